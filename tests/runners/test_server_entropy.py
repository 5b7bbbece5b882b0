"""The entropy estimate from a server's top logprobs: exact where the top-K covers the distribution, bounded
where it does not, and parsed from vLLM's and SGLang's shapes as each server returns them."""

from __future__ import annotations

import math
import sys

import pytest

from specbench.errors import SpecbenchError
from specbench.runners.server_entropy import (
    entropy_fields, entropy_mode, mean_entropy, quartile_agreement, sglang_positions, token_entropy, vllm_positions,
)


def exact_entropy(probs: list[float]) -> float:
    return -sum(p * math.log(p) for p in probs if p > 0)


def top_logprobs(probs: list[float], k: int) -> list[float]:
    return [math.log(p) for p in sorted(probs, reverse=True)[:k]]


def zipf(n: int, s: float = 1.1) -> list[float]:
    weights = [1 / (i + 1) ** s for i in range(n)]
    return [w / sum(weights) for w in weights]


@pytest.mark.parametrize("tail", ["one", "capped", "uniform"])
def test_a_distribution_the_top_k_covers_is_exact(tail):
    probs = [0.5, 0.25, 0.125, 0.125]
    assert token_entropy(top_logprobs(probs, 4), tail, vocab_size=10) == pytest.approx(exact_entropy(probs))
    assert token_entropy([0.0], tail, vocab_size=10) == 0.0                # a certain token


def test_uniform_tail_is_exact_for_a_uniform_distribution_and_the_others_bound_it_below():
    probs = [1 / 1000] * 1000
    lps = top_logprobs(probs, 20)
    assert token_entropy(lps, "uniform", vocab_size=1000) == pytest.approx(math.log(1000))
    assert token_entropy(lps, "capped") == pytest.approx(math.log(1000))    # the cap is the tail's own value
    assert token_entropy(lps, "one") < math.log(1000) - 2


@pytest.mark.parametrize("probs", [zipf(49152), zipf(5000, 1.6), [0.9] + [0.1 / 9999] * 9999,
                                   [0.4, 0.3] + zipf(3000, 0.8)])
def test_one_and_capped_are_lower_bounds_uniform_an_upper_bound_capped_the_tighter(probs):
    probs = [p / sum(probs) for p in probs]
    h, lps = exact_entropy(probs), top_logprobs(probs, 20)
    one, capped = token_entropy(lps, "one"), token_entropy(lps, "capped")
    uniform = token_entropy(lps, "uniform", vocab_size=len(probs))
    assert one <= capped + 1e-9 <= h + 1e-9 <= uniform + 2e-9


def test_the_chosen_token_outside_the_top_k_counts_once():
    """vLLM lists the sampled token among its top_logprobs; a server that does not gets it added, once."""
    lp = math.log(0.5)
    listed = {"token": "token_id:7", "logprob": lp, "top_logprobs": [{"token": "token_id:7", "logprob": lp},
                                                                      {"token": "token_id:3", "logprob": lp}]}
    unlisted = {"token": "token_id:9", "logprob": math.log(0.1),
                "top_logprobs": [{"token": "token_id:7", "logprob": math.log(0.6)},
                                 {"token": "token_id:3", "logprob": math.log(0.3)}]}
    assert vllm_positions([listed, unlisted]) == [[lp, lp], [math.log(0.6), math.log(0.3), math.log(0.1)]]
    assert mean_entropy(vllm_positions([listed, unlisted])) == pytest.approx(
        (math.log(2) + exact_entropy([0.6, 0.3, 0.1])) / 2)
    rows = [[[math.log(0.6), 7, None], [math.log(0.3), 3, None]], None]
    chosen = [[math.log(0.3), 3, None], [math.log(0.2), 5, None]]
    assert sglang_positions(rows, chosen) == [[math.log(0.6), math.log(0.3)], [math.log(0.2)]]


def test_a_record_prefers_the_exact_entropy_and_says_where_it_came_from():
    lps = [[math.log(0.5), math.log(0.5)]]
    assert entropy_fields(1.5, lps) == {"mean_entropy": 1.5, "entropy_source": "exact",
                                        "entropy_estimate": pytest.approx(math.log(2))}
    assert entropy_fields(None, lps) == {"mean_entropy": pytest.approx(math.log(2)),
                                         "entropy_source": "top-20 logprobs"}
    assert entropy_fields(None, None) == {"mean_entropy": None, "entropy_source": None}


def test_quartile_agreement_counts_requests_in_the_same_quartile():
    exact = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    assert quartile_agreement(exact, [2 * e for e in exact]) == 1.0       # the same order, other values
    swapped = [0.1, 0.3, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8]                     # 0.2 and 0.3 cross Q1 | Q2
    assert quartile_agreement(exact, swapped) == 0.75


