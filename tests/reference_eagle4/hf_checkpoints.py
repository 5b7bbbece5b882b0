"""Tiny random checkpoints in the layouts users bring: Hugging Face Llama and Qwen3 targets (written by transformers'
own save_pretrained, sharded), EAGLE-3 drafters in the layout vLLM 0.33.0 loads (llama_eagle3.py, qwen3_eagle3.py)
and DFlash drafters in the DFlash authors' layout (qwen3_dflash.py, DFlashDraftModel)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=1024)
LLAMA31_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64, "rope_theta": 500000.0}     # Llama-3.1's, over a 64 context


def hf_target(folder: Path, tokenizer_from: Path, kind: str, *, tied: bool, rope: dict[str, Any] | None = None,
              head_dim: int = 16, seed: int = 0) -> Path:
    """A random `kind` ("llama" or "qwen3") model saved by transformers in shards of 300 KB (so
    model.safetensors.index.json lists several files), with the tokenizer and chat template of `tokenizer_from`."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_from)
    config_cls, model_cls = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM)}[kind]
    config = config_cls(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                        tie_word_embeddings=tied, head_dim=head_dim, rope_parameters=rope, **SHAPE)
    torch.manual_seed(seed)
    model = model_cls(config)
    model.save_pretrained(folder, max_shard_size="300KB")
    tok.save_pretrained(folder)
    return folder


def _rand(g: torch.Generator, *shape: int, std: float = 0.1) -> Tensor:
    return torch.randn(*shape, generator=g) * std


def _norm(g: torch.Generator, n: int) -> Tensor:
    return 0.5 + torch.rand(n, generator=g)


def _layer(g: torch.Generator, prefix: str, H: int, I: int, nh: int, nkv: int, hd: int, qkv_in: int,
           qk_norm: bool) -> dict[str, Tensor]:
    """One decoder layer's tensors under HF names, norms away from 1 so that a norm read wrong shows."""
    out = {
        prefix + "input_layernorm.weight": _norm(g, H),
        prefix + "post_attention_layernorm.weight": _norm(g, H),
        prefix + "self_attn.q_proj.weight": _rand(g, nh * hd, qkv_in),
        prefix + "self_attn.k_proj.weight": _rand(g, nkv * hd, qkv_in),
        prefix + "self_attn.v_proj.weight": _rand(g, nkv * hd, qkv_in),
        prefix + "self_attn.o_proj.weight": _rand(g, H, nh * hd),
        prefix + "mlp.gate_proj.weight": _rand(g, I, H), prefix + "mlp.up_proj.weight": _rand(g, I, H),
        prefix + "mlp.down_proj.weight": _rand(g, H, I),
    }
    if qk_norm:
        out[prefix + "self_attn.q_norm.weight"] = _norm(g, hd)
        out[prefix + "self_attn.k_norm.weight"] = _norm(g, hd)
    return out


def eagle3_drafter(folder: Path, target: Path, *, qwen3: bool, draft_vocab: Tensor, own_embed: bool = False,
                   norm_before_residual: bool = False, bins: bool = False, layer_ids: list[int] | None = None,
                   max_position: int | None = None, seed: int = 1) -> Path:
    """A random EAGLE-3 checkpoint for `target`: a Llama layer (LlamaForCausalLMEagle3, as the Llama-3.1-8B
    drafters) or a Qwen3 one with q/k norms (Eagle3Qwen3ForCausalLM); its lm_head over `draft_vocab` (target ids,
    stored as d2t offsets with t2d); with `own_embed` its own embed_tokens; in pytorch_model.bin with `bins`; the
    target layers named by eagle_config's layer-output ids (SpecForge), or none (the target's default layers); a
    context of `max_position` (the Llama-3.1-8B drafter says 2048), else the target's."""
    tcfg = json.loads((target / "config.json").read_text())
    H, V, nh, nkv = tcfg["hidden_size"], tcfg["vocab_size"], tcfg["num_attention_heads"], tcfg["num_key_value_heads"]
    hd, I = tcfg.get("head_dim") or H // nh, tcfg["intermediate_size"]
    g = torch.Generator().manual_seed(seed)
    Vd = draft_vocab.numel()
    state = _layer(g, "midlayer.", H, I, nh, nkv, hd, 2 * H, qwen3)
    state.update({"fc.weight": _rand(g, H, 3 * H), "midlayer.hidden_norm.weight": _norm(g, H),
                  "norm.weight": _norm(g, H), "lm_head.weight": _rand(g, Vd, H, std=0.5),
                  "d2t": draft_vocab - torch.arange(Vd),
                  "t2d": torch.zeros(V, dtype=torch.bool).index_fill(0, draft_vocab, True)})
    if own_embed:
        state["embed_tokens.weight"] = _rand(g, V, H, std=1.0)
    cfg: dict[str, Any] = {
        "architectures": ["Eagle3Qwen3ForCausalLM" if qwen3 else "LlamaForCausalLMEagle3"],
        "model_type": "qwen3" if qwen3 else "llama", "hidden_size": H, "intermediate_size": I,
        "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": hd, "num_hidden_layers": 1,
        "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "max_position_embeddings": max_position or tcfg["max_position_embeddings"],
        "rope_parameters": tcfg.get("rope_parameters"), "vocab_size": V, "draft_vocab_size": Vd,
        "tie_word_embeddings": False, "norm_before_residual": norm_before_residual}
    if layer_ids is not None:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": layer_ids, "use_aux_hidden_state": True}
    folder.mkdir(parents=True)
    state = {k: v.contiguous() for k, v in state.items()}
    if bins:
        torch.save(state, folder / "pytorch_model.bin")
    else:
        from safetensors.torch import save_file

        save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def dflash_authors_drafter(folder: Path, target: Path, *, target_layer_ids: list[int], block_size: int,
                           mask_token_id: int, layers: int = 2, max_position: int | None = None,
                           seed: int = 2) -> Path:
    """A random DFlash checkpoint as the DFlash authors publish theirs: a Qwen3 config with dflash_config
    (mask_token_id, target_layer_ids as layer-output ids), per-head q/k norms, no lm_head, no embedding, no
    mask_embedding.pt (the MASK is the embedding row of mask_token_id) and no rope_theta (vLLM's default 1e6)."""
    tcfg = json.loads((target / "config.json").read_text())
    H, V, nh, nkv = tcfg["hidden_size"], tcfg["vocab_size"], tcfg["num_attention_heads"], tcfg["num_key_value_heads"]
    hd, I = tcfg.get("head_dim") or H // nh, tcfg["intermediate_size"]
    g = torch.Generator().manual_seed(seed)
    state: dict[str, Tensor] = {"fc.weight": _rand(g, H, len(target_layer_ids) * H, std=0.2),
                                "hidden_norm.weight": _norm(g, H), "norm.weight": _norm(g, H)}
    for i in range(layers):
        state.update(_layer(g, f"layers.{i}.", H, I, nh, nkv, hd, H, True))
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": H, "intermediate_size": I,
           "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": hd, "num_hidden_layers": layers,
           "hidden_act": "silu", "rms_norm_eps": 1e-6,
           "max_position_embeddings": max_position or tcfg["max_position_embeddings"], "vocab_size": V, "block_size": block_size, "num_target_layers": tcfg["num_hidden_layers"],
           "layer_types": ["full_attention"] * layers, "tie_word_embeddings": False, "attention_bias": False,
           "dflash_config": {"mask_token_id": mask_token_id, "target_layer_ids": target_layer_ids}}
    folder.mkdir(parents=True)
    from safetensors.torch import save_file

    save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder
