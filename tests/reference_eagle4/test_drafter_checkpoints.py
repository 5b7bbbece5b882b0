"""Drafters in their published layouts: EAGLE-3 checkpoints (the Llama-3.1-8B and Qwen3 drafters' layout, as vLLM
0.33.0's llama_eagle3.py / qwen3_eagle3.py load it) and DFlash checkpoints in the DFlash authors' layout draft what
vLLM's own drafting computes over the same checkpoint, keep the engine lossless, and an export read back drafts as the
drafter it came from."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

sys.path.insert(0, str(Path(__file__).parent))
from eagle4_helpers import one_thread  # noqa: E402,F401
from hf_checkpoints import dflash_authors_drafter, eagle3_drafter, hf_target  # noqa: E402
from test_export_dflash import tiny_drafter as our_dflash  # noqa: E402
from vllm_dflash_twin import VllmDFlashTwin  # noqa: E402

from reference_eagle4.checkpoints import CheckpointError, Tensors, read_tensors  # noqa: E402
from reference_eagle4.drafters.dflash_model import load_dflash  # noqa: E402
from reference_eagle4.drafters.eagle4_model import load_drafter  # noqa: E402
from reference_eagle4.engine import Engine, GenerationConfig, Request, Sequence  # noqa: E402
from reference_eagle4.export_dflash import export_dflash  # noqa: E402
from reference_eagle4.model import load_transformer  # noqa: E402
from reference_eagle4.proposers import PROPOSERS  # noqa: E402

MASK_ID = 7
DRAFTS = 4


@pytest.fixture(scope="module")
def qwen3(tiny_target, tmp_path_factory):
    """A Qwen3 target (untied head, head_dim 32 != hidden / heads, sharded) and transformers' model of it."""
    from transformers import Qwen3ForCausalLM

    folder = hf_target(tmp_path_factory.mktemp("qwen3") / "t", tiny_target, "qwen3", tied=False, head_dim=32)
    return folder, load_transformer(folder), Qwen3ForCausalLM.from_pretrained(folder).eval()


def draft_vocab(V: int, n: int) -> Tensor:
    return torch.randperm(V, generator=torch.Generator().manual_seed(4))[:n].sort().values


def context(hf, n: int = 13, seed: int = 5) -> tuple[list[int], list[Tensor]]:
    """Tokens (the last one the root) and transformers' hidden states entering each layer for all but the root."""
    tokens = torch.randint(3, 300, (n + 1,), generator=torch.Generator().manual_seed(seed)).tolist()
    tokens[-1] = 9 if tokens[-1] == MASK_ID else tokens[-1]
    with torch.no_grad():
        states = hf(torch.tensor([tokens[:n]]), output_hidden_states=True).hidden_states
    return tokens, [s[0] for s in states]


def our_drafts(method: str, folder: Path, target, tokens: list[int], hidden: list[Tensor],
               n: int = DRAFTS) -> list[int]:
    """Our proposer's chain of n drafts after the prefill of tokens[:-1], fed the hidden states entering its
    capture layers."""
    extra = {"early_stop": False, "int8": False} if method.startswith("eagle4") else {}
    prop = PROPOSERS[method](budget=n + 1, drafter=str(folder), dtype="float32", **extra)
    prop.bind(target)
    seq = Sequence(Request("x", tokens[:-1]), slot=0, generator=None, tokens=list(tokens))
    prop.begin(seq, [hidden[i] for i in prop.capture])
    return prop.propose([seq])[0].tokens[1:]


