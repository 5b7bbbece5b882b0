"""A Llama-family target in plain PyTorch over a preallocated, ragged, tree-capable KV cache.

One `forward` serves prefill, vanilla decoding and tree verification: every sequence in the batch appends
up to T tokens after its own cached length, and a per-sequence T x T mask says which of the new tokens
each new token may see (causal for prefill and chains, ancestors-only for trees). The prefix is always
visible. Positions are given explicitly (context length + tree depth).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from reference_eagle4.kernels import amx_linear, layer_ops
from reference_eagle4.kernels.exact_attention_cpu import exact_attention_cpu, library, supports


@dataclass(frozen=True)
class ModelArgs:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate: int
    vocab_size: int
    norm_eps: float
    rope_theta: float
    max_position: int
    tie_embeddings: bool

    @classmethod
    def from_hf_config(cls, path: str | Path) -> "ModelArgs":
        cfg = json.loads(Path(path).read_text())
        rope = cfg.get("rope_parameters") or {}
        n_heads = cfg["num_attention_heads"]
        return cls(
            dim=cfg["hidden_size"],
            n_layers=cfg["num_hidden_layers"],
            n_heads=n_heads,
            n_kv_heads=cfg.get("num_key_value_heads", n_heads),
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // n_heads,
            intermediate=cfg["intermediate_size"],
            vocab_size=cfg["vocab_size"],
            norm_eps=cfg.get("rms_norm_eps", 1e-5),
            rope_theta=rope.get("rope_theta", cfg.get("rope_theta", 10000.0)),
            max_position=cfg.get("max_position_embeddings", 2048),
            tie_embeddings=cfg.get("tie_word_embeddings", False),
        )

    @property
    def eagle_layers(self) -> tuple[int, int, int]:
        """Layers whose *input* hidden states EAGLE-3 style drafters fuse (low, mid, high); shallow models
        (under 8 layers), where EAGLE-3's (2, N//2, N-3) would repeat a layer, use (1, N//2, N-1)."""
        n = self.n_layers
        return (2, n // 2, n - 3) if n >= 8 else (1, n // 2, n - 1)


class KVCache:
    """Keys and values for `slots` sequences, each with its own length, in one tensor per kind.

    Layout [layer, slot, kv_head, position, head_dim] keeps a slot's rows contiguous per layer, so a
    batch of slots 0..B-1 is a view and the accepted-path compaction is one indexed copy for all layers.
    """

    def __init__(self, args: ModelArgs, slots: int, max_len: int, dtype: torch.dtype, device: str = "cpu"):
        shape = (args.n_layers, slots, args.n_kv_heads, max_len, args.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.lengths = torch.zeros(slots, dtype=torch.long, device=device)
        self.max_len = max_len

    def keep(self, slot: int, src: Tensor) -> None:
        """Keep the new tokens at offsets `src` (relative to the slot's length) in order; drop the rest."""
        start = int(self.lengths[slot])
        n = src.numel()
        if not torch.equal(src, torch.arange(n, device=src.device)):
            dst = slice(start, start + n)
            idx = start + src
            self.k[:, slot, :, dst] = self.k[:, slot, :, idx]
            self.v[:, slot, :, dst] = self.v[:, slot, :, idx]
        self.lengths[slot] = start + n

    def load(self, slot: int, k: Tensor, v: Tensor, n: int) -> None:
        """Start a slot with the first n positions of saved keys/values ([layer, kv_head, position, dim])."""
        self.k[:, slot, :, :n] = k[:, :, :n]
        self.v[:, slot, :, :n] = v[:, :, :n]
        self.lengths[slot] = n

    def rows(self, slot: int) -> tuple[Tensor, Tensor]:
        """Views of a slot's cached keys and values, [layer, kv_head, position, dim]."""
        n = int(self.lengths[slot])
        return self.k[:, slot, :, :n], self.v[:, slot, :, :n]

    def move(self, src_slot: int, dst_slot: int) -> None:
        """Move a sequence to another slot, so that live sequences stay in slots 0..B-1."""
        n = int(self.lengths[src_slot])
        self.k[:, dst_slot, :, :n] = self.k[:, src_slot, :, :n]
        self.v[:, dst_slot, :, :n] = self.v[:, src_slot, :, :n]
        self.lengths[dst_slot] = n
        self.lengths[src_slot] = 0


def rope_tables(args: ModelArgs, device: str = "cpu") -> tuple[Tensor, Tensor]:
    """cos/sin for every position, computed in float64 and with an explicit device (safe under meta init)."""
    steps = torch.arange(0, args.head_dim, 2, dtype=torch.float64, device=device)
    inv = 1.0 / (args.rope_theta ** (steps / args.head_dim))
    ang = torch.outer(torch.arange(args.max_position, dtype=torch.float64, device=device), inv)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().float(), ang.sin().float()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """HF Llama convention (rotate halves); x [B, H, T, D], cos/sin [B, 1, T, D]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return layer_ops.rms_norm(x, self.weight, self.eps)


class Block(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        q_out = args.n_heads * args.head_dim
        kv_out = args.n_kv_heads * args.head_dim
        self.attn_norm = RMSNorm(args.dim, args.norm_eps)
        self.qkv = nn.Linear(args.dim, q_out + 2 * kv_out, bias=False)
        self.o = nn.Linear(q_out, args.dim, bias=False)
        self.mlp_norm = RMSNorm(args.dim, args.norm_eps)
        self.gate_up = nn.Linear(args.dim, 2 * args.intermediate, bias=False)
        self.down = nn.Linear(args.intermediate, args.dim, bias=False)

    def forward(self, x: Tensor, cache_k: Tensor, cache_v: Tensor, store: Callable[[Tensor, Tensor, Tensor], Tensor],
                attend: Callable[[Tensor, Tensor, Tensor], Tensor], packed: "Packing | None" = None,
                exact: bool = True) -> Tensor:
        """x: [B, T, dim], or [N, dim] holding only the real tokens when `packed` (attention unpacks).
        store(qkv, cache_k, cache_v) rotates this step's queries and keys, writes keys and values to the
        cache and returns the queries [B, H, T, D] (`Transformer._rope_store`)."""
        qkv = linear(self.qkv, self.attn_norm(x), exact)
        if packed is not None:
            qkv = packed.unpack(qkv, reuse=True)
        q = store(qkv, cache_k, cache_v)
        B, _, T, _ = q.shape
        out = attend(q, cache_k, cache_v).transpose(1, 2).reshape(B, T, -1)
        x, h = layer_ops.add_rms_norm(x, linear(self.o, out if packed is None else packed.pack(out), exact),
                                      self.mlp_norm.weight, self.mlp_norm.eps)
        return x + linear(self.down, layer_ops.silu_mul(linear(self.gate_up, h, exact)), exact)


class Packing:
    """The real tokens of a ragged step ([B, T] with padding), so matmuls run on N rows instead of B * T.

    A verification step pads every tree to the largest; the linears and the LM head, nearly all of a
    step's time, then pay for the padding too. Packing drops it: only attention sees the [B, T] layout.
    """

    def __init__(self, valid: Tensor):
        self.shape = valid.shape
        self.rows = valid.reshape(-1).nonzero().squeeze(1)
        self._padded: dict[tuple[int, torch.dtype], Tensor] = {}    # reused by `unpack(..., reuse=True)`

    def pack(self, x: Tensor) -> Tensor:
        """[B, T, d] -> [N, d]."""
        return x.reshape(-1, x.shape[-1]).index_select(0, self.rows)

    def unpack(self, x: Tensor, reuse: bool = False) -> Tensor:
        """[N, d] -> [B, T, d] with zeros in the padding. reuse: into one buffer per width for the whole
        step (every layer writes the same rows, so the padding stays zero), for a result consumed before
        the next call, such as a layer's qkv; zeroing a fresh one for each of 30 layers cost ~1 ms a step."""
        B, T = self.shape
        key = (x.shape[-1], x.dtype)
        out = self._padded.get(key) if reuse else None
        if out is None:
            out = x.new_zeros(B * T, x.shape[-1])
            if reuse:
                self._padded[key] = out
        out.index_copy_(0, self.rows, x)
        return out.view(B, T, -1)


class PackedLinear(nn.Module):
    """A frozen linear layer whose weight oneDNN has reordered once for the CPU's matmul kernels.

    Decoding is bound by streaming weights from memory; the blocked layout halves the time of the
    small-row matmuls that dominate a step (see BENCHMARKS.md). Inference only: no autograd.
    """

    ROW_BLOCK = 32
    MIN_ROWS = 4

    def __init__(self, linear: nn.Linear, rows_hint: int = 16):
        super().__init__()
        self.out_features = linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), rows_hint)
        self.tiles = amx_linear.pack(linear.weight)      # None where the AMX kernel does not run (rowwise)

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")

    def rowwise(self, x: Tensor) -> Tensor:
        """The product with every row computed as if alone, so that verifying a tree computes each node
        exactly as vanilla decoding does. oneDNN picks kernels by row count, and two of its switches round
        rows differently (checked row by row in tests/reference_eagle4/test_model.py): a single row takes
        a vector kernel (fp32 on every CPU seen; bf16 on AVX512-BF16 without AMX, in the MLP down
        projection), and bf16 calls of more than 32 rows take AMX kernels where the CPU has them. Between
        2 and 32 rows every CPU seen computes each row alike, so calls go in blocks of at most 32 and a
        block of fewer than MIN_ROWS rows is padded up to MIN_ROWS: one row must not run alone, and oneDNN's
        kernels for 2 or 3 rows are slower than its 4-row one (`linear_bench`, Zen 4: the MLP's gate/up
        projection over 30 layers 8.7 ms at 2 rows, 5.9 ms at 4; BENCHMARKS.md session 12), so a decoding
        step pays for 4. On a CPU with AMX one call of `amx_linear` takes any number of rows instead, each
        row alike, streaming the weights once (blocks of 32 streamed them once per block)."""
        if self.tiles is not None:
            out = amx_linear.matmul(x, self.tiles, self.out_features)
            if out is not None:
                return out
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] <= self.ROW_BLOCK:       # a decoding or verification step: one call, no split
            out = self._block(rows)
        else:
            out = torch.cat([self._block(b) for b in rows.split(self.ROW_BLOCK)])
        return out.view(*x.shape[:-1], self.out_features)

    def _block(self, rows: Tensor) -> Tensor:
        n = rows.shape[0]
        if n >= self.MIN_ROWS:
            return self(rows)
        return self(torch.cat((rows, rows.new_zeros(self.MIN_ROWS - n, rows.shape[1]))))[:n]


