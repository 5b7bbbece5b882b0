"""Lossless verification of a draft tree against the target's logits, shared by every method.

The rule: starting at the root, draw y from the target's processed distribution at the
current node (argmax when greedy), move to the child whose token is y, and stop when there is none,
emitting y as the bonus token. Each emitted token is then distributed exactly as the target's own next
token, whatever the drafter proposed, so greedy output equals vanilla decoding and sampled output has
the target's distribution. Because only visited nodes use their draw, drawing every node's y in one
batched call is equivalent to drawing them along the walk.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from reference_eagle4.kernels import row_ops
from reference_eagle4.tree import DraftTree


@dataclass(frozen=True)
class Sampling:
    """Target sampling settings; temperature 0 means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def processed_probs(logits: Tensor, sampling: Sampling) -> Tensor:
    """Temperature, then top-k, then top-p: the same pipeline plain sampling uses, in fp32."""
    x = logits.float() / sampling.temperature
    if sampling.top_k > 0:
        kth = torch.topk(x, min(sampling.top_k, x.shape[-1]), dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = x.softmax(-1)
    if sampling.top_p < 1.0:
        sorted_p, idx = probs.sort(-1, descending=True)
        # drop a token when the mass strictly before it already reaches top_p (the top token always stays)
        drop = (sorted_p.cumsum(-1) - sorted_p) >= sampling.top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def greedy_tokens(logits: Tensor) -> Tensor:
    """argmax per row (the first maximum), by `row_ops` on the CPU, where PyTorch's bf16 argmax is a scalar
    loop over the vocabulary."""
    return row_ops.argmax(logits)


def draw(logits: Tensor, sampling: Sampling, generator: torch.Generator | None) -> Tensor:
    """One target token per row of logits [N, V]."""
    if sampling.greedy:
        return greedy_tokens(logits)
    return torch.multinomial(processed_probs(logits, sampling), 1, generator=generator).squeeze(-1)


@dataclass(frozen=True)
class Verdict:
    path: list[int]          # accepted node indices, root first (root always accepted)
    tokens: list[int]        # emitted tokens: accepted drafts then the bonus token


def walk(tree: DraftTree, targets: list[int]) -> Verdict:
    """Follow the target's token at each node down the tree; `targets[i]` is the draw at node i."""
    node, path, out = 0, [0], []
    while True:
        y = targets[node]
        out.append(y)
        child = tree.children[node].get(y)
        if child is None:
            return Verdict(path, out)
        node = child
        path.append(child)


def verify(tree: DraftTree, logits: Tensor, sampling: Sampling,
           generator: torch.Generator | None = None) -> Verdict:
    """Verify one tree given the target's logits for its nodes [len(tree), V]."""
    return walk(tree, draw(logits[: len(tree)], sampling, generator).tolist())


def entropy(logits: Tensor) -> Tensor:
    """Entropy (nats) of the target's raw next-token distribution, per row (`row_ops`: one pass a row)."""
    return row_ops.entropy(logits)


TokenLogprobs = tuple[float, list[tuple[int, float]]]


def top_logprobs(logits: Tensor, tokens: list[int], k: int) -> list[TokenLogprobs]:
    """Per row of logits [N, V]: the log-probability of tokens[i] and the k most likely (token, log-probability)
    pairs, most likely first, all under the raw distribution whose entropy `entropy` gives (fp32)."""
    logp = logits.float().log_softmax(-1)
    chosen = logp.gather(-1, torch.tensor(tokens, device=logp.device)[:, None])[:, 0].tolist()
    values, ids = logp.topk(min(k, logp.shape[-1]), dim=-1)
    return [(c, list(zip(i, v))) for c, i, v in zip(chosen, ids.tolist(), values.tolist())]
