"""What a server runs on, as the manifest records it."""

from __future__ import annotations

import subprocess

import pytest

from specbench.runners.hardware import UNKNOWN, gpu_inventory, is_local, server_hardware

QUERY = "NVIDIA B300, 183359, 580.65.06\nNVIDIA B300, 183359, 580.65.06\nNVIDIA B300, 183359, 580.65.06\n" \
        "NVIDIA B300, 183359, 580.65.06\n"
HEADER = "| NVIDIA-SMI 580.65.06    Driver Version: 580.65.06    CUDA Version: 13.0     |\n"


def fake_smi(query: str = QUERY, header: str = HEADER, code: int = 0):
    def run(argv, **kwargs):
        if argv[0] != "nvidia-smi":
            raise AssertionError(argv)
        out = query if any(a.startswith("--query-gpu") for a in argv) else header
        return subprocess.CompletedProcess(argv, code, out, "")
    return run


def no_smi(argv, **kwargs):
    raise FileNotFoundError("nvidia-smi")


def test_gpus_from_nvidia_smi(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus = gpu_inventory(fake_smi())
    assert (gpus["name"], gpus["count"], gpus["driver"], gpus["cuda"]) == ("NVIDIA B300", 4, "580.65.06", "13.0")
    assert gpus["memory_mib"] == [183359] * 4
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2")
    assert gpu_inventory(fake_smi())["count"] == 2


def test_no_gpu_facts_without_nvidia_smi_or_when_it_fails():
    assert gpu_inventory(no_smi) is None
    assert gpu_inventory(fake_smi(code=9)) is None
    assert gpu_inventory(fake_smi(query="")) is None


@pytest.mark.parametrize("endpoint, local", [(None, True), ("http://127.0.0.1:8000", True),
                                             ("http://localhost:30000", True), ("http://10.0.0.5:8000", False),
                                             ("https://gpu-node.example:443", False)])
def test_which_servers_are_on_this_machine(endpoint, local):
    assert is_local(endpoint) is local


def test_the_device_label_a_speedup_is_matched_on(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert server_hardware(None, run=fake_smi())["device"] == "4x NVIDIA B300"
    assert server_hardware("http://127.0.0.1:8000", run=no_smi)["device"].startswith("cpu: ")
    assert server_hardware("http://10.0.0.5:8000", run=fake_smi())["device"] == UNKNOWN
    declared = server_hardware("http://10.0.0.5:8000", "8x NVIDIA H100", run=fake_smi())
    assert declared == {"device": "8x NVIDIA H100", "hardware": {"source": "--option device"}}
