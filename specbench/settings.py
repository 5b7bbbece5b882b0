"""What a run is, independent of the engine that runs it: the rows and engine (`Job`) and one method's settings
(`Settings`). Every runner reads these; the manifest records both, so a run names everything that decided it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specbench.dataset import Row, load_rows

# A method as `compare --methods` names it: (name, the options given to this entry alone).
MethodSpec = tuple[str, dict[str, Any]]


@dataclass
class Settings:
    """Everything that decides one method's output on a set of requests, echoed into its manifest."""

    method: str
    budget: int                              # L: tokens the target verifies per sequence per step, root included
    concurrency: int = 1                     # C: sequences in flight
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    # options given to this method alone (`compare --methods name:key=value`), already in `options`;
    # they name the run apart from the same method without them
    variant: dict[str, Any] = field(default_factory=dict)


@dataclass
class Job:
    """What to run on: the rows and the engine. One Job drives several methods in a comparison."""

    dataset: str = "prompt-enhancement"
    categories: list[str] = field(default_factory=list)
    limit: int | None = None
    target: str = "smollm2-135m"
    dtype: str = "auto"
    threads: int | None = None               # reference engine only
    engine: str = "reference"                # a name in specbench.runners.ENGINES
    endpoint: str | None = None              # server engines: a running server's URL (else one is launched)
    prefix_cache: bool = True                # reference engine: reuse the KV of a prompt prefix seen recently

    def rows(self, seed: int) -> list[Row]:
        return load_rows(self.dataset, self.categories or None, self.limit, seed)
