"""DFlash and DSpark drafters: one parallel forward drafts a whole block.

    ctx    = hidden_norm(fc(cat[h_low, h_mid, h_high]))   target features of the verified positions < t
    block  = [embed(x_t), MASK, ..., MASK]                 B rows at positions t .. t+B-1 (own MASK vector)
    layer  : q from the block only; k, v from [ctx; block] (KV injection: every layer reads the same ctx);
             a block row sees every ctx row and every block row (non-causal inside the block); RoPE at
             absolute positions; then the MLP. Llama-shaped (GQA, SiLU), pre-norm, several layers.
    logits = norm(h) @ head.T for block rows 1..B-1 (the target's lm_head rows of the draft vocabulary)

One forward, one denoising step: block row k drafts x_{t+k}. The context of the next step holds only the
verified tokens' features, and since a layer's ctx keys/values depend on ctx alone they are cached.

DSpark (`markov_rank` > 0) adds two small heads on the same backbone:
  * a low-rank Markov head: logits_k += (norm(embed(prev_k)) @ U) @ M, prev_k the token before row k
    (x_t for k = 1, then the drafted tokens), so the block is drafted left to right at the price of a
    rank-r product per row;
  * a confidence head: sigmoid(w . [norm(h_k), norm(embed(prev_k))] + b) predicts whether draft k is
    accepted given that everything before it was; the proposer verifies the prefix whose predicted
    cumulative acceptance pays for its verification cost at the current batch size.

The target's embedding and lm_head are shared at run time and never stored. Checkpoint keys (HF-like):
    fc.weight, hidden_norm.weight, mask_embedding, norm.weight, d2t (draft index -> target id offsets),
    layers.{i}.{input_layernorm,post_attention_layernorm}.weight, layers.{i}.self_attn.{q,k,v,o}_proj.weight,
    layers.{i}.mlp.{gate,up,down}_proj.weight, markov.U [H, r], markov.M [r, V_draft],
    confidence.weight [1, 2H], confidence.bias [1]

`load_dflash` also reads DFlash checkpoints in the DFlash authors' layout (DFlashDraftModel, the one vLLM 0.33.0's
qwen3_dflash.py loads and export_dflash.py writes): the same layers with per-head q/k RMSNorm before RoPE
(layers.{i}.self_attn.{q,k}_norm.weight, on the block's queries and keys and on the context keys), the MASK vector
from mask_embedding.pt or else the embedding row of dflash_config.mask_token_id (the target's, or the checkpoint's
own embed_tokens), an lm_head of its own where it ships one, and target_layer_ids as layer-output ids (+1).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from reference_eagle4.checkpoints import CheckpointError, check_dflash_config, expect_layout, read_json, read_tensors
from reference_eagle4.drafters.eagle4_model import LayerShape, copy_weights, rope_cos_sin, target_shape
from reference_eagle4.linears import packed
from reference_eagle4.model import ModelArgs, RMSNorm, apply_rope, rope_parameters


@dataclass(frozen=True)
class DFlashConfig(LayerShape):
    num_layers: int = 2
    block_size: int = 16                          # B: the root plus B - 1 drafted tokens per forward
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 8192
    capture_layers: tuple[int, ...] = (2, 15, 27)
    draft_vocab_size: int | None = None           # rows of the target's head the drafter scores (d2t)
    markov_rank: int = 0                          # > 0: DSpark (Markov + confidence heads)
    kind: str = "dflash"
    rope_scaling: dict[str, Any] | None = None    # model.rope_parameters' scaling (None: plain RoPE)
    qk_norm: bool = False                         # per-head q/k RMSNorm before RoPE (the DFlash authors' layer)
    mask_row: int | None = None                   # MASK = this row of the embedding (authors' checkpoints)
    own_head: bool = False                        # the checkpoint's lm_head instead of the target's rows
    own_embed: bool = False                       # the checkpoint's embedding table instead of the target's

    @classmethod
    def for_target(cls, args: ModelArgs, **overrides: Any) -> "DFlashConfig":
        cfg = replace(cls(**target_shape(args)), **overrides)
        return replace(cfg, kind="dspark" if cfg.markov_rank else "dflash")

    @property
    def draft_vocab(self) -> int:
        return self.draft_vocab_size or self.vocab_size

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["capture_layers"] = list(self.capture_layers)
        return {"architectures": ["DFlashDrafter"], "model_type": self.kind, **d}

    @classmethod
    def from_json(cls, cfg: dict[str, Any]) -> "DFlashConfig":
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in cfg.items() if k in known}
        kw["capture_layers"] = tuple(kw.get("capture_layers", (2, 15, 27)))
        return cls(**kw)

    @classmethod
    def from_authors(cls, cfg: dict[str, Any]) -> "DFlashConfig":
        """A DFlash authors' config.json (a Qwen3 config plus dflash_config, as vLLM's qwen3_dflash.py reads it)."""
        dcfg = cfg["dflash_config"]
        n_heads, hidden = cfg["num_attention_heads"], cfg["hidden_size"]
        theta, scaling = rope_parameters({"rope_theta": 1e6, **cfg})   # qwen3_dflash.py: set_default_rope_theta
        vocab, draft_vocab = cfg["vocab_size"], cfg.get("draft_vocab_size")
        return cls(
            hidden_size=hidden, num_attention_heads=n_heads,
            num_key_value_heads=cfg.get("num_key_value_heads", n_heads),
            head_dim=cfg.get("head_dim") or hidden // n_heads, intermediate_size=cfg["intermediate_size"],
            vocab_size=vocab, target_hidden_size=cfg.get("target_hidden_size") or hidden,
            num_layers=cfg["num_hidden_layers"], block_size=cfg["block_size"],
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6), rope_theta=theta, rope_scaling=scaling,
            max_position_embeddings=cfg.get("max_position_embeddings", 8192),
            capture_layers=tuple(int(i) + 1 for i in dcfg.get("target_layer_ids", cfg.get("target_layer_ids"))),
            draft_vocab_size=draft_vocab if draft_vocab not in (None, vocab) else None,
            qk_norm=True, mask_row=int(dcfg.get("mask_token_id", cfg.get("mask_token_id"))))


class DFlashLayer(nn.Module):
    def __init__(self, c: DFlashConfig):
        super().__init__()
        H, hd = c.hidden_size, c.head_dim
        self.input_norm = RMSNorm(H, c.rms_norm_eps)
        self.q = nn.Linear(H, c.num_attention_heads * hd, bias=False)
        self.kv = nn.Linear(H, 2 * c.num_key_value_heads * hd, bias=False)
        self.q_norm = RMSNorm(hd, c.rms_norm_eps) if c.qk_norm else None
        self.k_norm = RMSNorm(hd, c.rms_norm_eps) if c.qk_norm else None
        self.o = nn.Linear(c.num_attention_heads * hd, H, bias=False)
        self.post_norm = RMSNorm(H, c.rms_norm_eps)
        self.gate_up = nn.Linear(H, 2 * c.intermediate_size, bias=False)
        self.down = nn.Linear(c.intermediate_size, H, bias=False)


class DFlashDrafter(nn.Module):
    """Weights and forward pieces; the proposer (cached ctx) and the trainer (many anchors) compose them."""

    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        if cfg.block_size < 2:
            raise ValueError(f"block_size must be >= 2, got {cfg.block_size}")
        self.cfg = cfg
        H = cfg.hidden_size
        self.fc = nn.Linear(len(cfg.capture_layers) * cfg.target_hidden_size, H, bias=False)
        self.hidden_norm = RMSNorm(H, cfg.rms_norm_eps)
        self.mask_embedding = nn.Parameter(torch.zeros(H))
        self.layers = nn.ModuleList(DFlashLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        Vd = cfg.draft_vocab
        self.register_buffer("d2t", torch.arange(Vd) if cfg.draft_vocab_size else None)
        self.lm_head = nn.Linear(H, Vd, bias=False) if cfg.own_head else None
        self.embed_tokens = nn.Embedding(cfg.vocab_size, H) if cfg.own_embed else None
        if cfg.markov_rank:
            self.markov_u = nn.Linear(H, cfg.markov_rank, bias=False)
            self.markov_m = nn.Linear(cfg.markov_rank, Vd, bias=False)
            self.prev_norm = RMSNorm(H, cfg.rms_norm_eps)
            self.confidence = nn.Linear(2 * H, 1)
        cos, sin = rope_cos_sin(cfg)  # type: ignore[arg-type]
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.embed_weight: Tensor | None = None       # shared with the target (never saved)
        self.head_weight: Tensor | None = None        # [V_draft, H]
        self.head: nn.Module | None = None            # packed linear over head_weight at run time
        self.reset_parameters()

    @property
    def is_dspark(self) -> bool:
        return self.cfg.markov_rank > 0

    def reset_parameters(self, std: float = 0.02, generator: torch.Generator | None = None) -> None:
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    m.weight.normal_(0.0, std, generator=generator)
                    if m.bias is not None:
                        m.bias.zero_()
            self.mask_embedding.normal_(0.0, std, generator=generator)
            if self.is_dspark:
                self.markov_m.weight.zero_()       # starts as plain DFlash

    def attach(self, embed_weight: Tensor, lm_head_weight: Tensor) -> "DFlashDrafter":
        """Share the target's embedding and lm_head rows (plain attributes: never parameters), unless the
        checkpoint has its own; a MASK that is an embedding row (`mask_row`) is taken from that embedding."""
        embed = (embed_weight if self.embed_tokens is None else self.embed_tokens.weight).detach()
        object.__setattr__(self, "embed_weight", embed)
        if self.lm_head is not None:
            head = self.lm_head.weight.detach()
        else:
            head = lm_head_weight.detach()
            head = head[self.d2t] if self.d2t is not None else head
        object.__setattr__(self, "head_weight", head)
        if self.cfg.mask_row is not None:
            with torch.no_grad():
                self.mask_embedding.copy_(embed[self.cfg.mask_row])
        return self

    def pack(self) -> "DFlashDrafter":
        """oneDNN-prepack every linear and the head rows (inference on CPU only; packing twice is a no-op)."""
        if not torch.backends.mkldnn.is_available() or self.mask_embedding.device.type != "cpu" \
                or not isinstance(self.fc, nn.Linear):
            return self
        from reference_eagle4.drafters.eagle4_model import _packed_from_weight
        for mod in [self, *self.layers]:
            for name, child in list(mod.named_children()):
                if isinstance(child, nn.Linear) and name not in ("confidence", "lm_head"):
                    setattr(mod, name, packed(child))
        object.__setattr__(self, "head", _packed_from_weight(self.head_weight))
        return self

    # -- forward pieces ------------------------------------------------------------------------------
    def context(self, feats: Tensor) -> Tensor:
        """[..., 3H_t] target features -> ctx rows [..., H]."""
        return self.hidden_norm(self.fc(feats))

    def rope(self, x: Tensor, pos: Tensor) -> Tensor:
        """x [B, heads, T, hd], pos [B, T]."""
        return apply_rope(x, self.rope_cos[pos].unsqueeze(1).to(x.dtype), self.rope_sin[pos].unsqueeze(1).to(x.dtype))

    def ctx_kv(self, layer: DFlashLayer, ctx: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
        """Keys (RoPE'd) and values [B, nkv, T, hd] of ctx rows [B, T, H] at positions pos [B, T]."""
        c = self.cfg
        B, T, _ = ctx.shape
        k, v = layer.kv(ctx).view(B, T, 2, c.num_key_value_heads, c.head_dim).permute(2, 0, 3, 1, 4)
        return self.rope(self._norm(layer.k_norm, k), pos), v

    @staticmethod
    def _norm(norm: RMSNorm | None, x: Tensor) -> Tensor:
        """A per-head q or k norm over the last dimension, where the layer has one."""
        return x if norm is None else norm(x.contiguous())

    def block_inputs(self, roots: Tensor) -> Tensor:
        """[B] root tokens -> block embeddings [B, block_size, H]: the root, then MASK rows."""
        e = F.embedding(roots, self.embed_weight).to(self.mask_embedding.dtype)
        mask = self.mask_embedding.expand(roots.shape[0], self.cfg.block_size - 1, -1)
        return torch.cat([e[:, None], mask], 1)

    def layer_forward(self, layer: DFlashLayer, h: Tensor, pos: Tensor, ctx_k: Tensor, ctx_v: Tensor,
                      ctx_mask: Tensor | None) -> Tensor:
        """One layer for block rows h [B, Tb, H] at pos [B, Tb] over cached ctx keys [B, nkv, Tc, hd].

        ctx_mask [B, Tb, Tc] bool (None: every ctx row visible); block rows see the whole block."""
        c = self.cfg
        B, Tb, _ = h.shape
        x = layer.input_norm(h)
        q = layer.q(x).view(B, Tb, c.num_attention_heads, c.head_dim).transpose(1, 2)
        q = self.rope(self._norm(layer.q_norm, q), pos)
        kb, vb = layer.kv(x).view(B, Tb, 2, c.num_key_value_heads, c.head_dim).permute(2, 0, 3, 1, 4)
        kb = self.rope(self._norm(layer.k_norm, kb), pos)
        k = torch.cat([ctx_k.to(q.dtype), kb], 2)
        v = torch.cat([ctx_v.to(q.dtype), vb], 2)
        mask = None
        if ctx_mask is not None:
            mask = torch.cat([ctx_mask, ctx_mask.new_ones(B, Tb, Tb)], -1).unsqueeze(1)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        h = h + layer.o(attn.transpose(1, 2).reshape(B, Tb, -1))
        g, u = layer.gate_up(layer.post_norm(h)).chunk(2, dim=-1)
        return h + layer.down(F.silu(g) * u)

    def base_logits(self, h: Tensor) -> Tensor:
        """Backbone logits over the draft vocabulary for pre-norm rows [..., H]."""
        hn = self.norm(h)
        if self.head is not None:
            return self.head(hn)
        return hn @ self.head_weight.to(hn.dtype).T

    def prev_features(self, prev: Tensor) -> Tensor:
        """Normed target embeddings of the tokens before each block row (Markov and confidence inputs)."""
        return self.prev_norm(F.embedding(prev, self.embed_weight).to(self.mask_embedding.dtype))

    def markov_bias(self, pe: Tensor) -> Tensor:
        """Logit bias [..., V_draft] from normed previous-token embeddings pe [..., H]."""
        return self.markov_m(self.markov_u(pe))

    def confidence_logit(self, h: Tensor, pe: Tensor) -> Tensor:
        x = torch.cat([self.norm(h), pe], -1).to(self.confidence.weight.dtype)
        return self.confidence(x).float().squeeze(-1)

    def to_target_ids(self, idx: Tensor) -> Tensor:
        return self.d2t[idx] if self.d2t is not None else idx

    # -- checkpoints ---------------------------------------------------------------------------------
    def export_state(self, dtype: torch.dtype = torch.float16) -> dict[str, Tensor]:
        c = self.cfg
        nkv = c.num_key_value_heads * c.head_dim
        out: dict[str, Tensor] = {"fc.weight": self.fc.weight, "hidden_norm.weight": self.hidden_norm.weight,
                                  "mask_embedding": self.mask_embedding, "norm.weight": self.norm.weight}
        for i, L in enumerate(self.layers):
            p = f"layers.{i}."
            k, v = L.kv.weight.split([nkv, nkv])
            gate, up = L.gate_up.weight.chunk(2)
            out.update({
                p + "input_layernorm.weight": L.input_norm.weight,
                p + "post_attention_layernorm.weight": L.post_norm.weight,
                p + "self_attn.q_proj.weight": L.q.weight, p + "self_attn.k_proj.weight": k,
                p + "self_attn.v_proj.weight": v, p + "self_attn.o_proj.weight": L.o.weight,
                p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                p + "mlp.down_proj.weight": L.down.weight})
            if L.q_norm is not None:
                out.update({p + "self_attn.q_norm.weight": L.q_norm.weight,
                            p + "self_attn.k_norm.weight": L.k_norm.weight})
        for name in ("lm_head", "embed_tokens"):
            if getattr(self, name) is not None:
                out[name + ".weight"] = getattr(self, name).weight
        if self.is_dspark:
            out.update({"markov.U": self.markov_u.weight.T, "markov.M": self.markov_m.weight.T,
                        "markov.norm.weight": self.prev_norm.weight,
                        "confidence.weight": self.confidence.weight, "confidence.bias": self.confidence.bias})
        out = {n: t.detach().to(dtype).contiguous() for n, t in out.items()}
        if self.d2t is not None:
            out["d2t"] = (self.d2t - torch.arange(self.d2t.numel(), device=self.d2t.device)).long()
        return out

    def save(self, folder: str | Path, dtype: torch.dtype = torch.float16,
             extra: dict[str, Any] | None = None) -> Path:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file(self.export_state(dtype), str(folder / "model.safetensors"))
        (folder / "config.json").write_text(json.dumps({**self.cfg.to_json(), **(extra or {})}, indent=2) + "\n")
        return folder


def load_dflash(folder: str | Path, dtype: torch.dtype = torch.float32) -> DFlashDrafter:
    """Load a DFlash or DSpark drafter saved by `DFlashDrafter.save`, or a DFlash checkpoint in the DFlash
    authors' layout; another layout, a variant the drafter does not run or a missing tensor is one line."""
    folder = Path(folder)
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"no drafter config.json in {folder}")
    layout = expect_layout(folder, ("dflash", "dflash-authors"), "dflash")
    raw = read_json(folder / "config.json")
    if layout == "dflash":
        cfg = DFlashConfig.from_json(raw)
        state = read_tensors(folder)
    else:
        check_dflash_config(raw, folder / "config.json")
        try:
            cfg = DFlashConfig.from_authors(raw)
        except (KeyError, ValueError) as err:
            raise CheckpointError(f"{folder / 'config.json'}: {err if isinstance(err, ValueError) else f'no {err}'}") \
                from None
        state = read_tensors(folder, rename=_authors_key)
        mask = _mask_vector(folder, cfg.mask_row)
        cfg = replace(cfg, own_head="lm_head.weight" in state, own_embed="embed_tokens.weight" in state,
                      mask_row=None if mask is not None else cfg.mask_row)
    model = DFlashDrafter(cfg)
    ours = {"fc.weight": state["fc.weight"], "hidden_norm.weight": state["hidden_norm.weight"],
            "norm.weight": state["norm.weight"]}
    mask = state["mask_embedding"] if layout == "dflash" else mask
    if mask is not None:
        ours["mask_embedding"] = mask
    for name in ("lm_head", "embed_tokens"):
        if getattr(model, name) is not None:
            ours[name + ".weight"] = state[name + ".weight"]
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        ours.update({
            p + "input_norm.weight": state[p + "input_layernorm.weight"],
            p + "post_norm.weight": state[p + "post_attention_layernorm.weight"],
            p + "q.weight": state[p + "self_attn.q_proj.weight"],
            p + "kv.weight": torch.cat([state[p + "self_attn.k_proj.weight"], state[p + "self_attn.v_proj.weight"]]),
            p + "o.weight": state[p + "self_attn.o_proj.weight"],
            p + "gate_up.weight": torch.cat([state[p + "mlp.gate_proj.weight"], state[p + "mlp.up_proj.weight"]]),
            p + "down.weight": state[p + "mlp.down_proj.weight"]})
        if cfg.qk_norm:
            ours.update({p + "q_norm.weight": state[p + "self_attn.q_norm.weight"],
                         p + "k_norm.weight": state[p + "self_attn.k_norm.weight"]})
    if cfg.markov_rank:
        ours.update({"markov_u.weight": state["markov.U"].T, "markov_m.weight": state["markov.M"].T,
                     "prev_norm.weight": state["markov.norm.weight"],
                     "confidence.weight": state["confidence.weight"], "confidence.bias": state["confidence.bias"]})
    copy_weights(model, ours, folder)
    if cfg.draft_vocab_size:
        model.d2t = state["d2t"].long() + torch.arange(cfg.draft_vocab_size)
    model = model.to(dtype).eval().requires_grad_(False)
    model.rope_cos, model.rope_sin = rope_cos_sin(cfg)  # type: ignore[arg-type]
    return model


