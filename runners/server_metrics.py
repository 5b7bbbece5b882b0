"""What a server says about speculation, in the project's terms: engine counters and per-request steps.

Two sources, one metric definition (`specbench.analysis.metrics`): vLLM's spec-decode counters from /metrics
(deltas around a block, summarised as AL and per-position hit rates), and per-request acceptance that servers
return with each response, turned into the records' `steps` (where a server reports only accepted counts or a
histogram, the steps are reconstructed and fitted to the output length).
"""

from __future__ import annotations

from typing import Any

# vLLM's speculative-decoding counters (vllm/v1/spec_decode/metrics.py, SpecDecodingStats.observe_draft):
# per step of a request that drafted k > 0 tokens of which a were accepted: num_drafts += 1,
# num_draft_tokens += k, num_accepted_tokens += a (bonus token excluded), per_pos[i] += 1 for i < a.
# Exposed on /metrics as counters `<name>_total`; per_pos carries a `position` label (0-based).
VLLM_COUNTERS = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}
VLLM_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
# What the project's AL needs beside them (vllm/v1/metrics/loggers.py): tokens the server generated and requests
# it finished (summed over `finished_reason`); the first token of each request comes from its prefill, not a step.
VLLM_OUTPUT_COUNTERS = {
    "vllm:generation_tokens": "generation_tokens",
    "vllm:request_success": "requests_finished",
}
COUNTED = (*VLLM_COUNTERS.values(), *VLLM_OUTPUT_COUNTERS.values())


# -- /metrics counters --------------------------------------------------------------------------------------------

def parse_spec_counters(text: str) -> dict[str, Any] | None:
    """vLLM's spec-decode counters from a Prometheus text exposition, summed over label sets (engines).

    Parsed with prometheus_client's text parser. Returns None when the server exposes none of them (no
    speculative decoding configured), else {"num_drafts", "num_draft_tokens", "num_accepted_tokens",
    "num_accepted_tokens_per_pos": [per position 0..], "generation_tokens", "requests_finished"} (the last two
    are 0 where the server does not expose them).
    """
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {v: 0.0 for v in COUNTED}
    per_pos: dict[int, float] = {}
    found = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name.endswith("_created"):
                continue
            base = name[: -len("_total")] if name.endswith("_total") else name
            if base in VLLM_COUNTERS:
                out[VLLM_COUNTERS[base]] += sample.value
                found = True
            elif base in VLLM_OUTPUT_COUNTERS:
                out[VLLM_OUTPUT_COUNTERS[base]] += sample.value
            elif base == VLLM_PER_POS:
                pos = int(sample.labels.get("position", 0))
                per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
                found = True
    if not found:
        return None
    n = max(per_pos) + 1 if per_pos else 0
    out["num_accepted_tokens_per_pos"] = [per_pos.get(i, 0.0) for i in range(n)]
    return out


def counter_delta(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    if after is None:
        return None
    before = before or {}
    out = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in COUNTED}
    a, b = after["num_accepted_tokens_per_pos"], before.get("num_accepted_tokens_per_pos", [])
    out["num_accepted_tokens_per_pos"] = [a[i] - (b[i] if i < len(b) else 0.0) for i in range(len(a))]
    return out


def add_counters(total: dict[str, Any] | None, delta: dict[str, Any]) -> dict[str, Any]:
    if total is None:
        return {k: (list(v) if isinstance(v, list) else v) for k, v in delta.items()}
    out = dict(total)
    for k, v in delta.items():
        if isinstance(v, list):
            old = list(out.get(k, []))
            old += [0.0] * (len(v) - len(old))
            out[k] = [x + (v[i] if i < len(v) else 0.0) for i, x in enumerate(old)]
        else:
            out[k] = out.get(k, 0.0) + v
    return out


