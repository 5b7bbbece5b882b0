"""Saved runs as a pandas DataFrame: one row per run × category, plus one row per run for all its categories.

The columns are the report's, under the names `summarize --json` uses (times in seconds, shares as fractions), so
a notebook filters and groups results without re-deriving any metric: `runs_frame(dirs).query("category ==
'all'")` is the leaderboard, `.groupby(["dataset", "concurrency", "method"])["speedup"].max()` the best budget
of each method. Metrics a row does not have (vanilla's hit rate, a speedup without a vanilla run) are NaN.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from specbench.analysis.metrics import LATENCY_KEYS, speedups, summarize_run

Summary = dict[str, Any]

ALL_CATEGORIES = "all"   # the category of the row that covers every request of a run
# Column -> dtype, in the order the DataFrame has them: what a run is, then the report's metrics, then the rest.
COLUMNS: dict[str, str] = {
    "run_id": "str", "dataset": "str", "category": "str", "engine": "str",
    "method": "str",           # as the report names it, with the variant's options (`eagle4-harness+lookup=off`)
    "base_method": "str",      # the method's registry name (`eagle4-harness`)
    "variant": "str",          # the variant's options (`lookup=off`), missing for none
    "budget": "int64", "concurrency": "int64", "target": "str", "dtype": "str", "device": "str",
    "drafted_mean": "float64", "draft_ms_mean": "float64", "verify_ms_mean": "float64",
    "al_token_weighted": "float64", "al_per_request_mean": "float64", "hit_at_1": "float64",
    "aggregate_tok_s": "float64", "speedup": "float64", "per_user_tok_s": "float64",
    "ttft_mean_s": "float64", "ttft_p50_s": "float64", "ttft_p90_s": "float64", "ttft_p99_s": "float64",
    "tpot_mean_s": "float64", "tpot_p50_s": "float64", "tpot_p90_s": "float64", "tpot_p99_s": "float64",
    "itl_mean_s": "float64", "itl_p50_s": "float64", "itl_p90_s": "float64", "itl_p99_s": "float64",
    "request_s": "float64",
    "goodput_req_s": "float64",  # requests/s meeting every --goodput objective; missing without objectives
    "n_ok": "int64", "n_failed": "int64", "n_steps": "int64", "output_tokens": "int64", "wall_s": "float64",
    "al_entropy_q1": "float64", "al_entropy_q2": "float64", "al_entropy_q3": "float64", "al_entropy_q4": "float64",
    "pred_accept_corr": "float64",
    "baseline": "str",         # run_id of the vanilla run the speedup divides by
    "compare_id": "str", "created": "str", "run_dir": "str",
    "repeat": "Int64",         # k of `compare --repeats N`; missing for a run that is no repeat
}
RUN_KEYS = ("run_id", "dataset", "engine", "method", "budget", "concurrency", "target", "dtype", "device",
            "compare_id", "created", "run_dir")
METRIC_KEYS = ("drafted_mean", "draft_ms_mean", "verify_ms_mean", "al_token_weighted", "al_per_request_mean",
               "hit_at_1", "aggregate_tok_s", "per_user_tok_s", "request_s", "goodput_req_s",
               *LATENCY_KEYS,
               "n_ok", "n_failed", "n_steps", "output_tokens", "wall_s", "pred_accept_corr")


def _variant(manifest: dict[str, Any]) -> str | None:
    return "+".join(f"{k}={v}" for k, v in manifest["variant"].items()) if manifest.get("variant") else None


def _row(run: Summary, category: str, metrics: Summary, speedup: float | None, baseline: str | None) -> Summary:
    return {
        **{k: run.get(k) for k in RUN_KEYS},
        "category": category,
        "base_method": run["manifest"].get("method", run["method"]),
        "variant": _variant(run["manifest"]),
        **{k: metrics.get(k) for k in METRIC_KEYS},
        "speedup": speedup,
        **{f"al_entropy_q{q['quartile']}": q["al"] for q in metrics["entropy_quartiles"]},
        "baseline": baseline,
        "repeat": run["manifest"].get("repeat"),
    }


def summaries_frame(summaries: list[Summary]) -> pd.DataFrame:
    """Summaries (`metrics.summarize_run`) as rows: per run its "all" row first, then its categories, sorted.

    Speedups are matched among these summaries, as the report matches them.
    """
    rows = []
    for run, sp in zip(summaries, speedups(summaries)):
        rows.append(_row(run, ALL_CATEGORIES, run, sp["speedup"], sp["baseline"]))
        rows += [_row(run, cat, metrics, sp["per_category"][cat], sp["baseline"])
                 for cat, metrics in sorted(run["per_category"].items())]
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype(COLUMNS)


def runs_frame(run_dirs: Iterable[str | Path], slo: dict[str, float] | None = None) -> pd.DataFrame:
    """Run directories -> one DataFrame (see `summaries_frame`), read from their saved records only; `slo`
    (`metrics.parse_slo`) fills `goodput_req_s`."""
    return summaries_frame([summarize_run(d, slo) for d in run_dirs])
