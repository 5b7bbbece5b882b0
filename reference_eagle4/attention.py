"""The target's attention backends and the choice among them, once per forward.

Every new token of a step sees its slot's cached prefix and the new tokens its tree-mask row allows
(its ancestors and itself). Four ways compute that:

- `tree_attention_triton`: the Triton kernel over the ragged cache (CUDA, fp16/bf16, up to 64 new
  tokens; Triton's interpreter runs it on the CPU in tests);
- `exact_attention_cpu`: the C kernel that computes each token's attention exactly as if it were alone in
  the step, which exact (decoding and verification) steps on the CPU need;
- `float64_attention`: the same guarantee where the C kernel cannot be built or take the head size;
- PyTorch SDPA over a dense [B, T, S] mask: CUDA without the kernel, and inexact steps (a prompt's prefill).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from reference_eagle4.kernels.exact_attention_cpu import exact_attention_cpu, library, supports

if TYPE_CHECKING:
    from reference_eagle4.model import Transformer, TreeLayout

Attend = Callable[[Tensor, Tensor, Tensor], Tensor]     # (q [B, H, T, D], cache_k, cache_v) -> [B, H, T, D]


def exact_backend(model: "Transformer") -> str:
    """What exact steps attend with: "kernel" (CUDA: Triton or SDPA; CPU: `exact_attention_cpu`) or
    "float64" (`float64_attention`, a CPU where the C kernel cannot be built or take this head size)."""
    on_cpu = model.embed.weight.device.type == "cpu"
    wide = on_cpu and model.attention != "triton" and (library() is None or not supports(model.args.head_dim))
    return "float64" if wide else "kernel"


def step_attention(model: "Transformer", lens: Tensor, tree: "TreeLayout", kv_len: int, exact: bool,
                   cache_dtype: torch.dtype) -> Attend:
    """attend(q, cache_k, cache_v) for one step: every new token sees its slot's prefix (lens [B] cached
    positions) and its tree row. `model.attention` picks: "auto" takes the Triton kernel for steps of up to
    64 new tokens on CUDA in fp16/bf16, "triton" forces it, "torch" never uses it. Otherwise an exact step
    on the CPU runs `exact_attention_cpu`, or `float64_attention` over a float64 cache where that kernel
    could not be built (`Transformer.new_cache` chose the cache's dtype accordingly)."""
    B, T, _ = tree.mask.shape
    w = model.embed.weight
    kernel = model.attention == "triton" or (
        model.attention == "auto" and w.is_cuda and w.dtype in (torch.float16, torch.bfloat16) and T <= 64)
    if kernel:
        from reference_eagle4.kernels import available
        from reference_eagle4.kernels.tree_attention import pack_tree_mask
        if available() or model.attention == "triton":
            from reference_eagle4.kernels.tree_attention_triton import tree_attention_triton
            bits = pack_tree_mask(tree.mask)
            return lambda q, k, v: tree_attention_triton(q, k, v, lens, bits, kv_len=kv_len)
    if exact and not w.is_cuda and cache_dtype != torch.float64:       # new_cache chose the C kernel
        rows, real = tree.mask.contiguous(), None if tree.valid is None else tree.valid.contiguous()
        return lambda q, k, v: exact_attention_cpu(q, k, v, lens, rows, real)    # skips padding tokens
    mask = visible_keys(lens, tree.mask, kv_len)                                          # [B, T, S]
    if w.is_cuda or not exact:
        return lambda q, k, v: F.scaled_dot_product_attention(
            q, k[:B, :, :kv_len].to(q.dtype), v[:B, :, :kv_len].to(q.dtype), attn_mask=mask.unsqueeze(1),
            enable_gqa=True)
    a = model.args
    bias = torch.zeros(B, a.n_kv_heads, a.n_heads // a.n_kv_heads, T, kv_len, dtype=torch.float64)
    bias.masked_fill_(~mask[:, None, None], float("-inf"))
    bias = bias.view(B * a.n_kv_heads, -1, kv_len)
    return lambda q, k, v: float64_attention(q, k[:B, :, :kv_len], v[:B, :, :kv_len], bias)


def visible_keys(lens: Tensor, tree_mask: Tensor, S: int) -> Tensor:
    """[B, T, S] bool: each new token sees its slot's prefix and the new tokens of its tree_mask row."""
    B, T, _ = tree_mask.shape
    rel = torch.arange(S, device=lens.device)[None, :] - lens[:, None]                     # [B, S]
    in_new = (rel >= 0) & (rel < T)
    new_vis = tree_mask.gather(2, rel.clamp(0, T - 1)[:, None, :].expand(B, T, S))
    return (rel < 0)[:, None, :] | (in_new[:, None, :] & new_vis)


def float64_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """Attention computed in float64, so that a token's output does not depend on what else the step holds
    (the fallback of `exact_attention_cpu`, which gets there by construction and faster).

    A tree node's visible keys sit at other cache positions than when vanilla decoding reaches the same
    token (its siblings come between), and the step holds other nodes, sequences and padding. Every
    fp32/bf16 kernel sums in an order that depends on those (vectorised lanes, BLAS blocking, threads),
    and in bf16 the differences flip greedy tokens (SDPA's outputs often differ from vanilla's). In float64
    the order's effect stays far below a bf16 or fp32 rounding step, so the rounded result is the same:
    verification reproduces vanilla decoding exactly in practice.
    q [B, H, T, D]; k, v [B, KV, S, D] float64; bias [B * KV, G * T, S] float64, 0 = visible, -inf = not.
    """
    B, H, T, D = q.shape
    KV, S = k.shape[1], k.shape[2]
    qg = q.double().reshape(B * KV, -1, D)                  # query heads grouped by the key head they share
    s = torch.baddbmm(bias, qg, k.reshape(B * KV, S, D).transpose(1, 2), alpha=D ** -0.5)
    return torch.bmm(s.softmax(-1), v.reshape(B * KV, S, D)).view(B, H, T, D).to(q.dtype)
