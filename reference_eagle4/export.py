"""Export an EAGLE-4 drafter to the EAGLE-3 checkpoint layout that vLLM and SGLang load.

vLLM (`--speculative-config '{"method": "eagle3", "model": DIR, ...}'`, model class
`Eagle3LlamaForCausalLM`, vllm/model_executor/models/llama_eagle3.py) and SGLang
(`--speculative-algorithm EAGLE3 --speculative-draft-model-path DIR`, `LlamaForCausalLMEagle3`) read the
layout of the SafeAILab / SpecForge EAGLE-3 checkpoints:

    config.json         a one-layer Llama config: architectures ["LlamaForCausalLMEagle3"], hidden_size, ...,
                        vocab_size (the target's), draft_vocab_size, target_hidden_size
    model.safetensors   fc.weight [H, 3*H_t]; midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}
                        .weight; midlayer.self_attn.{q,k,v}_proj.weight (input width 2H: [embedding, hidden]);
                        midlayer.self_attn.o_proj.weight; midlayer.mlp.{gate,up,down}_proj.weight;
                        norm.weight; lm_head.weight [V_draft, H]; d2t [V_draft] (offsets: target id = i + d2t[i]);
                        t2d [V] (bool)

The subset they run differs from EAGLE-4 in two ways, both dropped by the export (and recorded in
config.json under `specbench_export`): no sliding-window attention over the drafter's context (the engines
attend over the whole context), and no low-rank candidate head (`lm_head` is the full head: the target's
lm_head rows for the draft vocabulary; the engines score every row). The embedding is not stored: both
engines share the target's, as EAGLE-3 checkpoints expect.

Which target layers feed `fc`. EAGLE-4 captures the hidden states *entering* target layers
`capture_layers` (default (2, N//2, N-3)). The engines name them differently:
vLLM reads `eagle_aux_hidden_state_layer_ids` (top level first, then `eagle_config`) as the layers whose
input is captured (llama.py: `if idx in aux_hidden_state_layers: aux.append(hidden_states + residual)`
before layer idx runs); SGLang reads `eagle_config.eagle_aux_hidden_state_layer_ids` as layer *outputs*
and adds one (`set_eagle3_layers_to_capture`: "we plus 1 here"), as SpecForge writes them. The export writes
both: the top-level list in vLLM's convention, `eagle_config` in SGLang's, so both engines tap the layers
the drafter was trained on (and `load_drafter` reads the export back with the same layers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from reference_eagle4.drafters.eagle4_model import Eagle4Drafter, load_drafter

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DROPPED_KEYS = ("lowrank.A", "lowrank.B")


def target_tensors(target_folder: str | Path) -> dict[str, Tensor]:
    """The target's `lm_head.weight` and `model.embed_tokens.weight`, those of them its *.safetensors hold."""
    from safetensors import safe_open

    found: dict[str, Tensor] = {}
    for f in sorted(Path(target_folder).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as fh:
            for key in ("lm_head.weight", "model.embed_tokens.weight"):
                if key in fh.keys() and key not in found:
                    found[key] = fh.get_tensor(key)
    return found


def target_head(target_folder: str | Path) -> Tensor:
    """The target's lm_head weight [V, H] read from its safetensors (the embedding when tied)."""
    found = target_tensors(target_folder)
    head = found.get("lm_head.weight", found.get("model.embed_tokens.weight"))
    if head is None:
        raise ValueError(f"{target_folder}: no lm_head.weight or model.embed_tokens.weight in *.safetensors")
    return head


def target_config(target_folder: str | Path | None) -> dict[str, Any] | None:
    """The target's config.json (None without a folder or a config)."""
    if target_folder is None or not (Path(target_folder) / "config.json").exists():
        return None
    return json.loads((Path(target_folder) / "config.json").read_text())


def eagle3_config(drafter: Eagle4Drafter, dtype: torch.dtype, target_config: dict[str, Any] | None = None,
                  source: str = "") -> dict[str, Any]:
    c = drafter.cfg
    capture = [int(i) for i in c.capture_layers]
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta,
        "rope_scaling": None,
        "max_position_embeddings": c.max_position_embeddings,
        "vocab_size": c.vocab_size,
        "draft_vocab_size": c.draft_vocab,
        "target_hidden_size": c.target_hidden_size,
        "tie_word_embeddings": False,
        "norm_before_residual": False,
        "torch_dtype": str(dtype).removeprefix("torch."),
        # vLLM: ids of the target layers whose input is captured; SGLang/SpecForge: layer-output ids (id + 1).
        "eagle_aux_hidden_state_layer_ids": capture,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in capture], "use_aux_hidden_state": True},
        "specbench_export": {
            "source": source,
            "source_kind": c.kind,
            "dropped": {"sliding_window": c.window, "lowrank_head_rank": c.rank if c.head == "lowrank" else None},
            "capture_layers_inputs": capture,
        },
    }
    if target_config:
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if target_config.get(key) is not None:
                cfg[key] = target_config[key]
        if target_config.get("num_hidden_layers"):
            cfg["target_num_hidden_layers"] = target_config["num_hidden_layers"]
    return cfg


def export_state(drafter: Eagle4Drafter, head: Tensor | None, dtype: torch.dtype) -> dict[str, Tensor]:
    """EAGLE-3 tensors: the drafter's layer, the full head over its draft vocabulary, d2t / t2d."""
    state = {k: v for k, v in drafter.export_state(dtype).items() if k not in DROPPED_KEYS}
    c = drafter.cfg
    if "lm_head.weight" not in state:
        if head is None:
            raise ValueError("this drafter shares the target's lm_head: give the target folder")
        if head.shape[1] != c.hidden_size or head.shape[0] != c.vocab_size:
            raise ValueError(f"target lm_head has shape {tuple(head.shape)}, the drafter expects "
                             f"[{c.vocab_size}, {c.hidden_size}]")
        rows = head[drafter.d2t.cpu()] if drafter.d2t is not None else head
        state["lm_head.weight"] = rows.detach().to(dtype).contiguous()
    if "d2t" not in state:
        state["d2t"] = torch.zeros(c.draft_vocab, dtype=torch.long)
        state["t2d"] = torch.ones(c.vocab_size, dtype=torch.bool)
    return state


def export_eagle3(drafter_dir: str | Path, out_dir: str | Path, target_folder: str | Path | None = None,
                  dtype: str | torch.dtype = "bfloat16") -> Path:
    """Write DRAFTER_DIR's drafter to OUT_DIR as an EAGLE-3 checkpoint (config.json + model.safetensors)."""
    from safetensors.torch import save_file

    dt = DTYPES[dtype] if isinstance(dtype, str) else dtype
    drafter = load_drafter(drafter_dir)
    head = target_head(target_folder) if target_folder is not None else None
    target_cfg = target_config(target_folder)
    state = export_state(drafter, head, dt)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"))
    cfg = eagle3_config(drafter, dt, target_cfg, str(drafter_dir))
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out
