"""The cost-aware tree planner behind `eagle4-harness`.

Expected speed of a step is A / C: A = sum over the batch of (1 + sum of P_v over a sequence's verified
nodes), P_v = product of draft probabilities along v's path (the chance the target accepts v),
C = drafting time + verification time, both read from the measured cost table at the batch size and
context of this step.

Candidates are ranked best-first by P_v. Since P_v never grows along a path, every prefix of that
ranking is closed under ancestors, so the planner only chooses how many nodes to keep. The engine pads
every sequence of a batch to the largest tree, so the choice is one tree size T for the whole batch:
each sequence verifies its own T best candidates, and T maximises A / C (T <= L - 1). On a concave cost
curve this is the rule "add v while P_v / marginal cost > current A / C"; on a step-shaped curve it
also fills a step to its edge. At large batch the verification cost rises steeply with T, so T shrinks
towards a chain or vanilla on its own. Before each further draft level the planner asks whether the
best child that level could add (each sequence's best frontier probability times the drafter's top-1
confidence) pays for the level's drafting time plus its verification.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from reference_eagle4.calibration import CostTable


@dataclass(frozen=True)
class Plan:
    size: int            # drafted nodes each sequence verifies (root excluded)
    speed: float         # expected emitted tokens per ms for the batch
    accept: float        # A: expected tokens the step emits over the batch


class TreePlanner:
    """Plans the tree size of one step for a batch of sequences."""

    def __init__(self, table: CostTable, budget: int, batch: int, context: int):
        self.table = table
        self.budget = budget
        self.batch = max(batch, 1)
        # Verifying more tokens never costs less (a smaller tree could be padded up): a running maximum
        # keeps timing noise, e.g. a 4-token forward measured below a 2-token one, from steering the plan.
        self._verify = list(accumulate((table.verify(self.batch, context, t) for t in range(1, budget + 1)), max))

    def verify_ms(self, tokens: int) -> float:
        """One batched verification with `tokens` tokens per sequence (root included)."""
        return self._verify[min(max(tokens, 1), self.budget) - 1]

    def draft_ms(self, width: int) -> float:
        """One batched drafter forward over `width` nodes per sequence."""
        return self.table.draft(self.batch, width)

    def best_size(self, probs: list[list[float]], draft_ms: float) -> Plan:
        """probs[b]: sequence b's candidate probabilities, best first. Returns the best common size T."""
        best = Plan(0, len(probs) / (draft_ms + self.verify_ms(1)), float(len(probs)))
        accept = float(len(probs))
        longest = min(max((len(p) for p in probs), default=0), self.budget - 1)
        for n in range(1, longest + 1):
            accept += sum(p[n - 1] for p in probs if len(p) >= n)
            speed = accept / (draft_ms + self.verify_ms(n + 1))
            if speed > best.speed:
                best = Plan(n, speed, accept)
        return best

    def worth_another_level(self, probs: list[list[float]], draft_ms: float, frontier_best: list[float],
                            confidence: float, level_ms: float) -> bool:
        """Draft one level deeper (costing `level_ms`) only if its best plausible children beat the current
        plan's speed. draft_ms: drafting time spent so far this step."""
        if max(frontier_best, default=0.0) <= 0.0:
            return False
        now = self.best_size(probs, draft_ms)
        grown = [sorted([*p, f * confidence], reverse=True) for p, f in zip(probs, frontier_best)]
        later = self.best_size(grown, draft_ms + level_ms)
        return later.speed > now.speed
