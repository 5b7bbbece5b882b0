"""Prompt lookup (n-gram) drafting: copy what followed the latest earlier occurrence of the suffix.

No model: the longest suffix (max_n down to min_n tokens) of prompt + output that occurred before
proposes the tokens that followed it (`retrieval.ContextIndex`, one per sequence on `seq.state`). With
`matches` > 1 the continuations of several occurrences are merged into a trie, giving a draft tree (used
to test tree verification without a trained drafter).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor

from reference_eagle4.proposers.base import Proposer, register
from reference_eagle4.retrieval import ContextIndex
from reference_eagle4.tree import DraftTree

if TYPE_CHECKING:
    from reference_eagle4.engine import Sequence


def trie(root: int, continuations: list[list[int]], budget: int) -> DraftTree:
    """The continuations merged below `root` (shared prefixes once), at most `budget` nodes."""
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


@register("ngram", "prompt lookup: drafts what followed the latest match of the last n-gram in the context")
class NGram(Proposer):
    def __init__(self, budget: int, max_n: int = 3, min_n: int = 1, matches: int = 1, **options: Any) -> None:
        super().__init__(budget)
        self.max_n, self.min_n, self.matches = max_n, min_n, matches

    def config(self) -> dict[str, Any]:
        return {**super().config(), "max_n": self.max_n, "min_n": self.min_n, "matches": self.matches}

    def begin(self, seq: "Sequence", hidden: list[Tensor]) -> None:
        seq.state = ContextIndex(seq.tokens, self.max_n)       # indexes the sequence's tokens as they grow

    def propose(self, seqs: list["Sequence"]) -> list[DraftTree]:
        trees = []
        for s in seqs:
            _, conts = s.state.lookup(self.min_n, self.budget - 1, self.matches)
            trees.append(trie(s.tokens[-1], conts, self.budget))
        return trees

    def end(self, seq: "Sequence") -> None:
        seq.state = None
