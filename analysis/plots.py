"""PNG plots from run summaries (`metrics.summarize_run`), one function per figure of the report.

Figures are built on `matplotlib.figure.Figure` (Agg), never pyplot, so plotting holds no global state and needs
no display. Each function returns a `Plot` that says what was drawn and what was not: a run that cannot appear
(e.g. vanilla in a hit-rate plot) is named in `note`, and a figure with nothing to draw writes no file and says
why, so the report can print that instead of an image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from matplotlib import colormaps
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from specbench.analysis.metrics import BASELINE_METHOD, speedups

Summary = dict[str, Any]

# What tells two runs of one dataset apart; labels show the method and whichever of the others vary.
SERIES_KEYS = ("engine", "target", "dtype", "method", "budget", "concurrency")
PANEL_W, PANEL_H = 6.0, 3.8


@dataclass(frozen=True)
class Plot:
    title: str
    path: Path | None  # None when there was nothing to draw
    note: str = ""     # what was left out and why ("" when everything is drawn)


def _format_key(key: str, value: Any) -> str:
    return {"budget": f"L={value}", "concurrency": f"C={value}"}.get(key, str(value))


def _labeler(summaries: list[Summary], keys: Iterable[str]) -> Callable[[Summary], str]:
    """Labels naming the method and the other keys that differ between summaries, so legends stay short."""
    shown = [k for k in keys if k == "method" or len({repr(s.get(k)) for s in summaries}) > 1]
    return lambda s: " ".join(_format_key(k, s.get(k)) for k in shown)


def _sort_key(s: Summary) -> tuple:
    return (*(str(s.get(k)) for k in ("engine", "target", "dtype", "method")), s["budget"], s["concurrency"])


def _by_dataset(summaries: list[Summary]) -> dict[str, list[Summary]]:
    groups: dict[str, list[Summary]] = {}
    for s in sorted(summaries, key=_sort_key):
        groups.setdefault(str(s["dataset"]), []).append(s)
    return dict(sorted(groups.items()))


def _latest_per_setting(summaries: list[Summary]) -> tuple[list[Summary], list[Summary]]:
    """(runs to draw, repeated runs superseded by a later one with the same dataset and SERIES_KEYS): two points
    for one setting would draw a zigzag or hide a bar, so only the newest is drawn and the others are named."""
    latest: dict[tuple, Summary] = {}
    for s in sorted(summaries, key=lambda s: str(s.get("created"))):
        latest[(s["dataset"], *(repr(s.get(k)) for k in SERIES_KEYS))] = s
    kept = {id(s) for s in latest.values()}
    return [s for s in summaries if id(s) in kept], [s for s in summaries if id(s) not in kept]


def _select(summaries: list[Summary], can_draw: Callable[[Summary], bool], why: str) -> tuple[list[Summary], str]:
    """(runs to draw, note naming every run that is not drawn and why)."""
    runs, superseded = _latest_per_setting(summaries)
    label = _labeler(summaries, ("dataset", *SERIES_KEYS))
    missing = [s for s in runs if not can_draw(s)]
    notes = []
    if missing:
        notes.append(f"{why}, not shown: {', '.join(label(s) for s in missing)}.")
    if superseded:
        notes.append("Repeated settings, only the newest run drawn; not shown: "
                     f"{', '.join(str(s['run_id']) for s in superseded)}.")
    if not runs:
        notes.append("No runs to plot.")
    return [s for s in runs if can_draw(s)], " ".join(notes)


def _nothing(title: str, path: Path, note: str) -> Plot:
    """No figure; a file left at `path` by an earlier report is removed so the folder matches the page."""
    path.unlink(missing_ok=True)
    return Plot(title, None, note)


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def _nan(values: Iterable[float | None]) -> list[float]:
    """None -> NaN, which matplotlib draws as a gap."""
    return [math.nan if v is None else v for v in values]


LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")
HATCHES = ("", "//", "..", "xx", "\\\\", "oo")


class Styles:
    """One look per series, the same in every figure of a report: colour = method (with engine, target and
    dtype where those vary), line style or hatch = budget L, marker = concurrency C. The legend then
    lists those keys once, under the panels, instead of one entry per series beside each panel: a
    demo's 40-odd series otherwise squeeze the axes and repeat the ten default colours."""

    def __init__(self, summaries: list[Summary]):
        self.key = _labeler(summaries, ("engine", "target", "dtype", "method"))
        self.methods = list(dict.fromkeys(self.key(s) for s in sorted(summaries, key=_sort_key)))
        self.budgets = sorted({s["budget"] for s in summaries})
        self.levels = sorted({s["concurrency"] for s in summaries})
        cmap = colormaps["tab10" if len(self.methods) <= 10 else "tab20"]
        self.colors = {m: cmap(i % cmap.N) for i, m in enumerate(self.methods)}

    def line(self, s: Summary, budget: bool = True) -> dict[str, Any]:
        return {"color": self.colors[self.key(s)],
                "marker": MARKERS[self.levels.index(s["concurrency"]) % len(MARKERS)],
                "linestyle": LINESTYLES[self.budgets.index(s["budget"]) % len(LINESTYLES)] if budget else "-"}

    def bar(self, s: Summary) -> dict[str, Any]:
        return {"color": self.colors[self.key(s)], "edgecolor": "white",
                "hatch": HATCHES[self.budgets.index(s["budget"]) % len(HATCHES)]}

    def legend(self, fig: Figure, drawn: list[Summary], budget: str | None = "line",
               concurrency: bool = True, extra: Iterable[Artist] = ()) -> None:
        """Methods by colour, then budgets (as line styles or hatches) and concurrencies when they vary, then any
        `extra` handles (a reference line)."""
        handles: list[Artist] = [Patch(color=self.colors[m], label=m)
                                 for m in self.methods if any(self.key(s) == m for s in drawn)]
        budgets = sorted({s["budget"] for s in drawn})
        if budget and len(budgets) > 1:
            for b in budgets:
                i = self.budgets.index(b)
                handles.append(Line2D([], [], color="dimgray", linestyle=LINESTYLES[i % len(LINESTYLES)],
                                      label=f"L={b}") if budget == "line" else
                               Patch(facecolor="lightgray", edgecolor="white", hatch=HATCHES[i % len(HATCHES)],
                                     label=f"L={b}"))
        levels = sorted({s["concurrency"] for s in drawn})
        if concurrency and len(levels) > 1:
            handles += [Line2D([], [], color="dimgray", linestyle="none",
                               marker=MARKERS[self.levels.index(c) % len(MARKERS)], label=f"C={c}") for c in levels]
        handles += list(extra)
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), frameon=False,
                   fontsize="small")


