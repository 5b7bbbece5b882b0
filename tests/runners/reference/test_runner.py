"""The reference runner on targets and drafters a user brings: an untied LM head, a drafter for another target."""

from __future__ import annotations

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
