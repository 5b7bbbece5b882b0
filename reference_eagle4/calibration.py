"""Offline cost tables: measured verification and drafting times on the device the engine runs on.

The harness decides how large a tree to verify from these tables, so they must describe the machine
as it is (dtype, threads, packing), not a model of it. A table is keyed by device (the CPU's model or the
GPU's name), dtype, thread count and parallelism; `find_table` returns the one matching the current run or
None. On a GPU every timed call ends when the GPU has finished it, not when Python has queued it.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import torch

from reference_eagle4.cost_table import CostTable, table_dir
from reference_eagle4.device import device_name, synchronize
from reference_eagle4.model import Transformer

# every batch size to 8: a step's cost jumps where its rows (batch x tokens) cross a block of 32 rows of the
# linears (5 sequences of 8 tokens cost what 8 of 8 do), which interpolating between 4 and 8 would miss, and
# the planner would draft too deep for the batches of 5-7 that end a C = 8 run
DEFAULT_BATCHES = (1, 2, 3, 4, 5, 6, 7, 8, 16)
DEFAULT_CONTEXTS = (256, 1024, 2048)
DEFAULT_TOKENS = (1, 2, 3, 4, 6, 8, 16, 32, 64)
DEFAULT_WIDTHS = (1, 4, 8, 16)
FINE_TOKENS, FINE_ROUNDS = 16, 3            # token counts timed in FINE_ROUNDS times the rounds (time_verification)


# Bumped whenever a change to the engine moves what a step costs (kernels, linears, the drafter, the timing
# grid), so that a table timed before the change is not used: `specbench calibrate` times a new one.
COSTS_REVISION = 13


def device_key(model: Transformer, parallelism: str = "single") -> dict[str, Any]:
    """What a step's cost depends on besides the model: the device, dtype, threads, parallelism, the
    attention exact steps run (a table timed with float64 attention overprices the C kernel's trees) and
    the engine's cost revision."""
    w = model.embed.weight
    return {"device": device_name(w.device), "dtype": str(w.dtype).removeprefix("torch."),
            "threads": torch.get_num_threads(), "parallelism": parallelism, "attention": model.exact_attention,
            "revision": COSTS_REVISION}


def slug(key: dict[str, Any]) -> str:
    text = (f"{key['device']}-{key['dtype']}-t{key['threads']}-{key['parallelism']}-"
            f"{key.get('attention', 'float64')}-r{key.get('revision', 1)}")
    return "".join(c if c.isalnum() or c in "-." else "_" for c in text)


def find_table(key: dict[str, Any], folder: Path | None = None) -> CostTable | None:
    path = (folder or table_dir()) / f"{slug(key)}.json"
    return CostTable.load(path) if path.exists() else None


# The small grid measured in-process when no table matches this device: a few points, quick to time.
QUICK_GRID = dict(batches=(1, 8), contexts=(256, 1024), tokens=(1, 4, 16, 32), repeats=2)


def table_for(model: Transformer, who: str) -> tuple[CostTable, str]:
    """The calibrated table matching this run, else a quick in-process one (with a warning naming `who`).

    Returns (table, where it came from) for the run manifest."""
    import warnings

    key = device_key(model)
    table = find_table(key)
    if table is not None:
        return table, "calibrated (specbench calibrate)"
    warnings.warn(
        f"{who}: no cost table for {key['device']} ({key['dtype']}, {key['threads']} threads): measuring a "
        "small grid in-process now; run `specbench calibrate` once for a full table", stacklevel=3)
    return calibrate(model, **QUICK_GRID), "quick in-process grid"


def median_ms(fn: Callable[[], Any], repeats: int, warmup: int) -> tuple[float, list[float]]:
    samples = interleaved_ms([fn], repeats, warmup)[0]
    return statistics.median(samples), samples


def interleaved_ms(fns: list[Callable[[], Any]], repeats: int, warmup: int,
                   device: torch.device | None = None) -> list[list[float]]:
    """Samples of each callable, timed in rounds (each callable once a round), so that a machine's drift
    over the measurement touches every callable alike. What the planner reads is how much dearer a larger
    step is; timed one after another, a slow spell of the machine can make a 1-token step cost more than
    a 4-token one, and every tree up to 8 tokens look free. `device`: where the callables run; a GPU's work
    is waited for before and after each sample."""
    wait = (lambda: synchronize(device)) if device is not None else (lambda: None)
    for fn in fns:
        for _ in range(warmup):
            fn()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, samples):
            wait()
            t0 = time.perf_counter()
            fn()
            wait()
            out.append((time.perf_counter() - t0) * 1000)
    return samples


