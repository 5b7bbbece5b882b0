"""Linear layers in bf16 on AMX tiles, one pass over the weights for any number of rows: `amx_linear.c`.

Exact verification computes every row of a linear layer as if it were alone. oneDNN's bf16 kernels do that
only up to 32 rows (past that they switch kernels and round differently), so without this kernel
`PackedLinear.rowwise` calls them in blocks of 32, streaming every weight once per block: a batched step
of more than 32 rows pays for the weights twice or more. This kernel's rows are alike whatever their
number, and one call streams each weight once. Where the CPU has no AMX (or the build has no compiler)
`pack` returns None and the layer keeps oneDNN's blocks.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor

from reference_eagle4.kernels.cpu_build import load

SOURCE = Path(__file__).with_name("amx_linear.c")


@functools.cache
def library() -> ctypes.CDLL | None:
    lib = load(SOURCE, "linear layers keep oneDNN's kernels in blocks of 32 rows")
    if lib is None or not lib.amx_linear_available():
        return None
    lib.amx_linear_pack.restype = None
    lib.amx_linear_pack.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.amx_linear.restype = ctypes.c_int
    lib.amx_linear.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                               ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
    return lib


def pack(weight: Tensor) -> Tensor | None:
    """weight [N, K] in the kernel's tile layout, or None where the kernel cannot take it (not bf16 on the
    CPU, N or K not a multiple of 32, no AMX)."""
    n, k = weight.shape
    if weight.dtype != torch.bfloat16 or weight.device.type != "cpu" or n % 32 or k % 32 or library() is None:
        return None
    w = weight.detach().contiguous()
    out = torch.empty(n * k, dtype=torch.bfloat16)
    library().amx_linear_pack(w.data_ptr(), n, k, out.data_ptr())
    return out


def matmul(x: Tensor, packed: Tensor, out_features: int) -> Tensor | None:
    """x [..., K] (bf16) times the packed weight, transposed: [..., out_features]; None if the kernel
    refused the call."""
    k = x.shape[-1]
    rows = x.reshape(-1, k)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(rows.shape[0], out_features, dtype=torch.bfloat16)
    if rows.shape[0] and library().amx_linear(rows.data_ptr(), rows.shape[0], k, rows.stride(0), packed.data_ptr(),
                                              out_features, out.data_ptr(), out.stride(0)) != 0:
        return None
    return out.view(*x.shape[:-1], out_features)
