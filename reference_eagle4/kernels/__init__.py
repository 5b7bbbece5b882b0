"""GPU kernels of the reference engine, each with a PyTorch twin that defines what it computes.

`tree_attention` and `lowrank_topk` run the Triton kernel on CUDA tensors when Triton is installed and
the twin otherwise, so callers need no device checks. `python -m reference_eagle4.kernels.bench` checks
and times the kernels on a GPU; `python -m reference_eagle4.kernels.sm90` compiles them for Hopper on any
Linux machine and reports registers and spills.

The CPU's C kernels (`exact_attention.c`, `row_ops.c`, `layer_ops.c`, `lowrank_head.c`,
`drafter_attention.c`, `amx_linear.c`, built on first use by `cpu_build`) are imported from their own modules.
"""

import torch

from reference_eagle4.kernels._triton import has_triton
from reference_eagle4.kernels.lowrank_head import lowrank_topk, lowrank_topk_reference
from reference_eagle4.kernels.tree_attention import pack_tree_mask, tree_attention, tree_attention_reference


def available() -> bool:
    """True where the dispatchers run the Triton kernels: Triton imports and a CUDA device is present."""
    return has_triton() and torch.cuda.is_available()


__all__ = ["available", "lowrank_topk", "lowrank_topk_reference", "pack_tree_mask", "tree_attention",
           "tree_attention_reference"]
