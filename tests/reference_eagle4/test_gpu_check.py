"""The GPU check script runs end to end on small shapes on the CPU, so it cannot rot between GPU sessions."""

from __future__ import annotations

import json

from reference_eagle4 import gpu_check


def test_the_tiny_check_runs_every_method_and_writes_one_json(tmp_path, capsys):
    assert gpu_check.main(["--out", str(tmp_path), "--device", "cpu", "--tiny", "--dtypes", "float32"]) == 0
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert report["ok"] and report["device"].startswith("cpu: ")
    assert set(report["gpu"]) >= {"name", "count", "cuda", "torch", "triton"} and report["gpu"]["name"] is None
    (fp32,) = report["dtypes"]
    assert fp32["token_identical"]
    assert set(fp32["methods"]) == {"eagle4-chain", "eagle4-tree", "eagle4-tree:head=lowrank", "eagle4-harness",
                                    "eagle4-harness C=8"}
    assert all(run["match_rate"] == 1.0 for name, run in fp32["methods"].items() if "C=8" not in name)
    assert fp32["host_waits_per_step"]["vanilla"]["per_step"] == 1.0
    assert fp32["floor_ms"] > 0 and fp32["vanilla_over_floor"] > 0
    assert fp32["cost_table_key"]["dtype"] == "float32"
    assert list(tmp_path.glob("cost-table-*float32*.json"))
    assert set(fp32["harness_planned_tree"]) >= {"batch_1", "batch_8", "differs"}


def test_full_shapes_on_a_machine_without_a_gpu_exit_2_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gpu_check, "resolve_device", lambda name: gpu_check.torch.device("cpu"))
    assert gpu_check.main(["--out", str(tmp_path)]) == 2
    assert "need a CUDA GPU" in capsys.readouterr().out
    assert not (tmp_path / "gpu-check.json").exists()