def linear(layer: nn.Module, x: Tensor, exact: bool) -> Tensor:
    """`layer(x)`, row by row as if alone when `exact` (PackedLinear.rowwise; other layers already are)."""
    return layer.rowwise(x) if exact and isinstance(layer, PackedLinear) else layer(x)


def packed(linear: nn.Linear) -> nn.Module:
    """`linear` prepacked for oneDNN, or unchanged where this CPU's oneDNN cannot reorder its dtype (bf16
    needs AVX512-BF16 / AVX-NE-CONVERT): plain F.linear is then the fastest path there is."""
    if not can_pack(linear.weight.dtype):
        return linear
    return PackedLinear(linear)


class Int8Linear(nn.Module):
    """A frozen linear layer with int8 weights (one scale per output row) for calls of up to INT8_ROWS rows,
    computed by `aten._weight_int8pack_mm` against activations of the original dtype; larger calls take the
    prepacked weights of the original dtype (`packed`).

    For drafters only: a drafter's linears run right after a target forward has pushed their weights out of
    the caches, so a call of a few rows is bound by streaming weights, and int8 halves the bytes. But
    `_weight_int8pack_mm`'s time grows with the rows: measured in place (each call after a target forward,
    BENCHMARKS.md session 22) the layer's five linears took 0.47 / 0.58 / 0.88 / 1.54 ms at 1 / 4 / 6 / 16
    rows in int8 against a flat ~0.6 ms prepacked, and the catch-up's two over a new prompt's 256 rows 6.8
    against 0.9 ms. Outputs only propose tokens, which verification accepts or rejects, so rounding the
    weights can change acceptance but never the output."""

    INT8_ROWS = 4

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(1).clamp(min=torch.finfo(torch.float32).tiny) / 127.0
        self.out_features = linear.out_features
        self.register_buffer("weight_q", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(linear.weight.dtype))
        self.wide = packed(linear)

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] > self.INT8_ROWS:
            # in blocks of at most 32 rows: oneDNN builds a kernel for each new row count (4-7 ms the first
            # time, BENCHMARKS.md session 22), and a catch-up's row count is new at nearly every step
            return self.wide.rowwise(x) if isinstance(self.wide, PackedLinear) else self.wide(x)
        out = torch.ops.aten._weight_int8pack_mm(rows.contiguous(), self.weight_q, self.scale)
        return out.view(*x.shape[:-1], self.out_features)


