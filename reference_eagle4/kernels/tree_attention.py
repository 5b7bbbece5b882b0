"""Attention of up to 64 tree tokens per sequence over the ragged KV cache: semantics, twin, dispatcher.

A verification step appends T <= 64 new tokens after each sequence's cached prefix. Every new token sees
the whole prefix (positions < length) and, among the new tokens, the ones its row of the tree bitmask
names: bit j of `tree_bits[b, i]` (int64) = new token i sees new token j. The new tokens' keys and values
are already written at positions length .. length+T-1 of the cache. A query that sees no key at all
(empty prefix, empty row) gets zeros.

This module holds the semantics (the PyTorch twin) and the dispatcher; the Triton kernel lives in
`tree_attention_triton` and is imported only when a CUDA tensor needs it, so importing the engine never
imports Triton (which fixes interpreter-or-GPU mode at its own import).
"""

import torch
import torch.nn.functional as F
from torch import Tensor

from reference_eagle4.kernels._triton import has_triton

MAX_TREE = 64          # the bitmask is one int64 per row


def pack_tree_mask(mask: Tensor) -> Tensor:
    """bool [B, T, T] (row i = the new tokens token i sees) -> int64 bits [B, T] (bit j = column j)."""
    T = mask.shape[-1]
    if T > MAX_TREE:
        raise ValueError(f"at most {MAX_TREE} tree tokens, got {T}")
    weights = torch.ones((), dtype=torch.int64, device=mask.device) << torch.arange(T, device=mask.device)
    return (mask.to(torch.int64) * weights).sum(-1)     # distinct powers of two: the sum never overflows


def tree_visibility(lengths: Tensor, tree_bits: Tensor, kv_len: int) -> Tensor:
    """bool [B, T, kv_len]: which cache positions each new token sees (prefix + its row of the tree)."""
    T = tree_bits.shape[1]
    pos = torch.arange(kv_len, device=lengths.device)
    rel = pos[None, :] - lengths[:, None].long()                                   # [B, S]
    bit = (tree_bits[:, :, None] >> rel.clamp(0, MAX_TREE - 1)[:, None, :]) & 1    # [B, T, S]
    in_tree = ((rel >= 0) & (rel < T))[:, None, :]
    return (rel < 0)[:, None, :] | (in_tree & (bit != 0))


def tree_attention_reference(q: Tensor, k: Tensor, v: Tensor, lengths: Tensor, tree_bits: Tensor,
                             scale: float | None = None, kv_len: int | None = None) -> Tensor:
    """The PyTorch twin: dense mask + SDPA with GQA. Same arguments and result as `tree_attention`."""
    B, _, T, _ = q.shape
    kv_len = min(int(lengths.max()) + T if kv_len is None else kv_len, k.shape[2])
    vis = tree_visibility(lengths, tree_bits, kv_len)[:, None]                       # [B, 1, T, S]
    out = F.scaled_dot_product_attention(q, k[:B, :, :kv_len], v[:B, :, :kv_len], attn_mask=vis,
                                         scale=scale, enable_gqa=True)
    return out.masked_fill(~vis.any(-1, keepdim=True), 0.0)


def tree_attention(q: Tensor, k: Tensor, v: Tensor, lengths: Tensor, tree_bits: Tensor,
                   scale: float | None = None, kv_len: int | None = None) -> Tensor:
    """Attention of the T new tokens of each sequence over its cache prefix and its tree.

    q [B, n_heads, T, D]; k, v: one layer of the cache [slots >= B, n_kv, max_len, D] (slot b holds
    sequence b) with the new tokens already written; lengths [B] the cached prefix lengths; tree_bits
    [B, T] int64 (`pack_tree_mask`). kv_len, when given, bounds max(lengths) + T and saves a device sync.
    Returns [B, n_heads, T, D] in q's dtype. Triton on CUDA, the PyTorch twin elsewhere.
    """
    if q.is_cuda and has_triton():
        from reference_eagle4.kernels.tree_attention_triton import tree_attention_triton
        return tree_attention_triton(q, k, v, lengths, tree_bits, scale, kv_len)
    return tree_attention_reference(q, k, v, lengths, tree_bits, scale, kv_len)
