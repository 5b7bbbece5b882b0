"""The EAGLE-4 drafter: an EAGLE-3 layer with sliding-window attention and a low-rank candidate head.

    h      = fc(cat[h_low, h_mid, h_high])            3H_t -> H, no bias (skipped for depth >= 1 inputs)
    x      = cat[input_norm(embed(x_{t+1})), hidden_norm(h)]                      2H, embedding first
    h      = h + o(Attn(q/k/v(x)))         GQA + RoPE; a query at position p sees keys at (p - W, p]
    h      = h + down(silu(gate(post_norm(h))) * up(post_norm(h)))       pre-norm h feeds the next depth
    logits = norm(h) @ lm_head.T  -- over K candidates only:
             scores = (norm(h) @ A) @ B  (rank r), keep the top K, exact logits for those K rows,
             draft probabilities = softmax over the K exact logits           (`head="full"`: all rows)

The embedding and lm_head are the target's (shared at run time, never stored in the checkpoint). The
low-rank factors start from a truncated SVD of the target's lm_head and are trained. The same class loads
EAGLE-3 checkpoints in the layout vLLM 0.33.0 loads (llama_eagle3.py, qwen3_eagle3.py; SafeAILab / SpecForge key
names): their own lm_head over a `d2t` draft vocabulary, and where the checkpoint has them a Qwen3 layer's
per-head q/k norms, its own embedding table (vLLM then keeps it rather than the target's) and
`norm_before_residual` (the residual is hidden_norm(h) rather than h).

File layout (model.safetensors, EAGLE-3 key names plus ours):
    fc.weight, midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight,
    midlayer.self_attn.{q,k,v,o}_proj.weight, midlayer.mlp.{gate,up,down}_proj.weight, norm.weight,
    lowrank.A [H, r], lowrank.B [r, V_draft]        (EAGLE-4)
    lm_head.weight [V_draft, H], d2t [V_draft] (offsets: target = i + d2t[i]), t2d [V] bool   (EAGLE-3)
    midlayer.self_attn.{q,k}_norm.weight [head_dim], embed_tokens.weight [V, H]            (where EAGLE-3 has them)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from reference_eagle4.checkpoints import EAGLE3_QWEN3, CheckpointError
from reference_eagle4.kernels import drafter_attention, layer_ops, row_ops
from reference_eagle4.kernels.lowrank_head_cpu import LowrankHeadCPU
from reference_eagle4.linears import int8_linear, packed
from reference_eagle4.model import ModelArgs, RMSNorm, apply_rope, head_norms, rope_parameters
from reference_eagle4.model import rope_cos_sin as rope_table

HEADS = ("lowrank", "full")


@dataclass(frozen=True)
class LayerShape:
    """The layer geometry every drafter config starts with (HF key names)."""
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int                              # the target's vocabulary
    target_hidden_size: int


@dataclass(frozen=True)
class Eagle4Config(LayerShape):
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 8192
    capture_layers: tuple[int, ...] = (2, 15, 27)   # target layers whose *input* hidden states are fused
    window: int | None = 256                     # sliding-window attention span; None = full attention
    head: str = "lowrank"                        # "lowrank" | "full"
    rank: int = 64                               # r of the low-rank scorer
    topk_candidates: int = 64                    # K rows scored exactly
    draft_vocab_size: int | None = None          # EAGLE-3 draft vocabulary (d2t); None = the target's
    own_lm_head: bool = False                    # EAGLE-3 checkpoints carry their lm_head
    kind: str = "eagle4"
    rope_scaling: dict[str, Any] | None = None   # model.rope_parameters' scaling (None: plain RoPE)
    qk_norm: bool = False                        # per-head q/k RMSNorm before RoPE (a Qwen3 EAGLE-3 layer)
    own_embed: bool = False                      # the checkpoint's embedding table instead of the target's
    norm_before_residual: bool = False           # EAGLE-3's residual = hidden_norm(h) (vLLM llama_eagle3.py)

    @classmethod
    def for_target(cls, args: ModelArgs, **overrides: Any) -> "Eagle4Config":
        """A drafter shaped like one layer of the target (GQA, head_dim, RoPE) fusing its EAGLE layers."""
        return replace(cls(**target_shape(args)), **overrides)

    @property
    def draft_vocab(self) -> int:
        return self.draft_vocab_size or self.vocab_size

    def validate(self) -> None:
        if self.head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {self.head!r}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"window must be >= 1 or None (full attention), got {self.window}")
        if self.rank < 1 or self.topk_candidates < 1:
            raise ValueError("rank and topk_candidates must be >= 1")

    # -- config.json (HF-like keys, so EAGLE-3 configs read the same way) ----------------------------------
    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["capture_layers"] = list(self.capture_layers)
        return {"architectures": ["Eagle4Drafter"], "model_type": "eagle4", **d}

    @classmethod
    def from_json(cls, cfg: dict[str, Any]) -> "Eagle4Config":
        """Our own config.json, or an EAGLE-3 one (LlamaForCausalLMEagle3 / SpecForge)."""
        if cfg.get("model_type") == "eagle4":
            known = {f.name for f in fields(cls)}
            kw = {k: v for k, v in cfg.items() if k in known}
            kw["capture_layers"] = tuple(kw.get("capture_layers", (2, 15, 27)))
            return cls(**kw)
        n_heads = cfg["num_attention_heads"]
        hidden = cfg["hidden_size"]
        theta, scaling = rope_parameters(cfg)
        eagle = cfg.get("eagle_config") or {}
        layers = eagle.get("eagle_aux_hidden_state_layer_ids")
        n_target = cfg.get("target_num_hidden_layers") or cfg.get("num_target_layers")
        if cfg.get("eagle_aux_hidden_state_layer_ids"):
            # vLLM (gpu_model_runner.py, llama.py) reads the top-level list first, as ids of captured layer inputs
            capture = tuple(int(i) for i in cfg["eagle_aux_hidden_state_layer_ids"])
        elif layers is not None:
            # SGLang / SpecForge list layer-*output* ids; we capture layer inputs: input of i+1 = output of i
            capture = tuple(int(i) + 1 for i in layers)
        elif n_target:
            capture = (2, n_target // 2, n_target - 3)
        else:
            capture = ()                              # unknown: the proposer fills it from the target
        draft_vocab = cfg.get("draft_vocab_size")
        vocab = cfg["vocab_size"]
        return cls(
            hidden_size=hidden, num_attention_heads=n_heads,
            num_key_value_heads=cfg.get("num_key_value_heads", n_heads),
            head_dim=cfg.get("head_dim") or hidden // n_heads, intermediate_size=cfg["intermediate_size"],
            vocab_size=vocab, target_hidden_size=cfg.get("target_hidden_size") or hidden,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-5), rope_theta=theta, rope_scaling=scaling,
            max_position_embeddings=cfg.get("max_position_embeddings", 8192), capture_layers=capture,
            window=None, head="full", draft_vocab_size=draft_vocab if draft_vocab != vocab else None,
            own_lm_head=True, kind="eagle3", qk_norm=any(a in EAGLE3_QWEN3 for a in cfg.get("architectures") or ()),
            norm_before_residual=bool(cfg.get("norm_before_residual", False)))


def target_shape(args: ModelArgs) -> dict[str, Any]:
    """Config fields of a drafter whose layers are shaped like the target's (GQA, head_dim, RoPE, norms)."""
    return dict(hidden_size=args.dim, num_attention_heads=args.n_heads, num_key_value_heads=args.n_kv_heads,
                head_dim=args.head_dim, intermediate_size=args.intermediate, vocab_size=args.vocab_size,
                target_hidden_size=args.dim, rms_norm_eps=args.norm_eps, rope_theta=args.rope_theta,
                rope_scaling=args.rope_scaling, max_position_embeddings=args.max_position,
                capture_layers=tuple(args.eagle_layers))


