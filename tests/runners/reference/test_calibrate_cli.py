"""`specbench calibrate` on a tiny HF-folder target: the table it writes, --if-missing, the drafter it times."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specbench.cli import app

runner = CliRunner()
GRID = ["--batches", "1", "--contexts", "16", "--tokens", "1,2", "--repeats", "1", "--threads", "1"]


def test_a_target_the_shipped_drafter_does_not_fit_is_timed_alone(tiny_target, tmp_path):
    out = tmp_path / "table.json"
    res = runner.invoke(app, ["calibrate", "--target", str(tiny_target), "--out", str(out), *GRID])
    assert res.exit_code == 0, res.output
    assert "does not fit this target" in res.output and "timing the target only" in res.output
    table = json.loads(out.read_text())
    assert table["tokens"] == [1, 2] and not table["draft_ms"]


def test_if_missing_keeps_an_existing_out_file(tiny_target, tmp_path):
    out = tmp_path / "table.json"
    out.write_text("{}")
    res = runner.invoke(app, ["calibrate", "--target", str(tiny_target), "--out", str(out), "--if-missing", *GRID])
    assert res.exit_code == 0, res.output
    assert "exists; kept" in res.output and out.read_text() == "{}"


def test_the_command_line_grid_is_the_library_default():
    import typer.main

    from reference_eagle4 import calibration

    cmd = typer.main.get_command(app).commands["calibrate"]
    params = {p.name: p.default for p in cmd.params}
    for name, const in [("batches", calibration.DEFAULT_BATCHES), ("contexts", calibration.DEFAULT_CONTEXTS),
                        ("tokens", calibration.DEFAULT_TOKENS), ("widths", calibration.DEFAULT_WIDTHS)]:
        assert tuple(int(x) for x in params[name].split(",")) == const, name


@pytest.mark.parametrize("argv,message", [
    (["--engine", "vllm"], "--drafter: the server's EAGLE-3 checkpoint"),
    (["--engine", "vllm", "--drafter", "/ckpt/e3", "--ks", "0,3"], "--ks '0,3': values must be at least 1"),
    (["--engine", "vllm", "--drafter", "/ckpt/e3", "--threads", "2"], "--threads is for --engine reference"),
    (["--endpoint", "http://127.0.0.1:8000"], "--endpoint is for server engines"),
    (["--engine", "tgi", "--drafter", "/ckpt/e3"], "the reference engine or a vllm or sglang server"),
])
def test_server_calibration_flags_are_refused_in_one_line(argv, message):
    from specbench.errors import SpecbenchError

    with pytest.raises(SpecbenchError, match=message):
        runner.invoke(app, ["calibrate", *argv], catch_exceptions=False)
