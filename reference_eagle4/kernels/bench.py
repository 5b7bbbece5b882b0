"""Check the Triton kernels against their twins on a GPU and time them: `python -m reference_eagle4.kernels.bench`.

Random weights only. For each shape it reports the kernel's error against its twin, the kernel's median
time (L2 flushed before every run), the PyTorch path's (the twin for attention, the full head matmul +
topk for the head), and the bandwidth floor: the bytes the kernel must move divided by the
device-to-device copy bandwidth measured here. It also times the kernels at a few forced split counts,
so one run on a GPU leaves the data to tune the split heuristics (`--sweep` adds block sizes, warps and
pipeline depths). Last, the engine's own wiring: a verification step of a random target shaped like the
default one (SmolLM2-135M), ragged and with random trees, through the kernel and through SDPA, compared,
and timed as the engine runs it (eagerly: for a model this small a GPU step is the CPU's launches). Exit
status: 2 without CUDA, 1 when a kernel or the engine's step disagrees with its twin, 0 otherwise (the
speed targets are reported, not enforced).
"""

import argparse
import importlib.metadata
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from reference_eagle4.kernels import available
from reference_eagle4.kernels.lowrank_head import lowrank_topk_reference
from reference_eagle4.kernels.tree_attention import MAX_TREE, pack_tree_mask, tree_attention_reference
from reference_eagle4.model import ModelArgs, Transformer, TreeLayout, rope_tables

N_HEADS, N_KV, HEAD_DIM = 32, 8, 128           # Llama-3-8B attention
VOCAB, HIDDEN, RANK, TOPK = 131072, 4096, 256, 64
ATTENTION_SPLITS = (1, 2, 4, 8, 16, 32)
# the default target's shape (SmolLM2-135M-Instruct's config.json), with random weights
SMOLLM2_135M = ModelArgs(dim=576, n_layers=30, n_heads=9, n_kv_heads=3, head_dim=64, intermediate=1536,
                         vocab_size=49152, norm_eps=1e-5, rope_theta=100000.0, max_position=8192,
                         tie_embeddings=True)


class Timer:
    """Median CUDA-event time of a callable, with the L2 cache flushed before every run.

    Kernels are timed as a CUDA graph's replay: what the GPU spends, without the CPU's cost of launching
    them (tens of microseconds a Triton launch from Python, more than a 4k-context step's whole kernel),
    as in engines that capture their decoding steps in graphs. `graph=False` times the calls as they are
    (a step that syncs with the CPU cannot be captured)."""

    def __init__(self, reps: int):
        self.reps = reps
        self.flush = torch.empty(256 * 2 ** 20, dtype=torch.uint8, device="cuda")

    def __call__(self, fn: Callable[[], object], graph: bool = True) -> float:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):                 # warm-up (and Triton's compiles) off the capture
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        run = fn
        if graph:
            captured = torch.cuda.CUDAGraph()
            with torch.cuda.graph(captured):
                fn()
            run = captured.replay
        events = []
        for _ in range(self.reps):
            self.flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in events)


