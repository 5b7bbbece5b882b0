"""How a server run offers its load: the warm-up before a variant measures, and when each request arrives.

Both follow `vllm bench serve` (vLLM 0.33.0, vllm/benchmarks/serve.py), so a specbench server run and a vLLM
benchmark of the same server measure under the same protocol:

- Warm-up (`benchmark`, `--num-warmups`): requests sent at the run's concurrency before measuring, their
  answers thrown away, so the first measured requests do not pay for CUDA graph capture, allocator growth or
  compilation. vLLM repeats its first prompt; specbench sends the variant's own prompts (`warmup` of them,
  cycling), so the warm-up runs the drafter on the text it is measured on. Those prompts would then sit in the
  prefix cache at full length, so the runner flushes the cache after the warm-up as well as before it
  (`runners.server`), where vLLM (one repeated prompt, no flush) lets its warm-up prompt stay cached.
- Arrivals (`get_request`, `--request-rate`, `--burstiness`): with a request rate R the gaps between arrivals
  are gamma-distributed with shape B and mean 1/R (B = 1: a Poisson process; B < 1 burstier, B > 1 more
  regular), then rescaled so the last request arrives at n/R, as vLLM does to steady throughput across seeds.
  Concurrency still caps the requests in flight: an arrival waits for a free slot, and its time to first token
  counts from when it is sent. Without a rate every request arrives at once (fixed concurrency).
"""

from __future__ import annotations

import random
from typing import Any

from specbench.errors import SpecbenchError

WARMUP_OPTION = "warmup"
WARMUP_PER_SLOT = 2              # default warm-up requests per unit of concurrency


def warmup_requests(options: dict[str, Any], concurrency: int, flag: str = "--option") -> int:
    """Warm-up requests a variant sends before measuring: `--option warmup=N` (0 = none), else 2 * C.
    A value that is not a whole number >= 0 is a SpecbenchError naming the flag."""
    if WARMUP_OPTION not in options:
        return WARMUP_PER_SLOT * concurrency
    raw = options[WARMUP_OPTION]
    try:
        if isinstance(raw, bool) or float(raw) != int(raw):
            raise ValueError
        value = int(raw)
    except (TypeError, ValueError):
        value = -1
    if value < 0:
        raise SpecbenchError(f"{flag} {WARMUP_OPTION}={raw!r}: expected a whole number >= 0 (warm-up requests "
                             "before the variant measures; 0 turns the warm-up off)")
    return value


def arrival_offsets(n: int, rate: float | None, burstiness: float | None = None, seed: int = 0) -> list[float]:
    """Seconds from the start of a block at which each of its n requests arrives (vllm bench serve's
    `get_request`): all at 0 without a rate; else cumulative gamma(shape B, scale 1 / (R * B)) gaps drawn from
    `random.Random(seed)`, rescaled so the last arrival is at n / R."""
    if rate is None or n == 0:
        return [0.0] * n
    shape = burstiness or 1.0
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for _ in range(n):
        t += rng.gammavariate(shape, 1.0 / (rate * shape))
        offsets.append(t)
    scale = (n / rate) / offsets[-1] if offsets[-1] > 0 else 1.0
    return [o * scale for o in offsets]
