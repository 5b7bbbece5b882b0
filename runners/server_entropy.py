"""A request's mean entropy from the top logprobs a server returns, for the vLLM and SGLang runners.

A record's `mean_entropy` is the mean over its output tokens of the entropy (nats) of the target's next-token
distribution at each of them (DESIGN.md: entropy; `analysis.metrics.al_by_entropy_quartile` splits requests by
it). The bundled engine knows it exactly; a vLLM or SGLang server only returns, per output token, the K most
likely tokens' logprobs (and the chosen token's). The entropy of a position is then the known part,
-sum p_i log p_i over the returned tokens, plus a *tail*: the mass r = 1 - sum p_i of the tokens not returned,
whose split is unknown. Three models of it (`TAIL_MODELS`):

- "one":     the tail is one outcome: -r log r. A lower bound (splitting mass only adds entropy).
- "capped":  no tail token is more likely than the least likely returned one (c = min p_i: the returned tokens
             are the most likely), so each unit of tail mass carries at least -log c nats, and the tail at
             least -r log min(c, r). The tightest lower bound the top-K gives.
- "uniform": the tail spread evenly over the V - n tokens not returned: -r log(r / (V - n)). An upper bound;
             it needs the vocabulary size V.

The runners use "capped" (`DEFAULT_TAIL`). The quartile split needs the order of requests, not their values,
and the models differ only in what they charge per unit of tail mass: "one" charges -log r, which shrinks as
the tail grows, so it under-ranks the flattest requests, the ones whose tails are largest; "uniform" charges
log((V - n) / r), the most any distribution could, overshooting; "capped" charges -log min(c, r), which grows
as the returned distribution flattens, as the true tail's surprisal does. `tools/check_entropy_estimator.py`
measures the three against the engine's exact entropy through `specbench serve` on the default target:
"capped" and "uniform" order requests about equally well and "one" clearly worse. "capped" is preferred
because it does not exceed the exact entropy (an estimate that errs one way only; the exception is a sampled
token ranked below K, which vLLM lists in place of the K-th and so lowers the cap), its error there is the
smaller, and it needs no vocabulary size, which neither server reports.

What each server returns (the parsers below):
- vLLM chat completions, `logprobs: true, top_logprobs: K`: each streamed chunk's `choices[i].logprobs.content`
  lists one entry per token in that chunk: {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}
  (vllm/entrypoints/openai/chat_completion/serving.py `_create_chat_logprobs`, protocol.py
  `ChatCompletionLogProbsContent`). The K entries are the first K of the engine's per-position dict, which puts
  the sampled token first (vllm/entrypoints/generate/base/serving.py `chat_top_logprobs_limit`,
  vllm/logprobs.py `append_logprobs_for_next_position`): the sampled token plus the top K-1 when it ranks below
  K. Values below -9999 are sent as -9999.0. vLLM returns raw logprobs by default (`--logprobs-mode
  raw_logprobs`, vllm/config/model.py), the same distribution as the bundled engine's entropy, and refuses
  K above `--max-logprobs` (default 20, vllm/config/model.py; sampling_params.py `_validate_logprobs`).
- SGLang /generate, `return_logprob: true, top_logprobs_num: K`: `meta_info.output_top_logprobs` holds one
  list of [logprob, token_id, text] per output token (text null unless `return_text_in_logprobs`) and
  `meta_info.output_token_logprobs` one [logprob, token_id, text] for the chosen token
  (python/sglang/srt/managers/tokenizer_manager.py `add_logprob_to_meta_info`,
  `detokenize_top_logprobs_tokens`); each streamed event carries the lists for the whole output so far, or
  only the new positions with --incremental-streaming-output (`_slice_streaming_output_meta_info`). SGLang
  returns the raw distribution when greedy and the temperature-scaled one when sampling, unless the server
  runs with SGLANG_RETURN_ORIGINAL_LOGPROB=1 (python/sglang/srt/layers/sampler.py).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from specbench.analysis.metrics import entropy_quartile_of
from specbench.errors import SpecbenchError

DEFAULT_TOP_LOGPROBS = 20          # vLLM's default --max-logprobs: the most a stock vLLM server returns
TAIL_MODELS = ("one", "capped", "uniform")
DEFAULT_TAIL = "capped"
ENTROPY_MODES = ("inline", "off")
EXACT = "exact"


def estimate_source(k: int = DEFAULT_TOP_LOGPROBS) -> str:
    """The record's `entropy_source` for an entropy estimated from top-k logprobs."""
    return f"top-{k} logprobs"


