"""The cost-aware tree planner behind `eagle4-harness` (and dspark's verified chain lengths).

Expected speed of a step is A / C: A = sum over the batch of (1 + sum of P_v over a sequence's verified
nodes), P_v = product of draft probabilities along v's path (the chance the target accepts v),
C = drafting time + verification time, both read from the measured cost table at the batch size and
context of this step.

Candidates are ranked best-first by P_v. Since P_v never grows along a path, every prefix of a
sequence's ranking is closed under ancestors, so the planner only chooses how many nodes each sequence
keeps: by default one size T for the whole batch (each sequence verifies its own T best candidates, T
maximises A / C, T <= L - 1). On a concave cost curve this is the rule "add v while P_v / marginal cost >
current A / C"; on a step-shaped curve it also fills a step to its edge. At large batch the verification
cost rises steeply with T, so T shrinks towards a chain or vanilla on its own.

With `per_sequence` the planner merges every sequence's candidates into one best-first ranking and keeps
the prefix that maximises A / C (the engine packs ragged trees, so a step costs about what uniform trees
with the same total tokens cost): confident sequences draft deep and unsure ones not at all. That
maximises the expected tokens per step, but on a finite set of requests the unsure sequences it starves
become the stragglers that set the wall time, so the whole run can end later: it is an option, off by
default.

Before each further draft level the planner asks whether the best child that level could add (each
sequence's best frontier probability times the drafter's top-1 confidence) pays for the level's drafting
time plus its verification.

`best_chain` is the same choice for an engine that verifies one chain length per batch size (vLLM's
`num_speculative_tokens_per_batch_size`): the planner over a chain's depths, priced by a server's cost table.
This module and `reference_eagle4.cost_table` import no torch, so a server runner compiles its policy with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import accumulate

from reference_eagle4.cost_table import CostTable


@dataclass(frozen=True)
class Plan:
    sizes: list[int]     # drafted nodes each sequence verifies (root excluded)
    speed: float         # expected emitted tokens per ms for the batch
    accept: float        # A: expected tokens the step emits over the batch


class TreePlanner:
    """Plans the tree sizes of one step for a batch of sequences."""

    def __init__(self, table: CostTable, budget: int, batch: int, context: int):
        self.table = table
        self.budget = budget
        self.batch = max(batch, 1)
        # Verifying more tokens never costs less (a smaller tree could be padded up): a running maximum
        # keeps timing noise, e.g. a 4-token forward measured below a 2-token one, from steering the plan.
        self._verify = list(accumulate((table.verify(self.batch, context, t) for t in range(1, budget + 1)), max))

    def verify_ms(self, tokens: float) -> float:
        """One batched verification with `tokens` tokens per sequence on average (root included). A ragged
        batch (per_sequence) falls between two uniform steps; it is priced at the next whole count a
        sequence, not between, since linears cost by blocks of rows (17 rows cost what 32 do) and a
        midpoint would buy rows past a block's edge as nearly free."""
        t = min(max(math.ceil(tokens - 1e-9), 1), self.budget)
        return self._verify[t - 1]

    def draft_ms(self, width: int) -> float:
        """One batched drafter forward over `width` nodes per sequence."""
        return self.table.draft(self.batch, width)

    def best_sizes(self, probs: list[list[float]], draft_ms: float, per_sequence: bool = False,
                   least: int = 0) -> Plan:
        """probs[b]: sequence b's candidate probabilities, best first. Keeps the best-first prefix of all
        sequences' candidates together that maximises the batch's expected speed; with per_sequence off,
        one size for every sequence (the candidates ranked by depth in the sequence's list first). Plans
        that keep fewer than `least` nodes a sequence (on average, with per_sequence) are not considered."""
        B = len(probs)
        ranked = sorted(((p, b, i) for b, row in enumerate(probs) for i, p in enumerate(row[: self.budget - 1])),
                        key=(lambda pbi: -pbi[0]) if per_sequence else (lambda pbi: (pbi[2], -pbi[0])))
        accept, best_n = float(B), 0
        best = accept / (draft_ms + self.verify_ms(1)) if least <= 0 else -math.inf
        for n, (p, _, i) in enumerate(ranked, 1):
            accept += p
            if not per_sequence and n < len(ranked) and ranked[n][2] == i:
                continue                                   # one size for all: only whole ranks count
            if n < least * B:
                continue
            speed = accept / (draft_ms + self.verify_ms(1 + n / max(B, 1) if per_sequence else i + 2))
            if speed > best:
                best, best_n = speed, n
        sizes = [0] * B
        for _, b, _ in ranked[:best_n]:
            sizes[b] += 1
        return Plan(sizes, best, B + sum(p for p, _, _ in ranked[:best_n]))

    def worth_another_level(self, probs: list[list[float]], draft_ms: float, frontier_best: list[float],
                            confidence: float, level_ms: float, per_sequence: bool = False) -> bool:
        """Draft one level deeper (costing `level_ms`) only if its best plausible children beat the current
        plan's speed. draft_ms: drafting time spent so far this step."""
        if max(frontier_best, default=0.0) <= 0.0:
            return False
        now = self.best_sizes(probs, draft_ms, per_sequence)
        grown = [sorted([*p, f * confidence], reverse=True) for p, f in zip(probs, frontier_best)]
        later = self.best_sizes(grown, draft_ms + level_ms, per_sequence)
        return later.speed > now.speed


def best_chain(table: CostTable, budget: int, batch: int, context: int, reach: list[float],
               least: int = 0, draft_ms: float = 0.0) -> Plan:
    """The chain every sequence of a batch of `batch` verifies: the K drafts (K <= L - 1, K >= `least`) that
    maximise the batch's expected tokens per ms. reach[d-1] is the chance that a step's accepted path reaches
    draft depth d (vLLM's per-position acceptance), so a chain's depths are `best_sizes`' best-first
    candidates with P_v = reach. The table's entry at K + 1 tokens prices a step drafting K; where it is a
    server's whole step (drafting included, `specbench calibrate --engine vllm`), draft_ms stays 0. `least`
    keeps K off sizes the table did not time (a speculative server at K = 0 is not a vanilla one)."""
    if len(reach[: budget - 1]) < least:
        raise ValueError(f"a chain of at least {least} drafts needs the acceptance of {least} depths, "
                         f"got {len(reach)} within L = {budget}")
    planner = TreePlanner(table, budget, batch, context)
    return planner.best_sizes([list(reach)] * planner.batch, draft_ms, least=least)