def design_al(decode_tokens: float, steps: float) -> float | None:
    """The project's AL (DESIGN.md; `specbench.analysis.metrics.acceptance_length`, token-weighted): tokens
    emitted by verification steps / steps, every step counted whether it drafted or not. `decode_tokens`
    excludes each request's first token, which its prefill produced."""
    return float(decode_tokens) / steps if steps > 0 else None


def counters_summary(c: dict[str, Any]) -> dict[str, Any]:
    """AL and per-position acceptance from vLLM's counters.

    `al` is the project's definition (`design_al`): decode tokens = generated tokens - finished requests, and
    steps = decode tokens - accepted drafts, since every step emits its accepted drafts plus one token (vLLM
    counts accepted drafts before EOS or max_tokens cut them, so a cut last step makes this a step short).
    `al_engine` is vLLM's own: 1 + accepted / drafts, steps that drafted nothing left out, so it is higher
    wherever the drafter had nothing to offer (n-gram with no match). unconditional[i] = drafting steps whose
    accepted path reached depth i+1 / drafting steps; conditional[i] = that over the count at depth i.
    """
    drafts = c.get("num_drafts") or 0
    per_pos = c.get("num_accepted_tokens_per_pos") or []
    if not drafts:
        return {"al": None, "al_engine": None, "acceptance_rate": None, "hit_rate_unconditional": [],
                "hit_rate_conditional": []}
    accepted = c["num_accepted_tokens"]
    decode = (c.get("generation_tokens") or 0) - (c.get("requests_finished") or 0)
    prev = [drafts, *per_pos[:-1]]
    return {
        "al": design_al(decode, decode - accepted) if decode > accepted else None,
        "al_engine": 1.0 + accepted / drafts,
        "al_engine_definition": "vLLM: 1 + accepted / drafting steps",
        "acceptance_rate": accepted / c["num_draft_tokens"] if c.get("num_draft_tokens") else None,
        "hit_rate_unconditional": [p / drafts for p in per_pos],
        "hit_rate_conditional": [p / q if q else None for p, q in zip(per_pos, prev)],
    }


# -- steps from what a server reports ------------------------------------------------------------------

def _step(accepted: int, drafted: int, depth: int | None = None) -> dict[str, int]:
    return {"emitted": accepted + 1, "accepted": accepted, "drafted": drafted, "budget": drafted + 1,
            "depth": drafted if depth is None else depth}


def fit_steps(steps: list[dict[str, Any]], n_output: int) -> list[dict[str, Any]]:
    """Make reconstructed steps add up to the output: sum(emitted) = n_output - 1 (the prefill token).

    Servers report accepted drafts per drafting step; they do not say what EOS / max_tokens cut from the
    last step, nor how many steps drafted nothing (vLLM omits those). A surplus is cut from the last step;
    a shortfall becomes steps that drafted nothing and emitted one token each. Both are inferences: the
    step count can be off by the size of the final cut when both happen in one request.
    """
    total = max(n_output - 1, 0)
    emitted = sum(s["emitted"] for s in steps)
    if emitted > total and steps:
        cut = emitted - total
        for s in reversed(steps):
            take = min(cut, s["emitted"] - 1)
            s["emitted"] -= take
            cut -= take
            if not cut:
                break
    elif emitted < total:
        steps = steps + [_step(0, 0, 0) for _ in range(total - emitted)]
    return steps


def steps_from_per_step(accepted: list[int], drafted: list[int], n_output: int) -> list[dict[str, Any]]:
    return fit_steps([_step(int(a), int(d)) for a, d in zip(accepted, drafted)], n_output)


def steps_from_histogram(hist: list[int], drafted: int, n_output: int, depth: int | None = None,
                         ) -> list[dict[str, Any]]:
    """Steps from an acceptance histogram (index j: steps that accepted j drafts); their order is lost."""
    steps = [_step(j, drafted, depth) for j, n in enumerate(hist) for _ in range(int(n))]
    return fit_steps(steps, n_output)