def entropy_mode(options: dict[str, Any], flag: str = "--option ") -> str:
    """`--option entropy=inline|off` (default inline): whether a server run asks for logprobs to estimate the
    entropy. A bad value is one line naming the flag (`flag` leads it: "--methods m:" for a method's own)."""
    mode = str(options.get("entropy", "inline"))
    if mode not in ENTROPY_MODES:
        raise SpecbenchError(f"{flag}entropy={mode}: expected one of {', '.join(ENTROPY_MODES)}")
    return mode


def entropy_config(options: dict[str, Any]) -> dict[str, Any]:
    """What the method config records about the entropy: the mode and, inline, how many top logprobs each
    output token asks for and the tail model of the estimate."""
    if entropy_mode(options) == "off":
        return {"entropy": "off"}
    return {"entropy": "inline", "entropy_top_logprobs": DEFAULT_TOP_LOGPROBS, "entropy_tail": DEFAULT_TAIL}


def entropy_fields(exact: float | None, positions: Sequence[Sequence[float]] | None) -> dict[str, Any]:
    """A record's `mean_entropy` and `entropy_source`: the server's exact value when it gives one (`specbench
    serve`), else the estimate from the top logprobs, else None. With both, `entropy_estimate` keeps the
    estimate, so a run against `specbench serve` checks the estimator."""
    estimate = mean_entropy(positions or [])
    if exact is not None:
        return {"mean_entropy": exact, "entropy_source": EXACT,
                **({"entropy_estimate": estimate} if estimate is not None else {})}
    return {"mean_entropy": estimate, "entropy_source": estimate_source() if estimate is not None else None}


def token_entropy(logprobs: Sequence[float], tail: str = DEFAULT_TAIL, vocab_size: int | None = None) -> float:
    """The entropy (nats) of one position from the logprobs of distinct tokens (the top-K, maybe the chosen one
    too) plus a tail bucket for the rest, modelled as `tail` says (see the module docstring)."""
    probs = [math.exp(lp) for lp in logprobs]
    known = -sum(p * lp for p, lp in zip(probs, logprobs) if p > 0.0)
    rest = 1.0 - sum(probs)
    if rest <= 0.0:
        return known
    if tail == "one":
        return known - rest * math.log(rest)
    if tail == "capped":
        cap = min((p for p in probs if p > 0.0), default=rest)
        return known - rest * math.log(min(cap, rest))
    if tail == "uniform":
        if vocab_size is None or vocab_size <= len(probs):
            raise ValueError("the uniform tail needs a vocabulary larger than the returned tokens")
        return known - rest * math.log(rest / (vocab_size - len(probs)))
    raise ValueError(f"unknown tail model {tail!r} (expected one of {', '.join(TAIL_MODELS)})")


def mean_entropy(positions: Iterable[Sequence[float]], tail: str = DEFAULT_TAIL,
                 vocab_size: int | None = None) -> float | None:
    """The mean over output tokens of `token_entropy`; None when there are none."""
    values = [token_entropy(lps, tail, vocab_size) for lps in positions]
    return sum(values) / len(values) if values else None


def vllm_positions(content: Iterable[dict[str, Any]]) -> list[list[float]]:
    """Per output token, the distinct logprobs of a vLLM chat `logprobs.content` list: its top_logprobs, plus
    the chosen token's own when they leave it out (a server that lists the top K only)."""
    positions = []
    for entry in content:
        top = entry.get("top_logprobs") or []
        lps = [float(t["logprob"]) for t in top]
        chosen = (entry.get("token"), entry.get("logprob"))
        if chosen[1] is not None and not any((t.get("token"), t.get("logprob")) == chosen for t in top):
            lps.append(float(chosen[1]))
        positions.append(lps)
    return positions


def sglang_positions(top: Sequence[Sequence[Sequence[Any]] | None],
                     chosen: Sequence[Sequence[Any]]) -> list[list[float]]:
    """Per output token, the distinct logprobs of SGLang's `output_top_logprobs` rows ([logprob, token_id, text]
    each; a row may be null), plus the chosen token's (`output_token_logprobs`) when its id is not in the row."""
    positions = []
    for i, row in enumerate(top):
        row = row or []
        lps = [float(e[0]) for e in row]
        if i < len(chosen) and chosen[i][1] not in {e[1] for e in row}:
            lps.append(float(chosen[i][0]))
        positions.append(lps)
    return positions


def quartile_agreement(exact: Sequence[float], estimated: Sequence[float]) -> float:
    """The share of requests that fall in the same entropy quartile (`al_by_entropy_quartile`'s split) by the
    estimated mean entropy as by the exact one."""
    if len(exact) != len(estimated) or not exact:
        raise ValueError("quartile_agreement needs the same, non-zero number of exact and estimated entropies")
    same = sum(a == b for a, b in zip(entropy_quartile_of(list(exact)), entropy_quartile_of(list(estimated))))
    return same / len(exact)
