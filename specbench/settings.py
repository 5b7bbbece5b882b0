"""What a run is, independent of the engine that runs it: the rows and engine (`Job`) and one method's settings
(`Settings`). Every runner reads these; the manifest records both, so a run names everything that decided it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specbench.dataset import Row, load_rows

# A method as `compare --methods` names it: (name, the options given to this entry alone).
MethodSpec = tuple[str, dict[str, Any]]

# Output tokens per request when --max-new-tokens is not given. Server engines get enough for the prompt enhancer's
# 120-160-word answers (about 210 tokens with Llama-family tokenizers), so a long answer is measured whole; the
# reference engine keeps 128, what its bundled demo and every result before this default measured, on a CPU.
MAX_NEW_TOKENS = {"reference": 128}
SERVER_MAX_NEW_TOKENS = 256


def default_max_new_tokens(engine: str) -> int:
    """--max-new-tokens when the user gives none: 128 on the reference engine, 256 on a server engine."""
    return MAX_NEW_TOKENS.get(engine, SERVER_MAX_NEW_TOKENS)


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
    # server engines: requests/s arriving as a gamma process of this shape (1 = Poisson), capped by `concurrency`
    # in flight; None sends them all at once, so exactly `concurrency` stay in flight (burstiness None then too)
    request_rate: float | None = None
    burstiness: float | None = None
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
    device: str = "auto"                     # reference engine: auto, cpu, cuda or cuda:N
    cuda_graphs: bool = True                 # reference engine on CUDA: replay batch-1 decoding steps from a graph

    def rows(self, seed: int) -> list[Row]:
        return load_rows(self.dataset, self.categories or None, self.limit, seed)
