"""The low-rank candidate head: top-K of (h @ A) @ B over the vocabulary, exact logits for those K rows only.

The full head reads all of W [V, H] per draft level; the low-rank scorer reads B [r, V] plus the K rows of
W that it selects. This module holds the semantics (the PyTorch twin) and the dispatcher; the Triton
kernels live in `lowrank_head_triton`, imported only when a CUDA tensor needs them.
"""

import torch
from torch import Tensor

from reference_eagle4.kernels._triton import has_triton


def lowrank_topk_reference(hn: Tensor, A: Tensor, B: Tensor, W: Tensor, K: int) -> tuple[Tensor, Tensor]:
    """The PyTorch twin: (exact fp32 logits [N, K], vocabulary indices [N, K]), best low-rank score first.

    hn [N, H] normed hidden rows, A [H, r], B [r, V], W [V, H] the full head. Ties in the low-rank score
    may order differently from the kernel.
    """
    u = (hn @ A).to(B.dtype)
    idx = (u.float() @ B.float()).topk(K, dim=-1).indices
    exact = torch.bmm(W[idx].float(), hn.float().unsqueeze(-1)).squeeze(-1)
    return exact, idx


def lowrank_topk(hn: Tensor, A: Tensor, B: Tensor, W: Tensor, K: int) -> tuple[Tensor, Tensor]:
    """(exact fp32 logits [N, K], indices [N, K]) of the K best rows of (hn @ A) @ B, best first.

    hn [N, H], A [H, r], B [r, V], W [V, H]. Triton on CUDA, the PyTorch twin elsewhere.
    """
    if hn.is_cuda and has_triton():
        from reference_eagle4.kernels.lowrank_head_triton import lowrank_topk_triton
        return lowrank_topk_triton(hn, A, B, W, K)
    return lowrank_topk_reference(hn, A, B, W, K)
