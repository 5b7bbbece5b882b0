"""Regenerate training responses with the target itself (self-distillation data).

Each pool row {id, category, prompt, image_caption} becomes a chat: the category's system prompt (creative
categories have their own id in system_prompts.json, every other category uses "general") and the user
turn (image-* rows: "user_prompt: <prompt>\\nimage_caption: <caption>", as text-only targets see them in
the benchmarks). The reference Engine decodes them GREEDILY with packed weights in the machine's dtype
(bf16 where the CPU has it natively, else fp32), 8 requests in flight, up to `max_new_tokens` new tokens
(the pipeline uses 160: the benchmarks stop at 128), with vanilla decoding or, faster and with the same
greedy tokens, speculative decoding (ngram, or eagle4-harness once a drafter exists for the target).
Greedy because every acceptance target is measured greedily: the drafter then trains on exactly the
contexts it will meet (sampled responses would add diversity the benchmark never asks for). The
distribution targets come from the teacher-forced pass (features.py), not from these tokens.

Rows are appended to a JSONL as each request finishes (flushed), so a rerun skips finished ids and resumes.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

CREATIVE = ("text-to-video", "image-to-video", "text-to-image", "image-to-image")
Chat = Callable[[dict[str, Any]], list[dict[str, str]]]


def load_pool(path: str | Path) -> list[dict[str, Any]]:
    """Training rows {id, category, prompt[, image_caption]}; a row in the benchmark schema (the bundled pool's)
    is keyed by its question_id."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                row = json.loads(line)
                if "id" not in row and "question_id" in row:
                    row["id"] = row["question_id"]
                for key in ("id", "category", "prompt"):
                    if key not in row:
                        raise ValueError(f"{path}:{n}: missing field {key!r}")
                rows.append(row)
    return rows


def ordered(rows: list[dict[str, Any]], seed: int, creative_share: float = 0.75) -> list[dict[str, Any]]:
    """A seeded order that keeps about `creative_share` creative rows at every prefix (time-capped runs
    then still see the benchmark's main domain first, with general rows mixed in)."""
    rng = random.Random(seed)
    cre = [r for r in rows if r["category"] in CREATIVE]
    gen = [r for r in rows if r["category"] not in CREATIVE]
    rng.shuffle(cre)
    rng.shuffle(gen)
    out: list[dict[str, Any]] = []
    while cre or gen:
        take_cre = cre and (not gen or sum(r["category"] in CREATIVE for r in out) < creative_share * (len(out) + 1))
        out.append(cre.pop() if take_cre else gen.pop())
    return out


def done_ids(path: Path) -> set[str]:
    if not path.exists():
        return set()
    ids = set()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                ids.add(json.loads(line)["id"])
            except (json.JSONDecodeError, KeyError):
                continue          # a line cut by an interruption: its request is simply redone
    return ids


def packed_target(folder: str | Path, dtype: str = "auto", device: torch.device | str = "cpu"):
    """The target with packed linears on `device` (auto, cpu, cuda, cuda:N), in `dtype` ("auto": the device's
    own, `resolve_dtype`)."""
    from reference_eagle4.device import resolve_device, resolve_dtype
    from reference_eagle4.linears import pack_linears
    from reference_eagle4.model import load_transformer

    device = resolve_device(str(device))
    return pack_linears(load_transformer(folder, resolve_dtype(dtype, device), device))


def load_target(folder: Path, dtype: str = "auto", threads: int | None = None, device: torch.device | str = "cpu"):
    """(tokenizer, EOS ids, packed target on `device` in its dtype) for decoding the pool."""
    from transformers import AutoTokenizer

    from reference_eagle4.weights import eos_ids

    if threads:
        torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(folder)
    return tok, set(eos_ids(folder, tok)), packed_target(folder, dtype, device)


def chat_ids(tok, chat: Chat, row: dict[str, Any]) -> list[int]:
    return list(tok.apply_chat_template(chat(row), add_generation_prompt=True, tokenize=True, return_dict=False))


def regenerate(pool_path: str | Path, out_path: str | Path, target_folder: str | Path, chat: Chat, *,
               max_new_tokens: int = 256, concurrency: int = 8, seed: int = 0, limit: int | None = None,
               minutes: float | None = None, dtype: str = "auto", threads: int | None = None,
               method: str = "vanilla", budget: int = 1, device: torch.device | str = "cpu",
               log: Callable[[str], None] = print) -> int:
    """Decode pool prompts with the target; return how many rows the output file holds afterwards."""
    from reference_eagle4.engine import Engine, GenerationConfig, Request
    from reference_eagle4.proposers import PROPOSERS

    pool_path, out_path, folder = Path(pool_path), Path(out_path), Path(target_folder)
    rows = ordered(load_pool(pool_path), seed)
    if limit is not None:
        rows = rows[:limit]
    have = done_ids(out_path)
    todo = [r for r in rows if r["id"] not in have]
    log(f"regenerate: {len(have)} rows done, {len(todo)} to go (pool {len(rows)})")
    if not todo:
        return len(have)
    tok, eos, model = load_target(folder, dtype, threads, device)
    by_id = {r["id"]: r for r in todo}
    deadline = time.time() + 60 * minutes if minutes else None

    def requests() -> Iterator[Request]:
        for r in todo:
            if deadline is not None and time.time() > deadline:
                log("regenerate: time budget reached, no new requests")
                return
            yield Request(r["id"], chat_ids(tok, chat, r), {"category": r["category"]})

    cfg = GenerationConfig(max_new_tokens=max_new_tokens, eos_ids=tuple(sorted(eos)),
                           concurrency=concurrency, seed=seed)
    longest = 2048
    # vanilla by default; `ngram` (prompt lookup, L=8) emits the same greedy tokens (up to bf16 near-ties,
    # which batched vanilla decoding has as well) about twice as fast on these repetitive responses
    engine = Engine(model, PROPOSERS[method](budget=budget), cfg, max_len=longest)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    n_done, n_tok, t0 = len(have), 0, time.time()
    with open(out_path, "a", encoding="utf-8") as fh:
        def on_done(seq) -> None:
            nonlocal n_done, n_tok
            r = by_id[seq.request.id]
            fh.write(json.dumps({"id": r["id"], "category": r["category"], "prompt_ids": seq.request.prompt_ids,
                                 "output_ids": seq.output, "hit_eos": bool(seq.output and seq.output[-1] in eos),
                                 "text": tok.decode(seq.output, skip_special_tokens=True)}) + "\n")
            fh.flush()
            n_done += 1
            n_tok += len(seq.output)
            if n_done % 20 == 0:
                dt = time.time() - t0
                log(f"regenerate: {n_done} rows, {n_tok} new tokens in {dt:.0f} s ({n_tok / dt:.1f} tok/s)")

        engine.generate(requests(), on_done)
    log(f"regenerate: finished with {n_done} rows, {n_tok} new tokens this run in {time.time() - t0:.0f} s")
    return n_done