def al_vs_budget(summaries: list[Summary], path: Path) -> Plot:
    """Token-weighted AL against budget L: one panel per dataset, one line per method (and engine / C if mixed)."""
    title = "Acceptance length vs budget"
    drawable, note = _select(summaries, lambda s: s["al_token_weighted"] is not None, "No steps")
    if not drawable:
        return _nothing(title, path, note)
    label = _labeler(drawable, ("engine", "target", "dtype", "method", "concurrency"))
    style = Styles(summaries)
    groups = _by_dataset(drawable)
    fig = Figure(figsize=(PANEL_W * len(groups), PANEL_H), layout="constrained")
    for ax, (dataset, runs) in zip(fig.subplots(1, len(groups), squeeze=False)[0], groups.items()):
        series: dict[str, list[Summary]] = {}
        for s in runs:
            series.setdefault(label(s), []).append(s)
        for name, points in series.items():
            points.sort(key=lambda s: s["budget"])
            ax.plot([s["budget"] for s in points], [s["al_token_weighted"] for s in points], label=name,
                    **style.line(points[0], budget=False))
        budgets = sorted({s["budget"] for s in runs})
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.minorticks_off()
        ax.set(title=dataset, xlabel="budget L (tokens verified per step)", ylabel="AL (tokens / step)")
        ax.grid(alpha=0.3)
    style.legend(fig, drawable, budget=None)
    return Plot(title, _save(fig, path), note)


