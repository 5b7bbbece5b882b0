"""What one drafting step costs under each EAGLE-4 ablation (low-rank vs full head, window vs full attention).

A step's drafting is everything `propose` does: the catch-up of the tokens accepted last step plus every
draft level. The variants run on the same real context (the caller passes prompt + greedy continuation,
so the drafter is as confident as in a run), with early stopping off and a fixed depth so that every
variant drafts the same levels, and they are timed interleaved (A B C A B C ...) so that machine load
affects all alike. Acceptance is not measured here: run `specbench compare` with `--option head=full` or
`--option window=none` for that.
"""

from __future__ import annotations

import statistics
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from reference_eagle4.model import Transformer

ABLATIONS: dict[str, dict[str, Any]] = {
    "shipped (low-rank head, sliding window)": {},
    "full head": {"head": "full"},
    "full attention": {"window": "none"},
    "full head + full attention": {"head": "full", "window": "none"},
}


def propose_ms(target: "Transformer", context: list[int], variants: dict[str, dict[str, Any]] = ABLATIONS,
               drafter: str | None = None, method: str = "eagle4-tree", budget: int = 16, batch: int = 1,
               pending: int = 3, reps: int = 30, warmup: int = 3) -> dict[str, float]:
    """Median milliseconds of one `propose` per variant (method options), for `batch` copies of `context`
    whose last `pending` tokens are the ones accepted in the previous step."""
    from reference_eagle4.proposers import PROPOSERS

    if len(context) <= pending + 1:
        raise ValueError(f"context of {len(context)} tokens is too short for {pending} pending tokens")
    n = len(context)
    ids = torch.tensor([context] * batch)
    cache = target.new_cache(batch, n + 8)
    with torch.inference_mode():
        _, hidden = target(ids, cache, capture=tuple(target.args.eagle_layers))
    runs = {}
    for name, options in variants.items():
        p = PROPOSERS[method](budget=budget, drafter=drafter, target=target, early_stop=False, **options)
        seqs = [SimpleNamespace(tokens=context + [context[-1]], slot=b, state=None) for b in range(batch)]
        with torch.inference_mode():
            for b, s in enumerate(seqs):
                p.begin(s, [h[b, : n - pending] for h in hidden])
        c = p.cache
        runs[name] = (p, seqs, (c.k, c.v, c.pos, c.next, c.R))
    times: dict[str, list[float]] = {name: [] for name in variants}
    with torch.inference_mode():
        for r in range(warmup + reps):
            for name, (p, seqs, snapshot) in runs.items():
                # the drafter cache as begin() left it and the same pending tokens: the same work every repeat
                c, (k, v, pos, nxt, R) = p.cache, snapshot
                c.k, c.v, c.pos, c.next, c.R = k.clone(), v.clone(), pos.clone(), nxt.clone(), R
                for b, s in enumerate(seqs):
                    s.state.pending_features = torch.cat([h[b, n - pending:] for h in hidden], -1)
                    s.state.pending_tokens = ids[b, n - pending:].clone()
                t0 = time.perf_counter()
                p.propose(seqs)
                if r >= warmup:
                    times[name].append(1000 * (time.perf_counter() - t0))
    return {name: statistics.median(v) for name, v in times.items()}
