"""The engine's own counters beside the records: two sources of one metric, and where they disagree.

A vLLM or SGLang run has two views of acceptance: the records' per-request steps (what the server reported per
request, fitted to the output length) and the server's run-level counters (`manifest.json: engine_counters`,
summarised by the runner with the project's definition, `al`, and the engine's own, `al_engine`). Both should
give the same AL and per-position hit rates; a gap above `TOLERANCE` means steps were inferred wrongly, another
client used the server, or the engine counts differently, and the report flags it.
"""

from __future__ import annotations

from typing import Any

Summary = dict[str, Any]

TOLERANCE = 0.02          # relative gap between the two sources that the report flags


def _gap(a: float | None, b: float | None) -> float | None:
    return a / b - 1.0 if a is not None and b else None


def counter_agreement(summary: Summary) -> Summary | None:
    """The run's AL and hit rates from records and from engine counters, the relative gaps, and `flag` when any
    gap exceeds TOLERANCE; None for runs without engine counters (the reference engine, vanilla on a server).

    Hit rates are the unconditional ones (steps reaching depth d / drafting steps), compared at the depths
    both sources have; their gap is the largest absolute difference in rate."""
    counters = (summary.get("manifest") or {}).get("engine_counters") or {}
    counted = counters.get("summary") or {}
    if counted.get("al") is None and counted.get("al_engine") is None:
        return None
    al_gap = _gap(counted.get("al"), summary.get("al_token_weighted"))
    hits_records = summary.get("hit_rate_unconditional") or []
    hits_counters = counted.get("hit_rate_unconditional") or []
    pairs = [(a, b) for a, b in zip(hits_records, hits_counters) if a is not None and b is not None]
    hit_gap = max((abs(a - b) for a, b in pairs), default=None)
    return {
        "run_id": summary["run_id"],
        "source": counters.get("source", ""),
        "al_records": summary.get("al_token_weighted"),
        "al_counters": counted.get("al"),
        "al_engine": counted.get("al_engine"),
        "al_engine_definition": counted.get("al_engine_definition", ""),
        "al_gap": al_gap,
        "hit_rates_records": hits_records,
        "hit_rates_counters": hits_counters,
        "hit_gap": hit_gap,
        "incomplete": bool(counters.get("incomplete")),
        "flag": any(g is not None and abs(g) > TOLERANCE for g in (al_gap, hit_gap)),
    }
