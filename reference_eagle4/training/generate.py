"""Responses to the training pool at scale, into a TokenStore: greedy plus several sampled responses per prompt,
decoded with the engine's continuous batching at high concurrency.

Round 0 decodes every prompt greedily (the contexts the greedy benchmarks meet); round r >= 1 samples one more
response per prompt at temperatures[(r - 1) % len(temperatures)] (the diversity 20x the data needs, drawn from
the target's own distribution). A record's key is "<pool id>#g" or "<pool id>#s<r>", and the engine seeds each
request from (seed, key), so a resumed round draws what the interrupted one would have. A lossless drafting
method may speed decoding (the tokens are the target's greedy tokens or samples either way); at high
concurrency on a few CPU cores plain batched decoding is the faster one, hence the default.
Records are appended as requests finish; the run stops at `target_tokens` response tokens or after `minutes`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from reference_eagle4.training.regenerate import Chat, chat_ids, load_pool, load_target, ordered
from reference_eagle4.training.store import TokenStore


@dataclass
class GenPlan:
    samples: int = 8                               # sampled responses per prompt beside the greedy one
    temperatures: tuple[float, ...] = (0.7, 0.85, 1.0)
    top_p: float = 1.0
    max_new_tokens: int = 160
    concurrency: int = 48
    method: str = "vanilla"                        # a lossless proposer: vanilla, ngram, eagle4-harness ...
    budget: int = 1                                # its budget L (vanilla: 1)
    seed: int = 0
    target_tokens: int | None = 2_000_000          # stop once the store holds this many response tokens
    minutes: float | None = None                   # or after this many minutes of this call


def rounds(plan: GenPlan) -> list[tuple[str, float]]:
    """(key tag, temperature) of every round, in order."""
    return [("g", 0.0)] + [(f"s{r}", plan.temperatures[(r - 1) % len(plan.temperatures)])
                           for r in range(1, plan.samples + 1)]


def generate(pool_path: str | Path, store_dir: str | Path, target_folder: str | Path, chat: Chat,
             plan: GenPlan, *, dtype: str = "auto", threads: int | None = None, device: torch.device | str = "cpu",
             log: Callable[[str], None] = print, progress: bool = True) -> dict[str, Any]:
    """Append responses to the store until the plan's target or time is reached; return this call's counts.
    The target decodes on `device`."""
    folder = Path(target_folder)
    rows = ordered(load_pool(pool_path), plan.seed)
    tok, eos, model = load_target(folder, dtype, threads, device)
    prompts = {r["id"]: chat_ids(tok, chat, r) for r in rows}
    return decode(model, rows, prompts, eos, store_dir, plan, log=log, progress=progress)


def decode(model, rows: list[dict[str, Any]], prompts: dict[str, list[int]], eos: set[int],
           store_dir: str | Path, plan: GenPlan, *, log: Callable[[str], None] = print,
           progress: bool = True) -> dict[str, Any]:
    """`generate` with the target already loaded (on any device): the plan's rounds over `rows` {id, category},
    whose prompt token ids are `prompts[id]`, appended to the store at store_dir."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from reference_eagle4.engine import Engine, GenerationConfig, Request
    from reference_eagle4.proposers import PROPOSERS
    from reference_eagle4.verify import Sampling

    max_len = max(len(p) for p in prompts.values()) + plan.max_new_tokens + plan.budget + 8
    deadline = time.time() + 60 * plan.minutes if plan.minutes else None
    goal = plan.target_tokens or 0
    stats = {"records": 0, "tokens": 0, "seconds": 0.0}
    t0, c0 = time.time(), time.process_time()
    with TokenStore(store_dir, vocab_size=model.args.vocab_size) as store:
        have = start = store.response_tokens
        n0 = len(store)
        log(f"generate: {len(store)} records, {have} response tokens stored; goal {goal or 'none'}, "
            f"C = {plan.concurrency}, {plan.method} L = {plan.budget}, {plan.samples} samples at "
            f"T {list(plan.temperatures)}")

        def stop() -> bool:
            return bool(goal and have >= goal) or (deadline is not None and time.time() > deadline)

        bar = Progress(TextColumn("[bold]generate"), BarColumn(), TextColumn("{task.completed:,.0f} tokens"),
                       TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), disable=not progress)
        with bar:
            task = bar.add_task("generate", total=goal or None, completed=have, rate="")
            for tag, temp in rounds(plan):
                todo = [r for r in rows if f"{r['id']}#{tag}" not in store]
                if not todo:
                    continue
                if stop():
                    break
                log(f"generate: round {tag} (T = {temp}), {len(todo)} prompts")
                cfg = GenerationConfig(max_new_tokens=plan.max_new_tokens, eos_ids=tuple(sorted(eos)),
                                       sampling=Sampling(temperature=temp, top_p=plan.top_p if temp else 1.0),
                                       concurrency=plan.concurrency, seed=plan.seed)
                engine = Engine(model, PROPOSERS[plan.method](budget=plan.budget), cfg, max_len=max_len)

                def requests(todo: list[dict[str, Any]] = todo, tag: str = tag) -> Iterator[Request]:
                    for r in todo:
                        if stop():
                            return
                        yield Request(f"{r['id']}#{tag}", prompts[r["id"]], {"row": r})

                def on_done(seq, temp: float = temp) -> None:
                    nonlocal have
                    r = seq.request.meta["row"]
                    store.append(seq.request.id, seq.request.prompt_ids, seq.output, id=r["id"],
                                 category=r["category"], temperature=temp,
                                 hit_eos=bool(seq.output and seq.output[-1] in eos))
                    have += len(seq.output)
                    stats["records"] += 1
                    stats["tokens"] += len(seq.output)
                    rate = stats["tokens"] / max(time.time() - t0, 1e-9)
                    bar.update(task, completed=have, rate=f"{rate:.0f} tok/s")
                    if stats["records"] % 50 == 0:
                        log(f"generate: {len(store)} records, {have} response tokens stored; this call "
                            f"{stats['tokens']} tokens in {time.time() - t0:.0f} s ({rate:.1f} tok/s)")

                try:
                    engine.generate(requests(), on_done)
                except KeyboardInterrupt:                  # every finished record is already stored
                    log(_summary(stats, store, n0, start, t0, c0, "interrupted (the same command goes on from here)"))
                    raise
                del engine
    log(_summary(stats, store, n0, start, t0, c0, "stopped"))
    return stats


def _summary(stats: dict[str, Any], store: TokenStore, n0: int, start: int, t0: float, c0: float, how: str) -> str:
    """Complete this call's counts in `stats` from the store (which held n0 records and `start` response tokens
    when the call began; an interrupt may land between a write and the running counters) and say them in one line."""
    have = store.response_tokens
    seconds = time.time() - t0
    stats.update(records=len(store) - n0, tokens=have - start, seconds=round(seconds, 1), stored_tokens=have,
                 cpu_seconds=round(time.process_time() - c0, 1))                 # CPU: what a shared machine gave
    return (f"generate: {how} with {have} response tokens stored; this call {stats['records']} records, "
            f"{stats['tokens']} tokens in {stats['seconds']:.0f} s "
            f"({stats['tokens'] / max(seconds, 1e-9):.1f} tok/s; {stats['cpu_seconds']:.0f} CPU s)")