_INT8: dict[tuple[torch.dtype, str], bool] = {}


def int8_linear(linear: nn.Linear) -> nn.Module:
    """`linear` as an Int8Linear for bf16 weights where this build of torch runs int8 weights on this device;
    else prepacked (`packed`). Against fp32 activations `_weight_int8pack_mm` is no help: 2x slower than
    the prepacked fp32 weights at one row (`python -m reference_eagle4.linear_bench --int8`, BENCHMARKS.md
    session 22)."""
    key = (linear.weight.dtype, linear.weight.device.type)
    if linear.weight.dtype != torch.bfloat16:
        return packed(linear)
    if key not in _INT8:
        try:
            probe = torch.zeros(2, 32, dtype=linear.weight.dtype, device=linear.weight.device)
            torch.ops.aten._weight_int8pack_mm(probe, torch.zeros(32, 32, dtype=torch.int8, device=probe.device),
                                               torch.ones(32, dtype=probe.dtype, device=probe.device))
            _INT8[key] = True
        except (RuntimeError, NotImplementedError):
            _INT8[key] = False
    return Int8Linear(linear) if _INT8[key] else packed(linear)


_PACKABLE: dict[torch.dtype, bool] = {}


def can_pack(dtype: torch.dtype) -> bool:
    if dtype not in _PACKABLE:
        try:
            torch.ops.mkldnn._reorder_linear_weight(torch.zeros(8, 8, dtype=dtype), 16)
            _PACKABLE[dtype] = True
        except RuntimeError:
            _PACKABLE[dtype] = False
    return _PACKABLE[dtype]


