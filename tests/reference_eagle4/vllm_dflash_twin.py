"""vLLM 0.33.0's DFlash / DSpark drafting over an exported folder, re-implemented in plain PyTorch from its source.

Each step follows the file named beside it (paths under vllm/): what the proposer feeds the model, the model's
forward, and how the proposer reads the outputs. It reads only the export (config.json, model.safetensors,
mask_embedding.pt) and the target's embedding, as the engine does, so a test can put it beside our drafter.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import Tensor


class VllmDFlashTwin:
    def __init__(self, folder: str | Path, target_embed: Tensor):
        folder = Path(folder)
        self.cfg = cfg = json.loads((folder / "config.json").read_text())
        self.w = {k: (v if k == "d2t" else v.float()) for k, v in load_file(str(folder / "model.safetensors")).items()}
        self.eps = cfg["rms_norm_eps"]
        self.nh, self.nkv, self.hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        self.layers = cfg["num_hidden_layers"]
        self.theta = cfg.get("rope_parameters", {}).get("rope_theta", cfg.get("rope_theta"))
        dflash_config = cfg["dflash_config"]
        self.mask_id = dflash_config["mask_token_id"]          # spec_decode/utils.py get_parallel_drafting_token_id
        # the draft's own embed_tokens when it ships one (kept: it differs from the target's), else the target's
        self.embed = self.w.get("embed_tokens.weight", target_embed.float())
        self.mask_vec = None
        if (folder / "mask_embedding.pt").exists():            # qwen3_dflash.py _read_mask_embedding
            saved = torch.load(folder / "mask_embedding.pt", weights_only=True)
            assert saved["mask_token_id"] == self.mask_id
            self.mask_vec = saved["embedding"].float().reshape(-1)

    def aux_layer_ids(self) -> list[int]:
        """v1/worker/gpu/spec_decode/eagle/eagle3_utils.py get_eagle3_aux_layers_from_config: DFlash's
        target_layer_ids plus one; the target (llama.py) captures the hidden state entering each such layer."""
        return [i + 1 for i in self.cfg["dflash_config"]["target_layer_ids"]]

    # -- layers (model_executor/layers/layernorm.py RMSNorm; rotary_embedding neox style) --------------------
    def rms(self, x: Tensor, weight: Tensor) -> Tensor:
        x = x.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def rope(self, x: Tensor, pos: Tensor) -> Tensor:
        """x [T, heads, hd] at positions pos [T] (is_neox_style: rotate the two halves)."""
        inv = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd))
        ang = torch.outer(pos.double(), inv)
        cos, sin = ang.cos().float()[:, None], ang.sin().float()[:, None]
        x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def qkv_weight(self, i: int) -> Tensor:
        p = f"layers.{i}.self_attn."
        return torch.cat([self.w[p + "q_proj.weight"], self.w[p + "k_proj.weight"], self.w[p + "v_proj.weight"]])

    # -- qwen3_dflash.py -----------------------------------------------------------------------------------------
    def context_kv(self, aux: Tensor, pos: Tensor) -> list[tuple[Tensor, Tensor]]:
        """combine_hidden_states (fc), then precompute_and_store_context_kv: rms_norm with hidden_norm, the k/v
        rows of each layer's qkv_proj, k_norm, RoPE at the context positions."""
        normed = self.rms(aux.float() @ self.w["fc.weight"].T, self.w["hidden_norm.weight"])
        out = []
        q_size, kv = self.nh * self.hd, self.nkv * self.hd
        for i in range(self.layers):
            k, v = (normed @ self.qkv_weight(i)[q_size:].T).split([kv, kv], -1)
            k = self.rms(k.view(-1, self.nkv, self.hd), self.w[f"layers.{i}.self_attn.k_norm.weight"])
            out.append((self.rope(k, pos), v.view(-1, self.nkv, self.hd)))
        return out

    def embed_input_ids(self, ids: Tensor) -> Tensor:
        e = self.embed[ids]
        if self.mask_vec is not None:                           # has_separate_mask_embedding
            e = torch.where((ids == self.mask_id)[:, None], self.mask_vec, e)
        return e

    def forward(self, ids: Tensor, pos: Tensor, ctx: list[tuple[Tensor, Tensor]]) -> Tensor:
        """DFlashQwen3Model.forward over one request's query block: fused residual RMSNorms, per-head q_norm /
        k_norm, non-causal attention over [context; block] (causal=False), Qwen2MLP, final norm."""
        h, residual = self.embed_input_ids(ids), None
        q_size, kv = self.nh * self.hd, self.nkv * self.hd
        for i in range(self.layers):
            p = f"layers.{i}."
            if residual is None:
                residual, h = h, self.rms(h, self.w[p + "input_layernorm.weight"])
            else:
                residual = h + residual
                h = self.rms(residual, self.w[p + "input_layernorm.weight"])
            q, k, v = (h @ self.qkv_weight(i).T).split([q_size, kv, kv], -1)
            q = self.rope(self.rms(q.view(-1, self.nh, self.hd), self.w[p + "self_attn.q_norm.weight"]), pos)
            k = self.rope(self.rms(k.view(-1, self.nkv, self.hd), self.w[p + "self_attn.k_norm.weight"]), pos)
            keys = torch.cat([ctx[i][0], k]).transpose(0, 1)    # [nkv, Tc + Tb, hd]
            vals = torch.cat([ctx[i][1], v.view(-1, self.nkv, self.hd)]).transpose(0, 1)
            rep = self.nh // self.nkv
            attn = F.softmax(q.transpose(0, 1) @ keys.repeat_interleave(rep, 0).transpose(1, 2) * self.hd ** -0.5, -1)
            o = (attn @ vals.repeat_interleave(rep, 0)).transpose(0, 1).reshape(len(ids), -1)
            residual = o @ self.w[p + "self_attn.o_proj.weight"].T + residual
            h = self.rms(residual, self.w[p + "post_attention_layernorm.weight"])
            gate, up = h @ self.w[p + "mlp.gate_proj.weight"].T, h @ self.w[p + "mlp.up_proj.weight"].T
            h = (F.silu(gate) * up) @ self.w[p + "mlp.down_proj.weight"].T
        return self.rms(h + residual, self.w["norm.weight"])

    def draft_logits(self, hidden: Tensor) -> Tensor:
        """Qwen3DSparkForCausalLM.compute_draft_logits: lm_head over the draft vocabulary."""
        return hidden @ self.w["lm_head.weight"].T

    def to_target(self, draft_ids: Tensor) -> Tensor:
        """compute_logits' scatter / map_draft_to_target: target id = draft id + d2t[draft id]."""
        return draft_ids + self.w["d2t"][draft_ids] if "d2t" in self.w else draft_ids

    # -- v1/spec_decode/dflash.py and v1/worker/gpu/spec_decode/dspark/speculator.py ----------------------------
    def block(self, aux: Tensor, root: int, n: int) -> Tensor:
        """Hidden rows of the query block [bonus, mask x n] at positions T .. T+n after T context rows
        (copy_and_expand_dflash_inputs: query position = last context position + 1 + offset)."""
        T = aux.shape[0]
        ctx = self.context_kv(aux, torch.arange(T))
        ids = torch.tensor([root] + [self.mask_id] * n)
        return self.forward(ids, torch.arange(T, T + n + 1), ctx)

    def propose_dflash(self, aux: Tensor, root: int, n: int) -> tuple[Tensor, Tensor]:
        """Greedy drafts (target ids) and their draft-vocabulary logits, sampled at the mask rows."""
        logits = self.draft_logits(self.block(aux, root, n)[1:])
        return self.to_target(logits.argmax(-1)), logits

    def propose_dspark(self, aux: Tensor, root: int, n: int) -> tuple[Tensor, Tensor]:
        """_sample_sequential (sample_from_anchor false): Markov bias from the previous token, left to right,
        and compute_confidence = sigmoid(proj([hidden, markov_embed]))."""
        hidden = self.block(aux, root, n)[1:]
        base = self.draft_logits(hidden)
        prev, drafts, conf = torch.tensor([root]), [], []
        for i in range(n):
            me = self.w["markov_head.markov_w1.weight"][prev]
            pick = (base[i] + me @ self.w["markov_head.markov_w2.weight"].T).argmax(-1)
            prev = self.to_target(pick)
            drafts.append(prev)
            x = torch.cat([hidden[i: i + 1], me], -1)
            conf.append(torch.sigmoid(x @ self.w["confidence_head.proj.weight"].T + self.w["confidence_head.proj.bias"]))
        return torch.cat(drafts), torch.cat(conf).reshape(-1)
