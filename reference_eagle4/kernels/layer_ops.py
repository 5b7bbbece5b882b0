"""A decoder layer's element-wise work on the CPU: `layer_ops.c`, with PyTorch where it is not built.

Between its four matmuls and attention, a layer of the target runs about twenty small PyTorch operators
(RMS norms, the residual adds, rotary embedding, the cache writes, the SiLU gate), each dispatched on its
own and, in bf16, each rounding to bf16: a sizeable share of a decoding step of the default target,
the same for every method. The C versions are one pass each in fp32, rounded once. Each row is
computed alone, as exact verification needs; the results are within a bf16 rounding of PyTorch's (fp32:
within a few ulp), not bit for bit, so the engine uses one path or the other for every step of a run.
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from reference_eagle4.kernels.cpu_build import load

SOURCE = Path(__file__).with_name("layer_ops.c")


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernels, or None where they cannot be built (said once) or SPECBENCH_LAYER_OPS=pytorch
    asks for PyTorch's operators (an A/B of the two, in separate runs)."""
    if os.environ.get("SPECBENCH_LAYER_OPS") == "pytorch":
        return None
    lib = load(SOURCE, "the layers' element-wise work runs in PyTorch")
    if lib is None:
        return None
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.rows_rms_norm.argtypes = [ptr, i64, ptr, i64, ptr, ptr, ptr, i64, ctypes.c_int, i64, i64, ctypes.c_float]
    lib.rope_store.argtypes = [ptr, i64, ctypes.c_int, i64, i64, ptr, ptr, ptr, ctypes.c_int, ctypes.c_int,
                               ctypes.c_int, ptr, ptr, ptr, i64, i64, ptr]
    lib.rows_silu_mul.argtypes = [ptr, i64, ctypes.c_int, i64, i64, ptr]
    for f in (lib.rows_rms_norm, lib.rope_store, lib.rows_silu_mul):
        f.restype = None
    return lib


def runs_here(*tensors: Tensor) -> bool:
    """Whether the C kernels take these tensors: CPU, bf16 or fp32 alike, rows of unit stride, no autograd
    (training backpropagates through PyTorch's operators), and the library built."""
    t0 = tensors[0]
    return (t0.device.type == "cpu" and t0.dtype in (torch.bfloat16, torch.float32)
            and all(t.dtype == t0.dtype and t.stride(-1) == 1 and not t.requires_grad for t in tensors)
            and library() is not None)


def _rows(x: Tensor) -> tuple[int, int]:
    """(rows, row stride) of x seen as a matrix of its last dimension (its leading dimensions must merge)."""
    m = x.view(-1, x.shape[-1]) if x.dim() > 1 else x.view(1, -1)
    return m.shape[0], m.stride(0)


def rms_norm(x: Tensor, weight: Tensor, eps: float, out: Tensor | None = None) -> Tensor:
    """F.rms_norm over the last dimension, into `out` when given (x's shape; rows may be strided, e.g. one
    half of a wider row: the drafter writes its two normed inputs side by side this way)."""
    if not (runs_here(x, weight) and x.is_contiguous() and (out is None or runs_here(out))):
        y = F.rms_norm(x, (x.shape[-1],), weight, eps)
        return y if out is None else out.copy_(y)
    if out is None:
        out = torch.empty_like(x)
    rows, ld = _rows(x)
    library().rows_rms_norm(x.data_ptr(), ld, None, 0, None, weight.data_ptr(), out.data_ptr(), _rows(out)[1],
                            int(x.dtype == torch.bfloat16), rows, x.shape[-1], eps)
    return out


def add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """(x + residual, rms_norm(x + residual)): the residual stream and the next sublayer's input."""
    if not (runs_here(x, residual, weight) and x.is_contiguous() and residual.is_contiguous()
            and x.shape == residual.shape):
        x = x + residual
        return x, F.rms_norm(x, (x.shape[-1],), weight, eps)
    total, out = torch.empty_like(x), torch.empty_like(x)
    rows, ld = _rows(x)
    library().rows_rms_norm(x.data_ptr(), ld, residual.data_ptr(), ld, total.data_ptr(), weight.data_ptr(),
                            out.data_ptr(), x.shape[-1], int(x.dtype == torch.bfloat16), rows, x.shape[-1], eps)
    return total, out


def silu_mul(gate_up: Tensor) -> Tensor:
    """silu(g) * u for gate_up = [g | u] along the last dimension (the fused gate/up projection's output)."""
    n = gate_up.shape[-1] // 2
    if not (runs_here(gate_up) and gate_up.is_contiguous()):
        g, u = gate_up.chunk(2, dim=-1)
        return F.silu(g) * u
    out = gate_up.new_empty(*gate_up.shape[:-1], n)
    rows, ld = _rows(gate_up)
    library().rows_silu_mul(gate_up.data_ptr(), ld, int(gate_up.dtype == torch.bfloat16), rows, n, out.data_ptr())
    return out


def rope_store(qkv: Tensor, pos: Tensor, cos: Tensor, sin: Tensor, heads: tuple[int, int, int],
               cache_k: Tensor, cache_v: Tensor, lens: Tensor) -> Tensor:
    """Rotary embedding and the cache write of one layer's step, in C (callers check `runs_here` for the
    model's weights and the caches: C only, no PyTorch twin here, since that one wants the tables gathered
    once per step, `Transformer._rope_store`).

    qkv [B, T, (H + 2 KV) D]; pos [B, T] int64 rows of the fp32 tables cos, sin [P, D];
    heads = (H, KV, D); cache_k, cache_v [B, KV, S, D] views with contiguous positions, written at
    lens[b] + t. Returns the rotated queries [B, H, T, D]."""
    H, KV, D = heads
    qkv = qkv.contiguous()
    B, T, _ = qkv.shape
    q = qkv.new_empty(B, H, T, D)
    library().rope_store(qkv.data_ptr(), qkv.stride(1), int(qkv.dtype == torch.bfloat16), B, T, pos.data_ptr(),
                         cos.data_ptr(), sin.data_ptr(), H, KV, D, q.data_ptr(), cache_k.data_ptr(),
                         cache_v.data_ptr(), cache_k.stride(0), cache_k.stride(1), lens.data_ptr())
    return q


def rope_store_rows(qkv: Tensor, pos: Tensor, cos: Tensor, sin: Tensor, heads: tuple[int, int, int],
                    k_dst: Tensor, v_dst: Tensor, slot: Tensor, row: Tensor) -> Tensor:
    """rope_store for rows bound for scattered places (the EAGLE-4 drafter's ring of cached keys, or its
    tree buffer): row n of qkv [N, (H + 2 KV) D] at table row pos[n] goes to position row[n] of slot slot[n]
    of k_dst, v_dst [S, KV, P, D] (contiguous; no two rows to the same place). Returns the rotated queries
    [N, H, D]. C only, like rope_store: callers check `runs_here`."""
    H, KV, D = heads
    qkv = qkv.contiguous()
    N = qkv.shape[0]
    q = qkv.new_empty(N, H, D)
    start = (slot * (KV * k_dst.shape[2]) + row).contiguous()         # in units of D, slot stride 0
    pos = pos.contiguous()                 # (kept referenced: a temporary's memory would be freed at once)
    library().rope_store(qkv.data_ptr(), qkv.stride(0), int(qkv.dtype == torch.bfloat16), N, 1,
                         pos.data_ptr(), cos.data_ptr(), sin.data_ptr(), H, KV, D, q.data_ptr(),
                         k_dst.data_ptr(), v_dst.data_ptr(), 0, k_dst.stride(1), start.data_ptr())
    return q