def hit_rate_by_depth(summaries: list[Summary], path: Path) -> Plot:
    """Per-position hit rate by draft depth, unconditional (left) and conditional (right), one row per dataset."""
    title = "Per-position hit rate by depth"
    drawable, note = _select(summaries, lambda s: bool(s["hit_rate_unconditional"]), "No drafted tokens")
    if not drawable:
        return _nothing(title, path, note)
    label = _labeler(drawable, SERIES_KEYS)
    style = Styles(summaries)
    groups = _by_dataset(drawable)
    fig = Figure(figsize=(PANEL_W * 2, PANEL_H * len(groups) + 0.8), layout="constrained")
    for row, (dataset, runs) in zip(fig.subplots(len(groups), 2, squeeze=False), groups.items()):
        for ax, key, kind in zip(row, ("hit_rate_unconditional", "hit_rate_conditional"),
                                 ("unconditional: reached d / drafting steps", "conditional: reached d / reached d-1")):
            for s in runs:
                ax.plot(range(1, len(s[key]) + 1), _nan(s[key]), label=label(s), **style.line(s))
            ax.set(title=f"{dataset}\n{kind}", xlabel="draft depth d", ylabel="hit rate", ylim=(0, 1.05))
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.grid(alpha=0.3)
    style.legend(fig, drawable)
    return Plot(title, _save(fig, path), note)


def al_by_entropy(summaries: list[Summary], path: Path) -> Plot:
    """Token-weighted AL in each entropy quartile of requests (Q1 = lowest entropy), one panel per dataset."""
    title = "Acceptance length by entropy quartile"
    drawable, note = _select(summaries, lambda s: any(q["al"] is not None for q in s["entropy_quartiles"]),
                             "No entropy recorded")
    if not drawable:
        return _nothing(title, path, note)
    label = _labeler(drawable, SERIES_KEYS)
    style = Styles(summaries)
    groups = _by_dataset(drawable)
    fig = Figure(figsize=(PANEL_W * len(groups), PANEL_H + 0.8), layout="constrained")
    for ax, (dataset, runs) in zip(fig.subplots(1, len(groups), squeeze=False)[0], groups.items()):
        for s in runs:
            ax.plot([1, 2, 3, 4], _nan(q["al"] for q in s["entropy_quartiles"]), label=label(s), **style.line(s))
        ax.set(title=dataset, xlabel="entropy quartile (Q1 = most predictable)", ylabel="AL (tokens / step)")
        ax.set_xticks([1, 2, 3, 4], ["Q1", "Q2", "Q3", "Q4"])
        ax.grid(alpha=0.3)
    style.legend(fig, drawable)
    return Plot(title, _save(fig, path), note)


def throughput_by_concurrency(summaries: list[Summary], path: Path) -> Plot:
    """Aggregate tok/s as grouped bars: one group per concurrency C, one bar per method / budget."""
    title = "Throughput by concurrency"
    drawable, note = _select(summaries, lambda s: s["aggregate_tok_s"] is not None, "No finished requests")
    if not drawable:
        return _nothing(title, path, note)
    label = _labeler(drawable, ("engine", "target", "dtype", "method", "budget"))
    style = Styles(summaries)
    groups = _by_dataset(drawable)
    fig = Figure(figsize=(PANEL_W * len(groups), PANEL_H + 0.6), layout="constrained")
    for ax, (dataset, runs) in zip(fig.subplots(1, len(groups), squeeze=False)[0], groups.items()):
        levels = sorted({s["concurrency"] for s in runs})
        names = list(dict.fromkeys(label(s) for s in runs))
        width = 0.8 / len(names)
        for i, name in enumerate(names):
            mine = [s for s in runs if label(s) == name]
            tok_s = {s["concurrency"]: s["aggregate_tok_s"] for s in mine}
            xs = [x for x, c in enumerate(levels) if c in tok_s]
            bars = ax.bar([x - 0.4 + width * (i + 0.5) for x in xs], [tok_s[levels[x]] for x in xs],
                          width, label=name, **style.bar(mine[0]))
            ax.bar_label(bars, fmt="%.0f", fontsize="x-small")
        ax.set_xticks(range(len(levels)), [f"C={c}" for c in levels])
        ax.set(title=dataset, ylabel="aggregate tokens / s")
        ax.grid(axis="y", alpha=0.3)
    style.legend(fig, drawable, budget="hatch", concurrency=False)
    return Plot(title, _save(fig, path), note)