def test_entropy_option_is_inline_or_off():
    assert entropy_mode({}) == "inline" and entropy_mode({"entropy": "off"}) == "off"
    with pytest.raises(SpecbenchError, match=r"--methods ngram:entropy=on: expected one of inline, off"):
        entropy_mode({"entropy": "on"}, "--methods ngram:")


# -- the runners: what they ask for and what they read from a stream -------------------------------------------

POSITIONS = [[0.5, 0.5], [0.9, 0.1], [0.7, 0.2, 0.1], [1.0]]      # each token's whole distribution (top-K covers it)
EXACT_MEAN = sum(exact_entropy(p) for p in POSITIONS) / len(POSITIONS)


def drive(runner, events, options):
    """Run the runner's `one` on a stream of `events` (sse_events replaced), returning (record, request body)."""
    import asyncio

    from specbench.runners.server import ServerRequest, Session
    from specbench.settings import Settings

    sent = {}

    async def fake_sse(client, url, body, stall=None):
        sent.update(body)
        for event in events:
            yield event

    module = sys.modules[type(runner).__module__]
    settings = Settings("vanilla", 1, max_new_tokens=4, options=options)
    original, module.sse_events = module.sse_events, fake_sse
    try:
        rec = asyncio.run(runner.one(None, "http://127.0.0.1:1", Session(settings, None, {}),
                                     ServerRequest("q", [], prompt_ids=[1, 2])))
    finally:
        module.sse_events = original
    return rec, sent


def vllm_chunks(with_logprobs: bool) -> list[dict]:
    def entry(i, probs):
        top = [{"token": f"token_id:{i * 10 + j}", "logprob": math.log(p)} for j, p in enumerate(probs)]
        return {"token": top[0]["token"], "logprob": top[0]["logprob"], "top_logprobs": top}

    cuts = [(0, 1), (1, 3), (3, 4)]                     # a speculative step puts several tokens in one chunk
    return [{"choices": [{"index": 0, "delta": {"content": "x"}, "token_ids": list(range(a, b)),
                          "logprobs": {"content": [entry(i, POSITIONS[i]) for i in range(a, b)]}
                          if with_logprobs else None}]} for a, b in cuts]


@pytest.mark.parametrize("mode", ["inline", "off"])
def test_vllm_runner_asks_for_top_20_logprobs_and_estimates_from_the_stream(tiny_target, mode):
    from specbench.runners.vllm import VllmRunner

    runner = VllmRunner(str(tiny_target), "float32", "http://127.0.0.1:1")
    rec, body = drive(runner, vllm_chunks(mode == "inline"), {"entropy": mode})
    if mode == "inline":
        assert (body["logprobs"], body["top_logprobs"], body["return_tokens_as_token_ids"]) == (True, 20, True)
        assert rec["mean_entropy"] == pytest.approx(EXACT_MEAN) and rec["entropy_source"] == "top-20 logprobs"
    else:
        assert "logprobs" not in body and "top_logprobs" not in body
        assert rec["mean_entropy"] is None and rec["entropy_source"] is None
    assert rec["output_token_ids"] == [0, 1, 2, 3]


@pytest.mark.parametrize("incremental", [False, True])
def test_sglang_runner_asks_for_top_20_logprobs_and_reads_cumulative_or_incremental_streams(tiny_target,
                                                                                          incremental):
    from specbench.runners.sglang import SglangRunner

    rows = [[[math.log(p), i * 10 + j, None] for j, p in enumerate(probs)] for i, probs in enumerate(POSITIONS)]
    chosen = [row[0] for row in rows]
    events = []
    for a, b in [(0, 1), (1, 3), (3, 4)]:
        lo = a if incremental else 0
        events.append({"output_ids": list(range(lo, b)), "meta_info": {
            "completion_tokens": b, "output_top_logprobs": rows[lo:b], "output_token_logprobs": chosen[lo:b]}})
    runner = SglangRunner(str(tiny_target), "float32", "http://127.0.0.1:1")
    rec, body = drive(runner, events, {})
    assert body["return_logprob"] is True and body["top_logprobs_num"] == 20
    assert rec["output_token_ids"] == [0, 1, 2, 3]
    assert rec["mean_entropy"] == pytest.approx(EXACT_MEAN) and rec["entropy_source"] == "top-20 logprobs"
    _, body = drive(runner, events, {"entropy": "off"})
    assert "return_logprob" not in body and "top_logprobs_num" not in body
