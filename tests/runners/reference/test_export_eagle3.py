"""EAGLE-4 -> EAGLE-3 export: the layout vLLM / SGLang load, and the same drafter when read back."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from reference_eagle4.drafters.eagle4_model import Eagle4Config, Eagle4Drafter, load_drafter
from reference_eagle4.export import target_head
from reference_eagle4.model import ModelArgs
from specbench.cli import app

EAGLE3_KEYS = {
    "fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d",
    *(f"midlayer.{n}.weight" for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm")),
    *(f"midlayer.self_attn.{n}_proj.weight" for n in "qkvo"),
    *(f"midlayer.mlp.{n}_proj.weight" for n in ("gate", "up", "down")),
}


def tiny_drafter_dir(target_folder, folder):
    """A random EAGLE-4 drafter for the tiny HF target, built as the drafter tests build theirs."""
    args = ModelArgs.from_hf_config(target_folder / "config.json")
    cfg = Eagle4Config.for_target(args, window=16, rank=16, topk_candidates=32)
    torch.manual_seed(1)
    d = Eagle4Drafter(cfg)
    d.reset_parameters(std=0.1)
    d.save(folder, dtype=None)
    return folder, args


def test_export_writes_the_eagle3_layout_and_reads_back_as_the_same_drafter(tiny_target, tmp_path):
    src, args = tiny_drafter_dir(tiny_target, tmp_path / "eagle4")
    out = tmp_path / "eagle3"
    res = CliRunner().invoke(app, ["export-eagle3", str(src), "--out", str(out), "--target", str(tiny_target),
                                   "--dtype", "float32"])
    assert res.exit_code == 0, res.output
    state = load_file(str(out / "model.safetensors"))
    assert set(state) == EAGLE3_KEYS                                  # no low-rank factors, full head
    head = target_head(tiny_target)
    assert torch.equal(state["lm_head.weight"], head.float())
    assert state["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * args.dim      # [embedding, hidden]
    assert state["fc.weight"].shape == (args.dim, 3 * args.dim)
    assert not state["d2t"].any() and state["t2d"].all()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert cfg["draft_vocab_size"] == cfg["vocab_size"] == args.vocab_size
    capture = list(args.eagle_layers)
    assert cfg["eagle_aux_hidden_state_layer_ids"] == capture                        # vLLM: layer inputs
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [i - 1 for i in capture]   # SGLang: outputs
    assert cfg["specbench_export"]["dropped"] == {"sliding_window": 16, "lowrank_head_rank": 16}
    assert cfg["target_num_hidden_layers"] == args.n_layers

    ours, back = load_drafter(src), load_drafter(out)
    assert back.cfg.kind == "eagle3" and back.cfg.head == "full" and back.cfg.window is None
    assert tuple(back.cfg.capture_layers) == tuple(ours.cfg.capture_layers)
    for name in ("fc", "qkv", "o", "gate_up", "down"):
        assert torch.equal(getattr(back, name).weight, getattr(ours, name).weight), name
    # what the engines run = our drafter with the full head and no window
    ours.set_options(window=None, head="full")
    ours.attach(head, head)
    back.attach(head, None)
    h = torch.randn(5, args.dim)
    (v1, i1), (v2, i2) = ours.topk(h, 4), back.topk(h, 4)
    assert torch.equal(i1, i2) and torch.allclose(v1, v2, atol=1e-5)


def test_export_refuses_without_the_target_head(tiny_target, tmp_path):
    import pytest

    from reference_eagle4.export import export_eagle3

    src, _ = tiny_drafter_dir(tiny_target, tmp_path / "eagle4")
    with pytest.raises(ValueError, match="target folder"):
        export_eagle3(src, tmp_path / "out", None)


def test_an_export_loaded_as_a_drafter_drafts_every_tree_the_original_drafts(tiny_target, tmp_path):
    """Through `--option drafter=EXPORT`: the same trees, step after step, as our drafter run the way the export
    runs it (full head, no window), so an EAGLE-3 checkpoint behaves in the reference engine as the engines run it."""
    from reference_eagle4.engine import Engine, GenerationConfig, Request
    from reference_eagle4.model import load_transformer
    from reference_eagle4.proposers import PROPOSERS

    src, args = tiny_drafter_dir(tiny_target, tmp_path / "eagle4")
    out = tmp_path / "eagle3"
    res = CliRunner().invoke(app, ["export-eagle3", str(src), "--out", str(out), "--target", str(tiny_target),
                                   "--dtype", "float32"])
    assert res.exit_code == 0, res.output
    target = load_transformer(tiny_target)
    g = torch.Generator().manual_seed(2)
    reqs = [Request(f"q{i}", torch.randint(3, 300, (8 + 6 * i,), generator=g).tolist()) for i in range(3)]

    def trees(drafter, **options):
        prop = PROPOSERS["eagle4-tree"](budget=6, drafter=str(drafter), dtype="float32", int8=False, **options)
        seen, propose = [], prop.propose

        def recorded(seqs):
            drafted = propose(seqs)
            seen.append([(t.tokens, t.parents) for t in drafted])
            return drafted

        prop.propose = recorded
        Engine(target, prop, GenerationConfig(20, concurrency=2), max_len=200).generate(reqs, lambda s: None)
        return seen

    ours = trees(src, window="none", head="full")
    assert ours and ours == trees(out)
    assert sum(len(tokens) - 1 for step in ours for tokens, _ in step) > len(ours)     # trees, not bare roots
