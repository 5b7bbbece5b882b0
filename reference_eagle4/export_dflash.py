"""Export a DFlash or DSpark drafter to the checkpoint layouts vLLM 0.33.0 loads for method "dflash" / "dspark".

vLLM runs DFlash drafters as `DFlashQwen3ForCausalLM` (architectures ["DFlashDraftModel"],
vllm/model_executor/models/qwen3_dflash.py) and dense DSpark drafters as `Qwen3DSparkForCausalLM`
(["Qwen3DSparkModel"], qwen3_dspark.py), fed by the DFlash proposer (v1/spec_decode/dflash.py and the V2 runner's
v1/worker/gpu/spec_decode/dflash/speculator.py) and the DSpark speculator (v1/worker/gpu/spec_decode/dspark/
speculator.py). What maps from our `DFlashDrafter` (reference_eagle4/drafters/dflash_model.py), piece by piece:

    context      vLLM: fc(cat aux) (combine_hidden_states), then rms_norm(., hidden_norm), then per layer the k/v
                 rows of qkv_proj, k_norm, RoPE at the context positions (precompute_and_store_context_kv) =
                 ours: hidden_norm(fc(feats)) -> kv -> RoPE. The aux layers: `dflash_config.target_layer_ids`
                 are layer *outputs*, vLLM adds one (get_eagle3_aux_layers_from_config in
                 v1/worker/gpu/spec_decode/eagle/eagle3_utils.py, "DFlash's aux layer id semantics") and captures
                 the input of that layer (llama.py), so ids = our capture_layers (inputs) - 1.
    block        vLLM: [bonus, mask_token_id x N] at positions last+1 .. last+1+N (copy_and_expand_dflash_inputs
                 in v1/spec_decode/utils.py), the masks' embedding replaced by `mask_embedding.pt` when it ships
                 (DFlashQwen3Model.embed_input_ids) = ours: [root, MASK x (B-1)] at t .. t+B-1.
    layers       pre-norm, non-causal attention of the block over [context; block] (no sliding window: the
                 config has neither `layer_types` with sliding layers nor `dflash_config.use_swa`), SiLU MLP,
                 final norm: the same. vLLM's attention also applies a per-head RMSNorm to q and k (q_norm,
                 k_norm, Qwen3-style) that our drafter does not have; RMSNorm with weight 1 is not the identity.
                 The export holds both norms in their linear regime instead: the q and k rows of qkv_proj are
                 scaled by s ~ 2^-32 and q_norm / k_norm carry the weight w = sqrt(eps) / s, so
                 q_norm(s q) = w s q / sqrt(s^2 mean(q^2) + eps) = q / sqrt(1 + s^2 mean(q^2) / eps), which
                 is q to a relative 1e-19 * mean(q^2), far below float32's resolution. w is a bfloat16 value
                 (so it is exact served in bfloat16 or float32) and s = sqrt(eps) / w takes the rounding.
                 Float16 cannot hold the scaled weights (they underflow), so neither the export nor the
                 server may run the drafter in float16.
    head         lm_head.weight = the target's lm_head rows of the draft vocabulary, d2t the offsets
                 (compute_logits scatters draft ids to target ids), argmax drafting: the same.
    DSpark       Markov: vLLM looks up markov_w1[prev] (an embedding table, rank r) and adds it @ markov_w2.T;
                 ours is (prev_norm(embed(prev)) @ U) @ M, a function of the token alone, so markov_w1 =
                 prev_norm(E) @ U is exact. Confidence: vLLM's sigmoid(proj([hidden, markov_w1[prev]])) sees
                 the rank-r embedding, ours the full normed embedding; the export appends one column to
                 markov_w1 holding each token's confidence term (prev_norm(E) . w_prev), a zero column to
                 markov_w2 (no logit change) and weight 1 on that column in proj: exact, at rank r + 1.
                 The noise token's embedding: vLLM's DSpark drops `mask_embedding` ("DSpark masks via the
                 vocab row", qwen3_dspark.py load_weights), so the export ships `embed_tokens` = the target's
                 embedding with the mask token's row set to our MASK vector (vLLM keeps a draft embedding that
                 differs from the target's: _should_share in v1/worker/gpu/spec_decode/eagle/utils.py).
                 `sample_from_anchor` false: the 1 + N fill-in block, as ours (the speculator's default True
                 would predict the first draft from the anchor row).

What does not map, and is therefore stated, not exported:
  * the block. Our engine always runs B = block_size rows and verifies the first L - 1 drafts; vLLM runs
    1 + num_speculative_tokens = L rows. Attention inside the block is non-causal, so the drafts are the same
    only at L = block_size (`--budget 16` for the shipped drafters).
  * a root token equal to the mask token id: vLLM embeds it as the mask. The default mask id is a special token
    of the target's tokenizer that neither its chat template nor BOS/EOS/PAD/UNK use.
  * DSpark's verified length: vLLM's adaptive verification (v1/worker/gpu/spec_decode/adaptive_verification.py)
    chooses it from the confidences, our dspark method from the confidences and a measured cost table.

SGLang 0.5.23 reads the same DFlash layout (srt/models/dflash.py: q_norm / k_norm with rms_norm_eps, fc,
hidden_norm; srt/speculative/dflash_utils.py: dflash_config.target_layer_ids, mask_token, mask_token_id), but
merges mask_embedding.pt into the *target's* embedding row (dflash_worker_v2.py,
_maybe_merge_trained_mask_embedding), which is lossless only while no prompt or output holds that token.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from reference_eagle4.drafters.dflash_model import DFlashDrafter, load_dflash
from reference_eagle4.export import DTYPES, target_config, target_tensors

METHODS = ("dflash", "dspark")
QK_SCALE = 2.0 ** -32          # q/k rows' scale: s^2 mean(q^2) / eps stays below 1e-15 for |q| up to 1e4
ARCHITECTURES = {"dflash": "DFlashDraftModel", "dspark": "Qwen3DSparkModel"}   # model_executor/models/registry.py


def qk_norm_weight(eps: float) -> tuple[float, float]:
    """(w, s): the q/k RMSNorm weight, a bfloat16 value, and the q/k row scale with w * s = sqrt(eps)."""
    w = float(torch.tensor(math.sqrt(eps) / QK_SCALE).to(torch.bfloat16))
    return w, math.sqrt(eps) / w


def default_mask_token(target_folder: str | Path) -> tuple[int, str]:
    """The target tokenizer's highest-id special token that is no BOS/EOS/PAD/UNK and not in its chat template."""
    folder = Path(target_folder)
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise ValueError(f"{path}: missing, so no mask token can be chosen; pass --mask-token-id")
    added = json.loads(path.read_text()).get("added_tokens") or []
    tcfg_path = folder / "tokenizer_config.json"
    tcfg = json.loads(tcfg_path.read_text()) if tcfg_path.is_file() else {}
    template = str(tcfg.get("chat_template") or "")
    if (folder / "chat_template.jinja").is_file():
        template += (folder / "chat_template.jinja").read_text()
    named = {str(v.get("content") if isinstance(v, dict) else v)
             for k, v in tcfg.items() if k in ("bos_token", "eos_token", "pad_token", "unk_token") and v}
    cfg = target_config(folder) or {}
    ids = {cfg.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")}
    free = [(int(t["id"]), str(t["content"])) for t in added if t.get("special")
            and t["content"] not in named and t["content"] not in template and t["id"] not in ids]
    if not free:
        raise ValueError(f"{path}: every special token is BOS/EOS/PAD/UNK or in the chat template, so none is "
                         "free for the mask; pass --mask-token-id")
    return max(free)


def token_text(target_folder: str | Path, token_id: int) -> str | None:
    """The added token's text for `token_id` (None when it is no added token or there is no tokenizer.json)."""
    path = Path(target_folder) / "tokenizer.json"
    if not path.is_file():
        return None
    added = json.loads(path.read_text()).get("added_tokens") or []
    return next((str(t["content"]) for t in added if t.get("id") == token_id), None)


def check_inputs(drafter_dir: Path, method: str | None, dtype: str) -> None:
    """One clear line for a missing file or an export that cannot be made."""
    for name in ("config.json", "model.safetensors"):
        if not (drafter_dir / name).is_file():
            raise ValueError(f"{drafter_dir / name}: missing (a DFlash/DSpark drafter folder holds config.json "
                             "and model.safetensors)")
    if method is not None and method not in METHODS:
        raise ValueError(f"--method must be dflash or dspark, got {method!r}")
    if dtype not in ("bfloat16", "float32"):
        raise ValueError(f"--dtype {dtype}: the export holds vLLM's q/k norms in their linear regime with q/k "
                         f"weights scaled by {QK_SCALE:g}, which float16 cannot hold; use bfloat16 or float32")


def layer_state(drafter: DFlashDrafter, w: float, s: float) -> dict[str, Tensor]:
    """Backbone tensors in vLLM's names, q/k rows scaled by s and q_norm / k_norm weights w (float32)."""
    state = drafter.export_state(torch.float32)
    out = {k: v for k, v in state.items() if k.startswith(("fc.", "hidden_norm.", "norm.", "layers.", "d2t"))}
    hd = drafter.cfg.head_dim
    for i in range(drafter.cfg.num_layers):
        p = f"layers.{i}.self_attn."
        out[p + "q_proj.weight"] = out[p + "q_proj.weight"] * s
        out[p + "k_proj.weight"] = out[p + "k_proj.weight"] * s
        out[p + "q_norm.weight"] = torch.full((hd,), w)
        out[p + "k_norm.weight"] = torch.full((hd,), w)
    return out


def dspark_state(drafter: DFlashDrafter, embed: Tensor, mask_id: int) -> dict[str, Tensor]:
    """Markov table and head at rank r + 1 (the extra column carries the confidence's token term), the confidence
    head over [hidden, markov embedding], and the embedding table with the mask token's row set to MASK."""
    with torch.no_grad():
        pe = drafter.prev_norm(embed.float())                               # [V, H]
        H = drafter.cfg.hidden_size
        w_conf = drafter.confidence.weight.float()                          # [1, 2H]: [norm(h), prev features]
        w1 = torch.cat([drafter.markov_u(pe), pe @ w_conf[0, H:, None]], 1)  # [V, r + 1]
        w2 = torch.cat([drafter.markov_m.weight.float(), w_conf.new_zeros(drafter.cfg.draft_vocab, 1)], 1)
        proj = torch.cat([w_conf[:, :H], w_conf.new_zeros(1, drafter.cfg.markov_rank), w_conf.new_ones(1, 1)], 1)
        table = embed.float().clone()
        table[mask_id] = drafter.mask_embedding.float()
    return {"markov_head.markov_w1.weight": w1, "markov_head.markov_w2.weight": w2,
            "confidence_head.proj.weight": proj, "confidence_head.proj.bias": drafter.confidence.bias.float(),
            "embed_tokens.weight": table}


def engine_config(drafter: DFlashDrafter, method: str, dtype: str, mask_id: int, mask_text: str | None,
                  target_cfg: dict[str, Any] | None, source: str, w: float, s: float) -> dict[str, Any]:
    """config.json: a Qwen3 config (transformers parses model_type qwen3) plus the DFlash/DSpark keys vLLM reads."""
    c = drafter.cfg
    dflash_config: dict[str, Any] = {
        "mask_token_id": mask_id,                 # v1/worker/gpu/spec_decode/utils.py get_parallel_drafting_token_id
        "target_layer_ids": [i - 1 for i in c.capture_layers],   # layer outputs; vLLM adds one (eagle3_utils.py)
        "use_aux_hidden_state": True,             # fc over the concatenated aux layers (qwen3_dflash.py)
        "causal": False,                          # _dflash_layer_causal: a non-causal block
    }
    if mask_text is not None:
        dflash_config["mask_token"] = mask_text   # SGLang cross-checks it against mask_token_id (dflash_worker_v2.py)
    cfg: dict[str, Any] = {
        "architectures": [ARCHITECTURES[method]],
        "model_type": "qwen3",
        "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "head_dim": c.head_dim, "hidden_act": "silu",
        "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": c.rope_theta},
        "max_position_embeddings": c.max_position_embeddings,
        "attention_bias": False, "use_sliding_window": False, "tie_word_embeddings": False,
        "vocab_size": c.vocab_size, "draft_vocab_size": c.draft_vocab, "target_hidden_size": c.target_hidden_size,
        "block_size": c.block_size,
        "torch_dtype": dtype,
        "dflash_config": dflash_config,
    }
    if method == "dspark":
        cfg.update({"markov_rank": c.markov_rank + 1, "enable_confidence_head": True,
                    "confidence_head_with_markov": True, "sample_from_anchor": False})
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if target_cfg and target_cfg.get(key) is not None:
            cfg[key] = target_cfg[key]
    cfg["specbench_export"] = {
        "source": source, "source_kind": c.kind, "method": method,
        "mapping": "exact up to rounding at num_speculative_tokens = block_size - 1",
        "qk_norm": {"note": "q/k rows scaled by row_scale, q_norm/k_norm weight w: the norms act as the identity "
                            "(our drafter has none); serve in bfloat16 or float32, never float16",
                    "row_scale": s, "weight": w},
        "like_for_like_budget": c.block_size,
        "mask_token_id": mask_id,
        "capture_layers_inputs": list(c.capture_layers),
    }
    if method == "dspark":
        cfg["specbench_export"]["markov_rank_plus_confidence_column"] = c.markov_rank + 1
    return cfg


