"""The sentences a report opens with: which method is fastest at each concurrency C and dataset, and by how much.

Everything is computed from run summaries (`metrics.summarize_run`), never written by hand, so the opening of a
report always agrees with its tables. A *setting* is one dataset at one C; in each, the fastest run of any method
but vanilla is the winner and the fastest run of a different method the runner-up. Runs are ranked by speedup
over vanilla where the setting has one (interleaved with vanilla, so machine drift cancels) and by aggregate
tok/s where it has no vanilla run; what cannot be computed is said in words rather than left out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pandas as pd

from specbench.analysis.frame import ALL_CATEGORIES, summaries_frame
from specbench.analysis.metrics import BASELINE_METHOD

Summary = dict[str, Any]

# What a label names besides the method, where the report holds more than one value of it.
CONTEXT_KEYS = ("engine", "target", "dtype")
# One point of one method: a repeated run of it counts once (the newest), as the plots draw it.
POINT_KEYS = ("dataset", "concurrency", *CONTEXT_KEYS, "method", "budget")


@dataclass(frozen=True)
class Entry:
    """One run: its method (with the engine, target or dtype where the report holds several), budget and speed."""
    method: str
    budget: int
    speedup: float | None   # over vanilla; None where the setting has no vanilla run
    tok_s: float

    @property
    def label(self) -> str:
        return f"{self.method} L = {self.budget}"


@dataclass(frozen=True)
class Finding:
    """The fastest run of one setting and the fastest run of another method, or None where there is none."""
    dataset: str
    concurrency: int
    winner: Entry | None
    runner_up: Entry | None
    runs: int               # runs of methods other than vanilla in the setting, finished or not

    @property
    def margin(self) -> float | None:
        """How much faster the winner is than the runner-up, in the measure they were ranked by."""
        if self.winner is None or self.runner_up is None:
            return None
        if self.winner.speedup is not None and self.runner_up.speedup is not None:
            return self.winner.speedup / self.runner_up.speedup
        return self.winner.tok_s / self.runner_up.tok_s


def _entry(row: pd.Series) -> Entry:
    speedup = None if pd.isna(row["speedup"]) else float(row["speedup"])
    return Entry(str(row["who"]), int(row["budget"]), speedup, float(row["aggregate_tok_s"]))


def _newest_runs(summaries: list[Summary]) -> pd.DataFrame:
    """The "all categories" rows, the newest run per point, with `who`: the method and whichever context keys
    vary across the report."""
    frame = summaries_frame(summaries)
    runs = frame[frame["category"] == ALL_CATEGORIES].sort_values("created", kind="stable")
    runs = runs.drop_duplicates(list(POINT_KEYS), keep="last")
    varying = [k for k in CONTEXT_KEYS if runs[k].nunique(dropna=False) > 1]
    return runs.assign(who=runs[[*varying, "method"]].astype(str).agg(" ".join, axis=1))


def _finding(dataset: str, concurrency: int, runs: pd.DataFrame) -> Finding:
    candidates = runs[(runs["method"] != BASELINE_METHOD) & runs["aggregate_tok_s"].notna()]
    score = "speedup" if candidates["speedup"].notna().any() else "aggregate_tok_s"
    ranked = candidates.dropna(subset=[score]).sort_values([score, "who", "budget"], ascending=[False, True, True])
    best = [_entry(row) for _, row in ranked.drop_duplicates("who").iterrows()]   # each method's fastest run
    return Finding(dataset, concurrency, best[0] if best else None, best[1] if len(best) > 1 else None,
                   int((runs["method"] != BASELINE_METHOD).sum()))


def findings(summaries: list[Summary]) -> list[Finding]:
    """One finding per setting, by concurrency C and then dataset."""
    runs = _newest_runs(summaries)
    return [_finding(str(dataset), int(c), group)
            for (c, dataset), group in runs.groupby(["concurrency", "dataset"], sort=True)]


def _clause(f: Finding) -> str:
    """What one setting shows, as a clause of its concurrency's sentence."""
    w, r = f.winner, f.runner_up
    if w is None:
        return (f"no method besides vanilla finished a request on {f.dataset}" if f.runs
                else f"only vanilla ran on {f.dataset}")
    if w.speedup is not None and w.speedup < 1:
        return f"nothing beats vanilla on {f.dataset} (the fastest method, {w.label}, reaches {w.speedup:.2f}×)"
    parts = [f"{w.speedup:.2f}× vanilla" if w.speedup is not None
             else f"{w.tok_s:.1f} tok/s, no vanilla run to compare with"]
    if r is None:
        parts.append("no other method ran")
    else:
        versus = f" at {r.speedup:.2f}×" if r.speedup is not None else f" at {r.tok_s:.1f} tok/s"
        parts.append(f"{f.margin:.2f}× the best other method, {r.label}{versus}")
    return f"{w.label} is fastest on {f.dataset} ({'; '.join(parts)})"


def _and(items: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return " and ".join([", ".join(items[:-1]), items[-1]]) if len(items) > 1 else "".join(items)


def _beats_vanilla(f: Finding) -> bool:
    """A winner counts as one where it beats vanilla or where there is no vanilla run to tell."""
    return f.winner is not None and (f.winner.speedup is None or f.winner.speedup >= 1)


def _overall(found: list[Finding]) -> str:
    """Who wins how many settings, and the largest speedup of all."""
    wins = Counter(f.winner.method if f.winner is not None and _beats_vanilla(f) else None for f in found)
    tally = [f"{who} is fastest in {n}" if who is not None else f"nothing beats vanilla in {n}"
             for who, n in sorted(wins.items(), key=lambda item: (item[0] is None, -item[1]))]
    text = f"Over the {len(found)} settings (dataset × C), {_and(tally)}"
    top = max(((f.winner.speedup, f.winner.label, f.concurrency, f.dataset) for f in found
               if f.winner is not None and f.winner.speedup is not None), default=None)
    if top is not None:
        text += f"; the largest speedup is {top[0]:.2f}× ({top[1]} at C = {top[2]} on {top[3]})"
    return text + "."


def sentences(summaries: list[Summary]) -> list[str]:
    """One sentence per concurrency C naming each dataset's winner, its speedup over vanilla and its margin over
    the best other method, then, where there is more than one setting, one sentence on who wins how often."""
    found = findings(summaries)
    if not found:
        return ["No runs to compare."]
    out = []
    for c in dict.fromkeys(f.concurrency for f in found):
        clauses = [_clause(f) for f in found if f.concurrency == c]
        out.append(f"At C = {c}, {'; '.join(clauses)}.")
    if len(found) > 1:
        out.append(_overall(found))
    return out
