"""Retrieval drafts: token runs copied from earlier text rather than predicted by a network.

Two sources:

- prompt lookup: the continuations of the context's longest suffix that occurred earlier in the same
  context (`ContextIndex`). Prompt-enhancement answers copy whole phrases from the user's prompt, which a
  one-layer drafter predicts poorly. The `ngram` method verifies these alone; `eagle4-harness` adds them to
  its drafter's tree.
- the datastore (datastore.py): the majority continuation of the context's longest suffix among the
  target's own responses to training prompts, since a small target repeats its stock phrases across prompts.

`Retrieval` is what `eagle4-harness` does with them each step: find each sequence's drafts (`find`), price
their nodes by the acceptance measured for their source, depth and match length (`LookupAcceptance`,
`path_logp`), learn from what the target emitted (`observe`), and merge them into the drafter's candidate
records (`merge_drafts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from reference_eagle4.datastore import Datastore
from reference_eagle4.device import upload
from reference_eagle4.tree import Candidates


class ContextIndex:
    """Where each n-gram (n <= max_n) of a growing token list ended, kept up to date as tokens are
    appended to it, so that a step's lookup reads a few dict entries instead of scanning the whole context
    (a scan's cost grows with the context)."""

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


class LookupAcceptance:
    """How often the target accepts retrieval drafts, learned online from the run's own steps.

    Rates are kept per (suffix match length n, depth d) as hits / tries of the conditional event "the
    target's token at depth d equals the draft, given depths < d did", from a prior of 1 hit in 2 tries.
    A draft's chance of acceptance is the product of its path's rates: what the harness needs to price a
    retrieved branch next to the drafter's own candidates."""

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


class Draft(NamedTuple):
    source: str           # "context" (the most recent match), "context-alt" (another match) or "datastore"
    match: int            # length of the suffix that matched
    tokens: list[int]


@dataclass
class SequenceRetrieval:
    """One sequence's retrieval state (kept on its proposer state)."""

    context: ContextIndex                                  # the sequence's prompt-lookup index
    drafts: list[Draft] = field(default_factory=list)     # this step's drafts, until the step is verified


class Retrieval:
    """The retrieval sources of a run and the acceptance each has earned so far."""

    SOURCES = ("context", "context-alt")

    def __init__(self, lookup: bool, max_n: int, matches: int, datastore: Datastore | None, depth: int) -> None:
        """lookup: prompt lookup on; max_n: its longest suffix; matches: distinct continuations it drafts
        (the most recent as "context", the others priced apart as "context-alt": where a phrase occurred
        more than once, the target often takes another occurrence's continuation); depth: the deepest draft
        priced (the budget's drafted nodes)."""
        self.lookup, self.max_n, self.matches, self.datastore = lookup, max_n, matches, datastore
        self.acceptance = {source: LookupAcceptance(max_n, depth) for source in self.SOURCES}
        if datastore is not None:
            self.acceptance["datastore"] = LookupAcceptance(datastore.max_n, depth)

    @property
    def active(self) -> bool:
        return self.lookup or self.datastore is not None

    def drop_datastore(self) -> None:
        self.datastore = None
        self.acceptance.pop("datastore", None)

    def start(self, tokens: list[int]) -> SequenceRetrieval:
        """A new sequence's state, indexing its token list as it grows."""
        return SequenceRetrieval(ContextIndex(tokens, self.max_n))

    def find(self, context: ContextIndex, length: int) -> list[Draft]:
        """The distinct continuations of the context's longest earlier match (most recent first) and the
        datastore's majority continuation of the longest suffix it holds, when it differs."""
        found: list[Draft] = []
        if self.lookup:
            n, conts = context.lookup(1, length, self.matches)
            found += [Draft(self.SOURCES[0] if i == 0 else self.SOURCES[1], n, cont) for i, cont in enumerate(conts)]
        if self.datastore is not None:
            n, draft = self.datastore.draft(context.tokens, length)
            if draft and all(draft != f.tokens[: len(draft)] for f in found):
                found.append(Draft("datastore", n, draft))
        return found

    def path_logp(self, drafts: list[list[Draft]]) -> Tensor:
        """[B, m]: the log-probability of acceptance of every drafted node, each sequence's drafts end to
        end (-inf past a sequence's last)."""
        m = max((sum(len(d.tokens) for d in found) for found in drafts), default=0)
        out = np.full((len(drafts), m), -np.inf)
        for b, found in enumerate(drafts):
            at = 0
            for source, n, tokens in found:
                out[b, at: at + len(tokens)] = np.log(self.acceptance[source].path_probs(n, len(tokens)))
                at += len(tokens)
        return torch.as_tensor(out).float()          # on the host (host_syncs: a factory given no device)

    def observe(self, drafts: list[Draft], emitted: list[int]) -> None:
        """Score a sequence's drafts of the step against the tokens the target emitted after the root."""
        for source, n, tokens in drafts:
            self.acceptance[source].observe(n, tokens, emitted)


def merge_drafts(candidates: Candidates, drafts: list[list[Draft]], logp: Tensor) -> Candidates:
    """Each sequence's retrieval drafts merged into its drafter candidates as one more branch each: follow a
    draft down the existing records while they agree (a node both propose keeps the higher of the two
    probabilities), then append the rest as new records. logp [B, m]: `Retrieval.path_logp` of `drafts`."""
    scores, tokens, parents = candidates
    B, n = scores.shape
    m = logp.shape[1]
    # Python lists: a draft's tokens are walked one at a time, where per-call tensor or numpy overhead dominates
    all_scores = torch.cat([scores, scores.new_full((B, m), float("-inf"))], 1).tolist()
    all_tokens = torch.cat([tokens, tokens.new_zeros(B, m)], 1).tolist()
    all_parents = torch.cat([parents, parents.new_full((B, m), -1)], 1).tolist()
    draft_logp = logp.tolist()
    for b, found in enumerate(drafts):
        s, t, p, lp = all_scores[b], all_tokens[b], all_parents[b], draft_logp[b]
        child: dict[tuple[int, int], int] = {}             # (parent record, token) -> record
        for i in range(n):
            child.setdefault((p[i], t[i]), i)
        new, at = n, 0
        for draft in found:
            node = -1
            for tok in draft.tokens:
                hit = child.get((node, tok))
                if hit is not None:
                    node = hit
                    s[node] = max(s[node], lp[at])
                else:
                    s[new], t[new], p[new] = lp[at], tok, node
                    child[(node, tok)] = new
                    node, new = new, new + 1
                at += 1
    dev = scores.device
    return Candidates(upload(all_scores, dev, scores.dtype), upload(all_tokens, dev, tokens.dtype),
                      upload(all_parents, dev, parents.dtype))