# -- vLLM 0.33.0's EAGLE-3 drafting, written from its source ---------------------------------------------------
def rms(x: Tensor, w: Tensor, eps: float = 1e-6) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x: Tensor, pos: Tensor, theta: float) -> Tensor:
    """x [T, heads, hd], neox style (rotary_embedding with is_neox_style)."""
    hd = x.shape[-1]
    ang = torch.outer(pos.double(), 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    cos, sin = ang.cos().float()[:, None], ang.sin().float()[:, None]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def vllm_eagle3_chain(folder: Path, target: Path, aux: Tensor, tokens: list[int], n: int) -> list[int]:
    """Greedy EAGLE-3 drafting as vLLM runs it (v1/spec_decode/llm_base_proposer.py): the first pass pairs the
    fc-combined target features of positions 0..T-1 with tokens 1..T (input ids shifted by one), each further pass
    one (pre-norm output, drafted token) pair at the next position; every pass attends causally over all pairs.
    The layer is llama_eagle3.py's LlamaDecoderLayer (qwen3_eagle3.py's adds Qwen3Attention's per-head q/k norms):
    cat[input_layernorm(embed), hidden_norm(h)], residual h (hidden_norm(h) with norm_before_residual), then
    norm(mlp + residual) -> lm_head over the draft vocabulary -> compute_logits' d2t scatter."""
    import json

    cfg = json.loads((folder / "config.json").read_text())
    w = {k: v.float() if v.is_floating_point() else v for k, v in read_tensors(folder, bins=True).items()}
    emb = w.get("embed_tokens.weight")
    if emb is None:
        emb = Tensors(target).get("model.embed_tokens.weight").float()
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
    p = "midlayer."
    keys, vals, drafts = [], [], []
    h, ids = aux @ w["fc.weight"].T, torch.tensor(tokens[1:])
    pos = torch.arange(len(ids))
    for _ in range(n):
        x = torch.cat([rms(emb[ids], w[p + "input_layernorm.weight"]), rms(h, w[p + "hidden_norm.weight"])], -1)
        residual = x[:, emb.shape[1]:] if cfg.get("norm_before_residual") else h
        q, k, v = (x @ torch.cat([w[p + f"self_attn.{c}_proj.weight"] for c in "qkv"]).T).split(
            [nh * hd, nkv * hd, nkv * hd], -1)
        q, k, v = q.view(-1, nh, hd), k.view(-1, nkv, hd), v.view(-1, nkv, hd)
        if p + "self_attn.q_norm.weight" in w:
            q, k = rms(q, w[p + "self_attn.q_norm.weight"]), rms(k, w[p + "self_attn.k_norm.weight"])
        keys.append(rope(k, pos, theta))
        vals.append(v)
        K, Vv = torch.cat(keys), torch.cat(vals)
        qpos, kpos = pos[:, None], torch.cat([torch.arange(len(K) - len(pos)), pos])[None]
        attn = F.scaled_dot_product_attention(rope(q, pos, theta).transpose(0, 1), K.transpose(0, 1),
                                              Vv.transpose(0, 1), attn_mask=kpos <= qpos, enable_gqa=True)
        residual = attn.transpose(0, 1).reshape(len(ids), -1) @ w[p + "self_attn.o_proj.weight"].T + residual
        m = rms(residual, w[p + "post_attention_layernorm.weight"])
        prenorm = (F.silu(m @ w[p + "mlp.gate_proj.weight"].T) * (m @ w[p + "mlp.up_proj.weight"].T)) \
            @ w[p + "mlp.down_proj.weight"].T + residual
        best = (rms(prenorm[-1], w["norm.weight"]) @ w["lm_head.weight"].T).argmax()
        drafts.append(int(best + w["d2t"][best]))
        h, ids, pos = prenorm[-1:], torch.tensor(drafts[-1:]), pos[-1:] + 1
    return drafts


@pytest.mark.parametrize("layout", [
    dict(qwen3=True, own_embed=True, norm_before_residual=True, layer_ids=[0, 2, 4]),   # Qwen3 (SpecForge ids)
    dict(qwen3=False, bins=True, max_position=8),       # as the Llama-3.1-8B drafter: .bin, no ids, a short context
])
def test_an_eagle3_checkpoint_drafts_what_vllm_drafts_from_it(qwen3, tmp_path, layout):
    folder, target, hf = qwen3
    e3 = eagle3_drafter(tmp_path / "e3", folder, draft_vocab=draft_vocab(target.args.vocab_size, 120), **layout)
    d = load_drafter(e3)
    assert d.cfg.kind == "eagle3" and d.cfg.draft_vocab_size == 120 and d.cfg.qk_norm == layout["qwen3"]
    tokens, hidden = context(hf)
    ours = our_drafts("eagle4-chain", e3, target, tokens, hidden)
    capture = d.cfg.capture_layers or target.args.eagle_layers
    assert ours == vllm_eagle3_chain(e3, folder, torch.cat([hidden[i] for i in capture], -1), tokens, DRAFTS)
    assert set(ours) <= set(draft_vocab(target.args.vocab_size, 120).tolist())


def test_a_dflash_authors_checkpoint_drafts_what_vllm_drafts_from_it(qwen3, tmp_path):
    """Four target layers, the MASK as the target's embedding row, the target's lm_head (none of its own), a context
    shorter than the target's (its RoPE tables grow to the target's)."""
    folder, target, hf = qwen3
    ck = dflash_authors_drafter(tmp_path / "df", folder, target_layer_ids=[0, 2, 3, 5], block_size=DRAFTS + 1,
                                mask_token_id=MASK_ID, max_position=8)
    d = load_dflash(ck)
    assert d.cfg.capture_layers == (1, 3, 4, 6) and d.cfg.qk_norm and d.cfg.rope_theta == 1e6
    tokens, hidden = context(hf)
    twin = VllmDFlashTwin(ck, Tensors(folder).get("model.embed_tokens.weight"))
    twin.w["lm_head.weight"] = Tensors(folder).get("lm_head.weight").float()     # shared with the target
    twin.theta = 1e6
    aux = torch.cat([hidden[i] for i in twin.aux_layer_ids()], -1)
    assert our_drafts("dflash", ck, target, tokens, hidden) == twin.propose_dflash(aux, tokens[-1], DRAFTS)[0].tolist()


def test_a_dflash_export_read_back_drafts_as_the_drafter_it_came_from(tiny_target, tmp_path):
    """export_dflash folds no norms into ours: the loaded export runs real q/k norms in their linear regime."""
    from transformers import LlamaForCausalLM

    src, _ = our_dflash(tiny_target, tmp_path / "ours", markov_rank=0)
    out = export_dflash(src, tmp_path / "export", tiny_target, dtype="float32", mask_token_id=MASK_ID)
    back = load_dflash(out)
    assert back.cfg.qk_norm and back.cfg.mask_row is None and back.cfg.own_head
    target, hf = load_transformer(tiny_target), LlamaForCausalLM.from_pretrained(tiny_target).eval()
    tokens, hidden = context(hf)
    n = back.cfg.block_size - 1
    assert our_drafts("dflash", out, target, tokens, hidden, n) == our_drafts("dflash", src, target, tokens, hidden, n)


def run(target, method: str, drafter: Path | None, budget: int = DRAFTS + 1) -> tuple[dict[str, list[int]], int]:
    """Greedy outputs of three requests at concurrency 2, and how many tokens were drafted."""
    extra = {"drafter": str(drafter), "dtype": "float32"} if drafter else {}
    if method == "eagle4-harness":
        from lossless_helpers import FLAT_TABLE

        extra.update(table=FLAT_TABLE, datastore="off")
    engine = Engine(target, PROPOSERS[method](budget=budget, **extra), GenerationConfig(24, concurrency=2), max_len=256)
    g = torch.Generator().manual_seed(1)
    reqs = [Request(f"q{i}", torch.randint(3, 300, (9 + 5 * i,), generator=g).tolist()) for i in range(3)]
    done: dict[str, Sequence] = {}
    engine.generate(reqs, lambda s: done.__setitem__(s.request.id, s))
    return {k: s.output for k, s in done.items()}, sum(st["drafted"] for s in done.values() for st in s.steps)


def test_published_layouts_keep_every_method_lossless(qwen3, tmp_path):
    folder, target, _ = qwen3
    e3 = eagle3_drafter(tmp_path / "e3", folder, qwen3=True, draft_vocab=draft_vocab(target.args.vocab_size, 200))
    df = dflash_authors_drafter(tmp_path / "df", folder, target_layer_ids=[1, 3, 5], block_size=6,
                                mask_token_id=MASK_ID)
    base, _ = run(target, "vanilla", None, 1)
    for method, drafter, budget in (("eagle4-chain", e3, 5), ("eagle4-tree", e3, 5), ("eagle4-harness", e3, 5),
                                    ("dflash", df, 6)):
        outputs, drafted = run(target, method, drafter, budget)
        assert outputs == base and drafted > 0, method


def test_a_drafter_for_another_method_or_a_missing_tensor_is_one_line(qwen3, tmp_path):
    folder, target, _ = qwen3
    e3 = eagle3_drafter(tmp_path / "e3", folder, qwen3=True, draft_vocab=draft_vocab(target.args.vocab_size, 50))
    df = dflash_authors_drafter(tmp_path / "df", folder, target_layer_ids=[1, 3, 5], block_size=6,
                                mask_token_id=MASK_ID)
    with pytest.raises(CheckpointError, match=f"^{e3} holds an EAGLE-3 checkpoint, which eagle4-chain, .* not dflash"):
        load_dflash(e3)
    with pytest.raises(CheckpointError, match=f"^{df} holds a DFlash checkpoint .*, which dflash loads, not the EAGLE"):
        load_drafter(df)
    from safetensors.torch import load_file, save_file

    state = load_file(str(e3 / "model.safetensors"))
    del state["midlayer.self_attn.k_norm.weight"]
    save_file(state, str(e3 / "model.safetensors"))
    with pytest.raises(CheckpointError, match=f"^{e3}: no tensor 'midlayer.self_attn.k_norm.weight'"):
        load_drafter(e3)
