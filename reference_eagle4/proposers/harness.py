"""`eagle4-harness`: the EAGLE-4 drafter with cost-aware dynamic trees.

Same drafter and level-by-level expansion as `eagle4-tree` (proposers/eagle4.py), under another
`TreePolicy`, `CostAwareTree`: no fixed depth or tree size. Before each further draft level the
`TreePlanner` (planner.py) decides from the measured cost table (and the measured drafter time) whether
another level pays for itself, and at the end how many best-first nodes each sequence verifies (the budget
L only caps it; `--option per_sequence=on` lets confident sequences of a batch take more than unsure ones).
Wide and deep at C = 1, narrow, a chain or plain decoding at large batch, by measurement rather than by
hand-set constants.

Retrieval drafts (retrieval.py) join the candidates, each merged into the drafter's tree as one more
branch (a node the drafter also proposed keeps the higher of the two probabilities) and priced by the
acceptance the run has measured for its source at that depth and match length; the planner then ranks
drafter and retrieved nodes alike. Two sources: prompt lookup (`lookup`, on by default; `lookup_matches`
distinct continuations of the context's longest earlier match) and the datastore (`datastore`, the one
shipped for the default target unless `off` or another folder). Where a source misses, its measured rate
falls and the planner drops its drafts.

A step may skip the drafter (`skip_drafter`, on by default): when the retrieval drafts alone promise a
higher expected speed than the drafter's plans have reached lately, the step verifies them and no more,
saving the catch-up and the draft levels; the drafter's cache takes the pairs accepted meanwhile in the next
drafting step's catch-up. Copied phrases are where this pays: there the lookup is confident and the drafter
adds little.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from reference_eagle4.calibration import CostTable, table_for
from reference_eagle4.datastore import Datastore
from reference_eagle4.device import upload
from reference_eagle4.drafters import DEFAULT_DATASTORE
from reference_eagle4.planner import TreePlanner
from reference_eagle4.proposers.base import flag_option, register
from reference_eagle4.proposers.eagle4 import DraftStep, Eagle4Proposer
from reference_eagle4.retrieval import Draft, Retrieval, merge_drafts
from reference_eagle4.tree import Candidates
from reference_eagle4.weights import sha256_file

if TYPE_CHECKING:
    from reference_eagle4.engine import Sequence
    from reference_eagle4.model import Transformer


@dataclass
class PlannedStep(DraftStep):
    """A harness step: the drafting so far, the step's planner and its retrieval drafts."""

    planner: TreePlanner | None = None
    drafts: list[list[Draft]] = field(default_factory=list)    # per sequence: this step's retrieval drafts
    draft_logp: Tensor | None = None      # [B, m] their nodes' log P_v, each sequence's drafts end to end


class CostAwareTree:
    """The harness's `TreePolicy`: trees sized by the cost table, retrieval drafts added, the drafter skipped
    when retrieval suffices. It keeps running estimates across steps: one draft level's time (for tables
    without drafter timings) and the expected speed of the steps that drafted."""

    REFRESH = 8          # a step drafts at least this often (see _retrieval_suffices)

    def __init__(self, table: CostTable | None, budget: int, per_sequence: bool, skip_drafter: bool,
                 retrieval: Retrieval) -> None:
        self.table = table                  # set by `Eagle4Harness.bind` when not given
        self.budget = budget
        self.per_sequence = per_sequence    # on: tree sizes per sequence (planner.py)
        self.skip_drafter = skip_drafter    # on: steps may verify retrieval drafts alone
        self.retrieval = retrieval
        self.drafted_speed: float | None = None     # running mean of drafting steps' expected speed
        self.since_drafted = 0                       # steps since the last one that drafted
        self.level_ms = 0.0                          # running estimate of one draft level's time (measured)

    def start(self, seqs: list["Sequence"]) -> PlannedStep:
        """The step's planner, and each sequence's retrieval drafts (kept on its state for `observe`)."""
        assert self.table is not None, "bind() the proposer to a target first"
        step = PlannedStep(seqs, planner=TreePlanner(self.table, self.budget, len(seqs),
                                                     max(len(s.tokens) for s in seqs)))
        if self.retrieval.active and self.budget > 1:
            step.drafts = [self.retrieval.find(s.state.retrieval.context, self.budget - 1) for s in seqs]
            for s, found in zip(seqs, step.drafts):
                s.state.retrieval.drafts = found
            step.draft_logp = self.retrieval.path_logp(step.drafts)
        return step

    def use_drafter(self, step: PlannedStep) -> bool:
        alone = self._retrieval_suffices(step)
        self.since_drafted = self.since_drafted + 1 if alone else 0
        return not alone

    def _retrieval_suffices(self, step: PlannedStep) -> bool:
        """Whether this step should verify retrieval drafts alone: their plan's expected speed beats what
        the drafter's plans have reached lately (a running mean of their expected speed, drafting time
        included). A step without the drafter also skips its catch-up, which the next drafting step does for
        every pair accepted since. At least every `REFRESH` steps draft, to keep that mean current."""
        if not self.skip_drafter or step.draft_logp is None or self.drafted_speed is None \
                or self.since_drafted >= self.REFRESH:
            return False
        alone = step.planner.best_sizes(self._top_probs(step.draft_logp), 0.0, self.per_sequence)
        return alone.speed > self.drafted_speed

    def keep_drafting(self, step: PlannedStep) -> bool:
        """After `step.levels` draft levels: is one more worth its drafting and verification time?"""
        if step.levels > 1 or not self.level_ms:      # level 1's time includes the catch-up of accepted tokens
            self.level_ms = step.level_ms if not self.level_ms else 0.8 * self.level_ms + 0.2 * step.level_ms
        if step.levels >= self.budget - 1:
            return False
        return step.planner.worth_another_level(
            self._best_probs(step), step.spent_ms, step.frontier[:, 0].exp().tolist(),
            float(step.best_child.exp().mean()), self._next_level_ms(step), self.per_sequence)

    def _next_level_ms(self, step: PlannedStep) -> float:
        if self.table is not None and self.table.draft_ms:
            return step.planner.draft_ms(step.frontier.shape[1])
        return self.level_ms

    def candidates(self, step: PlannedStep, drafted: Candidates) -> Candidates:
        """The drafter's candidates with each sequence's retrieval drafts merged in."""
        if step.draft_logp is None or step.draft_logp.shape[1] == 0:
            return drafted
        return merge_drafts(drafted, step.drafts, step.draft_logp)

    def tree_sizes(self, step: PlannedStep, scores: Tensor) -> list[int]:
        plan = step.planner.best_sizes(self._top_probs(scores), step.spent_ms, self.per_sequence)
        if step.levels:                     # a step that drafted: its expected speed joins the running mean
            old = self.drafted_speed
            self.drafted_speed = plan.speed if old is None else 0.7 * old + 0.3 * plan.speed
        return plan.sizes

    def tree_info(self, step: PlannedStep) -> dict[str, float]:
        return {"levels": step.levels}

    def _best_probs(self, step: PlannedStep) -> list[list[float]]:
        """While drafting: the drafter's nodes so far and the retrieval drafts (a shared node counted twice)."""
        scores = step.scores
        extra = [] if step.draft_logp is None else [upload(step.draft_logp, scores[0].device).to(scores[0].dtype)]
        return self._top_probs(torch.cat([*scores, *extra], 1))

    def _top_probs(self, scores: Tensor) -> list[list[float]]:
        return scores.topk(min(self.budget - 1, scores.shape[1]), dim=-1).values.exp().tolist()


