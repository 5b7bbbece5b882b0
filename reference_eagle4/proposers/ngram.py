"""Prompt lookup (n-gram) drafting: copy what followed the latest earlier occurrence of the suffix.

No model: the longest suffix (max_n down to min_n tokens) of prompt + output that occurred before
proposes the tokens that followed it. With `matches` > 1 the continuations of several occurrences are
merged into a trie, giving a draft tree (used to test tree verification without a trained drafter).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from reference_eagle4.proposers.base import Proposer, register
from reference_eagle4.tree import DraftTree

if TYPE_CHECKING:
    from reference_eagle4.engine import Sequence


class ContextIndex:
    """Where each n-gram (n <= max_n) of a growing token list ended, kept up to date as tokens are
    appended to it, so that a step's lookup reads a few dict entries instead of scanning the whole context
    (a numpy scan took ~70 us a step at 300 tokens, and grows with the context)."""

    def __init__(self, tokens: list[int], max_n: int) -> None:
        self.tokens = tokens                                 # the sequence's own list, not a copy
        self.max_n = max_n
        self.indexed = 0
        self.ends: dict[tuple[int, ...], list[int]] = {}     # n-gram -> positions of its last token

    def sync(self) -> None:
        """Index the tokens appended to the list since the last call."""
        t = self.tokens
        for i in range(self.indexed, len(t)):
            for n in range(1, min(self.max_n, i + 1) + 1):
                self.ends.setdefault(tuple(t[i - n + 1: i + 1]), []).append(i)
        self.indexed = len(t)

    def lookup(self, n_min: int, length: int, matches: int) -> tuple[int, list[list[int]]]:
        """(n, continuations): the length of the longest suffix (max_n down to n_min) that occurred
        before, and up to `matches` distinct continuations of `length` tokens that followed its
        occurrences, most recent first; (0, []) without a match."""
        self.sync()
        own = self.tokens
        last = len(own) - 1
        for n in range(min(self.max_n, last), max(n_min, 1) - 1, -1):
            found: list[list[int]] = []
            for e in reversed(self.ends.get(tuple(own[last - n + 1:]), ())):
                if e == last:                              # the suffix itself
                    continue
                cont = own[e + 1: e + 1 + length]
                if cont not in found:
                    found.append(cont)
                    if len(found) == matches:
                        break
            if found:
                return n, found
        return 0, []


class ContextIndexes:
    """One `ContextIndex` per live sequence, for proposers that look up every step."""

    def __init__(self, max_n: int) -> None:
        self.max_n = max_n
        self._by_seq: dict[int, ContextIndex] = {}

    def of(self, seq: "Sequence") -> ContextIndex:
        """The sequence's index (built on first use; the sequence is told apart by its token list, so a new
        sequence reusing a finished one's id gets a fresh index)."""
        index = self._by_seq.get(id(seq))
        if index is None or index.tokens is not seq.tokens:
            index = self._by_seq[id(seq)] = ContextIndex(seq.tokens, self.max_n)
        return index

    def drop(self, seq: "Sequence") -> None:
        self._by_seq.pop(id(seq), None)


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
        self.context = ContextIndexes(max_n)

    def config(self) -> dict[str, Any]:
        return {**super().config(), "max_n": self.max_n, "min_n": self.min_n, "matches": self.matches}

    def propose(self, seqs):  # type: ignore[override]
        trees = []
        for s in seqs:
            _, conts = self.context.of(s).lookup(self.min_n, self.budget - 1, self.matches)
            trees.append(trie(s.tokens[-1], conts, self.budget))
        return trees

    def end(self, seq: "Sequence") -> None:
        self.context.drop(seq)
