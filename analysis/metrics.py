"""Metrics from per-request records (the format in `specbench.records`), and one summary per run.

Every function reads records only, so runs from the reference engine, vLLM and SGLang are measured by the same
code, and a report can be rebuilt from saved records. Failed records are counted but excluded from every metric:
a request that died half-way would otherwise pull AL and throughput towards whatever it managed before failing.

Vocabulary (the project's design card): a *step* is one target verification pass for one sequence; `emitted`
counts the tokens it output (cut by EOS / max_new_tokens), `accepted` the drafted tokens the target agreed with
(not cut, so hit rates see what the drafter got right even when the sequence ended mid-path).

Latency follows `vllm bench serve` (vLLM 0.33.0, vllm/benchmarks/serve.py `calculate_metrics`): TTFT, TPOT =
(latency - TTFT) / (output tokens - 1) and ITL (the gaps between stream chunks, `itl_s`, pooled over requests)
each as mean, p50, p90 and p99 (numpy's linear percentiles); goodput under service-level objectives is the
requests per second that meet every objective (`goodput`).
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from specbench.errors import SpecbenchError
from specbench.records import read_manifest, read_records

Record = dict[str, Any]

REQUIRED_MANIFEST_KEYS = ("run_id", "method", "engine", "dataset", "budget", "concurrency")
MANIFEST_KEYS = REQUIRED_MANIFEST_KEYS + (
    "target", "dtype", "device", "compare_id", "command", "created", "seed", "method_config", "engine_version",
    "tensor_parallel_size",
)
# A speedup is only meaningful against vanilla decoding of the same model in the same conditions: the same
# engine and version, model and hardware (device, tensor parallel size), and the same workload (which rows, how
# many tokens, how they are sampled). A server whose hardware is unknown (`runners.hardware.UNKNOWN`) is only
# compared with vanilla measured in the same `specbench compare`, on the same server by construction.
BASELINE_MATCH_KEYS = ("engine", "engine_version", "dataset", "concurrency", "target", "dtype", "device",
                       "tensor_parallel_size")
UNKNOWN_DEVICE = "unknown"
WORKLOAD_KEYS = ("categories", "limit", "seed", "max_new_tokens", "temperature", "top_p", "top_k", "threads",
                 "prefix_cache", "request_rate", "burstiness")     # read from the manifest
PERCENTILES = (50, 90, 99)
# throughput()'s latency figures, seconds: TTFT, TPOT and ITL as mean and each percentile
LATENCY_KEYS = tuple(f"{m}_{stat}_s" for m in ("ttft", "tpot", "itl")
                     for stat in ("mean", *(f"p{p}" for p in PERCENTILES)))
# --goodput objectives, as vllm bench serve's `--goodput KEY:VALUE` (milliseconds): the record metric each bounds
SLO_METRICS = {"ttft": "time to first token", "tpot": "time per output token after the first",
               "e2el": "end-to-end latency"}
BASELINE_METHOD = "vanilla"


def ok_records(records: Iterable[Record]) -> list[Record]:
    return [r for r in records if r["status"] == "ok"]


def _steps(records: Iterable[Record]) -> list[dict[str, Any]]:
    return [s for r in ok_records(records) for s in r["steps"]]


def _ratio(num: float, den: float) -> float | None:
    """None instead of NaN when there is nothing to divide by, so summaries stay valid JSON."""
    return float(num) / den if den else None


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def acceptance_length(records: Iterable[Record]) -> dict[str, float | None]:
    """AL two ways: token-weighted (sum emitted / sum steps) and the mean of per-request ALs.

    Both are reported because long requests dominate the first and each request counts once in the second.
    The token sampled from the prefill's logits is not a step and is not counted here.
    """
    records = ok_records(records)
    steps = _steps(records)
    per_request = [sum(s["emitted"] for s in r["steps"]) / len(r["steps"]) for r in records if r["steps"]]
    return {
        "token_weighted": _ratio(sum(s["emitted"] for s in steps), len(steps)),
        "per_request_mean": _mean(per_request),
    }


def hit_rates(records: Iterable[Record]) -> dict[str, list[float | None]]:
    """Per-position hit rate for draft depths 1..D (index 0 is depth 1), both definitions in use.

    unconditional[d] = steps whose accepted path reaches depth d / steps that drafted anything (vLLM's);
    conditional[d]   = steps reaching d / steps reaching d-1, both among steps whose tree was at least d deep
    (EAGLE's alpha), so a shallow dynamic tree does not count as a miss at depths it never drafted.
    Vanilla records (no drafted steps) give empty lists.
    """
    drafting = [s for s in _steps(records) if s["drafted"] > 0]
    max_depth = max((s["depth"] for s in drafting), default=0)
    unconditional, conditional = [], []
    for d in range(1, max_depth + 1):
        unconditional.append(_ratio(sum(s["accepted"] >= d for s in drafting), len(drafting)))
        deep = [s for s in drafting if s["depth"] >= d]
        conditional.append(_ratio(sum(s["accepted"] >= d for s in deep), sum(s["accepted"] >= d - 1 for s in deep)))
    return {"unconditional": unconditional, "conditional": conditional}


def acceptance_histogram(records: Iterable[Record]) -> dict[int, int]:
    """Steps by number of accepted drafts, sorted by that number."""
    counts: dict[int, int] = {}
    for s in _steps(records):
        counts[s["accepted"]] = counts.get(s["accepted"], 0) + 1
    return dict(sorted(counts.items()))


def al_by_entropy_quartile(records: Iterable[Record]) -> list[dict[str, Any]]:
    """Token-weighted AL in each quartile of requests sorted by mean target entropy.

    Shows whether a drafter only wins on easy (low-entropy) text. Always four entries; a quartile with no
    request (fewer than four requests with an entropy) has n = 0 and None values. Requests whose engine gave
    no entropy (null or NaN) are left out of the split.
    """
    with_entropy = [r for r in ok_records(records)
                    if r["mean_entropy"] is not None and math.isfinite(r["mean_entropy"])]
    of = entropy_quartile_of([r["mean_entropy"] for r in with_entropy])
    quartiles = []
    for i in range(4):
        group = [r for r, q in zip(with_entropy, of) if q == i + 1]
        entropies = [r["mean_entropy"] for r in group]
        quartiles.append({
            "quartile": i + 1,
            "n": len(group),
            "entropy_min": float(min(entropies)) if group else None,
            "entropy_max": float(max(entropies)) if group else None,
            "al": acceptance_length(group)["token_weighted"],
        })
    return quartiles


def entropy_quartile_of(entropies: list[float]) -> list[int]:
    """The quartile (1 = lowest) of each value: sorted ascending (ties in their given order), split into four
    groups whose sizes differ by at most one, the first groups the larger (np.array_split)."""
    quartile = [0] * len(entropies)
    for i, idx in enumerate(np.array_split(np.argsort(entropies, kind="stable"), 4)):
        for j in idx:
            quartile[j] = i + 1
    return quartile


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by the intervals, overlaps counted once.

    Aggregate throughput divides by this rather than by last end - first start: in an interleaved comparison a
    run's requests are separated by gaps where other methods ran, and a resumed run has a gap between sessions.
    """
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def _tpot(r: Record) -> float | None:
    """(latency - TTFT) / (output tokens - 1); None with fewer than two output tokens."""
    n = len(r["output_token_ids"])
    return (r["latency_s"] - r["ttft_s"]) / (n - 1) if n >= 2 else None


def _distribution(name: str, values: list[float]) -> dict[str, float | None]:
    """`{name}_mean_s` and `{name}_p50_s`, `_p90_s`, `_p99_s` of the values (None when there are none)."""
    out = {f"{name}_mean_s": _mean(values)}
    for p in PERCENTILES:
        out[f"{name}_p{p}_s"] = float(np.percentile(values, p)) if values else None
    return out


def throughput(records: Iterable[Record]) -> dict[str, float | None]:
    """Aggregate tok/s, requests/s, per-user tok/s, and TTFT, TPOT and ITL as mean, p50, p90 and p99 (seconds).

    Output tokens include the one sampled from the prefill's logits. TPOT needs at least two output tokens. ITL
    pools every gap of the records that have them (`itl_s`: server engines); None when none has.
    """
    records = ok_records(records)
    n_out = [len(r["output_token_ids"]) for r in records]
    wall = union_length((r["t_start"], r["t_end"]) for r in records)
    tpot = [t for t in map(_tpot, records) if t is not None]
    return {
        "output_tokens": sum(n_out),
        "wall_s": wall,
        "aggregate_tok_s": _ratio(sum(n_out), wall),
        "request_s": _ratio(len(records), wall),
        "per_user_tok_s": _mean([n / r["latency_s"] for r, n in zip(records, n_out) if r["latency_s"] > 0]),
        **_distribution("ttft", [r["ttft_s"] for r in records]),
        **_distribution("tpot", tpot),
        **_distribution("itl", [gap for r in records for gap in r.get("itl_s") or ()]),
    }


def parse_slo(items: Iterable[str], flag: str = "--goodput") -> dict[str, float]:
    """`ttft_ms:500 tpot_ms:20` (or vllm bench serve's `ttft:500`) -> {"ttft": 500.0, "tpot": 20.0}, milliseconds.
    Items may also be given in one string, separated by spaces or commas; anything else is a SpecbenchError."""
    slo: dict[str, float] = {}
    for item in (x for raw in items for x in raw.replace(",", " ").split()):
        key, sep, value = item.partition(":")
        name = key.removesuffix("_ms")
        try:
            ms = float(value)
        except ValueError:
            ms = -1.0
        if not sep or name not in SLO_METRICS or not 0 <= ms < float("inf"):
            raise SpecbenchError(f"{flag} {item!r}: expected KEY:MILLISECONDS with KEY one of "
                                 f"{', '.join(k + '_ms' for k in SLO_METRICS)} (e.g. {flag} ttft_ms:500 tpot_ms:20)")
        slo[name] = ms
    return slo


def goodput(records: Iterable[Record], slo: dict[str, float]) -> float | None:
    """Requests per second of wall time that meet every objective in `slo` (milliseconds; `parse_slo`), as
    vllm bench serve's `request_goodput`: a request with one output token has TPOT 0; failed requests never
    count. None without objectives or without wall time."""
    records = ok_records(records)
    if not slo:
        return None
    value = {"ttft": lambda r: r["ttft_s"], "tpot": lambda r: _tpot(r) or 0.0, "e2el": lambda r: r["latency_s"]}
    good = sum(all(value[k](r) * 1000 <= ms for k, ms in slo.items()) for r in records)
    return _ratio(good, union_length((r["t_start"], r["t_end"]) for r in records))


def mean_ci(values: Iterable[float | None], confidence: float = 0.95) -> tuple[float | None, float | None]:
    """(mean, half-width of its Student-t confidence interval) over the values that are not None: what a figure
    measured over repeats is, and how sure. The half-width is None for fewer than two values, 0 when they are
    all equal."""
    data = [float(v) for v in values if v is not None]
    if not data:
        return None, None
    mean = float(np.mean(data))
    if len(data) < 2:
        return mean, None
    from scipy import stats

    sem = float(stats.sem(data))
    if sem == 0:
        return mean, 0.0
    low, _ = stats.t.interval(confidence, len(data) - 1, loc=mean, scale=sem)
    return mean, mean - float(low)


def verified_drafts(records: Iterable[Record]) -> dict[str, float | None]:
    """Mean drafted tokens verified per step (what adaptive methods shrink under load), and for methods that
    record a predicted acceptance per step (dspark's `pred_accept`) its Pearson correlation with the
    accepted count: how well the confidence head, and so the chosen lengths, track reality."""
    steps = _steps(records)
    pred = [(s["pred_accept"], s["accepted"]) for s in steps if "pred_accept" in s]
    corr = None
    if len(pred) > 2:
        a = np.array(pred, dtype=float)
        if a[:, 0].std() > 0 and a[:, 1].std() > 0:
            corr = float(np.corrcoef(a[:, 0], a[:, 1])[0, 1])
    return {"drafted_mean": _mean([s["drafted"] for s in steps]), "pred_accept_corr": corr}


def step_times(records: Iterable[Record]) -> dict[str, float | None]:
    """Mean milliseconds a step spent drafting and in the target's verification forward, over the steps of
    every sequence (a batched step counts once per sequence in it), where the runner records them (the
    reference engine): where a method's time per step goes beside vanilla's, from the run's own steps."""
    steps = [s for s in _steps(records) if "draft_ms" in s and "verify_ms" in s]
    return {"draft_ms_mean": _mean([s["draft_ms"] for s in steps]),
            "verify_ms_mean": _mean([s["verify_ms"] for s in steps])}


def summarize_records(records: list[Record], slo: dict[str, float] | None = None) -> dict[str, Any]:
    """Every metric for one set of records, flat so tables can pick columns by name; `goodput_req_s` under the
    objectives `slo` (`parse_slo`; None without them).

    The histogram's keys are strings so the summary is unchanged by a JSON round trip.
    """
    ok = ok_records(records)
    al = acceptance_length(ok)
    hits = hit_rates(ok)
    return {
        "n_ok": len(ok),
        "n_failed": len(records) - len(ok),
        "n_steps": len(_steps(ok)),
        "al_token_weighted": al["token_weighted"],
        "hit_at_1": hits["unconditional"][0] if hits["unconditional"] else None,
        "al_per_request_mean": al["per_request_mean"],
        "hit_rate_unconditional": hits["unconditional"],
        "hit_rate_conditional": hits["conditional"],
        "acceptance_histogram": {str(k): v for k, v in acceptance_histogram(ok).items()},
        "entropy_quartiles": al_by_entropy_quartile(ok),
        **verified_drafts(ok),
        **step_times(ok),
        **throughput(ok),
        "goodput_req_s": goodput(ok, slo or {}),
    }


def _load_manifest(run_dir: Path) -> dict[str, Any]:
    if not run_dir.is_dir():
        raise SpecbenchError(f"{run_dir}: not a run directory (no such directory)")
    try:
        manifest = read_manifest(run_dir)
    except ValueError as err:
        raise SpecbenchError(f"{run_dir}: manifest.json is not valid JSON ({err})") from None
    missing = [k for k in REQUIRED_MANIFEST_KEYS if k not in manifest]
    if missing:
        raise SpecbenchError(f"{run_dir}: manifest.json lacks {', '.join(missing)}")
    return manifest


def method_label(manifest: dict[str, Any]) -> str:
    """The method as tables and plots name it: with its own options when it ran as a variant
    (`eagle4-harness+lookup=off`), so variants of one method stay apart."""
    variant = manifest.get("variant") or {}
    return "+".join([str(manifest["method"]), *(f"{k}={v}" for k, v in variant.items())])


def summarize_run(run_dir: str | Path, slo: dict[str, float] | None = None) -> dict[str, Any]:
    """Manifest fields + every metric over the run's ok records + the same metrics per category; goodput
    under `slo` (`goodput_slo` names the objectives).

    JSON-serialisable. `manifest` keeps the whole manifest for keys the report shows when present.
    """
    run_dir = Path(run_dir)
    manifest = _load_manifest(run_dir)
    records = read_records(run_dir)
    categories = sorted({r["category"] for r in records})
    return {
        **{k: manifest.get(k) for k in MANIFEST_KEYS},
        "method": method_label(manifest),
        "run_dir": str(run_dir),
        "manifest": manifest,
        "goodput_slo": slo or None,
        **summarize_records(records, slo),
        "per_category": {c: summarize_records([r for r in records if r["category"] == c], slo) for c in categories},
    }


def _created_seconds(summary: dict[str, Any]) -> float | None:
    try:
        return datetime.fromisoformat(summary["created"]).timestamp()
    except (TypeError, ValueError):
        return None


def _baseline_for(summary: dict[str, Any], summaries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The vanilla run that matches on BASELINE_MATCH_KEYS and WORKLOAD_KEYS, preferring the same `compare_id`
    (measured interleaved, so machine drift cancels), then the same repeat of it, then the one created closest
    in time."""
    workload = lambda s: [s.get("manifest", {}).get(k) for k in WORKLOAD_KEYS]  # noqa: E731
    candidates = [s for s in summaries if s["method"] == BASELINE_METHOD
                  and all(s.get(k) == summary.get(k) for k in BASELINE_MATCH_KEYS)
                  and workload(s) == workload(summary)
                  and (summary.get("device") != UNKNOWN_DEVICE
                       or (summary.get("compare_id") is not None and s.get("compare_id") == summary["compare_id"]))]
    if not candidates:
        return None
    here = _created_seconds(summary)

    def rank(s: dict[str, Any]) -> tuple[bool, bool, float, str]:
        same_compare = summary.get("compare_id") is not None and s.get("compare_id") == summary["compare_id"]
        same_repeat = _repeat(s) == _repeat(summary)
        there = _created_seconds(s)
        gap = abs(there - here) if here is not None and there is not None else math.inf
        return (not same_compare, not same_repeat, gap, str(s["run_id"]))

    return min(candidates, key=rank)


def _repeat(summary: dict[str, Any]) -> Any:
    return summary.get("manifest", {}).get("repeat")


def _tok_s_ratio(mine: dict[str, Any] | None, theirs: dict[str, Any] | None) -> float | None:
    if mine is None or theirs is None or mine["aggregate_tok_s"] is None or not theirs["aggregate_tok_s"]:
        return None
    return mine["aggregate_tok_s"] / theirs["aggregate_tok_s"]


def _paired(summary: dict[str, Any], base: dict[str, Any] | None) -> list[tuple[dict[str, Any], Any]]:
    """(run, its baseline) pairs behind one speedup: each repeat with vanilla's same repeat where both are
    repeats combined (`analysis.repeats`), so each ratio is of two runs measured side by side; else the pair."""
    if base is not None and summary.get("repeats") and base.get("repeats"):
        theirs = {_repeat(b): b for b in base["repeats"]}
        pairs = [(m, theirs[_repeat(m)]) for m in summary["repeats"] if _repeat(m) in theirs]
        if pairs:
            return pairs
    return [(summary, base)]


def speedups(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each summary (same order): its vanilla baseline's run_id and the aggregate tok/s ratio, overall and
    per category. `baseline` and the ratios are None when no matching vanilla run (or no throughput) exists.

    For combined repeats the ratio is the mean over repeats of each repeat's ratio to vanilla's same repeat, and
    `speedup_ci95` / `per_category_ci95` hold the half-width of its 95% t interval (None for a single run)."""
    out = []
    for summary in summaries:
        base = _baseline_for(summary, summaries)
        pairs = _paired(summary, base)
        overall = mean_ci(_tok_s_ratio(m, b) for m, b in pairs)
        per_category = {c: mean_ci(_tok_s_ratio(m["per_category"].get(c), b and b["per_category"].get(c))
                                   for m, b in pairs) for c in summary["per_category"]}
        out.append({
            "run_id": summary["run_id"],
            "baseline": base["run_id"] if base else None,
            "speedup": overall[0],
            "speedup_ci95": overall[1],
            "per_category": {c: v[0] for c, v in per_category.items()},
            "per_category_ci95": {c: v[1] for c, v in per_category.items()},
        })
    return out


def output_match_rate(records: list[Record], baseline: list[Record]) -> float | None:
    """Share of requests (present and ok in both) whose output tokens equal the baseline's.

    Lossless methods give 1.0 in fp32; in bf16 a batched verification can flip near-ties, and this is
    the number that says how often.
    """
    base = {r["question_id"]: r["output_token_ids"] for r in ok_records(baseline)}
    pairs = [(r["output_token_ids"], base[r["question_id"]]) for r in ok_records(records) if r["question_id"] in base]
    return _ratio(sum(a == b for a, b in pairs), len(pairs))
