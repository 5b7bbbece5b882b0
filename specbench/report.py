"""`specbench report`: run directories -> leaderboard.md + index.html + plots, rebuilt from saved records only.

Both pages lead with the answer: sentences saying which method is fastest where and by how much
(`analysis.headline`) and the speedup-over-vanilla figure, then the tables and the other plots, long ones
collapsed. Tables are built once here as rows of formatted strings and the two templates only lay them out, so
the Markdown and the HTML always show the same numbers.

Repeats of a variant (`compare --repeats N`) become one row (`analysis.repeats`): each figure is their mean with
the half-width of its 95% confidence interval (`12.3 ± 0.4`), and the plots and headline read the same means;
the runs table and the commands list every repeat.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from specbench.analysis.engine_counters import TOLERANCE, counter_agreement
from specbench.analysis.headline import sentences
from specbench.analysis.metrics import PERCENTILES, SLO_METRICS, speedups, summarize_run
from specbench.analysis.plots import Plot, all_plots, speedup_by_budget
from specbench.analysis.repeats import combine_repeats
from specbench.machine_load import others_share

Summary = dict[str, Any]

TEMPLATES = Path(__file__).parent / "templates"
DASH = "—"
HEADLINE_PLOT = "speedup.png"
# Manifest keys describing where a run ran, shown when any manifest has them (device and dtype always).
ENVIRONMENT_KEYS = ("device", "dtype", "machine", "hostname", "platform", "cpu", "gpu", "versions")
RESULT_COLUMNS = (
    ("engine", False), ("method", False), ("L", True), ("drafts/step", True), ("draft ms", True),
    ("verify ms", True), ("AL", True), ("AL/req", True), ("hit@1", True),
    ("tok/s", True), ("speedup", True), ("tok/s/user", True), ("TTFT ms", True), ("TPOT ms", True),
    ("goodput req/s", True), ("n", True), ("run", False),
)
# Latency in full, one table per dataset: each of TTFT, TPOT and ITL as mean and percentiles.
LATENCY_COLUMNS = (
    ("engine", False), ("method", False), ("L", True), ("C", True), ("TTFT ms", True), ("TTFT p50/p90/p99", True),
    ("TPOT ms", True), ("TPOT p50/p90/p99", True), ("ITL ms", True), ("ITL p50/p90/p99", True), ("n", True),
    ("run", False),
)
OPTIONAL_COLUMNS = ("draft ms", "verify ms", "ITL ms", "ITL p50/p90/p99", "goodput req/s")
COLUMN_LEGEND = (
    ("L", "budget: tokens the target verifies per sequence per step, root included"),
    ("drafts/step", "drafted tokens the target verified per step, mean (adaptive methods shrink it under load)"),
    ("draft ms", "drafting time of a step, mean (shown where runs record it: the reference engine)"),
    ("verify ms", "the target's verification forward of a step, mean (as draft ms; vanilla's is a decoding step)"),
    ("AL", "acceptance length, tokens emitted per step, token-weighted (sum emitted / sum steps)"),
    ("AL/req", "mean of per-request AL"),
    ("hit@1", "share of drafting steps whose first drafted token was accepted"),
    ("tok/s", "aggregate output tokens per second over the union of the requests' [start, end] intervals "
              "(in a category table: that category's tokens over the time its requests were in flight)"),
    ("speedup", "tok/s / tok/s of vanilla decoding on the same engine, dataset, C, target and dtype "
                "(the same `specbench compare` when there is one)"),
    ("tok/s/user", "mean over requests of output tokens / latency"),
    ("TTFT ms", "mean time to first token, prefill included"),
    ("TPOT ms", "mean time per output token after the first: (latency - TTFT) / (tokens - 1)"),
    ("ITL ms", "latency table: mean gap between stream chunks carrying output, every request's gaps pooled "
               "(vllm bench serve's ITL; server engines)"),
    ("p50/p90/p99", "latency table: percentiles of TTFT, TPOT (over requests) and ITL (over gaps), ms"),
    ("n", "requests measured (failed requests are counted apart and excluded from every number); with repeats, "
          "over all of them"),
)
REPEATS_LEGEND = (("± x", "with repeats (`compare --repeats N`): the figure is the mean over repeats and x the "
                          "half-width of its 95% confidence interval (Student t); percentiles show the means alone"),)


@dataclass
class Table:
    title: str
    columns: list[str]
    numeric: list[bool]
    rows: list[list[str]] = field(default_factory=list)


def fmt(value: float | None, spec: str, scale: float = 1.0, dash: str = DASH) -> str:
    """A metric for a table cell; a metric a run does not have (vanilla's hit rate) shows as a dash."""
    return dash if value is None else format(value * scale, spec)


def _describe(value: Any) -> str:
    """One line for any manifest value: dicts as `k=v, ...`, lists joined, None as a dash."""
    if value is None:
        return DASH
    if isinstance(value, dict):
        return ", ".join(f"{k}={_describe(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_describe(v) for v in value)
    return str(value)


def _command(value: Any) -> str:
    return shlex.join(map(str, value)) if isinstance(value, (list, tuple)) else _describe(value)


def _with_ci(value: float | None, half: float | None, spec: str, scale: float = 1.0, unit: str = "") -> str:
    """A figure for a table cell, followed by ` ± half-width` where it is a mean over repeats."""
    if value is None:
        return DASH
    return format(value * scale, spec) + unit + ("" if half is None else f" ± {format(half * scale, spec)}")


def _figure(metrics: Summary, key: str, spec: str, scale: float = 1.0) -> str:
    return _with_ci(metrics.get(key), (metrics.get("ci95") or {}).get(key), spec, scale)


def _percentiles(metrics: Summary, name: str) -> str:
    """`p50/p90/p99` of a latency, ms, in one cell (a dash where the run has none)."""
    values = [metrics.get(f"{name}_p{p}_s") for p in PERCENTILES]
    return DASH if values[0] is None else "/".join(fmt(v, ".1f", 1000) for v in values)


def _n(run: Summary, metrics: Summary) -> str:
    n = str(metrics["n_ok"]) + (f" (+{metrics['n_failed']} failed)" if metrics["n_failed"] else "")
    return n + (f" in {len(run['repeats'])} repeats" if run.get("repeats") else "")


def _result_row(run: Summary, metrics: Summary, speedup: float | None, speedup_ci: float | None) -> list[str]:
    return [
        str(run["engine"]), str(run["method"]), str(run["budget"]), _figure(metrics, "drafted_mean", ".1f"),
        _figure(metrics, "draft_ms_mean", ".1f"), _figure(metrics, "verify_ms_mean", ".1f"),
        _figure(metrics, "al_token_weighted", ".2f"), _figure(metrics, "al_per_request_mean", ".2f"),
        _figure(metrics, "hit_at_1", ".1%"), _figure(metrics, "aggregate_tok_s", ".1f"),
        _with_ci(speedup, speedup_ci, ".2f", unit="×"),
        _figure(metrics, "per_user_tok_s", ".1f"), _figure(metrics, "ttft_mean_s", ".1f", 1000),
        _figure(metrics, "tpot_mean_s", ".1f", 1000), _figure(metrics, "goodput_req_s", ".2f"), _n(run, metrics),
        str(run["run_id"]),
    ]


def _table(title: str, columns: tuple[tuple[str, bool], ...], cells: list[list[str]]) -> Table:
    """The rows under `columns`, leaving out each optional column no row has a value in (step times where the
    reference engine recorded them, ITL where a server streamed, goodput where objectives were given)."""
    keep = [i for i, (c, _) in enumerate(columns) if c not in OPTIONAL_COLUMNS or any(row[i] != DASH for row in cells)]
    return Table(title, [columns[i][0] for i in keep], [columns[i][1] for i in keep],
                 [[row[i] for i in keep] for row in cells])


def _results_table(title: str, rows: Iterable[tuple[Summary, Summary, float | None, float | None]]) -> Table:
    """Rows sorted fastest first (no throughput last), as a leaderboard reads."""
    ordered = sorted(rows, key=lambda r: (r[1]["aggregate_tok_s"] is None, -(r[1]["aggregate_tok_s"] or 0)))
    return _table(title, RESULT_COLUMNS, [_result_row(*r) for r in ordered])


def _latency_table(title: str, runs: list[Summary]) -> Table:
    return _table(title, LATENCY_COLUMNS, [
        [str(s["engine"]), str(s["method"]), str(s["budget"]), str(s["concurrency"]),
         *(cell for m in ("ttft", "tpot", "itl") for cell in (_figure(s, f"{m}_mean_s", ".1f", 1000),
                                                             _percentiles(s, m))),
         _n(s, s), str(s["run_id"])]
        for s in runs])


def _entropy_table(title: str, runs: list[Summary]) -> Table:
    def cell(q: Summary) -> str:
        return DASH if q["al"] is None else f"{q['al']:.2f} ({q['entropy_min']:.2f}–{q['entropy_max']:.2f})"

    table = Table(title, ["engine", "method", "L", "C", "Q1", "Q2", "Q3", "Q4", "run"],
                  [False, False, True, True, True, True, True, True, False])
    for s in runs:
        table.rows.append([str(s["engine"]), str(s["method"]), str(s["budget"]), str(s["concurrency"]),
                           *(cell(q) for q in s["entropy_quartiles"]), str(s["run_id"])])
    return table


def _dataset_sections(summaries: list[Summary], speeds: list[Summary]) -> list[dict[str, Any]]:
    """Per dataset: per concurrency an all-categories table and one table per category; one entropy table."""
    sections = []
    for dataset in sorted({str(s["dataset"]) for s in summaries}):
        pairs = [(s, sp) for s, sp in zip(summaries, speeds) if str(s["dataset"]) == dataset]
        blocks = []
        for c in sorted({s["concurrency"] for s, _ in pairs}):
            at_c = [(s, sp) for s, sp in pairs if s["concurrency"] == c]
            categories = sorted({cat for s, _ in at_c for cat in s["per_category"]})
            blocks.append({
                "concurrency": c,
                "overall": _results_table(f"{dataset} · C={c} · all categories",
                                          [(s, s, sp["speedup"], sp["speedup_ci95"]) for s, sp in at_c]),
                "categories": [
                    _results_table(f"{dataset} · C={c} · {cat}",
                                   [(s, s["per_category"][cat], sp["per_category"][cat], sp["per_category_ci95"][cat])
                                    for s, sp in at_c if cat in s["per_category"]])
                    for cat in categories
                ],
            })
        runs = sorted((s for s, _ in pairs), key=lambda s: (s["concurrency"], str(s["method"]), s["budget"]))
        sections.append({"name": dataset, "blocks": blocks,
                         "entropy": _entropy_table(f"{dataset} · AL by entropy quartile (entropy range, nats)", runs),
                         "latency": _latency_table(f"{dataset} · latency (ms)", runs)})
    return sections


def _runs_table(summaries: list[Summary], speeds: list[Summary]) -> Table:
    table = Table("Runs", ["run", "method", "engine", "dataset", "L", "C", "target", "dtype", "device", "seed",
                           "created", "compare", "vanilla baseline", "CPU taken by others"],
                  [False, False, False, False, True, True, False, False, False, True, False, False, False, True])
    for s, sp in zip(summaries, speeds):
        table.rows.append([_describe(s[k]) for k in ("run_id", "method", "engine", "dataset", "budget",
                                                      "concurrency", "target", "dtype", "device", "seed",
                                                      "created", "compare_id")]
                          + [_describe(sp["baseline"]), _others_cpu(s["manifest"].get("machine_load"))])
    return table


def _counters_table(summaries: list[Summary]) -> dict[str, Any] | None:
    """Each server run's AL and hit@1 from its records beside those from the engine's counters (both by the
    project's definition), the engine's own AL, and a flag where the sources differ by more than 2%, with the
    engines' own AL definitions; None when no run has engine counters."""
    checks = [(s, c) for s in summaries if (c := counter_agreement(s)) is not None]
    if not checks:
        return None
    table = Table("Engine counters", ["engine", "method", "L", "C", "AL records", "AL counters", "gap",
                                      "AL engine's own", "hit@1 records", "hit@1 counters", "check", "run"],
                  [False, False, True, True, True, True, True, True, True, True, False, False])
    def first(rates: list[float | None]) -> float | None:
        return rates[0] if rates else None

    for s, c in checks:
        check = (f"differs > {TOLERANCE:.0%}" if c["flag"] else "agrees") + (" (counters incomplete)"
                                                                            if c["incomplete"] else "")
        table.rows.append([str(s["engine"]), str(s["method"]), str(s["budget"]), str(s["concurrency"]),
                           fmt(c["al_records"], ".3f"), fmt(c["al_counters"], ".3f"), fmt(c["al_gap"], "+.1%"),
                           fmt(c["al_engine"], ".3f"), fmt(first(c["hit_rates_records"]), ".1%"),
                           fmt(first(c["hit_rates_counters"]), ".1%"), check, str(s["run_id"])])
    return {"table": table, "flagged": sum(c["flag"] for _, c in checks),
            "definitions": sorted({c["al_engine_definition"] for _, c in checks if c["al_engine_definition"]})}


def _others_cpu(load: dict[str, Any] | None) -> str:
    """Share of the machine's CPU that other processes and guests took while the run measured (machine_load.py);
    a run of the in-process engine on a quiet machine shows 0%."""
    if not load:
        return "—"
    return f"{others_share(load):.0%}"


def _environment(summaries: list[Summary]) -> list[tuple[str, str]]:
    """Each environment key present in any manifest, with its distinct values."""
    items = []
    for key in ENVIRONMENT_KEYS:
        values = list(dict.fromkeys(_describe(s["manifest"][key]) for s in summaries if key in s["manifest"]))
        if values:
            items.append((key, "; ".join(values)))
    return items


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(table: Table) -> str:
    """A GitHub-flavoured Markdown table, numeric columns right-aligned."""
    lines = [table.columns, ["---:" if n else "---" for n in table.numeric], *table.rows]
    return "\n".join("| " + " | ".join(_md_cell(c) for c in line) + " |" for line in lines)


def _render(template: str, context: dict[str, Any]) -> str:
    env = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, trim_blocks=True,
                      lstrip_blocks=True, keep_trailing_newline=True,
                      autoescape=lambda name: bool(name and name.endswith(".html.j2")))
    env.filters["md"] = _md_cell
    env.filters["md_table"] = _md_table
    return env.get_template(template).render(**context)


def _plot_view(plot: Plot, out_dir: Path) -> dict[str, Any]:
    """A plot as the templates show it, its path relative to out_dir so the report folder can move."""
    return {"title": plot.title, "src": plot.path.relative_to(out_dir).as_posix() if plot.path else None,
            "note": plot.note}


def _goodput_legend(slo: dict[str, float] | None) -> tuple[tuple[str, str], ...]:
    if not slo:
        return ()
    bounds = ", ".join(f"{SLO_METRICS[k]} ≤ {v:g} ms" for k, v in slo.items())
    return (("goodput req/s", f"requests per second that met every objective ({bounds}; `--goodput`, as vllm "
                              "bench serve defines it)"),)


def _context(summaries: list[Summary], combined: list[Summary], headline: Plot, plots: list[Plot], out_dir: Path,
             slo: dict[str, float] | None = None) -> dict[str, Any]:
    """Everything both templates show: the headline (sentences and figure) first, then tables and plots.
    `combined`: the summaries with each variant's repeats as one (`analysis.repeats`), which the headline and
    result tables show; the runs table lists every run."""
    speeds = speedups(summaries)
    created = sorted(str(s["created"]) for s in summaries if s.get("created"))
    return {
        "headline": {"sentences": sentences(combined), "plot": _plot_view(headline, out_dir)},
        "n_runs": len(summaries),
        "created_range": (created[0], created[-1]) if created else None,
        "datasets": _dataset_sections(combined, speedups(combined)),
        "legend": (COLUMN_LEGEND + _goodput_legend(slo)
                   + (REPEATS_LEGEND if any(s.get("repeats") for s in combined) else ())),
        "plots": [_plot_view(p, out_dir) for p in plots],
        "runs": _runs_table(summaries, speeds),
        "counters": _counters_table(summaries),
        "commands": [(str(s["run_id"]), _command(s["command"])) for s in summaries],
        "environment": _environment(summaries),
    }


def render_report(run_dirs: Iterable[str | Path], out_dir: str | Path, slo: dict[str, float] | None = None,
                  ) -> list[Path]:
    """Write out_dir/leaderboard.md, out_dir/index.html, the headline figure and the plots; return every path
    written, the pages first and the figures in the order the pages show them. `slo`: goodput objectives
    (`metrics.parse_slo`), shown as a column when given."""
    out_dir = Path(out_dir)
    summaries = [summarize_run(d, slo) for d in run_dirs]
    combined = combine_repeats(summaries, slo)
    out_dir.mkdir(parents=True, exist_ok=True)
    headline = speedup_by_budget(combined, out_dir / HEADLINE_PLOT)
    plots = all_plots(combined, out_dir)
    context = _context(summaries, combined, headline, plots, out_dir, slo)
    written = []
    for name in ("leaderboard.md", "index.html"):
        path = out_dir / name
        path.write_text(_render(f"{name}.j2", context))
        written.append(path)
    return written + [p.path for p in (headline, *plots) if p.path]
