"""`eagle4-harness`: the EAGLE-4 drafter with cost-aware dynamic trees.

Same drafter and level-by-level expansion as `eagle4-tree`, but no fixed depth or tree size: before each
further draft level the `TreePlanner` decides from the measured cost table (and the measured drafter
time) whether another level pays for itself, and at the end how many best-first nodes each sequence
verifies (the budget L only caps it; `--option per_sequence=on` lets confident sequences of a batch take
more than unsure ones). Wide and deep at C = 1, narrow, a chain or plain decoding at large
batch, by measurement rather than by hand-set constants.

Retrieval drafts join the candidates, each merged into the drafter's tree as one more branch (a node the
drafter also proposed keeps the higher of the two probabilities) and priced by the acceptance the run has
measured for its source at that depth and match length; the planner then ranks drafter and retrieved
nodes alike. Two sources: prompt lookup (`lookup`, on by default), the continuations of the context's
longest earlier match, since prompt-enhancement answers copy whole phrases from the user's prompt, which a
one-layer drafter predicts poorly (the most recent occurrence's, and up to `lookup_matches` - 1 other
distinct ones, priced apart as "context-alt": where the phrase occurred more than once, the target often
takes another occurrence's continuation); and the datastore (`datastore`, the one shipped for the default target
unless `off` or another folder), the majority continuation of the context's longest suffix among the
target's own responses to training prompts, since a small target repeats its stock phrases across
prompts. Where a source misses, its measured rate falls and the planner drops its drafts.

A step may skip the drafter (`skip_drafter`, on by default): when the retrieval drafts alone promise a
higher expected speed than the drafter's plans have reached lately, the step verifies them and no more,
saving the catch-up and the draft levels; the drafter's cache takes the pairs accepted meanwhile in the next
drafting step's catch-up. Copied phrases are where this pays: there the lookup is confident and the drafter
adds little.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from reference_eagle4.calibration import CostTable, table_for
from reference_eagle4.datastore import Datastore
from reference_eagle4.drafters import DEFAULT_DATASTORE
from reference_eagle4.planner import TreePlanner
from reference_eagle4.proposers.base import flag_option, register
from reference_eagle4.proposers.eagle4 import Eagle4Proposer
from reference_eagle4.proposers.ngram import ContextIndexes, LookupAcceptance
from reference_eagle4.weights import sha256_file

Draft = tuple[str, int, list[int]]   # (source: "context", "context-alt" or "datastore", match length, tokens)

if TYPE_CHECKING:
    from reference_eagle4.engine import Sequence
    from reference_eagle4.model import Transformer
    from reference_eagle4.tree import DraftTree



@register("eagle4-harness",
          "EAGLE-4 drafter + prompt lookup + datastore retrieval, cost-aware dynamic tree sized from the "
          "calibrated cost table")
class Eagle4Harness(Eagle4Proposer):
    default_top_k = 8
    REFRESH = 8          # a step drafts at least this often (see _retrieval_suffices)

    def __init__(self, budget: int, table: CostTable | str | None = None, lookup: Any = True,
                 lookup_max_n: int = 3, lookup_matches: int = 3, datastore: str | None = None,
                 per_sequence: Any = False, skip_drafter: Any = True, **options: Any) -> None:
        options.setdefault("depth", max(budget - 1, 1))
        super().__init__(budget, **options)
        self.lookup = flag_option(lookup)
        self.per_sequence = flag_option(per_sequence)   # on: tree sizes per sequence (see harness.py)
        self.lookup_max_n = int(lookup_max_n)
        self.lookup_matches = int(lookup_matches)
        self.context = ContextIndexes(self.lookup_max_n)
        if self.lookup_matches < 1:
            raise ValueError(f"lookup_matches must be >= 1, got {lookup_matches}")
        self._datastore_given = False
        self.datastore_path, self.datastore = self._load_datastore(datastore)
        depth = max(budget - 1, 1)
        # measured acceptance per draft source: drafts from the context and from the datastore differ
        self.acceptance = {source: LookupAcceptance(self.lookup_max_n, depth) for source in ("context", "context-alt")}
        if self.datastore is not None:
            self.acceptance["datastore"] = LookupAcceptance(self.datastore.max_n, depth)
        self._step_drafts: list[list[Draft]] = []     # this step's retrieval drafts, per sequence
        self._drafts: dict[int, list[Draft]] = {}      # the same by id(seq), for `accepted`
        self._lookup_logp: Tensor | None = None        # [B, m] their nodes' log-probabilities, drafts end to end
        self.table = CostTable.load(table) if isinstance(table, str) else table
        self.table_source = "given" if table is not None else ""
        self._planner: TreePlanner | None = None
        self.skip_drafter = flag_option(skip_drafter)   # on: steps may verify retrieval drafts alone
        self._drafted_speed: float | None = None         # running mean of drafting steps' expected speed
        self._since_drafted = 0
        self._level_ms = 0.0          # running estimate of one draft level's time (measured)
        self._spent_ms = 0.0          # drafting time spent in the current step
        self._levels = 0

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
        if self.datastore is not None and self.datastore.vocab_size != target.args.vocab_size:
            if self._datastore_given:
                raise ValueError(f"datastore {self.datastore_path} was built for a vocabulary of "
                                 f"{self.datastore.vocab_size} tokens, the target has {target.args.vocab_size}")
            self.datastore_path = self.datastore = None      # the shipped one belongs to another tokenizer
            self.acceptance.pop("datastore")
        if self.table is not None:
            return
        self.table, self.table_source = table_for(target, "eagle4-harness")

    def config(self) -> dict[str, Any]:
        return {**super().config(), "cost_table": self.table_source,
                "cost_table_key": self.table.key if self.table else None,
                "lookup": self.lookup, "lookup_max_n": self.lookup_max_n if self.lookup else None,
                "lookup_matches": self.lookup_matches if self.lookup else None,
                "datastore": str(self.datastore_path) if self.datastore_path else None,
                "datastore_sha256": sha256_file(self.datastore_path / "tokens.npy") if self.datastore_path else None,
                "per_sequence": self.per_sequence, "skip_drafter": self.skip_drafter}

    def propose(self, seqs: list["Sequence"]) -> list["DraftTree"]:  # type: ignore[override]
        assert self.table is not None, "bind() the proposer to a target first"
        self._planner = TreePlanner(self.table, self.budget, len(seqs), max(len(s.tokens) for s in seqs))
        self._spent_ms, self._levels = 0.0, 0
        retrieve = (self.lookup or self.datastore is not None) and self.budget > 1
        self._lookup_logp = self._lookup_drafts(seqs) if retrieve else None
        if self._retrieval_suffices():
            self._since_drafted += 1
            none = torch.empty(len(seqs), 0)                  # no drafter records: the retrieval drafts alone
            trees = self._trees([s.tokens[-1] for s in seqs], *self._candidates(none, none.long(), none.long()),
                                self.budget - 1)
        else:
            self._since_drafted = 0
            trees = super().propose(seqs)
        for tree in trees:
            tree.info = {"levels": self._levels}
        return trees

    def _retrieval_suffices(self) -> bool:
        """Whether this step should verify retrieval drafts alone: their plan's expected speed beats what
        the drafter's plans have reached lately (a running mean of their expected speed, drafting time
        included). A step without the drafter also skips its catch-up, which the next drafting step does for
        every pair accepted since. At least every `REFRESH` steps draft, to keep that mean current."""
        if not self.skip_drafter or self._lookup_logp is None or self._drafted_speed is None \
                or self._since_drafted >= self.REFRESH:
            return False
        alone = self._planner.best_sizes(self._top_probs(self._lookup_logp), 0.0, self.per_sequence)
        return alone.speed > self._drafted_speed

    def accepted(self, seq: "Sequence", path: list[int], hidden: list[Tensor]) -> None:
        super().accepted(seq, path, hidden)
        for source, n, draft in self._drafts.pop(id(seq), []):
            self.acceptance[source].observe(n, draft, seq.tokens[-len(path):])

    def end(self, seq: "Sequence") -> None:
        super().end(seq)
        self.context.drop(seq)

    def _retrieve(self, seq: "Sequence", length: int) -> list[Draft]:
        """The distinct continuations of the context's longest earlier match (most recent first) and the
        datastore's majority continuation of the longest suffix it holds, when it differs."""
        found: list[Draft] = []
        if self.lookup:
            n, conts = self.context.of(seq).lookup(1, length, self.lookup_matches)
            found += [("context" if i == 0 else "context-alt", n, cont) for i, cont in enumerate(conts)]
        if self.datastore is not None:
            n, draft = self.datastore.draft(seq.tokens, length)
            if draft and all(draft != f[2][: len(draft)] for f in found):
                found.append(("datastore", n, draft))
        return found

    def _lookup_drafts(self, seqs: list["Sequence"]) -> Tensor:
        """Each sequence's retrieval drafts (kept for `accepted`) and their nodes' log-probabilities [B, m],
        each sequence's drafts end to end."""
        self._step_drafts = [self._retrieve(s, self.budget - 1) for s in seqs]
        # every live sequence takes part in every step, so this step's drafts replace the last step's
        self._drafts = {id(s): f for s, f in zip(seqs, self._step_drafts) if f}
        m = max((sum(len(d[2]) for d in f) for f in self._step_drafts), default=0)
        out = np.full((len(seqs), m), -np.inf)
        for b, found in enumerate(self._step_drafts):
            at = 0
            for source, n, draft in found:
                out[b, at: at + len(draft)] = np.log(self.acceptance[source].path_probs(n, len(draft)))
                at += len(draft)
        return torch.from_numpy(out).float()

    def _candidates(self, scores: Tensor, tokens: Tensor, parents: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Merge each sequence's retrieval drafts into its drafter tree: follow a draft down the existing
        records while they agree (raising a shared node to the draft's probability when that is higher),
        then append the rest as new records."""
        if self._lookup_logp is None or self._lookup_logp.shape[1] == 0:
            return scores, tokens, parents
        B, N = scores.shape
        m = self._lookup_logp.shape[1]
        # Python lists: a draft's tokens are walked one at a time (numpy's per-call cost dominated at C = 8)
        s_l = torch.cat([scores, scores.new_full((B, m), float("-inf"))], 1).tolist()
        t_l = torch.cat([tokens, tokens.new_zeros(B, m)], 1).tolist()
        p_l = torch.cat([parents, parents.new_full((B, m), -1)], 1).tolist()
        lp = self._lookup_logp.tolist()
        for b, found in enumerate(self._step_drafts):
            s, t, p = s_l[b], t_l[b], p_l[b]
            child: dict[tuple[int, int], int] = {}             # (parent record, token) -> record
            for i in range(N):
                child.setdefault((p[i], t[i]), i)
            new, at = N, 0
            for _, _, draft in found:
                node = -1
                for tok in draft:
                    hit = child.get((node, tok))
                    if hit is not None:
                        node = hit
                        s[node] = max(s[node], lp[b][at])
                    else:
                        s[new], t[new], p[new] = lp[b][at], tok, node
                        child[(node, tok)] = new
                        node, new = new, new + 1
                    at += 1
        dev = scores.device
        return (torch.tensor(s_l, dtype=scores.dtype, device=dev), torch.tensor(t_l, dtype=tokens.dtype, device=dev),
                torch.tensor(p_l, dtype=parents.dtype, device=dev))

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
        plan = self._planner.best_sizes(self._top_probs(scores), self._spent_ms, self.per_sequence)
        if self._levels:                     # a step that drafted: its expected speed joins the running mean
            old = self._drafted_speed
            self._drafted_speed = plan.speed if old is None else 0.7 * old + 0.3 * plan.speed
        return plan.sizes

    def _best_probs(self, scores: list[Tensor]) -> list[list[float]]:
        """While drafting: the drafter's nodes so far and the lookup draft (a shared node counted twice)."""
        extra = [] if self._lookup_logp is None else [self._lookup_logp.to(scores[0].device, scores[0].dtype)]
        return self._top_probs(torch.cat([*scores, *extra], 1))

    def _top_probs(self, scores: Tensor) -> list[list[float]]:
        return scores.topk(min(self.budget - 1, scores.shape[1]), dim=-1).values.exp().tolist()
