"""The harness's policy compiled into what a server engine executes, by the planner the reference harness plans with.

The reference engine plans every step: a tree grown best-first while a node's acceptance probability pays for
its marginal cost (`reference_eagle4.planner.TreePlanner`). A server engine takes its speculation shape at
launch, so the same planner runs once, over a cost table measured on that server (`runners.server_calibrate`),
and its choice becomes the engine's configuration:

- vLLM verifies chains, one length K per batch size (Dynamic SD: `num_speculative_tokens_per_batch_size`, a
  list of inclusive (first batch size, last batch size, K) ranges, vllm/config/speculative.py; vLLM expands it
  into a batch size -> K lookup and carries the last K past the last range, v1/spec_decode/dynamic/utils.py).
  For each batch size the planner's `best_chain` picks the K (1 <= K <= L - 1) that maximises expected tokens per
  ms over the measured step costs and acceptance by depth; K between two timed lengths is priced by the table's
  linear interpolation. `num_speculative_tokens` is the largest K of the schedule.
- SGLang drafts an EAGLE-2 tree every step: `--speculative-num-steps` levels, `--speculative-eagle-topk` children
  per frontier node with the topk best kept as the next frontier, and the `--speculative-num-draft-tokens` - 1
  best of the topk + (steps - 1) * topk^2 candidates verified (speculative/eagle_utils.py
  `organize_draft_results`; with topk 1 SGLang sets num_draft_tokens = steps + 1, arg_groups/speculative_hook.py).
  `sglang_shape` builds that candidate set from the acceptance by depth and rank, lets the planner's
  `best_sizes` choose how many to verify at the expected concurrency (drafting priced at steps levels of width
  topk from the table), and keeps the (steps, topk, num_draft_tokens) with the most expected tokens per ms.
  SGLang takes that shape at launch, so one launch serves one expected concurrency: `sglang_policy` compiles it
  from a server table (`specbench calibrate --engine sglang`) for the run's --concurrency, and the SGLang runner
  launches it (`runners.sglang`, `--engine sglang --method eagle4-harness`).

What this leaves to the reference engine: per-step trees sized from each sequence's own draft confidence, and the
harness's prompt-lookup and datastore drafts (`HARNESS_PARTS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reference_eagle4.cost_table import CostTable
from reference_eagle4.planner import TreePlanner, best_chain
from specbench.runners.server_calibrate import reach_by_depth

# engine -> (what of the harness runs there, what runs on the reference engine only)
HARNESS_PARTS = {
    "vllm": ("batch-aware chain length: the K per batch size that maximises expected tokens per ms, compiled "
             "into num_speculative_tokens_per_batch_size from a calibrated cost table",
             "per-step cost-aware trees, prompt lookup and the datastore: reference engine only"),
    "sglang": ("calibrated EAGLE-2 tree shape per expected concurrency: the (num_steps, topk, num_draft_tokens) "
               "that maximises expected tokens per ms at the run's --concurrency, compiled from a calibrated cost "
               "table into SGLang's launch flags; a chain calibration measures no rank > 1, so the shape is a "
               "chain (topk 1) of the best length",
               "per-step cost-aware trees, prompt lookup and the datastore: reference engine only"),
}


@dataclass(frozen=True)
class ChainPolicy:
    """K per batch size 1..max for one budget, and the expected tokens per ms the planner gave each."""

    budget: int
    ks: list[int]                   # ks[b - 1]: drafts at batch size b
    speeds: list[float]             # expected tokens per ms of the whole batch at that K
    reach: list[float]              # acceptance by depth the plan used

    @property
    def schedule(self) -> list[list[int]]:
        """vLLM's num_speculative_tokens_per_batch_size: equal neighbouring K merged into one range."""
        out: list[list[int]] = []
        for b, k in enumerate(self.ks, 1):
            if out and out[-1][2] == k:
                out[-1][1] = b
            else:
                out.append([b, b, k])
        return out

    @property
    def num_speculative_tokens(self) -> int:
        return max(self.ks)

    def k_at(self, batch: int) -> int:
        """K at a batch size (the last range's K past it, as vLLM carries it)."""
        return self.ks[min(max(batch, 1), len(self.ks)) - 1]

    def manifest(self) -> dict[str, Any]:
        return {"schedule": self.schedule, "num_speculative_tokens": self.num_speculative_tokens,
                "per_batch": [{"batch": b, "k": k, "expected_tokens_per_ms": round(s, 5)}
                              for b, (k, s) in enumerate(zip(self.ks, self.speeds), 1)],
                "reach_by_depth": [round(r, 4) for r in self.reach]}