@register("eagle4-harness",
          "EAGLE-4 drafter + prompt lookup + datastore retrieval, cost-aware dynamic tree sized from the "
          "calibrated cost table")
class Eagle4Harness(Eagle4Proposer):
    default_top_k = 8

    def __init__(self, budget: int, table: CostTable | str | None = None, lookup: Any = True,
                 lookup_max_n: int = 3, lookup_matches: int = 3, datastore: str | None = None,
                 per_sequence: Any = False, skip_drafter: Any = True, **options: Any) -> None:
        options.setdefault("depth", max(budget - 1, 1))
        super().__init__(budget, **options)
        lookup, lookup_max_n, lookup_matches = flag_option(lookup), int(lookup_max_n), int(lookup_matches)
        if lookup_matches < 1:
            raise ValueError(f"lookup_matches must be >= 1, got {lookup_matches}")
        self._datastore_given = False
        self.datastore_path, store = self._load_datastore(datastore)
        self.retrieval = Retrieval(lookup, lookup_max_n, lookup_matches, store, depth=max(budget - 1, 1))
        table = CostTable.load(table) if isinstance(table, str) else table
        self.table_source = "given" if table is not None else ""
        self.policy: CostAwareTree = CostAwareTree(table, budget, flag_option(per_sequence),
                                                   flag_option(skip_drafter), self.retrieval)

    def _load_datastore(self, option: str | None) -> tuple[Path | None, Datastore | None]:
        """The `datastore` option: a folder, `off`, or unset (or `on`) for the one shipped for the default
        target (used when the target's vocabulary is the one it was built with; see `bind`)."""
        if option is not None and not flag_option(option):
            return None, None
        if isinstance(option, str) and option.lower() in ("1", "true", "yes", "on"):
            option = None                                   # `datastore=on`: the shipped one, as by default
        self._datastore_given = option is not None
        folder = Path(option) if option is not None else DEFAULT_DATASTORE["smollm2-135m"]
        if option is None and not (folder / "config.json").exists():
            return None, None
        return folder, Datastore.load(folder)

    def bind(self, target: "Transformer") -> None:
        super().bind(target)
        store = self.retrieval.datastore
        if store is not None and store.vocab_size != target.args.vocab_size:
            if self._datastore_given:
                raise ValueError(f"datastore {self.datastore_path} was built for a vocabulary of "
                                 f"{store.vocab_size} tokens, the target has {target.args.vocab_size}")
            self.datastore_path = None                      # the shipped one belongs to another tokenizer
            self.retrieval.drop_datastore()
        if self.policy.table is None:
            self.policy.table, self.table_source = table_for(target, "eagle4-harness")

    def config(self) -> dict[str, Any]:
        r, table = self.retrieval, self.policy.table
        return {**super().config(), "cost_table": self.table_source,
                "cost_table_key": table.key if table else None,
                "lookup": r.lookup, "lookup_max_n": r.max_n if r.lookup else None,
                "lookup_matches": r.matches if r.lookup else None,
                "datastore": str(self.datastore_path) if self.datastore_path else None,
                "datastore_sha256": sha256_file(self.datastore_path / "tokens.npy") if self.datastore_path else None,
                "per_sequence": self.policy.per_sequence, "skip_drafter": self.policy.skip_drafter}

    # -- engine callbacks: the retrieval state of each sequence ----------------------------------------------
    def begin(self, seq: "Sequence", hidden: list[Tensor]) -> None:
        super().begin(seq, hidden)
        seq.state.retrieval = self.retrieval.start(seq.tokens)

    def accepted(self, seq: "Sequence", path: list[int], hidden: list[Tensor]) -> None:
        super().accepted(seq, path, hidden)
        retrieval = seq.state.retrieval
        self.retrieval.observe(retrieval.drafts, seq.tokens[-len(path):])
        retrieval.drafts = []
