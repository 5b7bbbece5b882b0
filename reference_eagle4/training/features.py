"""Teacher-forced target pass: the drafter's inputs and targets for every regenerated response.

For each (prompt + response) the target (packed, in the dtype runs use on this machine: the features the
drafter meets at run time) runs once over the sequence (a system prompt that rows share runs once for
all of them: `prefix_groups`) and we keep
  * feats  [T, 3, H] bf16: hidden states ENTERING the captured layers (2, N//2, N-3) at every position;
  * tokens [T] int32;
  * the target's next-token distribution at the positions that predict response tokens, cached as its
    top-k (probabilities fp16 renormalised over the k, token ids int32). k = 32 keeps nearly all of the
    mass of these peaked distributions in 192 bytes per token instead of a float per vocabulary entry; the
    soft cross-entropy of the trainer uses it as the teacher distribution.
The cache is one torch file (a list of per-sample dicts); rows added to regen.jsonl since it was written
are computed and merged, the others are read back. The target runs on the device asked for; what it
computes comes back to the CPU before it is stored.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import torch


def read_regen(path: str | Path, max_len: int) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if r.get("output_ids") and len(r["prompt_ids"]) + len(r["output_ids"]) <= max_len:
                rows.append(r)
    rows.sort(key=lambda r: r["id"])
    return rows


def _lcp(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def prefix_groups(rows: list[dict[str, Any]], min_shared: int = 8) -> list[tuple[int, list[int]]]:
    """(shared prefix length, row indices by length) for rows grouped by the prompt prefix they share.

    Rows of one category start with the same system prompt (~200 tokens, two thirds of a row here), so
    each group's prefix runs once and its KV cache starts every row of the group. The prefix stops
    short of each row's last prompt token: every position that predicts a response token is in the
    per-row part."""
    order = sorted(range(len(rows)), key=lambda i: rows[i]["prompt_ids"])
    runs: list[list[int]] = []
    for i in order:
        if runs and _lcp(rows[runs[-1][0]]["prompt_ids"], rows[i]["prompt_ids"]) >= min_shared:
            runs[-1].append(i)
        else:
            runs.append([i])
    out = []
    for run in runs:
        first, last = rows[run[0]]["prompt_ids"], rows[run[-1]]["prompt_ids"]
        shared = min(_lcp(first, last), min(len(rows[i]["prompt_ids"]) for i in run) - 1)
        shared = shared if shared >= min_shared else 0
        run.sort(key=lambda i: len(rows[i]["prompt_ids"]) + len(rows[i]["output_ids"]))
        out.append((shared, run))
    return out


@torch.inference_mode()
def teacher_pass(model, rows: list[dict[str, Any]], capture: tuple[int, ...], topk: int = 32,
                 batch: int = 4, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run the target over prompt+response of each row; return per-sample feature dicts."""
    out: list[dict[str, Any]] = []
    t0 = time.time()
    dev = model.embed.weight.device
    batches = 0
    for shared, group in prefix_groups(rows):
        pre_cache = model.new_cache(1, max(shared, 1))
        pre_hidden = [model.embed.weight.new_zeros(1, 0, model.args.dim)] * len(capture)
        if shared:
            prefix = torch.tensor(rows[group[0]]["prompt_ids"][:shared], dtype=torch.long, device=dev)
            _, pre_hidden = model(prefix[None], pre_cache, capture=capture,
                                  logits_rows=torch.zeros(1, shared, dtype=torch.bool, device=dev))
        for start in range(0, len(group), batch):
            idx = group[start: start + batch]
            seqs = [rows[i]["prompt_ids"] + rows[i]["output_ids"] for i in idx]
            T = max(len(s) for s in seqs)
            tokens = torch.zeros(len(seqs), T - shared, dtype=torch.long)
            need = torch.zeros(len(seqs), T - shared, dtype=torch.bool)
            cache = model.new_cache(len(seqs), T)
            for b, (i, s) in enumerate(zip(idx, seqs)):
                tokens[b, : len(s) - shared] = torch.tensor(s[shared:])
                P = len(rows[i]["prompt_ids"])
                need[b, P - 1 - shared: len(s) - 1 - shared] = True     # positions predicting response tokens
                if shared:
                    cache.load(b, pre_cache.k[:, 0], pre_cache.v[:, 0], shared)
            logits, hidden = model(tokens.to(dev), cache, capture=capture, logits_rows=need.to(dev))
            probs = logits.float().softmax(-1)
            top_p, top_i = probs.topk(topk, dim=-1)
            top_p = top_p / top_p.sum(-1, keepdim=True)
            offsets = need.sum(1).cumsum(0).tolist()
            lo = 0
            for b, (i, s) in enumerate(zip(idx, seqs)):
                hi = offsets[b]
                n = len(s) - shared
                feats = [torch.cat([hp[0], h[b, :n]]) for hp, h in zip(pre_hidden, hidden)]
                out.append({
                    "id": rows[i]["id"], "category": rows[i]["category"], "prompt_len": len(rows[i]["prompt_ids"]),
                    "tokens": torch.tensor(s, dtype=torch.int32),
                    "feats": torch.stack(feats, dim=1).to(torch.bfloat16).cpu().clone(),
                    "top_p": top_p[lo:hi].to(torch.float16).cpu().clone(),
                    "top_i": top_i[lo:hi].to(torch.int32).cpu().clone(),
                })
                lo = hi
            if batches % 25 == 0:
                log(f"features: {len(out)}/{len(rows)} samples, {time.time() - t0:.0f} s")
            batches += 1
    return out