def rope_cos_sin(cfg: Eagle4Config, device: str | torch.device = "cpu") -> tuple[Tensor, Tensor]:
    """A drafter's cos/sin tables (model.rope_cos_sin over its own RoPE settings)."""
    return rope_table(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, cfg.max_position_embeddings, device)


def fit_rope(drafter: nn.Module, max_position: int) -> None:
    """Lengthen a drafter's RoPE tables to the target's context where its checkpoint says less, as vLLM 0.33.0 raises
    a draft's max_position_embeddings to the target's (config/speculative.py,
    _maybe_override_draft_max_position_embeddings: 2048 for the Llama-3.1-8B EAGLE-3 drafter); the frequencies do
    not depend on the length (rope_parameters fixes original_max_position_embeddings when it reads the config)."""
    cfg = drafter.cfg
    if cfg.max_position_embeddings < max_position:
        drafter.cfg = replace(cfg, max_position_embeddings=max_position)
        drafter.rope_cos, drafter.rope_sin = rope_cos_sin(drafter.cfg, drafter.rope_cos.device)


def lowrank_from_svd(weight: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """A [H, r], B [r, V] with (h @ A) @ B = the best rank-r approximation of h @ weight.T (weight [V, H])."""
    w = weight.detach().float()
    u, s, vh = torch.linalg.svd(w, full_matrices=False)     # w = u s vh, u [V, H], vh [H, H]
    r = min(rank, s.numel())
    root = s[:r].sqrt()
    a = vh[:r].T * root                                     # [H, r]
    b = (u[:, :r] * root).T                                 # [r, V]
    if r < rank:                                            # rank above H: pad with zeros (exact anyway)
        a = torch.cat([a, a.new_zeros(a.shape[0], rank - r)], 1)
        b = torch.cat([b, b.new_zeros(rank - r, b.shape[1])], 0)
    return a.contiguous(), b.contiguous()


class Eagle4Drafter(nn.Module):
    """Weights and the per-piece forward functions; the proposer and the trainer compose them."""

    def __init__(self, cfg: Eagle4Config):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        H, hd = cfg.hidden_size, cfg.head_dim
        nq, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.fc = nn.Linear(len(cfg.capture_layers or (0, 0, 0)) * cfg.target_hidden_size, H, bias=False)
        self.input_norm = RMSNorm(H, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(H, cfg.rms_norm_eps)
        self.qkv = nn.Linear(2 * H, (nq + 2 * nkv) * hd, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.o = nn.Linear(nq * hd, H, bias=False)
        self.post_norm = RMSNorm(H, cfg.rms_norm_eps)
        self.gate_up = nn.Linear(H, 2 * cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, H, bias=False)
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        Vd = cfg.draft_vocab
        # low-rank scorer as two linears (so they pack like any other): scores = lr_b(lr_a(h))
        self.lr_a = nn.Linear(H, cfg.rank, bias=False)         # weight = A.T [r, H]
        self.lr_b = nn.Linear(cfg.rank, Vd, bias=False)        # weight = B.T [V_draft, r]
        self.lm_head = nn.Linear(H, Vd, bias=False) if cfg.own_lm_head else None
        self.embed_tokens = nn.Embedding(cfg.vocab_size, H) if cfg.own_embed else None
        # draft index -> target token id (absolute; converted from EAGLE-3 offsets on load)
        self.register_buffer("d2t", torch.arange(Vd) if cfg.draft_vocab_size else None)
        cos, sin = rope_cos_sin(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        # shared with the target at run time (plain attributes: never parameters, never saved)
        self.embed_weight: Tensor | None = None
        self.head_weight: Tensor | None = None       # [V_draft, H]: rows for the exact logits
        self.full_head: nn.Module | None = None      # a (packed) linear producing all V_draft logits
        self.lowrank_ready = False                   # A, B hold trained or SVD values
        self.cpu_head: LowrankHeadCPU | None = None  # the head as one C call (made by `pack` on the CPU)
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02, generator: torch.Generator | None = None) -> None:
        for lin in (self.fc, self.qkv, self.o, self.gate_up, self.down):
            if isinstance(lin, nn.Linear):
                with torch.no_grad():
                    lin.weight.normal_(0.0, std, generator=generator)

    # -- binding to the target -------------------------------------------------------------------------
    def attach(self, embed_weight: Tensor, lm_head_weight: Tensor | None,
               full_head: nn.Module | None = None) -> "Eagle4Drafter":
        """Share the target's embedding and lm_head ([V, H]); initialise A, B from its SVD if untrained."""
        # plain attributes (object.__setattr__): a Parameter or Module assigned the usual way would be
        # registered, and the target's weights would join this module's parameters and state_dict
        share = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        share("embed_weight", (embed_weight if self.embed_tokens is None else self.embed_tokens.weight).detach())
        if self.lm_head is not None:
            share("head_weight", self.lm_head.weight.detach())
            share("full_head", None)
        else:
            if lm_head_weight is None:
                raise ValueError("the drafter needs the target's lm_head weight")
            if self.d2t is not None:
                share("head_weight", lm_head_weight.detach()[self.d2t])
                share("full_head", None)
            else:
                share("head_weight", lm_head_weight.detach())
                share("full_head", full_head)
        if not self.lowrank_ready:
            self.init_lowrank()
        return self

    def init_lowrank(self) -> None:
        if self.head_weight is None:
            raise ValueError("attach() the target first")
        a, b = lowrank_from_svd(self.head_weight, self.cfg.rank)
        with torch.no_grad():
            self.lr_a.weight.copy_(a.T)
            self.lr_b.weight.copy_(b.T)
        self.lowrank_ready = True

    def set_options(self, window: Any = "keep", head: str | None = None, rank: int | None = None,
                    topk_candidates: int | None = None) -> None:
        """Ablations at run time. A rank other than the trained one re-initialises A, B by SVD."""
        kw: dict[str, Any] = {}
        if window != "keep":
            kw["window"] = None if window in (None, 0, "none", "None") else int(window)
        if head is not None:
            kw["head"] = head
        if topk_candidates is not None:
            kw["topk_candidates"] = int(topk_candidates)
        if rank is not None and int(rank) != self.cfg.rank:
            kw["rank"] = int(rank)
            dev, dt = self.lr_a.weight.device, self.lr_a.weight.dtype
            self.lr_a = nn.Linear(self.cfg.hidden_size, int(rank), bias=False, device=dev, dtype=dt)
            self.lr_b = nn.Linear(int(rank), self.cfg.draft_vocab, bias=False, device=dev, dtype=dt)
            self.lowrank_ready = False
        self.cfg = replace(self.cfg, **kw)
        self.cfg.validate()
        if not self.lowrank_ready and self.head_weight is not None:
            self.init_lowrank()

    def pack(self, int8: bool = False) -> "Eagle4Drafter":
        """Prepack the drafter's own linears for oneDNN (inference only; a no-op off CPU); with `int8`, the
        layer's linears keep int8 weights too, for calls of a few rows (`Int8Linear`: half the bytes to stream)."""
        if not torch.backends.mkldnn.is_available() or self.qkv.weight.device.type != "cpu":
            return self
        if self.cfg.head == "lowrank" and self.head_weight is not None and isinstance(self.lr_a, nn.Linear):
            self.cpu_head = LowrankHeadCPU.create(self.lr_a.weight, self.lr_b.weight, self.head_weight)
        for name in ("fc", "qkv", "o", "gate_up", "down", "lr_a", "lr_b"):
            lin = getattr(self, name)
            if isinstance(lin, nn.Linear):
                setattr(self, name, int8_linear(lin) if int8 and name not in ("lr_a", "lr_b") else packed(lin))
        if self.full_head is None and self.head_weight is not None:
            object.__setattr__(self, "full_head", _packed_from_weight(self.head_weight))
        elif isinstance(self.full_head, nn.Linear):
            object.__setattr__(self, "full_head", packed(self.full_head))
        return self

    # -- forward pieces ----------------------------------------------------------------------------------
    def inputs(self, h: Tensor, tokens: Tensor, fuse: bool) -> tuple[Tensor, Tensor]:
        """(residual h, attention input [norm(embed), norm(h)]); `fuse` applies fc to target features."""
        if fuse:
            h = self.fc(h)
        e = F.embedding(tokens, self.embed_weight).to(h.dtype)
        H = h.shape[-1]
        if layer_ops.runs_here(h, e, self.input_norm.weight, self.hidden_norm.weight) and h.is_contiguous():
            x = h.new_empty(*h.shape[:-1], 2 * H)                        # both norms written in place
            layer_ops.rms_norm(e, self.input_norm.weight, self.input_norm.eps, out=x[..., :H])
            layer_ops.rms_norm(h, self.hidden_norm.weight, self.hidden_norm.eps, out=x[..., H:])
        else:
            x = torch.cat([self.input_norm(e), self.hidden_norm(h)], dim=-1)
        return (x[..., H:].contiguous() if self.cfg.norm_before_residual else h), x

    def project(self, x: Tensor, pos: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q [B, nq, T, hd], k/v [B, nkv, T, hd] with RoPE at absolute positions pos [B, T]."""
        return self._split_rope(self._qkv(x), pos)

    def _qkv(self, x: Tensor) -> Tensor:
        """[q | k | v] rows of attention inputs x, with the q/k norms where the layer has them."""
        qkv = self.qkv(x)
        if self.q_norm is None:
            return qkv
        return head_norms(qkv, self.q_norm, self.k_norm, self.cfg.num_attention_heads, self.cfg.num_key_value_heads)

    def _split_rope(self, qkv: Tensor, pos: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        c = self.cfg
        B, T, _ = qkv.shape
        q, k, v = qkv.split(
            [c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim,
             c.num_key_value_heads * c.head_dim], -1)
        cos = self.rope_cos[pos].unsqueeze(1).to(qkv.dtype)
        sin = self.rope_sin[pos].unsqueeze(1).to(qkv.dtype)
        q = apply_rope(q.view(B, T, c.num_attention_heads, c.head_dim).transpose(1, 2), cos, sin)
        k = apply_rope(k.view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2), cos, sin)
        v = v.view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        return q, k, v

    def project_rows(self, x: Tensor, pos: Tensor, k_dst: Tensor, v_dst: Tensor, slot: Tensor,
                     row: Tensor) -> Tensor:
        """Queries [N, nq, hd] of input rows x [N, 2H] at positions pos [N], their keys and values stored at
        row[n] of slot[n] of k_dst, v_dst [S, nkv, P, hd] (a ring of cached keys, or a step's tree buffer;
        no two rows to one place). On the CPU the rotation and the stores are one C call (layer_ops)."""
        c = self.cfg
        qkv = self._qkv(x)
        if layer_ops.runs_here(qkv, k_dst, v_dst) and k_dst.is_contiguous() and v_dst.is_contiguous() \
                and self.rope_cos.dtype == torch.float32:
            return layer_ops.rope_store_rows(qkv, pos, self.rope_cos, self.rope_sin,
                                             (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
                                             k_dst, v_dst, slot, row)
        q, k, v = self._split_rope(qkv[None], pos[None])
        k_dst[slot, :, row] = k[0].transpose(0, 1).to(k_dst.dtype)
        v_dst[slot, :, row] = v[0].transpose(0, 1).to(v_dst.dtype)
        return q[0].transpose(0, 1)

    def attend_cached(self, q: Tensor, qpos: Tensor, ring: tuple[Tensor, Tensor, Tensor, Tensor],
                      inclusive: bool = False, tree: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
        """Attention of queries q [B, T, nq, hd] at positions qpos [B, T] over their slots' cached keys,
        ring = (k, v [S, nkv, R, hd], pos [S, R] (-1: empty), slots [B]): those filled, before the query
        (or at it, `inclusive`) and inside the window; and over tree = (k, v [B, nkv, cap, hd], anc [B, T,
        n]): the first n tree keys, where anc says the query sees them. Returns [B, T, nq * hd], the heads
        side by side. On the CPU one C call (kernels/drafter_attention.c), else `attend`."""
        B, T = q.shape[:2]
        rk, rv, rpos, slots = ring
        cache = (rk, rv) if tree is None else (rk, rv, tree[0], tree[1])
        if drafter_attention.runs_here(q, *cache):
            return drafter_attention.drafter_attention(q, qpos, rk, rv, rpos, slots, self.cfg.window, inclusive,
                                                       tree).view(B, T, -1)
        kp = rpos[slots][:, None, :]
        vis = (kp >= 0) & ((kp <= qpos[:, :, None]) if inclusive else (kp < qpos[:, :, None]))
        if self.cfg.window is not None:
            vis &= kp > qpos[:, :, None] - self.cfg.window
        k, v = rk[slots], rv[slots]
        if tree is not None:
            tk, tv, anc = tree
            n = anc.shape[-1]
            k, v, vis = torch.cat([k, tk[:, :, :n]], 2), torch.cat([v, tv[:, :, :n]], 2), torch.cat([vis, anc], -1)
        return self.attend(q.transpose(1, 2), k, v, vis.unsqueeze(1)).transpose(1, 2).reshape(B, T, -1)

    @staticmethod
    def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """Attention of q [B, nq, T, hd] over k, v [B, nkv, S, hd], mask [B, 1, T, S] (True = visible; every
        row sees at least one key). Grouped matmuls, which beat PyTorch's SDPA over a window of a few hundred
        keys for a batch of sequences or a single query, except for one sequence of several queries, where
        SDPA is the faster (the CPU path when the C kernel does not run)."""
        B, H, T, D = q.shape
        if q.is_cuda or (B == 1 and T > 1):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        KV, S = k.shape[1], k.shape[2]
        G = H // KV
        s = torch.matmul(q.reshape(B, KV, G * T, D), k.transpose(-1, -2)).float() * D ** -0.5
        vis = mask.reshape(B, 1, 1, T, S).expand(B, 1, G, T, S).reshape(B, 1, G * T, S)
        p = s.masked_fill(~vis, float("-inf")).softmax(-1).to(v.dtype)
        return torch.matmul(p, v).reshape(B, H, T, D)

    def finish(self, h: Tensor, attn: Tensor) -> Tensor:
        """Residual + o(attn [B, T, nq * hd], the heads side by side) then the MLP; returns the pre-norm
        hidden state."""
        h, hn = layer_ops.add_rms_norm(h, self.o(attn), self.post_norm.weight, self.post_norm.eps)
        return h + self.down(layer_ops.silu_mul(self.gate_up(hn)))

    def full_logits(self, hn: Tensor) -> Tensor:
        """Logits over the whole draft vocabulary for normed hidden rows [N, H]."""
        if self.full_head is not None:
            return self.full_head(hn)
        return hn @ self.head_weight.T

    def lowrank_scores(self, hn: Tensor) -> Tensor:
        return self.lr_b(self.lr_a(hn))

    def topk(self, h: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """Draft log-probabilities and TARGET token ids of the k best next tokens for pre-norm rows [N, H].

        lowrank: softmax over the K exact logits of the low-rank top-K candidates; full: over all rows.
        """
        hn = self.norm(h)
        if self.cfg.head == "lowrank":
            K = min(max(self.cfg.topk_candidates, k), self.cfg.draft_vocab)
            if self.cpu_head is not None:                                  # one C call (kernels/)
                val, idx = self.cpu_head(hn, K, k)
            else:
                if hn.is_cuda and isinstance(self.lr_a, nn.Linear):       # fused Triton kernel (kernels/)
                    from reference_eagle4.kernels.lowrank_head import lowrank_topk
                    exact, cand = lowrank_topk(hn, self.lr_a.weight.T, self.lr_b.weight.T, self.head_weight, K)
                else:
                    cand = row_ops.topk_indices(self.lowrank_scores(hn), K)          # [N, K]
                    rows = self.head_weight[cand]                                     # [N, K, H]
                    exact = torch.bmm(rows, hn.to(rows.dtype).unsqueeze(-1)).squeeze(-1)
                val, pos = exact.float().log_softmax(-1).topk(k, dim=-1)
                idx = cand.gather(1, pos)
        else:
            logp = self.full_logits(hn).float().log_softmax(-1)
            val, idx = logp.topk(k, dim=-1)
        if self.d2t is not None:
            idx = self.d2t[idx]
        return val, idx

    # -- checkpoints -----------------------------------------------------------------------------------
    def export_state(self, dtype: torch.dtype | None = torch.float16) -> dict[str, Tensor]:
        """The checkpoint tensors under EAGLE-3 key names (+ lowrank.A/B); never the target's weights."""
        c = self.cfg
        nq, nkv, hd = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim, c.head_dim
        del hd
        q, k, v = self.qkv.weight.split([nq, nkv, nkv])
        gate, up = self.gate_up.weight.chunk(2)
        out = {
            "fc.weight": self.fc.weight,
            "midlayer.input_layernorm.weight": self.input_norm.weight,
            "midlayer.hidden_norm.weight": self.hidden_norm.weight,
            "midlayer.self_attn.q_proj.weight": q, "midlayer.self_attn.k_proj.weight": k,
            "midlayer.self_attn.v_proj.weight": v, "midlayer.self_attn.o_proj.weight": self.o.weight,
            "midlayer.post_attention_layernorm.weight": self.post_norm.weight,
            "midlayer.mlp.gate_proj.weight": gate, "midlayer.mlp.up_proj.weight": up,
            "midlayer.mlp.down_proj.weight": self.down.weight,
            "norm.weight": self.norm.weight,
            "lowrank.A": self.lr_a.weight.T, "lowrank.B": self.lr_b.weight.T,
        }
        if self.lm_head is not None:
            out["lm_head.weight"] = self.lm_head.weight
        if self.q_norm is not None:
            out["midlayer.self_attn.q_norm.weight"] = self.q_norm.weight
            out["midlayer.self_attn.k_norm.weight"] = self.k_norm.weight
        if self.embed_tokens is not None:
            out["embed_tokens.weight"] = self.embed_tokens.weight
        out = {n: t.detach().to(dtype or t.dtype).contiguous() for n, t in out.items()}
        if self.d2t is not None:
            out["d2t"] = (self.d2t - torch.arange(self.d2t.numel(), device=self.d2t.device)).long()
            t2d = torch.zeros(c.vocab_size, dtype=torch.bool)
            t2d[self.d2t.cpu()] = True
            out["t2d"] = t2d
        return out

    def save(self, folder: str | Path, dtype: torch.dtype | None = torch.float16,
             extra: dict[str, Any] | None = None) -> Path:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file(self.export_state(dtype), str(folder / "model.safetensors"))
        cfg = self.cfg.to_json()
        if extra:
            cfg.update(extra)
        (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        return folder


def _packed_from_weight(weight: Tensor) -> nn.Module:
    lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    lin.weight = nn.Parameter(weight.detach(), requires_grad=False)
    return packed(lin)


_ALIASES = ("midlayer.", "layers.0.", "model.layers.0.", "model.midlayer.")


def _normalise_key(name: str) -> str:
    for prefix in _ALIASES[1:]:
        if name.startswith(prefix):
            return "midlayer." + name[len(prefix):]
    if name.startswith("model.") and not name.startswith("model.layers"):
        return name[len("model."):]
    return name


def copy_weights(model: nn.Module, tensors: dict[str, Tensor], folder: Path) -> None:
    """Copy checkpoint tensors into the model's parameters, naming the file's folder on a shape mismatch."""
    with torch.no_grad():
        for name, t in tensors.items():
            target = model.get_parameter(name)
            if target.shape != t.shape:
                raise ValueError(f"{folder}: {name} has shape {tuple(t.shape)}, expected {tuple(target.shape)}")
            target.copy_(t.float())


def load_drafter(folder: str | Path, dtype: torch.dtype = torch.float32,
                 capture_default: tuple[int, ...] | None = None) -> Eagle4Drafter:
    """Load an EAGLE-4 drafter or an EAGLE-3 checkpoint (the layout vLLM's llama_eagle3.py / qwen3_eagle3.py load;
    model.safetensors, shards or pytorch_model*.bin) from a folder; any other layout, a variant the drafter does
    not run or a missing tensor is a CheckpointError naming the file."""
    from reference_eagle4.checkpoints import check_eagle3_config, expect_layout, read_json, read_tensors

    folder = Path(folder)
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"no drafter config.json in {folder}")
    layout = expect_layout(folder, ("eagle4", "eagle3"), "the EAGLE-4 methods")
    raw = read_json(folder / "config.json")
    if layout == "eagle3":
        check_eagle3_config(raw, folder / "config.json")
    try:
        cfg = Eagle4Config.from_json(raw)
    except ValueError as err:
        raise CheckpointError(f"{folder / 'config.json'}: {err}") from None
    state = read_tensors(folder, bins=True, rename=_normalise_key)
    if not cfg.capture_layers and capture_default is not None:
        cfg = replace(cfg, capture_layers=tuple(capture_default))     # else the proposer takes the target's
    if "lm_head.weight" not in state and cfg.own_lm_head:
        cfg = replace(cfg, own_lm_head=False)
    if "d2t" in state and cfg.draft_vocab_size is None and state["d2t"].numel() != cfg.vocab_size:
        cfg = replace(cfg, draft_vocab_size=state["d2t"].numel())
    if "lowrank.A" in state:
        cfg = replace(cfg, rank=state["lowrank.A"].shape[1])
    p = "midlayer."
    if not cfg.qk_norm and p + "self_attn.q_norm.weight" in state:
        raise CheckpointError(f"{folder}: q/k norm weights, which its architecture ({raw.get('architectures')}) "
                              f"has none of (vLLM's {EAGLE3_QWEN3[0]} has them)")
    cfg = replace(cfg, own_embed="embed_tokens.weight" in state)
    model = Eagle4Drafter(cfg)
    ours = {
        "fc.weight": state["fc.weight"],
        "input_norm.weight": state[p + "input_layernorm.weight"],
        "hidden_norm.weight": state[p + "hidden_norm.weight"],
        "qkv.weight": torch.cat([state[p + f"self_attn.{n}_proj.weight"] for n in "qkv"]),
        "o.weight": state[p + "self_attn.o_proj.weight"],
        "post_norm.weight": state[p + "post_attention_layernorm.weight"],
        "gate_up.weight": torch.cat([state[p + "mlp.gate_proj.weight"], state[p + "mlp.up_proj.weight"]]),
        "down.weight": state[p + "mlp.down_proj.weight"],
        "norm.weight": state["norm.weight"],
    }
    if cfg.own_lm_head:
        ours["lm_head.weight"] = state["lm_head.weight"]
    if cfg.qk_norm:
        ours["q_norm.weight"] = state[p + "self_attn.q_norm.weight"]
        ours["k_norm.weight"] = state[p + "self_attn.k_norm.weight"]
    if cfg.own_embed:
        ours["embed_tokens.weight"] = state["embed_tokens.weight"]
    if "lowrank.A" in state:
        ours["lr_a.weight"] = state["lowrank.A"].T
        ours["lr_b.weight"] = state["lowrank.B"].T
    copy_weights(model, ours, folder)
    if cfg.draft_vocab_size:
        offsets = state["d2t"].long()
        model.d2t = offsets + torch.arange(offsets.numel())
    model.lowrank_ready = "lowrank.A" in state
    model = model.to(dtype).eval().requires_grad_(False)
    model.rope_cos, model.rope_sin = rope_cos_sin(cfg)
    return model