def _authors_key(name: str) -> str:
    """Our key for a DFlash authors' tensor name (vLLM qwen3_dflash.py's hf_to_vllm_mapper: midlayer is layer 0,
    encoder.fc / encoder.output_norm_enc are fc / hidden_norm)."""
    for old, new in (("midlayer.", "layers.0."), ("encoder.output_norm_enc.", "hidden_norm."), ("encoder.fc.", "fc.")):
        if name.startswith(old):
            return new + name[len(old):]
    return name


def _mask_vector(folder: Path, mask_id: int | None) -> Tensor | None:
    """The MASK vector of mask_embedding.pt (a tensor, or {"embedding", "mask_token_id"} as qwen3_dflash.py's
    _read_mask_embedding reads it), or None where the checkpoint has none (the embedding row is the MASK)."""
    path = folder / "mask_embedding.pt"
    if not path.is_file():
        return None
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:          # a pickle torch refuses, a truncated file
        raise CheckpointError(f"{path}: cannot read it ({type(err).__name__}: {err})") from None
    if isinstance(data, dict):
        if data.get("mask_token_id", mask_id) != mask_id:
            raise CheckpointError(f"{path}: mask_token_id {data.get('mask_token_id')} differs from config.json's "
                                  f"dflash_config.mask_token_id {mask_id}")
        data = data.get("embedding")
    if not isinstance(data, Tensor):
        raise CheckpointError(f"{path}: holds no embedding tensor")
    return data.reshape(-1)
