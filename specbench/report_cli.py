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

from specbench.analysis.metrics import parse_slo, speedups, summarize_run

if TYPE_CHECKING:
    import pandas as pd

GOODPUT_HELP = ("Service-level objectives in milliseconds, as vllm bench serve's --goodput: `--goodput ttft_ms:500 "
                "tpot_ms:20` (also e2el_ms) adds goodput, the requests/s that met every one.")


def _fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    from specbench.report import fmt

    return fmt(value, spec, scale, dash="-")              # the terminal's tables stay ASCII


def summary_table(summaries: list[dict[str, Any]]) -> Table:
    """One row per run; the goodput column where the summaries were made with objectives."""
    goodput = any(s.get("goodput_slo") for s in summaries)
    table = Table(title="specbench summary")
    for name in ("run", "method", "engine", "dataset", "L", "C", "AL", "AL/req", "hit@1", "tok/s", "speedup",
                 "TTFT ms", "TTFT p99", "TPOT ms", "ITL p99", *(["goodput"] if goodput else []), "ok", "failed"):
        table.add_column(name, justify="left" if name in ("run", "method", "engine", "dataset") else "right")
    for s, sp in zip(summaries, speedups(summaries)):
        table.add_row(
            str(s["run_id"]), str(s["method"]), str(s["engine"]), str(s["dataset"]), str(s["budget"]),
            str(s["concurrency"]), _fmt(s["al_token_weighted"], ".2f"), _fmt(s["al_per_request_mean"], ".2f"),
            _fmt(s["hit_at_1"], ".1%"), _fmt(s["aggregate_tok_s"], ".1f"), _fmt(sp["speedup"], ".2f"),
            _fmt(s["ttft_mean_s"], ".1f", 1000), _fmt(s["ttft_p99_s"], ".1f", 1000),
            _fmt(s["tpot_mean_s"], ".1f", 1000), _fmt(s["itl_p99_s"], ".1f", 1000),
            *([_fmt(s["goodput_req_s"], ".2f")] if goodput else []), str(s["n_ok"]), str(s["n_failed"]),
        )
    return table


def goodput_args(run_dirs: list[Path], goodput: list[str]) -> tuple[list[Path], dict[str, float]]:
    """(run directories, objectives) from the command line: `--goodput ttft_ms:500 tpot_ms:20` leaves the second
    pair among the run directories (the flag takes one value), so KEY:VALUE arguments that name no existing
    path move to the objectives, as vllm bench serve reads them."""
    if not goodput:
        return run_dirs, {}
    pairs = [p for p in run_dirs if not p.exists() and ":" in p.name]
    return [p for p in run_dirs if p not in pairs], parse_slo([*goodput, *map(str, pairs)])


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
        goodput: list[str] = typer.Option([], help=GOODPUT_HELP),
    ) -> None:
        """Acceptance length, hit rates, throughput and latency of finished runs."""
        run_dirs, slo = goodput_args(run_dirs, goodput)
        summaries = [summarize_run(d, slo) for d in run_dirs]
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
        goodput: list[str] = typer.Option([], help=GOODPUT_HELP),
    ) -> None:
        """Leaderboard (Markdown + HTML + plots) of one or more runs, rebuilt from their records; repeats of a
        variant (`compare --repeats`) as one row of means with 95% confidence intervals."""
        from specbench.report import render_report

        run_dirs, slo = goodput_args(run_dirs, goodput)
        for path in render_report(run_dirs, out, slo):
            typer.echo(str(path))

    @app.command("export-answers")
    def export_answers(
        run_dir: Path = typer.Argument(..., help="A run directory."),
        out: Path = typer.Option(..., "--out", help="The Spec-Bench model-answer file to write (JSONL)."),
    ) -> None:
        """Write a run as a Spec-Bench model-answer file (one line per question: new_tokens, wall_time,
        accept_lengths), so Spec-Bench's evaluation/speed.py reads it: its mean accepted tokens is this run's AL,
        its speedup over a vanilla run's file the ratio of tok/s/user.

        Example: specbench export-answers runs/cmp/ngram-L8-C1 --out answers/ngram.jsonl
        """
        from specbench.analysis.spec_bench_answers import write_model_answers

        path, n = write_model_answers(run_dir, out)
        typer.echo(f"{n} answers: {path}")
