"""`specbench export-dflash`: what it prints for a good export, and one line naming the problem for a bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from reference_eagle4.drafters.dflash_model import DFlashConfig, DFlashDrafter
from reference_eagle4.model import ModelArgs
from specbench.cli import app
from specbench.errors import SpecbenchError


def drafter_dir(target_folder, folder, markov_rank: int = 0):
    args = ModelArgs.from_hf_config(target_folder / "config.json")
    torch.manual_seed(0)
    DFlashDrafter(DFlashConfig.for_target(args, block_size=6, markov_rank=markov_rank)).save(folder)
    return folder


def export(*argv: str):
    return CliRunner().invoke(app, ["export-dflash", *map(str, argv)])


def one_line_error(res) -> str:
    assert isinstance(res.exception, SpecbenchError), res.output
    assert "\n" not in str(res.exception)
    return str(res.exception)


def test_export_names_the_vllm_method_and_the_like_for_like_budget(tiny_target, tmp_path):
    src = drafter_dir(tiny_target, tmp_path / "dspark", markov_rank=4)
    res = export(src, "--out", tmp_path / "out", "--target", tiny_target, "--mask-token-id", 5)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert '"method": "dspark"' in text and '"num_speculative_tokens": 5' in text and "--budget 6" in text
    assert "never float16" in text and "adaptive verification" in text
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3DSparkModel"] and cfg["dflash_config"]["mask_token_id"] == 5


@pytest.mark.parametrize("missing", ["config.json", "model.safetensors"])
def test_a_missing_drafter_file_is_one_line_naming_it(tiny_target, tmp_path, missing):
    src = drafter_dir(tiny_target, tmp_path / "dflash")
    (src / missing).unlink()
    msg = one_line_error(export(src, "--out", tmp_path / "out", "--target", tiny_target, "--mask-token-id", 5))
    assert str(src / missing) in msg and "missing" in msg
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, words", [
    (["--dtype", "float16"], "float16 cannot hold"),
    (["--method", "dspark"], "no Markov or confidence head"),
    (["--method", "eagle3"], "--method must be dflash or dspark"),
    (["--mask-token-id", "100000"], "--mask-token-id 100000: outside the target vocabulary"),
    ([], "pass --mask-token-id"),        # the tiny tokenizer's special tokens are all BOS/EOS/PAD/UNK
])
def test_an_export_that_cannot_be_made_is_one_line(tiny_target, tmp_path, flags, words):
    src = drafter_dir(tiny_target, tmp_path / "dflash")
    extra = [] if "--mask-token-id" in flags or not flags else ["--mask-token-id", "5"]
    msg = one_line_error(export(src, "--out", tmp_path / "out", "--target", tiny_target, *flags, *extra))
    assert words in msg


def test_an_eagle4_folder_is_named_as_not_a_dflash_drafter(tiny_target, tmp_path):
    src = drafter_dir(tiny_target, tmp_path / "eagle4")
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**cfg, "model_type": "eagle4"}))
    msg = one_line_error(export(src, "--out", tmp_path / "out", "--target", tiny_target, "--mask-token-id", 5))
    assert msg.startswith(str(src)) and "holds an EAGLE-4 drafter" in msg and "not dflash" in msg


def test_a_target_of_another_shape_is_one_line(tiny_target, tmp_path):
    src = drafter_dir(tiny_target, tmp_path / "dflash")
    other = tmp_path / "other-target"
    other.mkdir()
    from safetensors.torch import save_file

    save_file({"model.embed_tokens.weight": torch.zeros(10, 8)}, str(other / "model.safetensors"))
    config = json.loads((Path(tiny_target) / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "hidden_size": 8}))
    for f in Path(tiny_target).iterdir():          # the same tokenizer and chat template: only the shape differs
        if f.is_file() and f.suffix != ".safetensors" and f.name != "config.json":
            shutil.copy(f, other / f.name)
    msg = one_line_error(export(src, "--out", tmp_path / "out", "--target", other, "--mask-token-id", 5))
    assert "another target?" in msg and str(other) in msg


def test_an_out_folder_that_is_the_drafter_or_a_file_is_one_line(tiny_target, tmp_path):
    src = drafter_dir(tiny_target, tmp_path / "dflash")
    weights = (src / "model.safetensors").read_bytes()
    msg = one_line_error(export(src, "--out", src, "--target", tiny_target, "--mask-token-id", 5))
    assert "is the drafter folder itself" in msg and (src / "model.safetensors").read_bytes() == weights
    (tmp_path / "file").write_text("x")
    msg = one_line_error(export(src, "--out", tmp_path / "file", "--target", tiny_target, "--mask-token-id", 5))
    assert f"--out {tmp_path / 'file'}: cannot create the folder" in msg