def build_features(regen_path: str | Path, target_folder: str | Path, out_path: str | Path, *,
                   topk: int = 32, max_len: int = 1024, dtype: str = "auto", threads: int | None = None,
                   device: torch.device | str = "cpu",
                   log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Load or compute the feature cache for the rows of `regen_path`."""
    from reference_eagle4.training.regenerate import packed_target

    if threads:
        torch.set_num_threads(threads)
    rows = read_regen(regen_path, max_len)
    out_path = Path(out_path)
    ids = [r["id"] for r in rows]
    cached: dict[str, dict[str, Any]] = {}
    cached_capture = None
    if out_path.exists():
        blob = torch.load(out_path, weights_only=False)
        if blob.get("ids") == ids and blob.get("topk") == topk:
            log(f"features: cached {len(ids)} samples ({out_path})")
            return blob["samples"]
        if blob.get("topk") == topk:     # regeneration appends rows: keep the samples of unchanged rows
            seqs = {r["id"]: r["prompt_ids"] + r["output_ids"] for r in rows}
            cached = {s["id"]: s for s in blob["samples"] if s["tokens"].tolist() == seqs.get(s["id"])}
            cached_capture = blob.get("capture")
        del blob
    model = packed_target(target_folder, dtype, device)
    capture = tuple(model.args.eagle_layers)
    if cached_capture != list(capture):
        cached = {}
    todo = [r for r in rows if r["id"] not in cached]
    if cached:
        log(f"features: {len(cached)} samples from {out_path}, {len(todo)} to compute")
    t0 = time.time()
    samples = teacher_pass(model, todo, capture, topk=topk, log=log) + list(cached.values())
    samples.sort(key=lambda s: s["id"])
    tmp = out_path.with_suffix(".partial")
    torch.save({"ids": ids, "topk": topk, "capture": list(capture), "samples": samples}, tmp)
    tmp.rename(out_path)
    n_tok = sum(len(s["tokens"]) for s in samples)
    log(f"features: {len(samples)} samples, {n_tok} tokens in {time.time() - t0:.0f} s -> {out_path}")
    return samples


def extract_to_store(token_dir: str | Path, feature_dir: str | Path, target_folder: str | Path, *,
                     topk: int = 32, batch: int = 16, shard_records: int = 128, minutes: float | None = None,
                     dtype: str = "auto", threads: int | None = None, device: torch.device | str = "cpu",
                     log: Callable[[str], None] = print) -> dict[str, Any]:
    """Teacher-forced features of every TokenStore record not yet in the FeatureStore, a shard at a time
    (an interruption loses at most the shard in flight); return this call's counts and throughput."""
    from reference_eagle4.training.regenerate import packed_target

    if threads:
        torch.set_num_threads(threads)
    return extract(packed_target(target_folder, dtype, device), token_dir, feature_dir, topk=topk, batch=batch,
                   shard_records=shard_records, minutes=minutes, log=log)


def extract(model, token_dir: str | Path, feature_dir: str | Path, *, topk: int = 32, batch: int = 16,
            shard_records: int = 128, minutes: float | None = None,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    """`extract_to_store` with a target already loaded (on any device)."""
    from reference_eagle4.training.store import FeatureStore, TokenStore

    tokens = TokenStore(token_dir)
    capture = tuple(model.args.eagle_layers)
    store = FeatureStore(feature_dir, {"capture": list(capture), "topk": topk, "dim": model.args.dim})
    todo = [i for i, e in enumerate(tokens.entries) if e["n_out"] > 0 and e["key"] not in store]
    log(f"features: {len(store)} records stored, {len(todo)} to compute (batch {batch}, {shard_records} per shard)")
    deadline = time.time() + 60 * minutes if minutes else None
    stats = {"records": 0, "positions": 0, "response_tokens": 0, "seconds": 0.0}
    t0, c0 = time.time(), time.process_time()
    for start in range(0, len(todo), shard_records):
        if deadline is not None and time.time() > deadline:
            log("features: time budget reached")
            break
        rows = tokens.rows(todo[start: start + shard_records])
        samples = teacher_pass(model, rows, capture, topk=topk, batch=batch, log=lambda m: None)
        name = store.write_shard(samples, {r["id"]: r["pool_id"] for r in rows})
        stats["records"] += len(rows)
        stats["positions"] += sum(len(r["prompt_ids"]) + len(r["output_ids"]) for r in rows)
        stats["response_tokens"] += sum(len(r["output_ids"]) for r in rows)
        dt = time.time() - t0
        log(f"features: {name}, {len(store)} records stored; this call {stats['response_tokens']} response "
            f"tokens ({stats['response_tokens'] / dt:.0f}/s), {stats['positions']} positions "
            f"({stats['positions'] / dt:.0f}/s) in {dt:.0f} s, {time.process_time() - c0:.0f} CPU s")
    stats["seconds"] = round(time.time() - t0, 1)
    return stats