def speedup_by_budget(summaries: list[Summary], path: Path) -> Plot:
    """The report's headline figure: speedup over vanilla against budget L, one row of panels per dataset and one
    panel per concurrency C, one line per method, a dashed line at 1.0× (vanilla) and each panel's best run
    labelled with its speedup. Rows share their y axis, so a dataset's panels show what C does to the gain."""
    title = "Speedup over vanilla by method and budget"
    ratio = {id(s): sp["speedup"] for s, sp in zip(summaries, speedups(summaries))}
    methods = [s for s in summaries if s["method"] != BASELINE_METHOD]
    if not methods:
        return _nothing(title, path, "No method besides vanilla ran.")
    drawable, note = _select(methods, lambda s: ratio[id(s)] is not None, "No vanilla run to compare with")
    if not drawable:
        return _nothing(title, path, note)
    style = Styles(summaries)
    groups = _by_dataset(drawable)
    levels = sorted({s["concurrency"] for s in drawable})
    fig = Figure(figsize=(PANEL_W * len(levels), (PANEL_H - 0.4) * len(groups) + 0.8), layout="constrained")
    axes = fig.subplots(len(groups), len(levels), squeeze=False, sharey="row")
    for row, (dataset, runs) in zip(axes, groups.items()):
        row[0].set_ylabel("speedup over vanilla (×)")
        for ax, c in zip(row, levels):
            at_c = [s for s in runs if s["concurrency"] == c]
            ax.axhline(1.0, color="dimgray", linestyle="--", linewidth=1)
            ax.set(title=f"{dataset} · C={c}", xlabel="budget L (tokens verified per step)")
            ax.margins(y=0.15)      # room above the best run's label
            ax.grid(alpha=0.3)
            if not at_c:
                ax.text(0.5, 0.5, "no runs", transform=ax.transAxes, ha="center", va="center", color="dimgray")
                continue
            for method in dict.fromkeys(style.key(s) for s in at_c):
                points = sorted((s for s in at_c if style.key(s) == method), key=lambda s: s["budget"])
                ax.plot([s["budget"] for s in points], [ratio[id(s)] for s in points], label=method,
                        **style.line(points[0], budget=False))
            best = max(at_c, key=lambda s: ratio[id(s)])
            ax.annotate(f"{ratio[id(best)]:.2f}×", (best["budget"], ratio[id(best)]), textcoords="offset points",
                        xytext=(0, 7), ha="center", fontsize="small", fontweight="bold")
            budgets = sorted({s["budget"] for s in at_c})
            ax.set_xscale("log", base=2)
            ax.set_xticks(budgets, [str(b) for b in budgets])
            ax.minorticks_off()
    vanilla = Line2D([], [], color="dimgray", linestyle="--", linewidth=1, label="vanilla (1.0×)")
    style.legend(fig, drawable, budget=None, concurrency=False, extra=[vanilla])
    return Plot(title, _save(fig, path), note)


def all_plots(summaries: list[Summary], out_dir: Path) -> list[Plot]:
    """Every figure of the report, written into out_dir under fixed names."""
    return [
        al_vs_budget(summaries, out_dir / "al_vs_budget.png"),
        hit_rate_by_depth(summaries, out_dir / "hit_rate_by_depth.png"),
        al_by_entropy(summaries, out_dir / "al_by_entropy.png"),
        throughput_by_concurrency(summaries, out_dir / "throughput.png"),
    ]
