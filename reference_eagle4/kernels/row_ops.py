"""Argmax, entropy and top-k over the rows of a CPU tensor: `row_ops.c`, with PyTorch where it is not built.

Every step takes the greedy token of each verified node (argmax over the vocabulary), the entropy of
each emitted token's distribution (a reported metric) and, while drafting, the low-rank head's top-K
candidates over the draft vocabulary. PyTorch runs a bf16 argmax as a scalar loop, the entropy as five
passes, and top-k as a partial sort, several calls a step over tens of thousands of entries a row. The C
versions are one or two vectorised passes per row. Results: the same argmax and top-k indices (ties go
to the lower index, as PyTorch's argmax; PyTorch's top-k leaves ties unspecified) and the entropy to
about 1e-6 relative.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor

from reference_eagle4.kernels.cpu_build import load

SOURCE = Path(__file__).with_name("row_ops.c")
MAX_TOPK = 4096            # rows_topk keeps its heap on the thread stack


@functools.cache
def library() -> ctypes.CDLL | None:
    lib = load(SOURCE, "argmax, entropy and top-k run in PyTorch")
    if lib is None:
        return None
    head = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    for name, tail in (("rows_argmax", [ctypes.c_void_p]), ("rows_entropy", [ctypes.c_void_p]),
                       ("rows_topk", [ctypes.c_int, ctypes.c_void_p])):
        f = getattr(lib, name)
        f.restype = None
        f.argtypes = head + tail
    return lib


def _rows(x: Tensor) -> Tensor | None:
    """x as a [rows, n] CPU matrix with unit column stride that the library reads, or None."""
    if x.device.type != "cpu" or x.dtype not in (torch.bfloat16, torch.float32) or x.dim() == 0 \
            or x.shape[-1] == 0 or library() is None:
        return None
    m = x.reshape(-1, x.shape[-1])
    return m if m.stride(-1) == 1 else m.contiguous()


def _args(m: Tensor) -> list:
    return [m.data_ptr(), int(m.dtype == torch.bfloat16), m.shape[0], m.shape[1], m.stride(0)]


def argmax_torch(x: Tensor) -> Tensor:
    """PyTorch's argmax, over fp32 (its bf16 argmax is a scalar loop; the conversion is exact)."""
    return x.float().argmax(-1)


def entropy_torch(x: Tensor) -> Tensor:
    logp = x.float().log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)


def argmax(x: Tensor) -> Tensor:
    """x.argmax(-1) (int64)."""
    m = _rows(x)
    if m is None:
        return argmax_torch(x)
    out = torch.empty(m.shape[0], dtype=torch.long)
    library().rows_argmax(*_args(m), out.data_ptr())
    return out.view(x.shape[:-1])


def entropy(x: Tensor) -> Tensor:
    """The entropy (nats) of softmax(x) along the last dimension, fp32."""
    m = _rows(x)
    if m is None:
        return entropy_torch(x)
    out = torch.empty(m.shape[0], dtype=torch.float32)
    library().rows_entropy(*_args(m), out.data_ptr())
    return out.view(x.shape[:-1])


def topk_indices(x: Tensor, k: int) -> Tensor:
    """x.topk(k, dim=-1).indices: the k largest, largest first."""
    m = _rows(x)
    if m is None or not 1 <= k <= min(m.shape[1], MAX_TOPK):
        return x.topk(k, dim=-1).indices
    out = torch.empty(m.shape[0], k, dtype=torch.long)
    library().rows_topk(*_args(m), k, out.data_ptr())
    return out.view(*x.shape[:-1], k)
