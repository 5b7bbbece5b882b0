"""The CPU's exact attention for decoding and verification: `exact_attention.c`, built on first use.

Greedy speculative decoding must reproduce vanilla decoding token for token, so a tree node's attention
output has to be bit-for-bit what decoding its path alone computes. The C kernel gets there by
construction: every output element is one fixed sequence of fp32 operations over the query's logical
keys (see the C file). Its fallback, float64 attention over a float64 cache
(`attention.float64_attention`), gets there by making every summation order's rounding negligible, at twice
the arithmetic and four times the cache traffic of bf16.

The library is built on first use (`cpu_build.load`). Where no compiler works, `library()` is None and the
model keeps float64 attention (`Transformer.new_cache`).
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

import torch
from torch import Tensor

from reference_eagle4.kernels.cpu_build import load

SOURCE = Path(__file__).with_name("exact_attention.c")


def supports(head_dim: int) -> bool:
    """Head sizes the kernel takes (it works in 16-lane blocks, with a fixed-size row buffer)."""
    return head_dim % 16 == 0 and head_dim <= 256


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernel, or None where it cannot be built here (said once, with the reason: runs then
    take float64 attention, slower but as exact). SPECBENCH_EXACT_ATTENTION=float64 asks for that path."""
    if os.environ.get("SPECBENCH_EXACT_ATTENTION") == "float64":
        return None
    lib = load(SOURCE, "exact steps use float64 attention, about 2-4x slower at 12 verified tokens")
    if lib is None:
        return None
    f = lib.exact_attention
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64,
                  ctypes.c_int64] + [ctypes.c_void_p] * 4 + [ctypes.c_int] * 5 + [ctypes.c_float]
    return lib


def exact_attention_cpu(q: Tensor, k: Tensor, v: Tensor, lens: Tensor, mask: Tensor,
                        valid: Tensor | None = None) -> Tensor:
    """Attention of q [B, H, T, D] over cache views k, v [B, KV, S, D] (bf16 or fp32, positions
    contiguous per head): token t of sequence b sees positions < lens[b] and the new tokens its row of
    mask [B, T, T] names (written at lens[b] + j). valid [B, T] marks the real tokens of a padded batch
    (the others are skipped and get zeros; None: all real). lens int64, mask and valid bool, all
    contiguous (the model converts them once per step, not per layer). Returns [B, H, T, D] in q's dtype."""
    lib = library()
    if lib is None:
        raise RuntimeError("the exact attention kernel is not built on this machine (no C compiler)")
    B, H, T, D = q.shape
    if q.dtype not in (torch.bfloat16, torch.float32) or k.dtype not in (torch.bfloat16, torch.float32) \
            or v.dtype != k.dtype:
        raise TypeError(f"query {q.dtype}, cache {k.dtype}: the kernel reads bfloat16 or float32")
    if k.stride(3) != 1 or k.stride(2) != D or v.stride() != k.stride():
        raise ValueError("cache views must keep each head's positions contiguous")
    q = q.contiguous()
    out = torch.empty_like(q)
    with torch.profiler.record_function("exact_attention_cpu"):      # named in step_profile's table
        rc = lib.exact_attention(q.data_ptr(), int(q.dtype == torch.bfloat16), k.data_ptr(), v.data_ptr(),
                                 int(k.dtype == torch.bfloat16), k.stride(0), k.stride(1), lens.data_ptr(),
                                 mask.data_ptr(), None if valid is None else valid.data_ptr(), out.data_ptr(),
                                 B, H, k.shape[1], T, D, D ** -0.5)
    if rc != 0:
        raise ValueError(f"exact attention: head_dim {D} unsupported (a multiple of 16, at most 256)"
                         if rc == -2 else "exact attention: workspace allocation failed")
    return out
