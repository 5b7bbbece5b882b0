"""Check the Triton kernels against their twins on a GPU and time them: `python -m reference_eagle4.kernels.bench`.

Random weights only. For each shape it reports the kernel's error against its twin, the kernel's median
time (L2 flushed before every run), the PyTorch path's (the twin for attention, the full head matmul +
topk for the head), and the bandwidth floor: the bytes the kernel must move divided by the
device-to-device copy bandwidth measured here. It also times the kernels at a few forced split counts,
so one GPU session leaves the data to tune the split heuristics. Exit status: 2 without CUDA, 1 when a
kernel disagrees with its twin, 0 otherwise (the speed targets are reported, not enforced).
"""

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from reference_eagle4.kernels import available
from reference_eagle4.kernels.lowrank_head import lowrank_topk_reference
from reference_eagle4.kernels.tree_attention import MAX_TREE, pack_tree_mask, tree_attention_reference

N_HEADS, N_KV, HEAD_DIM = 32, 8, 128           # Llama-3-8B attention
VOCAB, HIDDEN, RANK, TOPK = 131072, 4096, 256, 64
ATTENTION_SPLITS = (1, 2, 4, 8, 16, 32)
HEAD_CHUNKS = (33, 66, 132, 264, 528)


class Timer:
    """Median CUDA-event time of a callable, with the L2 cache flushed before every run."""

    def __init__(self, reps: int):
        self.reps = reps
        self.flush = torch.empty(256 * 2 ** 20, dtype=torch.uint8, device="cuda")

    def __call__(self, fn: Callable[[], object]) -> float:
        for _ in range(3):
            fn()
        events = []
        for _ in range(self.reps):
            self.flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in events)


def copy_bandwidth(timer: Timer) -> float:
    """Bytes per ms of a 1 GiB device-to-device copy (read + write)."""
    src = torch.empty(2 ** 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / timer(lambda: dst.copy_(src))


def random_trees(B: int, T: int, gen: torch.Generator) -> torch.Tensor:
    """int64 bits [B, T] of random trees, parents first (row i = token i's ancestors and itself)."""
    masks = torch.zeros(B, T, T, dtype=torch.bool)
    for b in range(B):
        for i in range(T):
            if i:
                masks[b, i] = masks[b, int(torch.randint(0, i, (1,), generator=gen))]
            masks[b, i, i] = True
    return pack_tree_mask(masks).cuda()


# -- correctness on ragged random inputs ---------------------------------------------------------------------
def check_attention(seed: int) -> list[dict]:
    """Ragged lengths, random trees, GQA 1 and 3, fp16 and bf16 (which the interpreter cannot check), with
    the split heuristic's choice and with 3 forced splits, into NaN-poisoned outputs."""
    from reference_eagle4.kernels.tree_attention_triton import tree_attention_triton

    gen = torch.Generator().manual_seed(seed)
    rows = []
    for group in (1, 3):
        for dtype in (torch.float16, torch.bfloat16):
            for T in (1, 33, MAX_TREE):
                B = 4
                lengths = torch.randint(0, 700, (B,), generator=gen)
                k = torch.randn(B + 1, 2, 800, 64, generator=gen).to(dtype).cuda()
                v = torch.randn(B + 1, 2, 800, 64, generator=gen).to(dtype).cuda()
                q = torch.randn(B, 2 * group, T, 64, generator=gen).to(dtype).cuda()
                args = (q, k, v, lengths.cuda(), random_trees(B, T, gen))
                want = tree_attention_reference(*args).float()
                for splits in (None, 3):
                    got = tree_attention_triton(*args, num_splits=splits, out=torch.full_like(q, float("nan")))
                    err = (got.float() - want).abs().max().item()
                    rows.append(dict(group=group, dtype=str(dtype), T=T, splits=splits, max_err=err, ok=err < 2e-2))
    return rows


def check_head(seed: int) -> list[dict]:
    """One row (the CUDA-core path) and 40 rows (tensor cores), fp16 and bf16."""
    from reference_eagle4.kernels.lowrank_head_triton import lowrank_topk_triton

    gen = torch.Generator().manual_seed(seed)
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        for N, K in ((1, 1), (40, 64)):
            hn = torch.randn(N, 512, generator=gen).to(dtype).cuda()
            A = (torch.randn(512, 32, generator=gen) / 512 ** 0.5).to(dtype).cuda()
            B = torch.randn(32, 30000, generator=gen).to(dtype).cuda()
            W = torch.randn(30000, 512, generator=gen).to(dtype).cuda()
            rows.append(dict(dtype=str(dtype), N=N, K=K, **compare_head(lowrank_topk_triton(hn, A, B, W, K),
                                                                         lowrank_topk_reference(hn, A, B, W, K),
                                                                         hn, W)))
    return rows


def compare_head(got: tuple[torch.Tensor, torch.Tensor], want: tuple[torch.Tensor, torch.Tensor],
                 hn: torch.Tensor, W: torch.Tensor) -> dict:
    """Share of the twin's candidates the kernel found (ties may differ) and its logits' error."""
    (logits, idx), (_, want_idx) = got, want
    found = sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(idx, want_idx)) / want_idx.numel()
    exact = torch.einsum("nkh,nh->nk", W[idx].float(), hn.float())
    err = (logits - exact).abs().max().item()
    return dict(found=found, max_err=err, ok=found >= 0.99 and err < 1e-2 * exact.abs().max().item())