def chain_policy(table: CostTable, budget: int) -> ChainPolicy:
    """The planner's chain length at every batch size the table timed (1..its largest), at budget L."""
    reach = reach_by_depth(table.raw)
    plans = [best_chain(table, budget, b, table.contexts[0], reach, least=1)
             for b in range(1, max(table.batches) + 1)]
    return ChainPolicy(budget, [p.sizes[0] for p in plans], [p.speed for p in plans], reach)


@dataclass(frozen=True)
class TreeShape:
    """SGLang's EAGLE speculation shape for one expected concurrency, and its expected tokens per ms."""

    num_steps: int
    topk: int
    num_draft_tokens: int           # verified per sequence, root included (SGLang counts it)
    speed: float

    def manifest(self, concurrency: int, accept: list[list[float]]) -> dict[str, Any]:
        return {"concurrency": concurrency, "num_steps": self.num_steps, "topk": self.topk,
                "num_draft_tokens": self.num_draft_tokens, "expected_tokens_per_ms": round(self.speed, 5),
                "acceptance_by_depth_and_rank": [[round(a, 4) for a in row] for row in accept]}


def rank_acceptance(reach: list[float]) -> list[list[float]]:
    """A chain's reach by depth as acceptance by depth and rank (rank 1 only): accept[d-1][0] is the chance depth
    d's top draft is accepted once depth d - 1 was."""
    out, before = [], 1.0
    for r in reach:
        out.append([r / before if before > 0 else 0.0])
        before = r
    return out


def tree_candidates(accept: list[list[float]], steps: int, topk: int) -> list[float]:
    """Path probabilities of every candidate SGLang's draft makes in `steps` levels of `topk`, best first.
    accept[d-1][r-1]: the chance the target's token at depth d is the drafter's r-th candidate, given the path
    to its parent was accepted."""
    frontier, out = [1.0], []
    for row in accept[:steps]:
        children = sorted((p * a for p in frontier for a in row[:topk]), reverse=True)
        out += children
        frontier = children[:topk]
    return sorted(out, reverse=True)


def sglang_shape(table: CostTable, budget: int, concurrency: int, accept: list[list[float]],
                 topks: tuple[int, ...] = (1, 2, 4, 8)) -> TreeShape:
    """The (num_steps, topk, num_draft_tokens <= L) that maximises expected tokens per ms at `concurrency`.

    accept[d-1][r-1] is the acceptance of depth d's rank-r draft; a row shorter than topk means its missing ranks
    are never accepted (`tree_candidates` reads row[:topk]). A server calibrated on chains (`specbench calibrate
    --engine sglang`: topk 1) measures rank 1 only (`rank_acceptance`), so every rank > 1 counts as never
    accepted and its table prices drafting as part of a chain step (no draft_ms): a wider tree then adds no
    expected tokens, ties with the chain of the same steps, and the chain (tried first) is kept."""
    planner = TreePlanner(table, budget, concurrency, table.contexts[0])
    best: TreeShape | None = None
    for topk in topks:
        for steps in range(1, min(budget - 1, len(accept)) + 1):
            candidates = tree_candidates(accept, steps, topk)
            if topk == 1:                       # SGLang verifies the whole chain: steps + 1 tokens
                candidates, least = candidates[:steps], steps
            else:
                least = 1
            draft_ms = steps * table.draft(planner.batch, topk)
            plan = planner.best_sizes([candidates] * planner.batch, draft_ms, least=least)
            shape = TreeShape(steps, topk, plan.sizes[0] + 1, plan.speed)
            if best is None or shape.speed > best.speed:
                best = shape
    if best is None:
        raise ValueError(f"no tree fits budget L={budget} with {len(accept)} depths of acceptance")
    return best


def sglang_policy(table: CostTable, budget: int, concurrency: int) -> tuple[TreeShape, list[list[float]]]:
    """SGLang's shape at budget L for an expected concurrency from a server table: its acceptance by depth as
    rank-1 acceptance (`rank_acceptance`: all a chain calibration measures), and the acceptance it used."""
    accept = rank_acceptance(reach_by_depth(table.raw))
    return sglang_shape(table, budget, concurrency, accept), accept