def pack_linears(model: nn.Module) -> nn.Module:
    """Swap every nn.Linear for a PackedLinear where oneDNN can run it (CPU); a no-op elsewhere."""
    if not torch.backends.mkldnn.is_available() or next(model.parameters()).device.type != "cpu":
        return model
    for name, child in model.named_children():
        if isinstance(child, nn.Linear) and child.bias is None:
            setattr(model, name, packed(child))
        else:
            pack_linears(child)
    return model


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.embed = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(Block(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.lm_head = nn.Linear(args.dim, args.vocab_size, bias=False)
        if args.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        cos, sin = rope_tables(args)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        # "auto": the Triton tree-attention kernel for steps of <= 64 new tokens on CUDA in fp16/bf16, SDPA over a
        # dense mask otherwise; "triton" forces the kernel (Triton's interpreter runs it on CPU: tests);
        # "torch" never uses it
        self.attention = "auto"

    @property
    def exact_attention(self) -> str:
        """What exact steps attend with: "kernel" (CUDA: Triton or SDPA; CPU: `exact_attention_cpu`) or
        "float64" (`float64_attention`, a CPU where the C kernel cannot be built or take this head size)."""
        p = self.embed.weight
        wide = p.device.type == "cpu" and self.attention != "triton" and (
            library() is None or not supports(self.args.head_dim))
        return "float64" if wide else "kernel"

    def new_cache(self, slots: int, max_len: int) -> KVCache:
        """The cache holds the model dtype, or float64 where exact steps run `float64_attention` (the dtype
        it reads; the keys and values are still the model dtype's values, stored exactly)."""
        p = self.embed.weight
        wide = self.exact_attention == "float64"
        return KVCache(self.args, slots, max_len, torch.float64 if wide else p.dtype, str(p.device))

    def forward(self, tokens: Tensor, cache: KVCache, tree_mask: Tensor | None = None,
                depths: Tensor | None = None, capture: tuple[int, ...] = (),
                logits_rows: Tensor | None = None, first_slot: int = 0,
                valid: Tensor | None = None, exact: bool = True) -> tuple[Tensor, list[Tensor]]:
        """Append `tokens` [B, T] after the cached tokens of slots first_slot..first_slot+B-1.

        tree_mask [B, T, T] (bool, row i = the new tokens token i sees) defaults to causal; depths [B, T]
        (offset of each token from the slot's length) default to 0..T-1. Padding rows of a shorter
        sequence need only see themselves. The cache lengths are NOT advanced: the caller keeps the
        accepted tokens with `cache.keep`. `capture` lists layers whose input hidden states are returned.
        `logits_rows` ([B, T] bool) limits the LM head to the rows that are needed (e.g. prefill's last).
        `valid` ([B, T] bool) marks the real tokens of a padded batch: the matmuls skip the rest, and the
        logits come back for the real tokens only, [N, V] in row-major order (not with `logits_rows`).
        `exact` (CPU): each token's results are exactly those it would get alone, as decoding and
        verification need (`exact_attention_cpu`, `PackedLinear.rowwise`); False takes the fastest kernels, for
        a computation every method does identically (a prompt's prefill).
        """
        B, T = tokens.shape
        dev = tokens.device
        lens = cache.lengths[first_slot: first_slot + B]
        steps = torch.arange(T, device=dev)
        if depths is None:
            depths = steps.expand(B, T)
        if tree_mask is None:
            tree_mask = torch.ones(T, T, dtype=torch.bool, device=dev).tril().expand(B, T, T)
        kv_len = int(lens.max()) + T
        if kv_len > cache.max_len:
            raise ValueError(f"KV cache overflow: {kv_len} > {cache.max_len} positions")
        store = self._rope_store(lens, (lens[:, None] + depths).contiguous(), cache)
        attend = self._attention(lens, tree_mask, kv_len, exact, cache.k.dtype, valid)

        packed = Packing(valid) if valid is not None else None
        x = self.embed(tokens if packed is None else tokens.reshape(-1)[packed.rows])
        hidden = []
        for i, layer in enumerate(self.layers):
            if i in capture:
                hidden.append(x if packed is None else packed.unpack(x))
            x = layer(x, cache.k[i, first_slot:], cache.v[i, first_slot:], store, attend, packed, exact)
        if self.args.n_layers in capture:
            hidden.append(x if packed is None else packed.unpack(x))
        x = self.norm(x)
        if logits_rows is not None:
            x = x[logits_rows]
        return linear(self.lm_head, x, exact), hidden

    def _rope_store(self, lens: Tensor, pos: Tensor, cache: KVCache) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
        """store(qkv, cache_k, cache_v) -> rotated queries [B, H, T, D] for this step, keys rotated and values
        written at each slot's length + t: `layer_ops.rope_store` where it runs (one C pass, fp32 tables),
        else PyTorch over the tables in the model dtype. One choice per step, the same for every layer."""
        a = self.args
        B, T = pos.shape
        heads = (a.n_heads, a.n_kv_heads, a.head_dim)
        w = self.embed.weight
        if layer_ops.runs_here(w, cache.k, cache.v) and self.rope_cos.dtype == torch.float32:
            return lambda qkv, k, v: layer_ops.rope_store(qkv, pos, self.rope_cos, self.rope_sin, heads, k, v, lens)
        cos = self.rope_cos[pos].unsqueeze(1).to(w.dtype)
        sin = self.rope_sin[pos].unsqueeze(1).to(w.dtype)
        rows = torch.arange(B, device=pos.device)[:, None].expand(B, T)
        cols = lens[:, None] + torch.arange(T, device=pos.device)

        def store(qkv: Tensor, cache_k: Tensor, cache_v: Tensor) -> Tensor:
            q, k, v = qkv.split([a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim, a.n_kv_heads * a.head_dim], -1)
            q = apply_rope(q.view(B, T, a.n_heads, a.head_dim).transpose(1, 2), cos, sin)
            k = apply_rope(k.view(B, T, a.n_kv_heads, a.head_dim).transpose(1, 2), cos, sin)
            cache_k[rows, :, cols] = k.transpose(1, 2).to(cache_k.dtype)
            cache_v[rows, :, cols] = v.view(B, T, a.n_kv_heads, a.head_dim).to(cache_v.dtype)
            return q
        return store

    def _attention(self, lens: Tensor, tree_mask: Tensor, kv_len: int, exact: bool, cache_dtype: torch.dtype,
                   valid: Tensor | None) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
        """attend(q, cache_k, cache_v) for this step: every new token sees its slot's prefix and its tree row.
        An exact step on the CPU runs `exact_attention_cpu`, or `float64_attention` over a float64 cache
        where that kernel could not be built."""
        B, T, _ = tree_mask.shape
        w = self.embed.weight
        kernel = self.attention == "triton" or (
            self.attention == "auto" and w.is_cuda and w.dtype in (torch.float16, torch.bfloat16) and T <= 64)
        if kernel:
            from reference_eagle4.kernels import available
            from reference_eagle4.kernels.tree_attention import pack_tree_mask
            if available() or self.attention == "triton":
                from reference_eagle4.kernels.tree_attention_triton import tree_attention_triton
                bits = pack_tree_mask(tree_mask)
                return lambda q, k, v: tree_attention_triton(q, k, v, lens, bits, kv_len=kv_len)
        if exact and not w.is_cuda and cache_dtype != torch.float64:       # new_cache chose the C kernel
            rows, real = tree_mask.contiguous(), None if valid is None else valid.contiguous()
            return lambda q, k, v: exact_attention_cpu(q, k, v, lens, rows, real)    # skips padding tokens
        mask = visible_keys(lens, tree_mask, kv_len)                                          # [B, T, S]
        if w.is_cuda or not exact:
            return lambda q, k, v: F.scaled_dot_product_attention(
                q, k[:B, :, :kv_len].to(q.dtype), v[:B, :, :kv_len].to(q.dtype), attn_mask=mask.unsqueeze(1),
                enable_gqa=True)
        a = self.args
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
    (the fallback of `exact_attention_cpu`, which gets there by construction, 2-4x faster).

    A tree node's visible keys sit at other cache positions than when vanilla decoding reaches the same
    token (its siblings come between), and the step holds other nodes, sequences and padding. Every
    fp32/bf16 kernel sums in an order that depends on those (vectorised lanes, BLAS blocking, threads),
    and in bf16 the differences flip greedy tokens (SDPA: a quarter to a half of the outputs differed from
    vanilla). In float64 the order costs ~1e-16 relative, far below a bf16 or fp32 rounding step, so the
    rounded result is the same: verification reproduces vanilla decoding exactly in practice.
    q [B, H, T, D]; k, v [B, KV, S, D] float64; bias [B * KV, G * T, S] float64, 0 = visible, -inf = not.
    """
    B, H, T, D = q.shape
    KV, S = k.shape[1], k.shape[2]
    qg = q.double().reshape(B * KV, -1, D)                  # query heads grouped by the key head they share
    s = torch.baddbmm(bias, qg, k.reshape(B * KV, S, D).transpose(1, 2), alpha=D ** -0.5)
    return torch.bmm(s.softmax(-1), v.reshape(B * KV, S, D)).view(B, H, T, D).to(q.dtype)


def load_transformer(folder: str | Path, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Transformer:
    """Build the model from a HF Llama safetensors folder, fusing q/k/v and gate/up into one matmul each."""
    from safetensors.torch import load_file

    folder = Path(folder)
    args = ModelArgs.from_hf_config(folder / "config.json")
    state: dict[str, Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        state.update(load_file(str(f)))
    with torch.device("meta"):
        model = Transformer(args)
    ours: dict[str, Tensor] = {
        "embed.weight": state["model.embed_tokens.weight"],
        "norm.weight": state["model.norm.weight"],
    }
    for i in range(args.n_layers):
        p = f"model.layers.{i}."
        ours[f"layers.{i}.attn_norm.weight"] = state[p + "input_layernorm.weight"]
        ours[f"layers.{i}.mlp_norm.weight"] = state[p + "post_attention_layernorm.weight"]
        ours[f"layers.{i}.qkv.weight"] = torch.cat(
            [state[p + f"self_attn.{n}_proj.weight"] for n in "qkv"])
        ours[f"layers.{i}.o.weight"] = state[p + "self_attn.o_proj.weight"]
        ours[f"layers.{i}.gate_up.weight"] = torch.cat(
            [state[p + "mlp.gate_proj.weight"], state[p + "mlp.up_proj.weight"]])
        ours[f"layers.{i}.down.weight"] = state[p + "mlp.down_proj.weight"]
    if not args.tie_embeddings:
        ours["lm_head.weight"] = state["lm_head.weight"]
    ours = {k: v.to(dtype=dtype, device=device) for k, v in ours.items()}
    model.load_state_dict(ours, strict=False, assign=True)
    if args.tie_embeddings:
        model.lm_head.weight = model.embed.weight
    cos, sin = rope_tables(args, device)
    model.rope_cos, model.rope_sin = cos, sin
    return model.eval().requires_grad_(False)
