"""A Llama-family target in plain PyTorch over a preallocated, ragged, tree-capable KV cache.

One `forward` serves prefill, vanilla decoding and tree verification: every sequence in the batch appends
up to T tokens after its own cached length, and a `TreeLayout` says which of the new tokens each new token
may see (causal for prefill and chains, ancestors-only for trees) and at which position. The prefix is
always visible. `prefill` and `verify` name the engine's two uses.

The linears live in linears.py (prepacked, exact row by row) and the attention backends in attention.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from torch import Tensor, nn

from reference_eagle4.attention import Attend, exact_backend, step_attention
from reference_eagle4.device import on_host, upload
from reference_eagle4.kernels import layer_ops
from reference_eagle4.linears import Packing, linear


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
    qk_norm: bool = False                        # Qwen3: per-head RMSNorm of queries and keys before RoPE
    rope_scaling: dict[str, Any] | None = None   # rope_parameters of a scaled RoPE (rope_frequencies); None: plain

    @classmethod
    def from_hf_config(cls, path: str | Path) -> "ModelArgs":
        """The shape of a Llama-family or Qwen3 target from its config.json (checkpoints.check_target_config
        refuses what the engine does not run, in one line naming the file)."""
        from reference_eagle4.checkpoints import check_target_config, read_json

        cfg = read_json(Path(path))
        check_target_config(cfg, Path(path))
        theta, scaling = rope_parameters(cfg)
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
            rope_theta=theta,
            max_position=cfg.get("max_position_embeddings", 2048),
            tie_embeddings=cfg.get("tie_word_embeddings", False),
            qk_norm=cfg.get("model_type") == "qwen3",
            rope_scaling=scaling,
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
    The lengths live on the host whatever the device: the engine reads them every step, and a read of a
    GPU tensor would wait for the GPU; a forward uploads the ones it needs.
    """

    def __init__(self, args: ModelArgs, slots: int, max_len: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu"):
        shape = (args.n_layers, slots, args.n_kv_heads, max_len, args.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.lengths = on_host(torch.zeros(slots, dtype=torch.long))
        self.max_len = max_len

    def keep(self, slot: int, src: Iterable[int] | Tensor) -> None:
        """Keep the new tokens at offsets `src` (relative to the slot's length) in order; drop the rest. A
        prefix of the new tokens (a chain's accepted drafts, a prefill) stays where it is, uncopied."""
        start = int(self.lengths[slot])
        offsets = src.tolist() if isinstance(src, Tensor) else list(src)
        n = len(offsets)
        if offsets != list(range(n)):
            dst = slice(start, start + n)
            idx = upload([start + i for i in offsets], self.k.device)
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


@dataclass(frozen=True)
class TreeLayout:
    """How a step's T new tokens per sequence relate to each other (padding rows need only see themselves)."""

    mask: Tensor                    # [B, T, T] bool: row i = the new tokens token i sees (its ancestors, itself)
    depths: Tensor                  # [B, T] each token's offset from its slot's cached length (tree depth)
    valid: Tensor | None = None     # [B, T] bool on the host: the real tokens of a padded batch (None: all are)

    @classmethod
    def causal(cls, B: int, T: int, device: torch.device | str = "cpu") -> "TreeLayout":
        """A chain per sequence: token i sees tokens 0..i and sits at depth i (prefill, decoding)."""
        return cls(torch.ones(T, T, dtype=torch.bool, device=device).tril().expand(B, T, T),
                   torch.arange(T, device=device).expand(B, T))


ROPE_TYPES = ("default", "linear", "llama3", "yarn")    # frequencies fixed at load time (no dynamic NTK, LongRoPE)


def rope_parameters(cfg: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling) of an HF config: transformers 5's `rope_parameters`, or `rope_theta` with `rope_scaling`
    as older configs write them; scaling is None for plain RoPE. A RoPE the engine cannot compute (its frequencies
    change with the sequence length, or it rotates part of each head) is a ValueError naming it."""
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    theta = float(params.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
    kind = params.pop("rope_type", params.pop("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(f"rope type {kind!r} is not one the reference engine computes ({', '.join(ROPE_TYPES)})")
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("a partial rotary factor (RoPE over part of each head) is not supported")
    if kind == "default":
        return theta, None
    params.setdefault("original_max_position_embeddings", cfg.get("max_position_embeddings", 2048))
    if kind == "yarn" and params.get("factor") is None:      # DeepSeek-V3 style: the ratio of the two contexts
        params["factor"] = cfg.get("max_position_embeddings", 2048) / params["original_max_position_embeddings"]
    return theta, {"rope_type": kind, **params}


def rope_frequencies(head_dim: int, theta: float, scaling: dict[str, Any] | None,
                     device: str | torch.device = "cpu") -> tuple[Tensor, float]:
    """(inverse frequencies [head_dim / 2] in float64, factor on cos and sin), the definitions transformers'
    modeling_rope_utils computes in float32 (linear, llama3, yarn)."""
    steps = torch.arange(0, head_dim, 2, dtype=torch.float64, device=device)
    inv = 1.0 / (theta ** (steps / head_dim))
    if scaling is None:
        return inv, 1.0
    kind, factor = scaling["rope_type"], float(scaling.get("factor") or 1.0)
    old = float(scaling["original_max_position_embeddings"])
    if kind == "linear":
        return inv / factor, 1.0
    if kind == "llama3":
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - low) / (high - low)
        mid = (1 - smooth) * inv / factor + smooth * inv
        return torch.where(wavelen > old / low, inv / factor, torch.where(wavelen < old / high, inv, mid)), 1.0
    mscale = lambda m: 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0  # noqa: E731
    attention = scaling.get("attention_factor")
    if attention is None:
        m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
        attention = mscale(m) / mscale(m_all) if m and m_all else mscale(1.0)
    dims = [head_dim * math.log(old / (rot * 2 * math.pi)) / (2 * math.log(theta))
            for rot in (scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1)]
    if scaling.get("truncate", True):
        dims = [math.floor(dims[0]), math.ceil(dims[1])]
    lo, hi = max(dims[0], 0), min(dims[1], head_dim - 1)
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float64, device=device) - lo) / (hi - lo or 1e-3)).clamp(0, 1)
    return inv / factor * ramp + inv * (1 - ramp), float(attention)


def rope_cos_sin(head_dim: int, theta: float, scaling: dict[str, Any] | None, max_position: int,
                 device: str | torch.device = "cpu") -> tuple[Tensor, Tensor]:
    """cos/sin [max_position, head_dim] (float32) of every position, computed in float64 with an explicit
    device (safe under meta init); target and drafters share it."""
    inv, attention = rope_frequencies(head_dim, theta, scaling, device)
    ang = torch.outer(torch.arange(max_position, dtype=torch.float64, device=device), inv)
    ang = torch.cat([ang, ang], dim=-1)
    if attention == 1.0:
        return ang.cos().float(), ang.sin().float()
    return (ang.cos() * attention).float(), (ang.sin() * attention).float()


def rope_tables(args: ModelArgs, device: str = "cpu") -> tuple[Tensor, Tensor]:
    """The target's cos/sin tables (rope_cos_sin)."""
    return rope_cos_sin(args.head_dim, args.rope_theta, args.rope_scaling, args.max_position, device)


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


def head_norms(qkv: Tensor, q_norm: RMSNorm, k_norm: RMSNorm, n_heads: int, n_kv_heads: int) -> Tensor:
    """[q | k | v] rows with every query head and every key head RMS-normed (Qwen3's q/k norms, applied before
    RoPE); each row alone, so decoding and verification stay exact."""
    D = q_norm.weight.shape[0]
    q_end, k_end = n_heads * D, (n_heads + n_kv_heads) * D
    lead = qkv.shape[:-1]
    q = q_norm(qkv[..., :q_end].reshape(*lead, n_heads, D)).reshape(*lead, q_end)
    k = k_norm(qkv[..., q_end:k_end].reshape(*lead, n_kv_heads, D)).reshape(*lead, k_end - q_end)
    return torch.cat([q, k, qkv[..., k_end:]], -1)


Store = Callable[[Tensor, Tensor, Tensor], Tensor]   # (qkv, cache_k, cache_v) -> rotated queries [B, H, T, D]


@dataclass(frozen=True)
class StepKernels:
    """What one forward decides once for all its layers."""

    store: Store                    # rotates this step's queries and keys, writes keys and values to the cache
    attend: Attend                  # attention of the queries over the cache (attention.py)
    packing: Packing | None         # a padded step's real tokens: the linears skip the padding
    exact: bool                     # each token's results as if it were alone (PackedLinear.rowwise)


class Block(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        q_out = args.n_heads * args.head_dim
        kv_out = args.n_kv_heads * args.head_dim
        self.attn_norm = RMSNorm(args.dim, args.norm_eps)
        self.qkv = nn.Linear(args.dim, q_out + 2 * kv_out, bias=False)
        self.q_norm = RMSNorm(args.head_dim, args.norm_eps) if args.qk_norm else None
        self.k_norm = RMSNorm(args.head_dim, args.norm_eps) if args.qk_norm else None
        self.o = nn.Linear(q_out, args.dim, bias=False)
        self.mlp_norm = RMSNorm(args.dim, args.norm_eps)
        self.gate_up = nn.Linear(args.dim, 2 * args.intermediate, bias=False)
        self.down = nn.Linear(args.intermediate, args.dim, bias=False)

    def forward(self, x: Tensor, cache_k: Tensor, cache_v: Tensor, step: StepKernels) -> Tensor:
        """x: [B, T, dim], or [N, dim] holding only the real tokens when the step is packed (attention
        unpacks); cache_k, cache_v: this layer's [slot, kv_head, position, head_dim] from the step's first slot."""
        packing, exact = step.packing, step.exact
        qkv = linear(self.qkv, self.attn_norm(x), exact)
        if self.q_norm is not None:
            qkv = head_norms(qkv, self.q_norm, self.k_norm, self.args.n_heads, self.args.n_kv_heads)
        if packing is not None:
            qkv = packing.unpack(qkv, reuse=True)
        q = step.store(qkv, cache_k, cache_v)                                       # [B, H, T, D]
        B, _, T, _ = q.shape
        out = step.attend(q, cache_k, cache_v).transpose(1, 2).reshape(B, T, -1)    # [B, T, H * D]
        x, h = layer_ops.add_rms_norm(x, linear(self.o, out if packing is None else packing.pack(out), exact),
                                      self.mlp_norm.weight, self.mlp_norm.eps)
        return x + linear(self.down, layer_ops.silu_mul(linear(self.gate_up, h, exact)), exact)


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
        self.attention = "auto"         # "auto", "triton" or "torch": see attention.step_attention

    @property
    def exact_attention(self) -> str:
        """What exact steps attend with: "kernel" or "float64" (attention.exact_backend)."""
        return exact_backend(self)

    def new_cache(self, slots: int, max_len: int) -> KVCache:
        """The cache holds the model dtype, or float64 where exact steps run `float64_attention` (the dtype
        it reads; the keys and values are still the model dtype's values, stored exactly)."""
        p = self.embed.weight
        wide = self.exact_attention == "float64"
        return KVCache(self.args, slots, max_len, torch.float64 if wide else p.dtype, str(p.device))

    def prefill(self, tokens: Tensor, cache: KVCache, slot: int,
                capture: tuple[int, ...] = ()) -> tuple[Tensor, list[Tensor]]:
        """A prompt's tokens [1, P] after slot `slot`'s cached ones, with the fastest kernels: every method
        prefills the same prompts alike. Returns the last token's logits [1, V] and the captured layers."""
        last = torch.zeros(tokens.shape, dtype=torch.bool, device=tokens.device)
        last[0, -1] = True
        return self(tokens, cache, first_slot=slot, capture=capture, logits_rows=last, exact=False)

    def verify(self, tokens: Tensor, cache: KVCache, tree: TreeLayout | None = None,
               capture: tuple[int, ...] = ()) -> tuple[Tensor, list[Tensor]]:
        """One exact step of slots 0..B-1: each token [B, T] gets the logits it would get decoded alone."""
        return self(tokens, cache, tree, capture=capture)

    def forward(self, tokens: Tensor, cache: KVCache, tree: TreeLayout | None = None, *, first_slot: int = 0,
                capture: tuple[int, ...] = (), logits_rows: Tensor | None = None,
                exact: bool = True, lens: Tensor | None = None) -> tuple[Tensor, list[Tensor]]:
        """Append `tokens` [B, T] after the cached tokens of slots first_slot..first_slot+B-1.

        `tree` defaults to a causal chain. The cache lengths are NOT advanced: the caller keeps the accepted
        tokens with `cache.keep`. `capture` lists layers whose input hidden states are returned ([B, T, dim]
        each). `logits_rows` ([B, T] bool) limits the LM head to the rows that are needed. With `tree.valid`
        the matmuls skip the padding, and the logits come back for the real tokens only, [N, V] in
        row-major order (not with `logits_rows`). `exact` (CPU): each token's results are exactly those it
        would get alone, as decoding and verification need; False takes the fastest kernels, for a
        computation every method does identically (a prompt's prefill). `lens` ([B] on the device): the
        slots' lengths from a buffer the caller fills, with attention over the whole cache, so that the shapes
        do not depend on them (a CUDA graph replays this forward: cuda_graphs.py); by default the cache's.
        """
        B, T = tokens.shape
        if tree is None:
            tree = TreeLayout.causal(B, T, tokens.device)
        if lens is None:
            host = cache.lengths[first_slot: first_slot + B]                            # [B]
            kv_len = int(host.max()) + T
            if kv_len > cache.max_len:
                raise ValueError(f"KV cache overflow: {kv_len} > {cache.max_len} positions")
            lens = upload(host, tokens.device)
        else:
            kv_len = cache.max_len
        packing = Packing(tree.valid, tokens.device) if tree.valid is not None else None
        step = StepKernels(store=self._rope_store(lens, (lens[:, None] + tree.depths).contiguous(), cache),
                           attend=step_attention(self, lens, tree, kv_len, exact, cache.k.dtype),
                           packing=packing, exact=exact)
        x = self.embed(tokens if packing is None else tokens.reshape(-1)[packing.rows])   # [B, T, dim] / [N, dim]
        hidden = []
        for i, layer in enumerate(self.layers):
            if i in capture:
                hidden.append(x if packing is None else packing.unpack(x))
            x = layer(x, cache.k[i, first_slot:], cache.v[i, first_slot:], step)
        if self.args.n_layers in capture:
            hidden.append(x if packing is None else packing.unpack(x))
        x = self.norm(x)
        if logits_rows is not None:
            x = x[logits_rows]
        return linear(self.lm_head, x, exact), hidden

    def _rope_store(self, lens: Tensor, pos: Tensor, cache: KVCache) -> Store:
        """store(qkv, cache_k, cache_v) -> rotated queries [B, H, T, D] for this step, keys rotated and values
        written at each slot's length + t: `layer_ops.rope_store` where it runs (one C pass, fp32 tables),
        else PyTorch over the tables in the model dtype. pos [B, T]: each token's absolute position."""
        a = self.args
        B, T = pos.shape
        heads = (a.n_heads, a.n_kv_heads, a.head_dim)
        w = self.embed.weight
        if layer_ops.runs_here(w, cache.k, cache.v) and self.rope_cos.dtype == torch.float32:
            return lambda qkv, k, v: layer_ops.rope_store(qkv, pos, self.rope_cos, self.rope_sin, heads, k, v, lens)
        cos = self.rope_cos[pos].unsqueeze(1).to(w.dtype)                              # [B, 1, T, D]
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


def load_transformer(folder: str | Path, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Transformer:
    """Build the model from a HF Llama-family or Qwen3 safetensors folder (one file or shards listed by
    model.safetensors.index.json), fusing q/k/v and gate/up into one matmul each. Tensors are read one at a
    time, so a sharded target never sits in memory twice; a missing file or tensor is a CheckpointError naming it."""
    from reference_eagle4.checkpoints import Tensors

    folder = Path(folder)
    args = ModelArgs.from_hf_config(folder / "config.json")
    tensors = Tensors(folder)
    with torch.device("meta"):
        model = Transformer(args)
    ours: dict[str, Tensor] = {}

    def put(name: str, *sources: str) -> None:
        parts = [tensors.get(s) for s in sources]
        ours[name] = (parts[0] if len(parts) == 1 else torch.cat(parts)).to(dtype=dtype, device=device)

    put("embed.weight", "model.embed_tokens.weight")
    put("norm.weight", "model.norm.weight")
    for i in range(args.n_layers):
        p = f"model.layers.{i}."
        put(f"layers.{i}.attn_norm.weight", p + "input_layernorm.weight")
        put(f"layers.{i}.mlp_norm.weight", p + "post_attention_layernorm.weight")
        put(f"layers.{i}.qkv.weight", *(p + f"self_attn.{n}_proj.weight" for n in "qkv"))
        put(f"layers.{i}.o.weight", p + "self_attn.o_proj.weight")
        put(f"layers.{i}.gate_up.weight", p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight")
        put(f"layers.{i}.down.weight", p + "mlp.down_proj.weight")
        if args.qk_norm:
            put(f"layers.{i}.q_norm.weight", p + "self_attn.q_norm.weight")
            put(f"layers.{i}.k_norm.weight", p + "self_attn.k_norm.weight")
    if not args.tie_embeddings:
        put("lm_head.weight", "lm_head.weight")
    model.load_state_dict(ours, strict=False, assign=True)
    if args.tie_embeddings:
        model.lm_head.weight = model.embed.weight
    cos, sin = rope_tables(args, device)
    model.rope_cos, model.rope_sin = cos, sin
    return model.eval().requires_grad_(False)