def export_dflash(drafter_dir: str | Path, out_dir: str | Path, target_folder: str | Path,
                  method: str | None = None, dtype: str = "bfloat16", mask_token_id: int | None = None) -> Path:
    """Write DRAFTER_DIR's DFlash/DSpark drafter to OUT_DIR in the layout vLLM loads for `method` (default: the
    drafter's kind; a DSpark drafter exported as dflash is its backbone alone, as our dflash method runs it)."""
    from safetensors.torch import save_file

    src = Path(drafter_dir)
    check_inputs(src, method, dtype)
    drafter = load_dflash(src)
    c = drafter.cfg
    method = method or c.kind
    if method == "dspark" and not drafter.is_dspark:
        raise ValueError(f"{src / 'config.json'}: a dflash drafter (markov_rank 0) has no Markov or confidence "
                         "head to export as dspark; use --method dflash")
    if min(c.capture_layers) < 1:
        raise ValueError(f"{src / 'config.json'}: capture layer 0 (the embeddings) has no layer-output id in "
                         "vLLM's dflash_config.target_layer_ids")
    found = target_tensors(target_folder)
    embed = found.get("model.embed_tokens.weight")
    head = found.get("lm_head.weight", embed)
    if embed is None:
        raise ValueError(f"{target_folder}: no model.embed_tokens.weight in *.safetensors")
    if tuple(embed.shape) != (c.vocab_size, c.hidden_size) or tuple(head.shape) != (c.vocab_size, c.hidden_size):
        raise ValueError(f"{target_folder}: embedding {tuple(embed.shape)} / lm_head {tuple(head.shape)} do not fit "
                         f"the drafter's [{c.vocab_size}, {c.hidden_size}] (another target?)")
    if mask_token_id is None:
        mask_id, mask_text = default_mask_token(target_folder)
    else:
        if not 0 <= mask_token_id < c.vocab_size:
            raise ValueError(f"--mask-token-id {mask_token_id}: outside the target vocabulary [0, {c.vocab_size})")
        mask_id, mask_text = mask_token_id, token_text(target_folder, mask_token_id)

    w, s = qk_norm_weight(c.rms_norm_eps)
    state = layer_state(drafter, w, s)
    state["lm_head.weight"] = head[drafter.d2t] if drafter.d2t is not None else head
    if method == "dspark":
        state.update(dspark_state(drafter, embed, mask_id))
    dt = DTYPES[dtype]
    state = {k: (v if k == "d2t" else v.detach().to(dt)).contiguous() for k, v in state.items()}
    out = Path(out_dir)
    if out.resolve() == src.resolve():
        raise ValueError(f"--out {out} is the drafter folder itself; the export would overwrite the drafter")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out {out}: cannot create the folder ({err.strerror})") from None
    save_file(state, str(out / "model.safetensors"))
    mask_file = out / "mask_embedding.pt"   # qwen3_dflash.py _read_mask_embedding; SGLang's dflash_worker_v2.py too
    if method == "dflash":
        torch.save({"embedding": drafter.mask_embedding.detach().to(dt).clone(), "mask_token_id": mask_id}, mask_file)
    else:
        mask_file.unlink(missing_ok=True)      # a stale one would not be read by DSpark, but would mislead a reader
    cfg = engine_config(drafter, method, dtype, mask_id, mask_text, target_config(target_folder), str(src), w, s)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out
