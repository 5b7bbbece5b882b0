"""Hugging Face targets as transformers writes them (Llama family and Qwen3; tied or untied heads; sharded; scaled
RoPE): the engine decodes exactly what transformers' generate decodes, and what is missing or unsupported is one
line naming it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from eagle4_helpers import one_thread  # noqa: E402,F401
from hf_checkpoints import LLAMA31_ROPE, dflash_authors_drafter, eagle3_drafter, hf_target  # noqa: E402

from reference_eagle4.checkpoints import CheckpointError  # noqa: E402
from reference_eagle4.engine import Engine, GenerationConfig, Request  # noqa: E402
from reference_eagle4.model import ModelArgs, load_transformer, rope_tables  # noqa: E402
from reference_eagle4.proposers import PROPOSERS  # noqa: E402
from reference_eagle4.weights import WeightsError, resolve_target  # noqa: E402

YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 1e6}
TARGETS = {   # kind, tied head, RoPE, head_dim
    "llama-3.1": ("llama", False, LLAMA31_ROPE, 16),
    "qwen3-tied-yarn": ("qwen3", True, YARN, 32),
}


@pytest.fixture(scope="module", params=sorted(TARGETS))
def hf(request, tiny_target, tmp_path_factory):
    """(folder, our model, transformers' model) of one target layout."""
    from transformers import AutoModelForCausalLM

    kind, tied, rope, head_dim = TARGETS[request.param]
    folder = hf_target(tmp_path_factory.mktemp(request.param) / "t", tiny_target, kind, tied=tied, rope=rope,
                       head_dim=head_dim)
    assert (folder / "model.safetensors.index.json").is_file() and len(list(folder.glob("*.safetensors"))) > 1
    return folder, load_transformer(resolve_target(str(folder))), AutoModelForCausalLM.from_pretrained(folder).eval()


def requests() -> list[Request]:
    g = torch.Generator().manual_seed(0)
    return [Request(f"q{i}", torch.randint(3, 300, (12 + 9 * i,), generator=g).tolist()) for i in range(3)]


def generate(model, method: str, budget: int, new: int = 30, **options) -> tuple[dict[str, list[int]], int]:
    """Greedy outputs at concurrency 2, and how many tokens were drafted."""
    engine = Engine(model, PROPOSERS[method](budget=budget, **options), GenerationConfig(new, concurrency=2),
                    max_len=256)
    done = {}
    engine.generate(requests(), lambda s: done.__setitem__(s.request.id, s))
    return {k: s.output for k, s in done.items()}, sum(st["drafted"] for s in done.values() for st in s.steps)


def test_the_engine_decodes_what_transformers_generates(hf):
    folder, ours, theirs = hf
    args = ModelArgs.from_hf_config(folder / "config.json")
    assert args.qk_norm == (json.loads((folder / "config.json").read_text())["model_type"] == "qwen3")
    out, _ = generate(ours, "vanilla", 1, new=40)
    for req in requests():
        ref = theirs.generate(torch.tensor([req.prompt_ids]), max_new_tokens=40, do_sample=False, eos_token_id=None,
                              pad_token_id=0)[0, len(req.prompt_ids):].tolist()
        assert out[req.id] == ref


def test_the_rope_tables_are_transformers_rotary_embedding(hf):
    _, ours, theirs = hf
    pos = torch.arange(0, 1000, 7)[None]
    cos, sin = theirs.model.rotary_emb(torch.zeros(1, dtype=torch.float32), pos)
    assert torch.allclose(ours.rope_cos[pos[0]], cos[0], atol=2e-5) and torch.allclose(ours.rope_sin[pos[0]], sin[0],
                                                                                         atol=2e-5)


def test_methods_with_published_drafters_stay_lossless(hf, tmp_path):
    folder, ours, _ = hf
    qwen3 = ours.args.qk_norm
    vocab = torch.randperm(ours.args.vocab_size, generator=torch.Generator().manual_seed(3))[:160].sort().values
    e3 = eagle3_drafter(tmp_path / "e3", folder, qwen3=qwen3, draft_vocab=vocab)
    df = dflash_authors_drafter(tmp_path / "df", folder, target_layer_ids=[0, 2, 4], block_size=5, mask_token_id=7)
    base, _ = generate(ours, "vanilla", 1)
    for method, options in (("ngram", {}), ("eagle4-chain", {"drafter": str(e3)}),
                            ("eagle4-tree", {"drafter": str(e3)}), ("dflash", {"drafter": str(df)})):
        out, drafted = generate(ours, method, 5, **options, **({} if method == "ngram" else {"dtype": "float32"}))
        assert out == base and drafted > 0, method


@pytest.fixture(scope="module")
def sharded(tiny_target, tmp_path_factory):
    return hf_target(tmp_path_factory.mktemp("sharded") / "t", tiny_target, "qwen3", tied=False, head_dim=32)


def copy(folder: Path, dst: Path) -> Path:
    return Path(shutil.copytree(folder, dst))


@pytest.mark.parametrize("damage, said", [
    (lambda f: sorted(f.glob("model-*.safetensors"))[1].unlink(),
     r"model-00002-of-\d+.safetensors: missing \(model.safetensors.index.json lists it\)"),
    (lambda f: (f / "config.json").unlink(), "config.json is missing"),
    (lambda f: (f / "tokenizer.json").unlink(), r"the tokenizer is missing \(none of tokenizer.json"),
    (lambda f: [(f / n).unlink(missing_ok=True) for n in ("chat_template.jinja", "tokenizer_config.json")],
     "the chat template is missing"),
])
def test_a_folder_missing_a_file_is_one_line_naming_it(sharded, tmp_path, damage, said):
    folder = copy(sharded, tmp_path / "t")
    damage(folder)
    with pytest.raises(WeightsError, match=f"^target {folder}: .*{said}"):
        resolve_target(str(folder))


def test_a_missing_tensor_is_one_line_naming_it(sharded, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = copy(sharded, tmp_path / "t")
    index = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    name = "model.layers.3.self_attn.k_norm.weight"
    shard = folder / index[name]
    state = load_file(str(shard))
    del state[name]
    save_file(state, str(shard))
    with pytest.raises(CheckpointError, match=f"^{folder}: no tensor '{name}'"):
        load_transformer(folder)


@pytest.mark.parametrize("edit, said", [
    ({"model_type": "qwen2"}, "model_type 'qwen2' is not a target the reference engine runs"),
    ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e6}},
     "rope type 'dynamic' is not one the reference engine computes"),
    ({"attention_bias": True}, "attention_bias is not supported"),
    ({"use_sliding_window": True}, "use_sliding_window is not supported"),
])
def test_a_target_the_engine_would_run_wrongly_is_refused_in_one_line(sharded, tmp_path, edit, said):
    folder = copy(sharded, tmp_path / "t")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **edit}))
    with pytest.raises(WeightsError, match=f"^{folder / 'config.json'}: {said}"):
        resolve_target(str(folder))


def test_the_default_targets_rope_is_unchanged():
    """Plain RoPE keeps its float64 tables (the shipped drafters were trained on them)."""
    args = ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, intermediate=128, vocab_size=64,
                     norm_eps=1e-5, rope_theta=100000.0, max_position=256, tie_embeddings=True)
    inv = 1.0 / (100000.0 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16))
    ang = torch.outer(torch.arange(256, dtype=torch.float64), inv).repeat(1, 2)
    cos, sin = rope_tables(args)
    assert torch.equal(cos, ang.cos().float()) and torch.equal(sin, ang.sin().float())
