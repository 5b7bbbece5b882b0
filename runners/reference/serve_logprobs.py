"""Logprobs in vLLM's response shapes, from the reference engine's per-token top logprobs.

The engine keeps, for each output token of a request that asks, the token's log-probability and the k most
likely (token, log-probability) pairs of the target's raw next-token distribution at that position
(`reference_eagle4.verify.top_logprobs`): the distribution whose entropy the engine reports, and the one vLLM
returns by default (`--logprobs-mode raw_logprobs`, vllm/config/model.py). A server runner estimates the
entropy from these exactly as it does from vLLM's, so the estimate can be checked against the exact value
through the same HTTP path.

vLLM builds, per position, a dict that holds the sampled token first and then the top k
(vllm/logprobs.py `append_logprobs_for_next_position`), and returns its first k entries on chat completions
(`chat_top_logprobs_limit`) and its first k + 1 on completions (`completion_top_logprobs_limit`,
vllm/entrypoints/generate/base/serving.py); a sampled token ranked below k thus displaces the k-th. Values
below -9999 are sent as -9999.0. Token strings are each id decoded alone, or "token_id:N" with
`return_tokens_as_token_ids` (`format_token_id_placeholder`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from reference_eagle4.verify import TokenLogprobs

LOGPROB_FLOOR = -9999.0


def candidates(token: int, logprobs: TokenLogprobs) -> list[tuple[int, float]]:
    """vLLM's per-position order: the sampled token first, then the top k without it."""
    own, top = logprobs
    return [(token, own), *((t, lp) for t, lp in top if t != token)]


def chat_logprobs(ids: Sequence[int], logprobs: Sequence[TokenLogprobs], k: int,
                  text: Callable[[int], str]) -> dict[str, Any]:
    """A chat choice's `logprobs` for these output tokens (vLLM's `ChatCompletionLogProbs`)."""

    def entry(token: int, lp: float) -> dict[str, Any]:
        s = text(token)
        return {"token": s, "logprob": max(lp, LOGPROB_FLOOR), "bytes": list(s.encode("utf-8", errors="replace"))}

    return {"content": [{**entry(token, lps[0]), "top_logprobs": [entry(t, lp) for t, lp in candidates(token, lps)[:k]]}
                        for token, lps in zip(ids, logprobs)]}


def completion_logprobs(ids: Sequence[int], logprobs: Sequence[TokenLogprobs], k: int,
                        text: Callable[[int], str], offset: int) -> dict[str, Any]:
    """A completion choice's `logprobs` for these output tokens (vLLM's `CompletionLogProbs`), the first token's
    text offset at `offset` (the length of the text sent before them)."""
    out: dict[str, Any] = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
    for token, lps in zip(ids, logprobs):
        s = text(token)
        out["text_offset"].append(offset)
        out["token_logprobs"].append(max(lps[0], LOGPROB_FLOOR))
        out["tokens"].append(s)
        out["top_logprobs"].append({text(t): max(lp, LOGPROB_FLOOR) for t, lp in candidates(token, lps)[: k + 1]})
        offset += len(s)
    return out
