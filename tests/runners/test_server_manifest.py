"""What a server run's manifest says about where it ran: hardware, tensor parallel size, the engine's version."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from specbench.cli import app
from specbench.records import read_manifest
from specbench.runners.vllm import VllmRunner

cli = CliRunner()


@pytest.fixture
def server(stub_server):
    return stub_server


def run(out, url, *extra):
    return cli.invoke(app, ["run", "--engine", "vllm", "--endpoint", url, "--target", "stub-model", "--method",
                            "vanilla", "--budget", "1", "--limit", "2", "--max-new-tokens", "4", "--no-report",
                            "--option", "warmup=0", "--out", str(out), *extra])


def test_a_server_here_records_this_machine_tp_and_the_version_it_reports(server, tmp_path, monkeypatch):
    speculative = {"enabled": False, "method": None, "num_speculative_tokens": None, "model": None,
                   "enable_adaptive_verification": None, "source": "GET /server_info"}
    monkeypatch.setattr(VllmRunner, "server_facts", lambda self, base: {
        "engine_version": "0.33.0", "tensor_parallel_size": 4, "speculative": speculative})
    monkeypatch.setattr("specbench.runners.hardware.gpu_inventory", lambda run=None: None)
    res = run(tmp_path / "r", server.url, "--option", "tp=4")
    assert res.exit_code == 0, res.output
    m = read_manifest(tmp_path / "r")
    assert m["device"].startswith("cpu: ") and server.url not in m["device"]
    assert m["hardware"]["source"] == "this machine (no nvidia-smi)"
    assert (m["tensor_parallel_size"], m["engine_version"]) == (4, "0.33.0")
    assert m["server"]["tensor_parallel_size"] == 4


def test_a_declared_device_is_what_the_manifest_records(server, tmp_path):
    res = run(tmp_path / "r", server.url, "--option", "device=4x NVIDIA B300")
    assert res.exit_code == 0, res.output
    m = read_manifest(tmp_path / "r")
    assert (m["device"], m["hardware"]) == ("4x NVIDIA B300", {"source": "--option device"})
