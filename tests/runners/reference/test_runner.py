"""The reference runner on targets and drafters a user brings: an untied LM head, a drafter for another target."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specbench.cli import app
from specbench.errors import SpecbenchError
from specbench.records import read_records

sys.path.insert(0, str(Path(__file__).parent))
from test_ablate_cli import drafter_folder  # noqa: E402

cli = CliRunner()


def run(target, out, method, *options):
    return cli.invoke(app, ["run", "--target", str(target), "--method", method, "--budget", "4", "--limit", "3",
                            "--max-new-tokens", "12", "--dtype", "float32", "--no-report", "--out", str(out),
                            *[arg for o in options for arg in ("--option", o)]], catch_exceptions=False)


def test_a_drafter_runs_on_a_target_with_an_untied_head(untied_tiny_target, tmp_path):
    """The runner packs the target's linears once, before any drafter binds; the drafter still reads the head."""
    untied_target = untied_tiny_target
    drafter = drafter_folder(untied_target, tmp_path / "drafter")
    assert run(untied_target, tmp_path / "vanilla", "vanilla").exit_code == 0
    res = run(untied_target, tmp_path / "chain", "eagle4-chain", f"drafter={drafter}")
    assert res.exit_code == 0, res.output
    base = {r["question_id"]: r["output_token_ids"] for r in read_records(tmp_path / "vanilla")}
    assert {r["question_id"]: r["output_token_ids"] for r in read_records(tmp_path / "chain")} == base


def test_a_drafter_made_for_another_target_is_one_line(tiny_target, tmp_path):
    with pytest.raises(SpecbenchError, match=r"--method eagle4-chain: drafter \(vocab 49152.*does not fit"):
        run(tiny_target, tmp_path / "chain", "eagle4-chain")


@pytest.fixture(scope="module")
def qwen3_with_drafters(tiny_target, tmp_path_factory):
    """A sharded Qwen3 target with the tiny target's tokenizer and chat template, an EAGLE-3 checkpoint (Qwen3
    layer, reduced draft vocabulary) and a DFlash checkpoint in the DFlash authors' layout."""
    import torch

    sys.path.insert(0, str(Path(__file__).parents[2] / "reference_eagle4"))
    from hf_checkpoints import dflash_authors_drafter, eagle3_drafter, hf_target

    root = tmp_path_factory.mktemp("qwen3")
    target = hf_target(root / "target", tiny_target, "qwen3", tied=False, head_dim=32)
    vocab = torch.randperm(320, generator=torch.Generator().manual_seed(0))[:200].sort().values
    return (target, eagle3_drafter(root / "eagle3", target, qwen3=True, draft_vocab=vocab),
            dflash_authors_drafter(root / "dflash", target, target_layer_ids=[1, 3, 5], block_size=4,
                                   mask_token_id=7))


def test_published_checkpoints_run_on_a_qwen3_target_and_match_vanilla(qwen3_with_drafters, tmp_path):
    target, eagle3, dflash = qwen3_with_drafters
    assert run(target, tmp_path / "vanilla", "vanilla").exit_code == 0
    base = {r["question_id"]: r["output_token_ids"] for r in read_records(tmp_path / "vanilla")}
    for method, drafter in (("eagle4-tree", eagle3), ("dflash", dflash)):
        res = run(target, tmp_path / method, method, f"drafter={drafter}")
        assert res.exit_code == 0, res.output
        assert {r["question_id"]: r["output_token_ids"] for r in read_records(tmp_path / method)} == base, method


def test_a_drafter_of_another_methods_layout_is_one_line(qwen3_with_drafters, tmp_path):
    target, eagle3, _ = qwen3_with_drafters
    with pytest.raises(SpecbenchError, match=f"^--method dflash: {eagle3} holds an EAGLE-3 checkpoint, which "
                                             "eagle4-chain, eagle4-tree or eagle4-harness loads, not dflash$"):
        run(target, tmp_path / "x", "dflash", f"drafter={eagle3}")


def test_a_target_without_a_chat_template_is_one_line(qwen3_with_drafters, tmp_path):
    import shutil

    target = Path(shutil.copytree(qwen3_with_drafters[0], tmp_path / "target"))
    (target / "chat_template.jinja").unlink(missing_ok=True)
    cfg = json.loads((target / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (target / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(SpecbenchError, match=f"^target {target}: the chat template is missing"):
        run(target, tmp_path / "x", "vanilla")
