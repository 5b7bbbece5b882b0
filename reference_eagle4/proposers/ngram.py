"""Prompt lookup (n-gram) drafting: copy what followed the latest earlier occurrence of the suffix.

No model: the longest suffix (max_n down to min_n tokens) of prompt + output that occurred before
proposes the tokens that followed it. With `matches` > 1 the continuations of several occurrences are
merged into a trie, giving a draft tree (used to test tree verification without a trained drafter).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reference_eagle4.proposers.base import Proposer, register
from reference_eagle4.tree import DraftTree


def lookup(history: np.ndarray, n_max: int, n_min: int, length: int,
           matches: int) -> tuple[int, list[list[int]]]:
    """(n, continuations): the length of the longest suffix that occurred before and what followed its
    occurrences, most recent first; (0, []) without a match."""
    L = len(history)
    top = min(n_max, L - 1)
    if top < max(n_min, 1):
        return 0, []
    # earlier occurrences of the last token, then how far back each one's match with the suffix reaches
    ends = np.flatnonzero(history[:-1] == history[-1])
    reach = np.ones(len(ends), dtype=np.int64)
    for k in range(1, top):
        before = ends - k
        reach += (reach == k) & (before >= 0) & (history[np.maximum(before, 0)] == history[L - 1 - k])
    for n in range(top, n_min - 1, -1):
        starts = (ends[reach >= n] - n + 1)[::-1]
        found: list[list[int]] = []
        for s in starts:
            cont = history[s + n: s + n + length].tolist()
            if cont and cont not in found:
                found.append(cont)
                if len(found) == matches:
                    break
        if found:
            return n, found
    return 0, []


def trie(root: int, continuations: list[list[int]], budget: int) -> DraftTree:
    tokens, parents = [root], [-1]
    children: list[dict[int, int]] = [{}]
    for cont in continuations:
        node = 0
        for tok in cont:
            nxt = children[node].get(tok)
            if nxt is None:
                if len(tokens) == budget:
                    break
                nxt = len(tokens)
                tokens.append(tok)
                parents.append(node)
                children.append({})
                children[node][tok] = nxt
            node = nxt
    return DraftTree(tokens, parents)


class LookupAcceptance:
    """How often the target accepts prompt-lookup drafts, learned online from the run's own steps.

    Rates are kept per (suffix match length n, depth d) as hits / tries of the conditional event "the
    target's token at depth d equals the draft, given depths < d did", from a prior of 1 hit in 2 tries.
    A draft's chance of acceptance is the product of its path's rates: what the harness needs to price a
    lookup branch next to the drafter's own candidates."""

    def __init__(self, max_n: int, depth: int) -> None:
        self.hits = np.ones((max_n + 1, depth))
        self.tries = np.full((max_n + 1, depth), 2.0)

    def path_probs(self, n: int, length: int) -> np.ndarray:
        """Acceptance probability of each draft along a lookup chain of `length` from an n-token match."""
        return np.cumprod(self.hits[n, :length] / self.tries[n, :length])

    def observe(self, n: int, draft: list[int], emitted: list[int]) -> None:
        """`emitted`: the target's tokens after the root this step, so drafts beyond it were never tested."""
        for d, (tok, got) in enumerate(zip(draft[: self.hits.shape[1]], emitted)):
            self.tries[n, d] += 1
            if tok != got:
                return
            self.hits[n, d] += 1


@register("ngram", "prompt lookup: drafts what followed the latest match of the last n-gram in the context")
class NGram(Proposer):
    def __init__(self, budget: int, max_n: int = 3, min_n: int = 1, matches: int = 1, **options: Any) -> None:
        super().__init__(budget)
        self.max_n, self.min_n, self.matches = max_n, min_n, matches

    def config(self) -> dict[str, Any]:
        return {**super().config(), "max_n": self.max_n, "min_n": self.min_n, "matches": self.matches}

    def propose(self, seqs):  # type: ignore[override]
        trees = []
        for s in seqs:
            history = np.asarray(s.tokens)
            _, conts = lookup(history, self.max_n, self.min_n, self.budget - 1, self.matches)
            trees.append(trie(s.tokens[-1], conts, self.budget))
        return trees
