"""Run vLLM's own DFlash / DSpark model class over an export, on CPU (run by .venv-vllm's python, not the project's).

    python vllm_export_probe.py TARGET_DIR EXPORT_DIR METHOD INPUTS.pt OUTPUTS.pt

builds the draft model exactly as the engine does (EngineArgs -> VllmConfig -> model_loader.get_model: the
checkpoint's names, shapes and load_weights), shares the target's embedding as the proposer does
(llm_base_proposer.py _maybe_share_embeddings, for a draft that ships none), and evaluates the pieces that run
outside the attention kernel with vLLM's own modules and CPU ops: the context K/V precompute
(combine_hidden_states, _project_context_kv, _normalize_context_k), the block's q/k after qkv_proj and
q_norm / k_norm, embed_input_ids (the mask embedding), compute_logits (d2t scatter), and for DSpark the Markov
table, bias and confidence head. The attention over [context; block] itself needs the engine's KV cache and
metadata; tests/reference_eagle4/vllm_dflash_twin.py re-implements that part.
"""

from __future__ import annotations

import os
import sys


def main(target: str, export: str, method: str, inputs: str, outputs: str) -> None:
    import torch
    from safetensors import safe_open

    torch.accelerator.empty_cache = lambda: None        # the loader empties an accelerator cache a CPU lacks
    from vllm.config import SpeculativeConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader import get_model

    x = torch.load(inputs, weights_only=True)
    spec = {"method": method, "model": export, "num_speculative_tokens": x["n"]}
    if method == "dflash":
        cfg = EngineArgs(model=target, speculative_config=spec, max_model_len=512, dtype="float32").create_engine_config()
    else:
        # VllmConfig refuses dspark without the V2 runner, which needs Triton (config/vllm.py): the draft model is
        # built from the target's config and the speculative config vLLM resolves for the export
        cfg = EngineArgs(model=target, max_model_len=512, dtype="float32").create_engine_config()
        object.__setattr__(cfg, "speculative_config", SpeculativeConfig(
            **spec, target_model_config=cfg.model_config, target_parallel_config=cfg.parallel_config))
    out: dict[str, torch.Tensor] = {}
    with set_current_vllm_config(cfg), torch.no_grad():
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{x['port']}")
        initialize_model_parallel(1, 1)
        m = get_model(vllm_config=cfg, model_config=cfg.speculative_config.draft_model_config)
        if not getattr(m, "has_own_embed_tokens", False):
            with safe_open(os.path.join(target, "model.safetensors"), framework="pt") as fh:
                m.model.embed_tokens.weight.copy_(fh.get_tensor("model.embed_tokens.weight"))
        inner = m.model
        L, nkv, hd = len(inner.layers), inner._num_kv_heads, inner._head_dim
        aux = x["aux"].float()
        ctx = m.combine_hidden_states(aux)
        k, v = inner._project_context_kv(ctx, aux.shape[0], L, nkv, hd)
        out["ctx_k"], out["ctx_v"] = inner._normalize_context_k(k), v
        qs, ks = [], []
        for layer in inner.layers:
            a = layer.self_attn
            q, kk, _ = a.qkv_proj(x["x"].float())[0].split([a.q_size, a.kv_size, a.kv_size], -1)
            qs.append(a.q_norm(q.view(-1, a.num_heads, a.head_dim)))
            ks.append(a.k_norm(kk.view(-1, a.num_kv_heads, a.head_dim)))
        out["q"], out["k"] = torch.stack(qs), torch.stack(ks)
        out["embeds"] = m.embed_input_ids(x["ids"])
        h = x["h"].float()
        if method == "dflash":
            out["drafts"] = m.compute_logits(h).argmax(-1)
        else:
            me = m.markov_embed(x["prev"])
            out["drafts"] = m.map_draft_to_target((m.compute_draft_logits(h) + m.markov_bias(me)).argmax(-1))
            out["confidence"] = m.compute_confidence(h, me)
        out["class"] = torch.tensor([ord(c) for c in type(m).__name__])
    torch.save(out, outputs)


if __name__ == "__main__":
    main(*sys.argv[1:6])
