"""The EAGLE-4 drafter's attention on the CPU: `drafter_attention.c`, built on first use.

A draft level's queries attend over their slot's ring of cached keys (filled, before the query's position,
inside the sliding window) and over the step's tree keys their ancestor mask names. As PyTorch operators
that is a dozen calls a level, most of a level's cost after a target forward at one to eight queries; the C
kernel reads the ring and the tree keys where they lie, masks from the ring's positions, and writes the
heads side by side, as the output projection takes them. `Eagle4Drafter.attend_cached` calls it, keeping
PyTorch's operators where it does not run (no compiler, CUDA, autograd).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor

from reference_eagle4.kernels.cpu_build import load

SOURCE = Path(__file__).with_name("drafter_attention.c")


@functools.cache
def library() -> ctypes.CDLL | None:
    lib = load(SOURCE, "the drafter's attention runs in PyTorch")
    if lib is None:
        return None
    i64, ptr, i32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
    f = lib.drafter_attention
    f.restype = i32
    f.argtypes = [ptr, i32, i64, i64, i32, i32, i32, ptr, ptr, ptr, ptr, i64, ptr, i64, i32, ptr, ptr, i64, i64,
                  ptr, ctypes.c_float, ptr]
    return lib


def runs_here(q: Tensor, *cache: Tensor) -> bool:
    """CPU tensors of one dtype (bf16 or fp32), no autograd, contiguous caches, head size a multiple of 16
    up to 256, and the library built."""
    D = q.shape[-1]
    return (q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float32) and D % 16 == 0 and D <= 256
            and all(t.dtype == q.dtype and t.is_contiguous() and not t.requires_grad for t in cache)
            and not q.requires_grad and library() is not None)


def drafter_attention(q: Tensor, qpos: Tensor, ring_k: Tensor, ring_v: Tensor, ring_pos: Tensor, slots: Tensor,
                      window: int | None, inclusive: bool, tree: tuple[Tensor, Tensor, Tensor] | None = None
                      ) -> Tensor:
    """q [B, T, NQ, D] at positions qpos [B, T]; ring_k, ring_v [S, KV, R, D] with ring_pos [S, R] (-1:
    empty), slots [B]; tree = (k, v [B, KV, cap, D], anc [B, T, n]: the first n tree keys each query sees)
    or None. Returns [B, T, NQ, D]."""
    B, T, NQ, D = q.shape
    KV, R = ring_k.shape[1], ring_k.shape[2]
    q = q.contiguous()
    out = torch.empty_like(q)
    qpos, ring_pos, slots = qpos.contiguous(), ring_pos.contiguous(), slots.contiguous()
    tk = tv = anc = None
    cap = n = 0
    if tree is not None:
        tk, tv, mask = tree
        cap, n = tk.shape[2], mask.shape[-1]
        anc = mask.to(torch.uint8).contiguous()
    rc = library().drafter_attention(q.data_ptr(), int(q.dtype == torch.bfloat16), B, T, NQ, KV, D,
                                     ring_k.data_ptr(), ring_v.data_ptr(), ring_pos.data_ptr(), slots.data_ptr(), R,
                                     qpos.data_ptr(), window or 0, int(inclusive),
                                     None if tk is None else tk.data_ptr(), None if tv is None else tv.data_ptr(),
                                     cap, n, None if anc is None else anc.data_ptr(), D ** -0.5, out.data_ptr())
    if rc != 0:
        raise RuntimeError("drafter attention: workspace allocation failed" if rc == -1
                           else f"drafter attention: head size {D} unsupported")
    return out
