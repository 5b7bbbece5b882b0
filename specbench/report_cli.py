"""`specbench summarize` and `specbench report`: the CLI face of specbench.analysis and specbench.report.

pandas, matplotlib and the report templates are imported by the commands that use them, so every other
command starts without them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from specbench.analysis.metrics import speedups, summarize_run

if TYPE_CHECKING:
    import pandas as pd


def _fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    from specbench.report import fmt

    return fmt(value, spec, scale, dash="-")              # the terminal's tables stay ASCII


def summary_table(summaries: list[dict[str, Any]]) -> Table:
    table = Table(title="specbench summary")
    for name in ("run", "method", "engine", "dataset", "L", "C", "AL", "AL/req", "hit@1", "tok/s", "speedup",
                 "TTFT ms", "TPOT ms", "ok", "failed"):
        table.add_column(name, justify="left" if name in ("run", "method", "engine", "dataset") else "right")
    for s, sp in zip(summaries, speedups(summaries)):
        hits = s["hit_rate_unconditional"]
        table.add_row(
            str(s["run_id"]), str(s["method"]), str(s["engine"]), str(s["dataset"]), str(s["budget"]),
            str(s["concurrency"]), _fmt(s["al_token_weighted"], ".2f"), _fmt(s["al_per_request_mean"], ".2f"),
            _fmt(hits[0] if hits else None, ".1%"), _fmt(s["aggregate_tok_s"], ".1f"), _fmt(sp["speedup"], ".2f"),
            _fmt(s["ttft_mean_s"], ".1f", 1000), _fmt(s["tpot_mean_s"], ".1f", 1000),
            str(s["n_ok"]), str(s["n_failed"]),
        )
    return table


def print_unsquashed(table: Table) -> None:
    """Widen the console to the table's natural width: rich would otherwise cut every cell to "…" in a narrow
    terminal or a pipe (80 columns), and a cut number is worse than a wrapped line."""
    console = Console()
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    (Console(width=natural) if natural > console.width else console).print(table)


def write_frame(frame: "pd.DataFrame", csv: Path | None = None, parquet: Path | None = None) -> None:
    """The results table as files a notebook reads back with `pandas.read_csv` / `read_parquet`."""
    for path, write in ((csv, frame.to_csv), (parquet, frame.to_parquet)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path, index=False)


def register(app: typer.Typer) -> None:
    @app.command()
    def summarize(
        run_dirs: list[Path] = typer.Argument(..., help="Run directories (each with manifest.json and records.jsonl)."),
        as_json: bool = typer.Option(False, "--json", help="Print the full summaries as JSON instead of a table."),
        csv: Path | None = typer.Option(None, "--csv", help="Also write the results as CSV: one row per run × "
                                        "category plus an 'all' row per run, with the report's columns."),
        parquet: Path | None = typer.Option(None, "--parquet", help="Also write the same rows as Parquet."),
    ) -> None:
        """Acceptance length, hit rates, throughput and latency of finished runs."""
        summaries = [summarize_run(d) for d in run_dirs]
        if as_json:
            typer.echo(json.dumps(summaries, indent=2))
        else:
            print_unsquashed(summary_table(summaries))
        if csv or parquet:
            from specbench.analysis.frame import summaries_frame

            write_frame(summaries_frame(summaries), csv=csv, parquet=parquet)

    @app.command()
    def report(
        run_dirs: list[Path] = typer.Argument(..., help="Run directories to put side by side."),
        out: Path = typer.Option(Path("reports"), "--out", help="Folder for leaderboard.md, index.html and plots."),
    ) -> None:
        """Leaderboard (Markdown + HTML + plots) of one or more runs, rebuilt from their records."""
        from specbench.report import render_report

        for path in render_report(run_dirs, out):
            typer.echo(str(path))
