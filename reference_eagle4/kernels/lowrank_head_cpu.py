"""The low-rank candidate head on the CPU in one call: `lowrank_head.c`, built on first use.

`Eagle4Drafter.topk` runs once per draft level. As PyTorch operators (low-rank scores, top-K, a gather of
K head rows, their logits, log-softmax, top-k) a call at one to eight rows is mostly fixed per-operator
cost, paid right after a target forward; the C kernel reads the same weights in one pass and does the rest in registers and
the L2 cache. `LowrankHeadCPU` keeps the factor B in the kernel's blocked layout, made once when the
drafter is packed. Where no compiler works, `LowrankHeadCPU.create` returns None and the drafter keeps
its PyTorch path.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor

from reference_eagle4.kernels.cpu_build import load
from reference_eagle4.kernels.row_ops import MAX_TOPK

SOURCE = Path(__file__).with_name("lowrank_head.c")
LANES = 16                        # scores per block of B (the kernel's vector width)


@functools.cache
def library() -> ctypes.CDLL | None:
    lib = load(SOURCE, "the drafter's low-rank head runs in PyTorch")
    if lib is None:
        return None
    f = lib.lowrank_topk
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                  ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
                  ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    return lib


class LowrankHeadCPU:
    """The head's weights as the kernel reads them: A transposed in fp32 [H, r'] (r' = r rounded up to 16 with
    zero ranks: one broadcast FMA per input feature updates 16 ranks), W [V, H], and B in bf16 blocks of 16
    rows, pairs of ranks interleaved [V / 16, r / 2, 16, 2] (one VDPBF16PS operand per pair, or an AMX tile
    in the VNNI layout), r padded to even."""

    def __init__(self, a_weight: Tensor, b_weight: Tensor, head_weight: Tensor):
        self.r, self.H = a_weight.shape
        self.V = b_weight.shape[0]
        self.dtype = head_weight.dtype
        nb, r2 = -(-self.V // LANES), self.r + self.r % 2
        b = torch.zeros(nb * LANES, r2, dtype=torch.bfloat16)
        b[: self.V, : self.r] = b_weight.detach()
        self.B = b.view(nb, LANES, r2 // 2, 2).transpose(1, 2).contiguous()      # [nb, r / 2, 16, 2]
        self.rp = -(-r2 // LANES) * LANES
        self.At = torch.zeros(self.H, self.rp)
        self.At[:, : self.r] = a_weight.detach().to(self.dtype).float().T      # the model's values, exactly
        self.r = r2                                        # an odd rank: a zero rank pairs with the last one
        self.W = head_weight.detach().contiguous()

    @classmethod
    def create(cls, a_weight: Tensor, b_weight: Tensor, head_weight: Tensor) -> "LowrankHeadCPU | None":
        """The head for CPU weights in bf16 or fp32 where the kernel is built, else None."""
        if head_weight.device.type != "cpu" or head_weight.dtype not in (torch.bfloat16, torch.float32) \
                or library() is None:
            return None
        return cls(a_weight, b_weight, head_weight)

    def __call__(self, hn: Tensor, K: int, k: int) -> tuple[Tensor, Tensor]:
        """(log-probabilities [N, k], rows of W [N, k]) of the k best of each row's K candidates: the softmax
        runs over the K exact logits of the K best low-rank scores, as `lowrank_topk_reference` + top-k."""
        if not 1 <= k <= K <= min(self.V, MAX_TOPK):
            raise ValueError(f"low-rank head: need 1 <= k ({k}) <= K ({K}) <= {min(self.V, MAX_TOPK)}")
        hn = hn.reshape(-1, self.H)
        if hn.dtype not in (torch.bfloat16, torch.float32):
            hn = hn.float()
        hn = hn.contiguous()
        N = hn.shape[0]
        logp = torch.empty(N, k, dtype=torch.float32)
        idx = torch.empty(N, k, dtype=torch.long)
        rc = library().lowrank_topk(hn.data_ptr(), int(hn.dtype == torch.bfloat16), N, self.H, self.At.data_ptr(),
                                    self.rp, self.B.data_ptr(), self.W.data_ptr(), int(self.dtype == torch.bfloat16),
                                    self.r, self.V, K, k, logp.data_ptr(), idx.data_ptr())
        if rc != 0:
            raise MemoryError("low-rank head: workspace allocation failed")
        return logp, idx