# -- timing --------------------------------------------------------------------------------------------------
def bench_attention(timer: Timer, bandwidth: float, contexts: list[int], batches: list[int],
                    trees: list[int]) -> list[dict]:
    from reference_eagle4.kernels.tree_attention_triton import tree_attention_triton

    gen = torch.Generator(device="cuda").manual_seed(0)
    max_len = max(contexts) + MAX_TREE
    k = torch.randn(max(batches), N_KV, max_len, HEAD_DIM, generator=gen, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(k.shape, generator=gen, device="cuda", dtype=torch.bfloat16)
    rows = []
    for ctx in contexts:
        for B in batches:
            for T in trees:
                q = torch.randn(B, N_HEADS, T, HEAD_DIM, generator=gen, device="cuda", dtype=torch.bfloat16)
                args = (q, k, v, torch.full((B,), ctx, device="cuda"), random_trees(B, T, torch.Generator()))
                kv_len = ctx + T
                err = (tree_attention_triton(*args, kv_len=kv_len).float()
                       - tree_attention_reference(*args, kv_len=kv_len).float()).abs().max().item()
                kernel = timer(lambda: tree_attention_triton(*args, kv_len=kv_len))
                by_split = {s: timer(lambda: tree_attention_triton(*args, kv_len=kv_len, num_splits=s))
                            for s in ATTENTION_SPLITS}
                torch_ms = timer(lambda: tree_attention_reference(*args, kv_len=kv_len))
                moved = 2 * B * N_KV * kv_len * HEAD_DIM * 2 + 2 * q.numel() * 2
                floor = moved / bandwidth
                best = min(by_split, key=by_split.get)
                rows.append(dict(context=ctx, batch=B, tree=T, kernel_ms=kernel, torch_ms=torch_ms, floor_ms=floor,
                                 kernel_over_floor=kernel / floor, best_splits=best, best_ms=by_split[best],
                                 ms_by_splits=by_split, max_err=err, ok=err < 2e-2))
                print(f"{ctx:>6} {B:>3} {T:>3}  {kernel:9.4f} {by_split[best]:9.4f} ({best:>2}) {torch_ms:9.4f} "
                      f"{floor:9.4f}  {kernel / floor:6.2f}x  {err:.1e}", flush=True)
    return rows


def bench_head(timer: Timer, bandwidth: float, row_counts: list[int]) -> list[dict]:
    from reference_eagle4.kernels.lowrank_head_triton import lowrank_topk_triton

    gen = torch.Generator(device="cuda").manual_seed(1)
    bf16 = dict(device="cuda", dtype=torch.bfloat16, generator=gen)
    W = torch.randn(VOCAB, HIDDEN, **bf16) / HIDDEN ** 0.5
    A = torch.randn(HIDDEN, RANK, **bf16) / HIDDEN ** 0.5
    B = torch.randn(RANK, VOCAB, **bf16) / RANK ** 0.5
    rows = []
    for N in row_counts:
        hn = torch.randn(N, HIDDEN, **bf16)
        check = compare_head(lowrank_topk_triton(hn, A, B, W, TOPK), lowrank_topk_reference(hn, A, B, W, TOPK),
                             hn, W)
        kernel = timer(lambda: lowrank_topk_triton(hn, A, B, W, TOPK))
        by_chunks = {c: timer(lambda: lowrank_topk_triton(hn, A, B, W, TOPK, vocab_chunks=c)) for c in HEAD_CHUNKS}
        full = timer(lambda: torch.topk(hn @ W.T, TOPK, dim=-1))
        twin = timer(lambda: lowrank_topk_reference(hn, A, B, W, TOPK))
        moved = (A.numel() + B.numel() + N * TOPK * HIDDEN + hn.numel()) * 2
        floor = moved / bandwidth
        best = min(by_chunks, key=by_chunks.get)
        rows.append(dict(rows=N, kernel_ms=kernel, full_head_ms=full, twin_ms=twin, floor_ms=floor,
                         speedup_vs_full=full / kernel, kernel_over_floor=kernel / floor, best_chunks=best,
                         best_ms=by_chunks[best], ms_by_chunks=by_chunks, **check))
        print(f"{N:>4}  {kernel:9.4f} {by_chunks[best]:9.4f} ({best:>3}) {full:9.4f} {twin:9.4f} {floor:9.4f}  "
              f"{full / kernel:6.2f}x  {kernel / floor:6.2f}x  found {check['found']:.3f}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--contexts", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--trees", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    if not available():
        print("the kernel benchmark needs a CUDA GPU and triton; "
              f"CUDA {'is' if torch.cuda.is_available() else 'is not'} available")
        return 2

    timer = Timer(args.reps)
    bandwidth = copy_bandwidth(timer)
    print(f"{torch.cuda.get_device_name()}: device-to-device copy {bandwidth / 1e6:.0f} GB/s")
    checks = dict(attention=check_attention(seed=0), head=check_head(seed=1))
    bad = [row for rows in checks.values() for row in rows if not row["ok"]]
    print(f"random checks against the twins: {sum(map(len, checks.values())) - len(bad)} ok, {len(bad)} failed")
    for row in bad:
        print("  FAILED", row)

    print(f"\ntree attention, bf16, {N_HEADS} q / {N_KV} kv heads, head_dim {HEAD_DIM} (times in ms)")
    print("   ctx   B   T     kernel  best(splits)   pytorch     floor  kernel/floor  max_err")
    attention = bench_attention(timer, bandwidth, args.contexts, args.batches, args.trees)
    print(f"\nlow-rank head, bf16, V {VOCAB}, H {HIDDEN}, r {RANK}, K {TOPK} (times in ms)")
    print("   N     kernel  best(chunks)  full head  twin      floor  full/kernel  kernel/floor")
    head = bench_head(timer, bandwidth, args.rows)

    within = sum(r["kernel_over_floor"] <= 1.5 for r in attention)
    faster = sum(r["speedup_vs_full"] >= 3 for r in head)
    print(f"\nacceptance: tree attention within 1.5x of the floor in {within}/{len(attention)} shapes; "
          f"low-rank head >= 3x faster than the full head in {faster}/{len(head)} row counts")
    bad += [r for r in attention + head if not r["ok"]]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dict(
            device=torch.cuda.get_device_name(), torch=torch.__version__, copy_bytes_per_ms=bandwidth,
            checks=checks, attention=attention, head=head,
            acceptance=dict(attention_within_1_5x_floor=f"{within}/{len(attention)}",
                            head_3x_faster=f"{faster}/{len(head)}")), indent=1) + "\n")
        print(f"wrote {args.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