def copy_bandwidth(timer: Timer) -> float:
    """Bytes per ms of a 1 GiB device-to-device copy (read + write)."""
    src = torch.empty(2 ** 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / timer(lambda: dst.copy_(src), graph=False)   # a graph's copy node is slower


def random_trees(B: int, T: int, gen: torch.Generator) -> torch.Tensor:
    """bool [B, T, T] of random trees, parents first (row i = token i's ancestors and itself)."""
    masks = torch.zeros(B, T, T, dtype=torch.bool)
    for b in range(B):
        for i in range(T):
            if i:
                masks[b, i] = masks[b, int(torch.randint(0, i, (1,), generator=gen))]
            masks[b, i, i] = True
    return masks


def tree_bits(B: int, T: int, gen: torch.Generator) -> torch.Tensor:
    """Random trees as the kernel takes them: int64 bits [B, T] on the GPU."""
    return pack_tree_mask(random_trees(B, T, gen)).cuda()


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
                args = (q, k, v, lengths.cuda(), tree_bits(B, T, gen))
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
def attention_bytes(B: int, kv_len: int, T: int) -> int:
    """What tree attention must move at the bench's shapes (bf16): each sequence's keys and values once,
    the queries read and the output written."""
    return 2 * B * N_KV * kv_len * HEAD_DIM * 2 + 2 * B * N_HEADS * T * HEAD_DIM * 2


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
                args = (q, k, v, torch.full((B,), ctx, device="cuda"), tree_bits(B, T, torch.Generator()))
                kv_len = ctx + T
                err = (tree_attention_triton(*args, kv_len=kv_len).float()
                       - tree_attention_reference(*args, kv_len=kv_len).float()).abs().max().item()
                kernel = timer(lambda: tree_attention_triton(*args, kv_len=kv_len))
                by_split = {s: timer(lambda: tree_attention_triton(*args, kv_len=kv_len, num_splits=s))
                            for s in ATTENTION_SPLITS}
                torch_ms = timer(lambda: tree_attention_reference(*args, kv_len=kv_len))
                floor = attention_bytes(B, kv_len, T) / bandwidth
                best = min(by_split, key=by_split.get)
                rows.append(dict(context=ctx, batch=B, tree=T, kernel_ms=kernel, torch_ms=torch_ms, floor_ms=floor,
                                 kernel_over_floor=kernel / floor, best_splits=best, best_ms=by_split[best],
                                 ms_by_splits=by_split, max_err=err, ok=err < 2e-2))
                print(f"{ctx:>6} {B:>3} {T:>3}  {kernel:9.4f} {by_split[best]:9.4f} ({best:>2}) {torch_ms:9.4f} "
                      f"{floor:9.4f}  {kernel / floor:6.2f}x  {err:.1e}", flush=True)
    return rows


def sweep_attention(timer: Timer, bandwidth: float) -> list[dict]:
    """The kernel's block size, warps and pipeline depth on a few shapes (split count by the heuristic):
    the data to choose the module's defaults on this GPU."""
    from reference_eagle4.kernels import tree_attention_triton as tat

    defaults = (tat.BLOCK_N, tat._num_warps, tat.NUM_STAGES)
    gen = torch.Generator(device="cuda").manual_seed(4)
    rows = []
    for ctx, B, T in ((4096, 1, 16), (32768, 1, 32), (16384, 4, 32), (32768, 8, 16), (32768, 8, 64)):
        k = torch.randn(B, N_KV, ctx + T, HEAD_DIM, generator=gen, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(k.shape, generator=gen, device="cuda", dtype=torch.bfloat16)
        q = torch.randn(B, N_HEADS, T, HEAD_DIM, generator=gen, device="cuda", dtype=torch.bfloat16)
        args = (q, k, v, torch.full((B,), ctx, device="cuda"), tree_bits(B, T, torch.Generator()))
        floor = attention_bytes(B, ctx + T, T) / bandwidth
        for block_n in (32, 64, 128):
            for warps in (4, 8):
                for stages in (2, 3, 4):
                    tat.BLOCK_N, tat._num_warps, tat.NUM_STAGES = block_n, lambda rows: warps, stages
                    try:
                        ms = timer(lambda: tat.tree_attention_triton(*args, kv_len=ctx + T))
                    except Exception as exc:      # a configuration this GPU cannot run (shared memory)
                        ms = float("nan")
                        print(f"  {block_n} {warps} {stages}: {type(exc).__name__}", flush=True)
                    rows.append(dict(context=ctx, batch=B, tree=T, block_n=block_n, num_warps=warps,
                                     num_stages=stages, kernel_ms=ms, kernel_over_floor=ms / floor))
        tat.BLOCK_N, tat._num_warps, tat.NUM_STAGES = defaults
        best = min((r for r in rows[-18:] if r["kernel_ms"] == r["kernel_ms"]), key=lambda r: r["kernel_ms"])
        print(f"{ctx:>6} {B:>3} {T:>3}  best BLOCK_N {best['block_n']}, {best['num_warps']} warps, "
              f"{best['num_stages']} stages: {best['kernel_ms']:.4f} ms = {best['kernel_over_floor']:.2f}x floor; "
              + " ".join(f"{r['block_n']}/{r['num_warps']}/{r['num_stages']}:{r['kernel_ms']:.4f}" for r in rows[-18:]),
              flush=True)
    return rows


def bench_head(timer: Timer, bandwidth: float, row_counts: list[int]) -> list[dict]:
    from reference_eagle4.kernels.lowrank_head_triton import GROUP, lowrank_topk_triton

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
        full = timer(lambda: torch.topk(hn @ W.T, TOPK, dim=-1))
        twin = timer(lambda: lowrank_topk_reference(hn, A, B, W, TOPK))
        parts = {name: timer(lambda: torch.topk(x, TOPK, dim=-1)) for name, x in (   # where the kernel's time goes
            ("topk_vocab_ms", torch.randn(N, VOCAB, device="cuda")),
            ("topk_groups_ms", torch.randn(N, VOCAB // GROUP, device="cuda")),
            ("topk_candidates_ms", torch.randn(N, TOPK * GROUP, device="cuda")))}
        moved = (A.numel() + B.numel() + N * TOPK * HIDDEN + hn.numel()) * 2
        floor = moved / bandwidth
        rows.append(dict(rows=N, kernel_ms=kernel, full_head_ms=full, twin_ms=twin, floor_ms=floor,
                         speedup_vs_full=full / kernel, kernel_over_floor=kernel / floor, **parts, **check))
        print(f"{N:>4}  {kernel:9.4f} {full:9.4f} {twin:9.4f} {floor:9.4f}  "
              f"{full / kernel:6.2f}x  {kernel / floor:6.2f}x  found {check['found']:.3f}  "
              + " ".join(f"{k} {v:.4f}" for k, v in parts.items()), flush=True)
    return rows


# -- the engine's verification step -------------------------------------------------------------------------
def random_target(args: ModelArgs, dtype: torch.dtype, device: str) -> Transformer:
    torch.manual_seed(2)
    with torch.device(device):
        model = Transformer(args)
    model = model.to(dtype).eval().requires_grad_(False)
    model.rope_cos, model.rope_sin = rope_tables(args, device)       # fp32 tables, as the loader keeps them
    return model


def tree_step(model: Transformer, cache, B: int, T: int, gen: torch.Generator) -> Callable[[], torch.Tensor]:
    """A verification step of B sequences with random trees of T tokens after their cached prefixes."""
    device = model.embed.weight.device
    masks = random_trees(B, T, gen).to(device)
    depths = masks.sum(-1) - 1
    tokens = torch.randint(0, model.args.vocab_size, (B, T), generator=gen).to(device)
    return lambda: model.verify(tokens, cache, TreeLayout(masks, depths))[0]


def engine_steps(timer: Callable[..., float], contexts: list[int], batches: list[int],
                 trees: list[int], args: ModelArgs = SMOLLM2_135M, device: str = "cuda") -> list[dict]:
    """The target's verification step through the kernel ("auto" on CUDA) and through SDPA ("torch"):
    logits compared (largest error against the logits' scale, argmax agreement) and both timed."""
    model = random_target(args, torch.bfloat16, device)
    cache = model.new_cache(max(batches), max(contexts) + MAX_TREE)
    gen = torch.Generator().manual_seed(3)
    rows = []
    for ctx in contexts:
        for slot in range(max(batches)):          # ragged prefixes: ctx / 2 .. ctx
            n = ctx // 2 + int(torch.randint(0, ctx // 2 + 1, (1,), generator=gen))
            prompt = torch.randint(0, args.vocab_size, (1, n), generator=gen).to(device)
            cache.lengths[slot] = 0
            model.prefill(prompt, cache, slot)
            cache.lengths[slot] = n
        for B in batches:
            for T in trees:
                step = tree_step(model, cache, B, T, gen)
                out, ms = {}, {}
                for mode in ("torch", "auto"):
                    model.attention = mode
                    out[mode] = step().float()
                    ms[mode] = timer(step, graph=False)      # the step reads its lengths on the CPU
                model.attention = "auto"
                err = (out["auto"] - out["torch"]).abs().max().item() / out["torch"].abs().max().item()
                agree = (out["auto"].argmax(-1) == out["torch"].argmax(-1)).float().mean().item()
                rows.append(dict(context=ctx, batch=B, tree=T, kernel_ms=ms["auto"], sdpa_ms=ms["torch"],
                                 rel_err=err, argmax_agree=agree, ok=err < 2e-2 and agree >= 0.95))
                print(f"{ctx:>6} {B:>3} {T:>3}  {ms['auto']:9.3f} {ms['torch']:9.3f}  {err:.1e}  {agree:.3f}",
                      flush=True)
    for row in rows:                               # cost of a step relative to one token at the same batch
        one = next((r for r in rows if (r["context"], r["batch"], r["tree"]) == (row["context"], row["batch"], 1)),
                   None)
        row["over_one_token"] = row["kernel_ms"] / one["kernel_ms"] if one else None
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the results as JSON here (after each section)")
    ap.add_argument("--contexts", type=int, nargs="+", default=[4096, 8192, 16384, 32768])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--trees", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--engine-contexts", type=int, nargs="+", default=[512, 4096])
    ap.add_argument("--engine-batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--engine-trees", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--sweep", action="store_true",
                    help="also time the attention kernel's block size, warps and stages on a few shapes")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    if not available():
        print("the kernel benchmark needs a CUDA GPU and triton; "
              f"CUDA {'is' if torch.cuda.is_available() else 'is not'} available")
        return 2

    timer = Timer(args.reps)
    bandwidth = copy_bandwidth(timer)
    results: dict = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                         triton=importlib.metadata.version("triton"), copy_bytes_per_ms=bandwidth)

    def save(**section) -> None:
        results.update(section)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=1) + "\n")

    print(f"{results['device']} (torch {results['torch']}, triton {results['triton']}): "
          f"device-to-device copy {bandwidth / 1e6:.0f} GB/s")
    checks = dict(attention=check_attention(seed=0), head=check_head(seed=1))
    bad = [row for rows in checks.values() for row in rows if not row["ok"]]
    print(f"random checks against the twins: {sum(map(len, checks.values())) - len(bad)} ok, {len(bad)} failed")
    for row in bad:
        print("  FAILED", row)
    save(checks=checks)

    print(f"\ntree attention, bf16, {N_HEADS} q / {N_KV} kv heads, head_dim {HEAD_DIM} (times in ms)")
    print("   ctx   B   T     kernel  best(splits)   pytorch     floor  kernel/floor  max_err")
    attention = bench_attention(timer, bandwidth, args.contexts, args.batches, args.trees)
    save(attention=attention)
    if args.sweep:
        print("\ntree attention configurations (BLOCK_N / warps / stages: ms)")
        save(attention_sweep=sweep_attention(timer, bandwidth))
    print(f"\nlow-rank head, bf16, V {VOCAB}, H {HIDDEN}, r {RANK}, K {TOPK} (times in ms)")
    print("   N     kernel  full head      twin     floor  full/kernel  kernel/floor")
    head = bench_head(timer, bandwidth, args.rows)
    within = sum(r["kernel_over_floor"] <= 1.5 for r in attention)
    faster = sum(r["speedup_vs_full"] >= 3 for r in head)
    save(head=head, acceptance=dict(attention_within_1_5x_floor=f"{within}/{len(attention)}",
                                    head_3x_faster=f"{faster}/{len(head)}"))
    print(f"\nacceptance: tree attention within 1.5x of the floor in {within}/{len(attention)} shapes; "
          f"low-rank head >= 3x faster than the full head in {faster}/{len(head)} row counts")

    print("\nverification step of a random SmolLM2-135M-shaped target, bf16 (times in ms)")
    print("   ctx   B   T     kernel      sdpa  rel_err  argmax_agree")
    engine = engine_steps(timer, args.engine_contexts, args.engine_batches, args.engine_trees)
    save(engine=engine)
    bad += [r for r in attention + head + engine if not r["ok"]]
    if args.out:
        print(f"wrote {args.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
