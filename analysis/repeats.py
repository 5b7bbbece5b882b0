"""Repeats of one variant (`compare --repeats N`) as one summary: each figure's mean over the repeats and the
half-width of its 95% Student-t confidence interval.

A repeat is an ordinary run whose manifest says `repeat` (k) and `repeats` (N); repeats of one variant share
their comparison, dataset, engine, method, budget, concurrency, target, dtype, device and workload. A combined
summary has the shape of `metrics.summarize_run`'s, so tables, plots and headline read it as one run:

- every scalar figure in `CI_KEYS` is the mean of the repeats' values, with `ci95[key]` its half-width (None
  where fewer than two repeats have the figure); per category the same;
- what does not average (request and token counts, the acceptance histogram, hit rates by depth, entropy
  quartiles) is computed over the repeats' records pooled;
- `repeats` keeps the repeats' own summaries, so a speedup pairs each repeat with vanilla's same repeat
  (`metrics.speedups`).

Runs that are not repeats pass through unchanged.
"""

from __future__ import annotations

import re
from typing import Any

from specbench.analysis.metrics import BASELINE_MATCH_KEYS, LATENCY_KEYS, WORKLOAD_KEYS, mean_ci, summarize_records
from specbench.records import read_records

Summary = dict[str, Any]

# The scalar figures a combined summary averages and gives a confidence interval.
CI_KEYS = (
    "al_token_weighted", "al_per_request_mean", "hit_at_1", "drafted_mean", "pred_accept_corr", "draft_ms_mean",
    "verify_ms_mean", "aggregate_tok_s", "request_s", "per_user_tok_s", "goodput_req_s",
    *LATENCY_KEYS,
)


def _variant_key(s: Summary) -> tuple:
    manifest = s.get("manifest", {})
    return (s.get("compare_id"), s["method"], s["budget"], *(repr(s.get(k)) for k in BASELINE_MATCH_KEYS),
            *(repr(manifest.get(k)) for k in WORKLOAD_KEYS))


def _averaged(pooled: Summary, members: list[Summary]) -> Summary:
    """`pooled` with each CI_KEYS figure replaced by the members' mean and its half-width in `ci95`."""
    out, ci = dict(pooled), {}
    for key in CI_KEYS:
        out[key], ci[key] = mean_ci(m.get(key) for m in members)
    out["ci95"] = ci
    return out


def _combined(members: list[Summary], slo: dict[str, float] | None) -> Summary:
    members = sorted(members, key=lambda m: m["manifest"]["repeat"])
    records = [r for m in members for r in read_records(m["run_dir"])]
    categories = sorted({r["category"] for r in records})
    first = members[0]
    return {
        **first,
        **_averaged(summarize_records(records, slo), members),
        "run_id": re.sub(r"-r\d+$", "", str(first["run_id"])),
        "per_category": {c: _averaged(summarize_records([r for r in records if r["category"] == c], slo),
                                      [m["per_category"][c] for m in members if c in m["per_category"]])
                         for c in categories},
        "repeats": members,
    }


def combine_repeats(summaries: list[Summary], slo: dict[str, float] | None = None) -> list[Summary]:
    """The summaries with the repeats of each variant replaced by one combined summary, where its first repeat
    stood; `slo` as the summaries were made with (`metrics.parse_slo`), for the pooled figures' goodput."""
    groups: dict[tuple | int, list[Summary]] = {}       # a variant's repeats by key; a single run by its index
    for i, s in enumerate(summaries):
        groups.setdefault(_variant_key(s) if s.get("manifest", {}).get("repeat") is not None else i, []).append(s)
    return [runs[0] if isinstance(key, int) else _combined(runs, slo) for key, runs in groups.items()]
