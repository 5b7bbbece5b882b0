"""`--device` on run, compare, calibrate and serve: the CPU runs and records its (null) GPU facts, a GPU this
machine lacks is one line, and a CPU run imports nothing CUDA-only."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from specbench.cli import app
from specbench.errors import SpecbenchError

cli = CliRunner()
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
GPU_FIELDS = {"name", "count", "capability", "cuda", "torch", "triton", "driver"}


def run(target, out, *flags):
    return cli.invoke(app, ["run", "--target", str(target), "--method", "vanilla", "--budget", "1", "--limit", "2",
                            "--max-new-tokens", "6", "--dtype", "float32", "--no-report", "--out", str(out), *flags],
                      catch_exceptions=False)


def test_a_cpu_run_records_the_gpu_fields_empty(tiny_target, tmp_path):
    res = run(tiny_target, tmp_path / "run", "--device", "cpu")
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["device"].startswith("cpu: ")
    assert set(manifest["gpu"]) == GPU_FIELDS and all(v is None for v in manifest["gpu"].values())
    assert manifest["cuda_graphs"] is False                    # the CPU has none to replay


@no_gpu
@pytest.mark.parametrize("command", [
    ["run", "--method", "vanilla", "--budget", "1", "--limit", "1"],
    ["compare", "--methods", "ngram", "--limit", "1"],
    ["calibrate", "--batches", "1", "--contexts", "16", "--tokens", "1"],
])
def test_cuda_on_a_machine_without_one_is_one_line(tiny_target, tmp_path, command):
    with pytest.raises(SpecbenchError, match=r"^--device 'cuda:1': torch sees no CUDA GPU .*use --device cpu$"):
        cli.invoke(app, [*command, "--target", str(tiny_target), "--device", "cuda:1", "--out", str(tmp_path / "o")],
                   catch_exceptions=False)


@no_gpu
def test_serve_refuses_cuda_on_a_machine_without_one(tiny_target):
    with pytest.raises(SpecbenchError, match="torch sees no CUDA GPU"):
        cli.invoke(app, ["serve", "--target", str(tiny_target), "--device", "cuda", "--port", "0"],
                   catch_exceptions=False)


@pytest.mark.parametrize("device", ["gpu", "cuda:x"])
def test_a_device_name_it_does_not_know_is_one_line(tiny_target, tmp_path, device):
    with pytest.raises(SpecbenchError, match=f"^--device '{device}': choose auto, cpu, cuda or cuda:N$"):
        run(tiny_target, tmp_path / "run", "--device", device)


def test_a_server_engine_refuses_the_reference_engines_device(tmp_path):
    with pytest.raises(SpecbenchError, match="--device cuda: the reference engine's device; a vllm server"):
        cli.invoke(app, ["run", "--engine", "vllm", "--endpoint", "http://127.0.0.1:9", "--device", "cuda",
                         "--out", str(tmp_path / "o")], catch_exceptions=False)


def test_calibrating_a_server_refuses_the_reference_engines_device():
    with pytest.raises(SpecbenchError, match="--device is for --engine reference"):
        cli.invoke(app, ["calibrate", "--engine", "vllm", "--drafter", "/ckpt/e3", "--device", "cpu"],
                   catch_exceptions=False)


def test_a_cpu_run_imports_no_gpu_kernel(tiny_target):
    """The Triton kernels' modules import Triton, which decides at its import between the GPU and its CPU
    interpreter: a CPU run never imports them (torch itself may import Triton's package to probe for it)."""
    script = (
        "import sys\n"
        "from reference_eagle4.engine import Request\n"
        "from specbench.runners.reference.runner import ReferenceRunner\n"
        "from specbench.settings import Settings\n"
        "r = ReferenceRunner(sys.argv[1], 'float32', 1, device='auto')\n"
        "e = r.make_engine(Settings('ngram', 4, 1, 6), 128)\n"
        "e.generate([Request('a', [5, 6, 7, 5, 6])], lambda s: None)\n"
        "print(sorted(m for m in sys.modules if m.endswith(('tree_attention_triton', 'lowrank_head_triton'))))\n")
    done = subprocess.run([sys.executable, "-c", script, str(tiny_target)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