def time_verification(model: Transformer, batches: tuple[int, ...], contexts: tuple[int, ...],
                      tokens: tuple[int, ...], repeats: int = 3, warmup: int = 1,
                      on_point: Callable[[], None] | None = None) -> tuple[list, dict[str, list[float]]]:
    """verify_ms[b][c][t] for a batch of b sequences, each with c cached tokens, appending t tokens: the
    token counts of one (batch, context) interleaved, medians over the rounds. Counts up to FINE_TOKENS
    (the trees of budgets up to 16) take FINE_ROUNDS times the rounds: the planner's choices turn on
    their ratios (at C = 8, 2 against 4 tokens), which a few rounds on a noisy machine misprice; the
    larger counts cost most of the time and matter only to larger budgets."""
    table: list[list[list[float]]] = []
    raw: dict[str, list[float]] = {}
    fine = [t for t in tokens if t <= FINE_TOKENS]
    coarse = [t for t in tokens if t > FINE_TOKENS]
    dev = model.embed.weight.device
    with torch.inference_mode():
        for b in batches:
            cache = model.new_cache(b, max(contexts) + max(tokens) + 1)
            rows = []
            for c in contexts:
                cache.lengths[:] = c
                calls = {t: (lambda x=torch.randint(0, model.args.vocab_size, (b, t)).to(dev): model.verify(x, cache))
                         for t in tokens}
                timed = dict(zip(fine, interleaved_ms([calls[t] for t in fine], repeats * FINE_ROUNDS, warmup, dev)))
                timed |= dict(zip(coarse, interleaved_ms([calls[t] for t in coarse], repeats, warmup, dev)))
                samples = [timed[t] for t in tokens]
                for t, ts in zip(tokens, samples):
                    raw[f"b{b}-c{c}-t{t}"] = ts
                    if on_point:
                        on_point()
                rows.append([statistics.median(ts) for ts in samples])
            table.append(rows)
    return table, raw


def calibrate(model: Transformer, batches: tuple[int, ...] = DEFAULT_BATCHES,
              contexts: tuple[int, ...] = DEFAULT_CONTEXTS, tokens: tuple[int, ...] = DEFAULT_TOKENS,
              drafter_step: Callable[[int, int], Callable[[], Any]] | None = None,
              widths: tuple[int, ...] = DEFAULT_WIDTHS, repeats: int = 3, warmup: int = 1,
              parallelism: str = "single", on_point: Callable[[], None] | None = None) -> CostTable:
    """Measure a full table. `drafter_step(batch, width)` returns a callable running one drafter forward."""
    contexts = tuple(c for c in contexts if c + max(tokens) < model.args.max_position) or (contexts[0],)
    verify, raw = time_verification(model, batches, contexts, tokens, repeats, warmup, on_point)
    draft: list[list[float]] = []
    if drafter_step is not None:
        for b in batches:       # cheap calls: FINE_ROUNDS times the rounds, since a few misprice a level
            samples = interleaved_ms([drafter_step(b, w) for w in widths], repeats * FINE_ROUNDS, warmup,
                                     model.embed.weight.device)
            for w, ts in zip(widths, samples):
                raw[f"draft-b{b}-w{w}"] = ts
                if on_point:
                    on_point()
            draft.append([statistics.median(ts) for ts in samples])
    return CostTable(device_key(model, parallelism), list(batches), list(contexts), list(tokens), verify,
                     list(batches) if draft else [], list(widths) if draft else [], draft,
                     datetime.now(timezone.utc).isoformat(timespec="seconds"), raw)


def grid_points(batches: tuple[int, ...], contexts: tuple[int, ...], tokens: tuple[int, ...],
                widths: tuple[int, ...], with_drafter: bool) -> int:
    return len(batches) * len(contexts) * len(tokens) + (len(batches) * len(widths) if with_drafter else 0)
