"""`eagle4-harness`: the EAGLE-4 drafter with cost-aware dynamic trees.

Same drafter and level-by-level expansion as `eagle4-tree`, but no fixed depth or tree size: before each
further draft level the `TreePlanner` decides from the measured cost table (and the measured drafter
time) whether another level pays for itself, and at the end how many best-first nodes every sequence
verifies (the budget L only caps it). Wide and deep at C = 1, narrow, a chain or plain decoding at large
batch, by measurement rather than by hand-set constants.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from reference_eagle4.calibration import CostTable, table_for
from reference_eagle4.harness import TreePlanner
from reference_eagle4.proposers.base import register
from reference_eagle4.proposers.eagle4 import Eagle4Proposer

if TYPE_CHECKING:
    from reference_eagle4.engine import Sequence
    from reference_eagle4.model import Transformer
    from reference_eagle4.tree import DraftTree



@register("eagle4-harness", "EAGLE-4 drafter, cost-aware dynamic tree sized from the calibrated cost table")
class Eagle4Harness(Eagle4Proposer):
    default_top_k = 8

    def __init__(self, budget: int, table: CostTable | str | None = None, **options: Any) -> None:
        options.setdefault("depth", max(budget - 1, 1))
        super().__init__(budget, **options)
        self.table = CostTable.load(table) if isinstance(table, str) else table
        self.table_source = "given" if table is not None else ""
        self._planner: TreePlanner | None = None
        self._level_ms = 0.0          # running estimate of one draft level's time (measured)
        self._spent_ms = 0.0          # drafting time spent in the current step
        self._levels = 0

    def bind(self, target: "Transformer") -> None:
        super().bind(target)
        if self.table is not None:
            return
        self.table, self.table_source = table_for(target, "eagle4-harness")

    def config(self) -> dict[str, Any]:
        return {**super().config(), "cost_table": self.table_source,
                "cost_table_key": self.table.key if self.table else None}

    def propose(self, seqs: list["Sequence"]) -> list["DraftTree"]:  # type: ignore[override]
        assert self.table is not None, "bind() the proposer to a target first"
        self._planner = TreePlanner(self.table, self.budget, len(seqs), max(len(s.tokens) for s in seqs))
        self._spent_ms, self._levels = 0.0, 0
        trees = super().propose(seqs)
        for tree in trees:
            tree.info = {"levels": self._levels}
        return trees

    def _next_level_ms(self, width: int) -> float:
        if self.table is not None and self.table.draft_ms:
            return self._planner.draft_ms(width)
        return self._level_ms

    def _keep_drafting(self, level: int, scores: list[Tensor], frontier: Tensor, top1: Tensor,
                       level_ms: float) -> bool:
        """After `level` draft levels: is one more worth its drafting and verification time?"""
        self._spent_ms += level_ms
        self._levels = level
        if level > 1 or not self._level_ms:      # level 1's time includes the catch-up of accepted tokens
            self._level_ms = level_ms if not self._level_ms else 0.8 * self._level_ms + 0.2 * level_ms
        if level >= self.budget - 1:
            return False
        return self._planner.worth_another_level(
            self._best_probs(scores), self._spent_ms, frontier[:, 0].exp().tolist(), float(top1.exp().mean()),
            self._next_level_ms(frontier.shape[1]))

    def _tree_size(self, scores: list[Tensor], levels: int) -> int:
        return self._planner.best_size(self._best_probs(scores), self._spent_ms).size

    def _best_probs(self, scores: list[Tensor]) -> list[list[float]]:
        all_s = torch.cat(scores, 1)
        return all_s.topk(min(self.budget - 1, all_s.shape[1]), dim=-1).values.exp().tolist()
