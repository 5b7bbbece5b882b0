"""Draft trees: the one structure every proposer returns and the verifier walks.

Node 0 is the root: the last emitted token, not yet in the target's KV cache. Nodes are stored parents
first, so a node's ancestors always precede it; a chain is the tree whose parents are 0, 1, 2, ...
The budget L of a step is the number of nodes, root included.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
