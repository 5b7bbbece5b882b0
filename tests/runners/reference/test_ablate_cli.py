"""`specbench ablate` times one drafting step per EAGLE-4 ablation on a real context and says which costs what."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from specbench.cli import app
from specbench.errors import SpecbenchError

runner = CliRunner()


def drafter_folder(target: Path, folder: Path) -> Path:
    from reference_eagle4.drafters.eagle4_model import Eagle4Config, Eagle4Drafter
    from reference_eagle4.model import load_transformer

    args = load_transformer(target).args
    d = Eagle4Drafter(Eagle4Config.for_target(args, window=16, rank=16, topk_candidates=32))
    d.reset_parameters(std=0.1)
    return d.save(folder)


def test_ablate_times_every_variant_on_the_same_context(tiny_target, tmp_path):
    folder = drafter_folder(tiny_target, tmp_path / "drafter")
    out = tmp_path / "ablate.json"
    res = runner.invoke(app, ["ablate", "--target", str(tiny_target), "--drafter", str(folder), "--budget", "8",
                              "--reps", "2", "--continue-tokens", "8", "--threads", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert set(data["ms_per_step"]) == {"shipped (low-rank head, sliding window)", "full head", "full attention",
                                        "full head + full attention"}
    assert all(ms > 0 for ms in data["ms_per_step"].values())
    assert "head=full" in res.output and "vs shipped" in res.output


def test_ablate_names_the_flag_it_cannot_use(tiny_target):
    res = runner.invoke(app, ["ablate", "--target", str(tiny_target), "--method", "ngram"])
    assert isinstance(res.exception, SpecbenchError) and "--method" in str(res.exception)
