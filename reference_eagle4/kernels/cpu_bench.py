"""`python -m reference_eagle4.kernels.cpu_bench`: the CPU's C kernels timed at the shapes a step gives them.

Exact attention (`exact_attention.c`) for one layer of the default target (9 query heads, 3 key heads,
head size 64) at a given context, for one sequence and for a batch, at several tokens per sequence; and
the row kernels (`row_ops.c`) beside the PyTorch calls they replace, on rows as wide as the target's
vocabulary (argmax, entropy) and the drafter's (top-64); and the drafter's low-rank head (`lowrank_head.c`)
beside its PyTorch path, at the default drafter's shapes with random weights, with warm caches and after
64 MB of other traffic (as after a target forward, which is when a step calls it). Medians of interleaved
rounds, microseconds:
on a noisy VM only side-by-side figures compare, so `--attention-baseline OLD.c` times another version of
the attention kernel in the same rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from reference_eagle4.calibration import interleaved_ms
from reference_eagle4.drafters.eagle4_model import Eagle4Config, Eagle4Drafter
from reference_eagle4.kernels import row_ops
from reference_eagle4.kernels.exact_attention_cpu import exact_attention_cpu
from reference_eagle4.kernels.exact_attention_cpu import library as attention_library


def _us(fns: list, repeats: int, calls: int = 20) -> list[float]:
    """Median microseconds per call of each function, `calls` calls a sample, interleaved."""
    batched = [lambda f=f: [f() for _ in range(calls)] for f in fns]
    return [1000 * statistics.median(s) / calls for s in interleaved_ms(batched, repeats, 2)]


def _baseline(source: Path):
    """exact_attention_cpu over the library built from another copy of exact_attention.c (an A/B of a
    kernel change). It includes the kernel headers, so it must sit beside them: e.g.
    `git show REV:reference_eagle4/kernels/exact_attention.c > reference_eagle4/kernels/old_attention.c`."""
    import ctypes

    import reference_eagle4.kernels.exact_attention_cpu as ea
    from reference_eagle4.kernels.cpu_build import load

    if not source.exists():
        raise SystemExit(f"--attention-baseline: {source} does not exist")
    lib = load(source, "no baseline")
    if lib is None:
        raise SystemExit(f"--attention-baseline: {source} did not build (see the warning; it includes the "
                         f"kernel headers, so put it in {Path(__file__).parent})")
    lib.exact_attention.restype = ctypes.c_int
    lib.exact_attention.argtypes = attention_library().exact_attention.argtypes

    def run(*args):
        ours, ea.library = ea.library, lambda: lib
        try:
            return exact_attention_cpu(*args)
        finally:
            ea.library = ours
    return run


def attention_rows(context: int, repeats: int, baseline: Path | None) -> list[str]:
    other = _baseline(baseline) if baseline else None
    head = "| sequences | tokens each | exact attention us (one layer) |" + (" baseline us |" if other else "")
    out = [head, "|---" * (4 if other else 3) + "|"]
    g = torch.Generator().manual_seed(0)
    for B in (1, 8):
        for T in (1, 4, 8, 14):
            q = torch.randn(B, 9, T, 64, generator=g).bfloat16()
            k = torch.randn(B, 3, context + T, 64, generator=g).bfloat16()
            v = torch.randn(B, 3, context + T, 64, generator=g).bfloat16()
            lens = torch.full((B,), context, dtype=torch.long)
            mask = torch.ones(T, T, dtype=torch.bool).tril().expand(B, T, T).contiguous()
            args = (q, k, v, lens, mask)
            if other is None:
                (us,) = _us([lambda: exact_attention_cpu(*args)], repeats)
                out.append(f"| {B} | {T} | {us:.1f} |")
                continue
            same = torch.equal(exact_attention_cpu(*args), other(*args))
            us, base = _us([lambda: exact_attention_cpu(*args), lambda: other(*args)], repeats)
            out.append(f"| {B} | {T} | {us:.1f} | {base:.1f}{'' if same else ' (outputs differ)'} |")
    return out


def row_rows(repeats: int) -> list[str]:
    out = ["| call | rows x width | row_ops us | PyTorch us |", "|---|---|---|---|"]
    g = torch.Generator().manual_seed(0)
    for rows, width, k in ((1, 49152, 0), (14, 49152, 0), (32, 49152, 0), (8, 32768, 64), (64, 32768, 64)):
        x = (torch.randn(rows, width, generator=g) * 4).bfloat16()
        if k:
            pairs = [("top-64", lambda: row_ops.topk_indices(x, k), lambda: x.topk(k, dim=-1).indices)]
        else:
            pairs = [("argmax", lambda: row_ops.argmax(x), lambda: row_ops.argmax_torch(x)),
                     ("entropy", lambda: row_ops.entropy(x), lambda: row_ops.entropy_torch(x))]
        for name, ours, theirs in pairs:
            a, b = _us([ours, theirs], repeats)
            out.append(f"| {name} | {rows} x {width} | {a:.0f} | {b:.0f} |")
    return out


def head_rows(repeats: int) -> list[str]:
    cfg = Eagle4Config(hidden_size=576, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                       intermediate_size=1536, vocab_size=49152, target_hidden_size=576, draft_vocab_size=32768)
    g = torch.Generator().manual_seed(0)
    d = Eagle4Drafter(cfg).bfloat16()
    d.attach(torch.randn(49152, 576, generator=g).bfloat16(), (torch.randn(49152, 576, generator=g) / 24).bfloat16())
    d.pack()
    c_head = d.cpu_head
    if c_head is None:
        return ["(the low-rank head kernel could not be built here)"]
    traffic = torch.zeros(64 << 20, dtype=torch.uint8)

    def timed(h, ours: bool, cold: bool) -> float:
        """Microseconds of one call; with `cold`, after (not timing) 64 MB of other traffic."""
        d.cpu_head = c_head if ours else None
        if cold:
            traffic.add_(1)
        t0 = time.perf_counter()
        d.topk(h, 8)
        return 1e6 * (time.perf_counter() - t0)
    out = ["| rows | caches | lowrank_head us | PyTorch us |", "|---|---|---|---|"]
    for rows in (1, 8, 64):
        h = torch.randn(rows, 576, generator=g).bfloat16()
        for cold in (False, True):
            samples: tuple[list[float], list[float]] = ([], [])
            for _ in range(repeats * 5):              # interleaved, one call each at a time
                for ours, got in ((True, samples[0]), (False, samples[1])):
                    got.append(timed(h, ours, cold))
            a, b = (statistics.median(x) for x in samples)
            out.append(f"| {rows} | {'after 64 MB' if cold else 'warm'} | {a:.0f} | {b:.0f} |")
    d.cpu_head = c_head
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=350, help="Cached tokens per sequence for attention.")
    ap.add_argument("--repeats", type=int, default=7, help="Interleaved rounds (the median is shown).")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's).")
    ap.add_argument("--attention-baseline", type=Path, default=None,
                    help="Another exact_attention.c, beside this one in reference_eagle4/kernels/ (it includes the "
                         "headers there), built and timed interleaved with it (outputs checked equal).")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if row_ops.library() is None or attention_library() is None:
        raise SystemExit("the C kernels could not be built here (see the warning): nothing to time")
    with torch.inference_mode():
        print(f"context {args.context}, {torch.get_num_threads()} threads, bf16")
        print("\n".join(attention_rows(args.context, args.repeats, args.attention_baseline)))
        print()
        print("\n".join(row_rows(args.repeats)))
        print()
        print("\n".join(head_rows(args.repeats)))


if __name__ == "__main__":
    main()
