"""`python -m reference_eagle4.step_profile`: what a verification step pays for its extra tokens, by operator.

Speculation pays only while verifying T tokens costs little more than decoding one, so the part of a
forward that grows with T is the part to optimise. This runs the target's exact (decode/verification)
forward on the default target at one context length (one sequence, or --batch of them), for 1 token and
for T tokens, interleaved, under torch.profiler, and prints the operators whose self time grows most from
1 to T tokens. The C kernels called through ctypes other than exact attention (`layer_ops`, the layers'
element-wise work) do not show as operators, so it also prints the wall-clock time of a forward,
unprofiled; `--pytorch-layer-ops` adds the same forwards with PyTorch's element-wise operators in their
place, in the same rounds, and `--onednn-linears` the same forwards with the exact linears in oneDNN's
blocks of 32 rows instead of `amx_linear` (where the CPU has AMX; the profiler does not see that kernel).
"""

from __future__ import annotations

import argparse
import statistics

import torch
from torch.profiler import ProfilerActivity, profile

from reference_eagle4.calibration import interleaved_ms
from reference_eagle4.device import resolve_dtype
from reference_eagle4.kernels import layer_ops
from reference_eagle4.linears import PackedLinear, pack_linears
from reference_eagle4.model import KVCache, Transformer, load_transformer
from reference_eagle4.weights import resolve_target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="smollm2-135m", help="Known target name, a .gguf file or a HF folder.")
    ap.add_argument("--dtype", default="auto", help="auto, float32 or bfloat16.")
    ap.add_argument("--tokens", type=int, default=12, help="Tokens of the step compared with a 1-token step.")
    ap.add_argument("--context", type=int, default=350, help="Cached tokens before the step.")
    ap.add_argument("--batch", type=int, default=1, help="Sequences in the step (each with --context cached).")
    ap.add_argument("--repeats", type=int, default=20, help="Forwards profiled per step size and round.")
    ap.add_argument("--rows", type=int, default=12, help="Operators shown.")
    ap.add_argument("--pytorch-layer-ops", action="store_true",
                    help="Also time forwards with PyTorch's element-wise operators instead of layer_ops.c.")
    ap.add_argument("--onednn-linears", action="store_true",
                    help="Also time forwards with the exact linears in oneDNN's blocks of 32 rows, not amx_linear.")
    args = ap.parse_args()
    model = pack_linears(load_transformer(resolve_target(args.target), resolve_dtype(args.dtype)))
    cache = model.new_cache(args.batch, args.context + args.tokens)
    vocab = model.args.vocab_size
    self_ms: dict[int, dict[str, float]] = {1: {}, args.tokens: {}}
    with torch.inference_mode():
        for slot in range(args.batch):
            model.prefill(torch.randint(0, vocab, (1, args.context)), cache, slot)
            cache.keep(slot, torch.arange(args.context))
        for _ in range(2):                       # two interleaved rounds, so drift touches both sizes alike
            for T in self_ms:
                ids = torch.randint(0, vocab, (args.batch, T))
                for _ in range(3):
                    model(ids, cache)
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    for _ in range(args.repeats):
                        model(ids, cache)
                for e in prof.key_averages():
                    per = e.self_cpu_time_total / 1000 / args.repeats / 2
                    self_ms[T][e.key] = self_ms[T].get(e.key, 0.0) + per
        print_wall_ms(model, cache, args.tokens, args.repeats, args.pytorch_layer_ops, args.onednn_linears)
    one, many = self_ms[1], self_ms[args.tokens]
    print(f"self time per forward at context {args.context}, batch {args.batch}: "
          f"1 token {sum(one.values()):.2f} ms, "
          f"{args.tokens} tokens {sum(many.values()):.2f} ms")
    print(f"| operator | 1 token ms | {args.tokens} tokens ms | growth ms |\n|---|---|---|---|")
    for key in sorted(set(one) | set(many), key=lambda k: one.get(k, 0.0) - many.get(k, 0.0))[: args.rows]:
        a, b = one.get(key, 0.0), many.get(key, 0.0)
        print(f"| {key} | {a:.2f} | {b:.2f} | {b - a:+.2f} |")


def print_wall_ms(model: Transformer, cache: KVCache, tokens: int, repeats: int, pytorch_too: bool,
                  onednn_too: bool = False) -> None:
    """Median wall-clock ms of unprofiled forwards of 1 and `tokens` tokens, interleaved (and, with
    pytorch_too, the same with layer_ops' PyTorch path: its library hidden for those calls; with onednn_too,
    the same with every PackedLinear's AMX tiles hidden)."""
    library = layer_ops.library
    linears = [m for m in model.modules() if isinstance(m, PackedLinear)]
    tiles = [m.tiles for m in linears]
    variants = [("", False, False)]
    if pytorch_too:
        variants.append((", PyTorch element-wise", True, False))
    if onednn_too:
        variants.append((", oneDNN linears", False, True))
    fns, names = [], []
    for label, pytorch, onednn in variants:
        for T in (1, tokens):
            ids = torch.randint(0, model.args.vocab_size, (cache.lengths.numel(), T))

            def forward(ids=ids, pytorch=pytorch, onednn=onednn):
                layer_ops.library = (lambda: None) if pytorch else library
                for m, t in zip(linears, tiles):
                    m.tiles = None if onednn else t
                try:
                    model(ids, cache)
                finally:
                    layer_ops.library = library
                    for m, t in zip(linears, tiles):
                        m.tiles = t
            fns.append(forward)
            names.append(f"{T} token{'s' if T > 1 else ''}{label}")
    for name, samples in zip(names, interleaved_ms(fns, repeats, warmup=3)):
        print(f"wall time per forward, {name}: {statistics.median(samples):.2f} ms")


if __name__ == "__main__":
    main()
