"""Draft trees: the one structure every proposer returns and the verifier walks.

Node 0 is the root: the last emitted token, not yet in the target's KV cache. Nodes are stored parents
first, so a node's ancestors always precede it; a chain is the tree whose parents are 0, 1, 2, ...
The budget L of a step is the number of nodes, root included.

`Candidates` are the nodes a tree drafter recorded before choosing its trees: each sequence's tree is
the best-scored prefix of them (`Candidates.trees`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch import Tensor


@dataclass
class DraftTree:
    tokens: list[int]
    parents: list[int]                       # parents[0] == -1
    depths: list[int] = field(default_factory=list)
    children: list[dict[int, int]] = field(default_factory=list)   # token -> child node, per node
    info: dict[str, float] = field(default_factory=dict)   # proposer facts recorded with the step

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.parents) or not self.tokens or self.parents[0] != -1:
            raise ValueError("a draft tree needs a root (parent -1) and one parent per token")
        self.depths = [0]
        self.children = [{}]
        for i in range(1, len(self.tokens)):
            p = self.parents[i]
            if not 0 <= p < i:
                raise ValueError(f"node {i}: parent {p} must precede it")
            self.depths.append(self.depths[p] + 1)
            self.children.append({})
            # a duplicate sibling can never be reached by the walk; keep the first one
            self.children[p].setdefault(self.tokens[i], i)

    @classmethod
    def chain(cls, root: int, drafts: list[int]) -> "DraftTree":
        return cls([root, *drafts], list(range(-1, len(drafts))))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def depth(self) -> int:
        return max(self.depths)

    def mask(self, size: int | None = None) -> Tensor:
        """[size, size] bool: row i sees node i and its ancestors; rows past the tree see only themselves."""
        n = len(self.tokens)
        size = size or n
        seen: list[list[int]] = []                  # each node's ancestors, in Python: one tensor write in all
        for i, p in enumerate(self.parents):
            seen.append(seen[p] + [p] if p >= 0 else [])
        rows = [i for i in range(n) for _ in seen[i]]
        m = torch.eye(size, dtype=torch.bool)
        m[rows, [a for i in range(n) for a in seen[i]]] = True
        return m

    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))


class Candidates(NamedTuple):
    """Every node a step's drafting recorded, per sequence, as [B, n] tensors in record order (a node's
    parent is recorded before it)."""

    scores: Tensor       # cumulative log-probability: log P_v, the chance the target accepts the node's path
    tokens: Tensor       # target token ids
    parents: Tensor      # the parent's record, -1 for a child of the root

    @classmethod
    def empty(cls, batch: int) -> "Candidates":
        """No recorded nodes (a step that does not run the drafter)."""
        none = torch.empty(batch, 0)
        return cls(none, none.long(), none.long())

    def trees(self, roots: list[int], sizes: list[int]) -> list[DraftTree]:
        """Each sequence's tree: the root and its sizes[b] best-scored records (stable, so a parent wins a tie
        with its child and the set is closed under ancestors), parents first."""
        n = self.scores.shape[1]
        # Python lists: a dozen tensor calls on [B, ~100] cost more than sorting ~100 floats per sequence; one
        # copy to the host for all three (a GPU's copies each wait for it; fp64 holds the ids exactly)
        host = torch.stack([self.scores.double(), self.tokens.double(), self.parents.double()], 1).tolist()
        trees = []
        for root, size, (scores, tokens, parents) in zip(roots, sizes, host):
            best = sorted(range(n), key=scores.__getitem__, reverse=True)[:size]
            chosen = sorted(best)                              # records in order: parents before children
            node = {record: i for i, record in enumerate(chosen, 1)}
            trees.append(DraftTree([root, *(int(tokens[r]) for r in chosen)],
                                   [-1, *(node.get(int(parents[r]), 0) for r in chosen)]))
        return trees
