"""Vanilla decoding: no drafts, one token per step. The baseline every speedup divides by."""

from __future__ import annotations

from reference_eagle4.proposers.base import Proposer, register
from reference_eagle4.tree import DraftTree


@register("vanilla", "no drafting: one target forward per token (the baseline)")
class Vanilla(Proposer):
    def __init__(self, budget: int = 1, **options: object) -> None:
        super().__init__(1)

    def propose(self, seqs):  # type: ignore[override]
        return [DraftTree([s.tokens[-1]], [-1]) for s in seqs]
