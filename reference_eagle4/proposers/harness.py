"""`eagle4-harness`: the EAGLE-4 drafter with cost-aware dynamic trees.

Same drafter and level-by-level expansion as `eagle4-tree`, but no fixed depth or tree size: before each
further draft level the `TreePlanner` decides from the measured cost table (and the measured drafter
time) whether another level pays for itself, and at the end how many best-first nodes each sequence
verifies (the budget L only caps it; `--option per_sequence=on` lets confident sequences of a batch take
more than unsure ones). Wide and deep at C = 1, narrow, a chain or plain decoding at large
batch, by measurement rather than by hand-set constants.

Prompt lookup joins the candidates (`lookup`, on by default): the continuation of the context's longest
earlier match is merged into the drafter's tree as one more branch (a node the drafter also proposed keeps
the higher of the two probabilities), each lookup draft priced by the acceptance the run has measured for
lookup drafts at that depth and match length. The planner then ranks drafter and lookup nodes alike.
Prompt-enhancement answers copy whole phrases from the user's prompt, which a one-layer drafter predicts
poorly and a lookup predicts well; where lookups miss, their measured rate falls and the planner drops them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from reference_eagle4.calibration import CostTable, table_for
from reference_eagle4.harness import TreePlanner
from reference_eagle4.proposers.base import flag_option, register
from reference_eagle4.proposers.eagle4 import Eagle4Proposer
from reference_eagle4.proposers.ngram import LookupAcceptance, lookup

if TYPE_CHECKING:
    from reference_eagle4.engine import Sequence
    from reference_eagle4.model import Transformer
    from reference_eagle4.tree import DraftTree



@register("eagle4-harness",
          "EAGLE-4 drafter + prompt lookup, cost-aware dynamic tree sized from the calibrated cost table")
class Eagle4Harness(Eagle4Proposer):
    default_top_k = 8

    def __init__(self, budget: int, table: CostTable | str | None = None, lookup: Any = True,
                 lookup_max_n: int = 3, per_sequence: Any = False, **options: Any) -> None:
        options.setdefault("depth", max(budget - 1, 1))
        super().__init__(budget, **options)
        self.lookup = flag_option(lookup)
        self.per_sequence = flag_option(per_sequence)   # on: tree sizes per sequence (see harness.py)
        self.lookup_max_n = int(lookup_max_n)
        self.lookup_acceptance = LookupAcceptance(self.lookup_max_n, max(budget - 1, 1))
        self._step_drafts: list[tuple[int, list[int]] | None] = []  # (match length, lookup draft) per sequence
        self._drafts: dict[int, tuple[int, list[int]]] = {}        # the same by id(seq), for `accepted`
        self._lookup_logp: Tensor | None = None                    # [B, m] their nodes' log-probabilities
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
                "cost_table_key": self.table.key if self.table else None,
                "lookup": self.lookup, "lookup_max_n": self.lookup_max_n if self.lookup else None,
                "per_sequence": self.per_sequence}

    def propose(self, seqs: list["Sequence"]) -> list["DraftTree"]:  # type: ignore[override]
        assert self.table is not None, "bind() the proposer to a target first"
        self._planner = TreePlanner(self.table, self.budget, len(seqs), max(len(s.tokens) for s in seqs))
        self._spent_ms, self._levels = 0.0, 0
        self._lookup_logp = self._lookup_drafts(seqs) if self.lookup and self.budget > 1 else None
        trees = super().propose(seqs)
        for tree in trees:
            tree.info = {"levels": self._levels}
        return trees

    def accepted(self, seq: "Sequence", path: list[int], hidden: list[Tensor]) -> None:
        super().accepted(seq, path, hidden)
        found = self._drafts.pop(id(seq), None)
        if found is not None:
            self.lookup_acceptance.observe(found[0], found[1], seq.tokens[-len(path):])

    def _lookup_drafts(self, seqs: list["Sequence"]) -> Tensor:
        """Each sequence's lookup draft (kept for `accepted`) and its nodes' log-probabilities [B, m]."""
        self._step_drafts = []
        for s in seqs:
            n, conts = lookup(np.asarray(s.tokens), self.lookup_max_n, 1, self.budget - 1, 1)
            self._step_drafts.append((n, conts[0]) if conts else None)
        # every live sequence takes part in every step, so this step's drafts replace the last step's
        self._drafts = {id(s): f for s, f in zip(seqs, self._step_drafts) if f is not None}
        m = max((len(f[1]) for f in self._drafts.values()), default=0)
        out = np.full((len(seqs), m), -np.inf)
        for b, f in enumerate(self._step_drafts):
            if f is not None:
                out[b, : len(f[1])] = np.log(self.lookup_acceptance.path_probs(f[0], len(f[1])))
        return torch.from_numpy(out).float()

    def _candidates(self, scores: Tensor, tokens: Tensor, parents: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Merge each sequence's lookup draft into its drafter tree: follow the draft down the drafter's
        records while they agree (raising a shared node to the lookup's probability when that is higher),
        then append the rest as new records."""
        if self._lookup_logp is None or self._lookup_logp.shape[1] == 0:
            return scores, tokens, parents
        B, N = scores.shape
        m = self._lookup_logp.shape[1]
        s_np = torch.cat([scores, scores.new_full((B, m), float("-inf"))], 1).float().cpu().numpy()
        t_np = torch.cat([tokens, tokens.new_zeros(B, m)], 1).cpu().numpy()
        p_np = torch.cat([parents, parents.new_full((B, m), -1)], 1).cpu().numpy()
        lp = self._lookup_logp.numpy()
        for b, found in enumerate(self._step_drafts):
            if found is None:
                continue
            node, new = -1, N
            for d, tok in enumerate(found[1]):
                hit = np.flatnonzero((p_np[b, :N] == node) & (t_np[b, :N] == tok)) if node < N else ()
                if len(hit):
                    node = int(hit[0])
                    s_np[b, node] = max(s_np[b, node], lp[b, d])
                else:
                    s_np[b, new], t_np[b, new], p_np[b, new] = lp[b, d], tok, node
                    node, new = new, new + 1
        dev = scores.device
        return (torch.from_numpy(s_np).to(dev, scores.dtype), torch.from_numpy(t_np).to(dev),
                torch.from_numpy(p_np).to(dev))

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
            self._next_level_ms(frontier.shape[1]), self.per_sequence)

    def _tree_sizes(self, scores: Tensor) -> list[int]:
        return self._planner.best_sizes(self._top_probs(scores), self._spent_ms, self.per_sequence).sizes

    def _best_probs(self, scores: list[Tensor]) -> list[list[float]]:
        """While drafting: the drafter's nodes so far and the lookup draft (a shared node counted twice)."""
        extra = [] if self._lookup_logp is None else [self._lookup_logp.to(scores[0].device, scores[0].dtype)]
        return self._top_probs(torch.cat([*scores, *extra], 1))

    def _top_probs(self, scores: Tensor) -> list[list[float]]:
        return scores.topk(min(self.budget - 1, scores.shape[1]), dim=-1).values.exp().tolist()
