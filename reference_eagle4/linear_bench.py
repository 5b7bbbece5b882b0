"""`python -m reference_eagle4.linear_bench`: F.linear vs oneDNN-prepacked weights at decode shapes.

Thirty distinct weights of one MLP shape are multiplied in turn, so they stream from memory as they do in
a forward pass (one weight timed alone stays in cache and flatters every layout). Prints the median over
repeats and the bandwidth floor (weight bytes / --bandwidth GB/s).
"""

from __future__ import annotations

import argparse
import torch
import torch.nn.functional as F

from reference_eagle4.calibration import median_ms
from reference_eagle4.model import PackedLinear, can_pack


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-features", type=int, default=3072)
    ap.add_argument("--in-features", type=int, default=576)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--bandwidth", type=float, default=26.0, help="GB/s used for the floor column")
    args = ap.parse_args()
    print("| dtype | rows | F.linear ms | prepacked ms | floor ms |\n|---|---|---|---|---|")
    for dtype in (torch.bfloat16, torch.float32):
        linears = [torch.nn.Linear(args.in_features, args.out_features, bias=False).to(dtype)
                   for _ in range(args.layers)]
        # without AVX512-BF16 / AVX-NE-CONVERT oneDNN cannot prepack bf16: time F.linear alone there
        packed = [PackedLinear(lin) for lin in linears] if can_pack(dtype) else None
        floor = sum(lin.weight.numel() * lin.weight.element_size() for lin in linears) / (args.bandwidth * 1e6)
        for rows in args.rows:
            x = torch.randn(rows, args.in_features, dtype=dtype)
            with torch.inference_mode():
                plain, _ = median_ms(lambda: [F.linear(x, lin.weight) for lin in linears], args.repeats, 3)
                fast = median_ms(lambda: [p(x) for p in packed], args.repeats, 3)[0] if packed else None
            shown = f"{fast:.1f}" if fast is not None else "cannot prepack on this CPU"
            print(f"| {str(dtype).removeprefix('torch.')} | {rows} | {plain:.1f} | {shown} | {floor:.1f} |")


if __name__ == "__main__":
    main()
