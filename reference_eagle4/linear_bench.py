"""`python -m reference_eagle4.linear_bench`: F.linear vs oneDNN-prepacked weights at decode shapes.

Thirty distinct weights of one MLP shape are multiplied in turn, so they stream from memory as they do in
a forward pass (one weight timed alone stays in cache and flatters every layout). Prints the median over
repeats and the bandwidth floor (weight bytes / --bandwidth GB/s). `--int4` adds the same products with
4-bit weights in groups of 32 (a scale and an offset per group, as GGUF's Q4_1 stores them) through
PyTorch's CPU kernel `_weight_int4pack_mm_for_cpu`: what a weight-only quantised target would pay, and how
that grows with the rows a verification step brings. `--int8` adds 8-bit weights with one scale per output
row through `_weight_int8pack_mm`, as the EAGLE-4 drafter keeps them for calls of a few rows (`Int8Linear`):
where they stop paying against the prepacked weights as the rows grow.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import Tensor

from reference_eagle4.calibration import median_ms
from reference_eagle4.linears import Int8Linear, PackedLinear, can_pack

INT4_GROUP = 32


def int4_pack(weight: Tensor) -> tuple[Tensor, Tensor]:
    """(packed 4-bit weight, scales and zeros) for `_weight_int4pack_mm_for_cpu`: each group of 32 inputs
    of a row rounded to 16 levels between its minimum and maximum (the kernel reads (q - 8) * scale + zero)."""
    n, k = weight.shape
    w = weight.float().view(n, k // INT4_GROUP, INT4_GROUP)
    lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp(min=1e-12)
    q = torch.round((w - lo) / scale).clamp(0, 15).to(torch.int32).view(n, k)
    zero = lo + 8 * scale
    scales_zeros = torch.stack([scale.view(n, -1), zero.view(n, -1)], -1).transpose(0, 1).contiguous()
    return torch._convert_weight_to_int4pack_for_cpu(q, 1), scales_zeros.to(weight.dtype)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-features", type=int, default=3072)
    ap.add_argument("--in-features", type=int, default=576)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--bandwidth", type=float, default=26.0, help="GB/s used for the floor column")
    ap.add_argument("--int4", action="store_true", help="Also time 4-bit weights (groups of 32).")
    ap.add_argument("--int8", action="store_true", help="Also time 8-bit weights (a scale per output row).")
    args = ap.parse_args()
    extra_head = (" int4 ms |" if args.int4 else "") + (" int8 ms |" if args.int8 else "")
    print(f"| dtype | rows | F.linear ms | prepacked ms |{extra_head} floor ms |")
    print(f"|---|---|---|---|{'---|' * (args.int4 + args.int8)}---|")
    for dtype in (torch.bfloat16, torch.float32):
        linears = [torch.nn.Linear(args.in_features, args.out_features, bias=False).to(dtype)
                   for _ in range(args.layers)]
        # without AVX512-BF16 / AVX-NE-CONVERT oneDNN cannot prepack bf16: time F.linear alone there
        packed = [PackedLinear(lin) for lin in linears] if can_pack(dtype) else None
        quantised = [int4_pack(lin.weight) for lin in linears] if args.int4 else []
        int8 = [Int8Linear(lin) for lin in linears] if args.int8 else []
        floor = sum(lin.weight.numel() * lin.weight.element_size() for lin in linears) / (args.bandwidth * 1e6)
        for rows in args.rows:
            x = torch.randn(rows, args.in_features, dtype=dtype)
            with torch.inference_mode():
                plain, _ = median_ms(lambda: [F.linear(x, lin.weight) for lin in linears], args.repeats, 3)
                fast = median_ms(lambda: [p(x) for p in packed], args.repeats, 3)[0] if packed else None
                int4 = median_ms(lambda: [torch.ops.aten._weight_int4pack_mm_for_cpu(x, w, INT4_GROUP, sz)
                                          for w, sz in quantised], args.repeats, 3)[0] if quantised else None
                # the int8 kernel itself at every row count (Int8Linear hands large calls to packed weights)
                i8 = median_ms(lambda: [torch.ops.aten._weight_int8pack_mm(x, q.weight_q, q.scale) for q in int8],
                               args.repeats, 3)[0] if int8 else None
            shown = f"{fast:.1f}" if fast is not None else "cannot prepack on this CPU"
            cells = "".join(f" {t:.1f} |" for t in (int4, i8) if t is not None)
            print(f"| {str(dtype).removeprefix('torch.')} | {rows} | {plain:.1f} | {shown} |{cells} {floor:.1f} |")


if __name__ == "__main__":
    main()
