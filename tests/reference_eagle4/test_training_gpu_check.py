"""The GPU training check runs end to end on small shapes on the CPU, so it cannot rot between GPU sessions."""

from __future__ import annotations

import dataclasses
import json

import pytest

from reference_eagle4.training import gpu_check


def test_the_tiny_check_runs_every_stage_and_writes_one_json(tmp_path, capsys):
    assert gpu_check.main(["--out", str(tmp_path), "--device", "cpu", "--tiny", "--plan-tokens", "1000",
                           "--plan-epochs", "2"]) == 0
    report = json.loads((tmp_path / "gpu-train-check.json").read_text())
    assert report["ok"] and report["device"].startswith("cpu: ") and report["gpu"]["name"] is None
    w = gpu_check.SMALL
    gen = report["generate"]
    assert gen["records"] == 2 * w.prompts and gen["response_tokens"] == 2 * w.prompts * w.new_tokens
    assert gen["response_tokens_per_s"] > 0 and gen["concurrency"] == w.concurrency
    feats = report["features"]
    assert feats["records"] == gen["records"] and feats["response_tokens"] == gen["response_tokens"]
    assert feats["positions"] == 2 * w.prompts * (w.system_len + w.prompt_len + w.new_tokens)
    assert set(report["train"]) == set(report["checks"]) == {"eagle4", "dflash", "dspark"}
    for kind, run in report["train"].items():
        assert run["steps"] == w.steps and run["s_per_step"] > 0 and run["response_tokens_per_s"] > 0, kind
        assert run["eval"], kind
        check = report["checks"][kind]
        assert check["ok"] and check["rel_diff"] == {"loss": 0.0, "grad_norm": 0.0}, kind
        assert check["cpu"]["loss"] > 0 and check["cpu"]["grad_norm"] > 0, kind
    est = report["estimate"]
    assert est["response_tokens"] == 1000 and est["epochs"] == 2
    assert est["generate_s"] == pytest.approx(1000 / gen["response_tokens_per_s"])
    assert est["train_s"]["dflash"] == pytest.approx(2 * 1000 / report["train"]["dflash"]["response_tokens_per_s"])
    assert est["total_s"] == pytest.approx(est["generate_s"] + est["features_s"] + sum(est["train_s"].values()))
    assert "estimate: 1000 response tokens, 2 epoch(s)" in capsys.readouterr().out


def test_a_step_that_differs_from_the_cpus_fails_the_check(tmp_path, monkeypatch):
    real = gpu_check.one_step
    calls: list[str] = []

    def off_on_the_device(kind, model, sample, cfg, d2t, device):
        got = real(kind, model, sample, cfg, d2t, device)
        calls.append(kind)
        if kind == "dflash" and calls.count(kind) == 1:          # the device's step is asked for first
            got["loss"] *= 1.01
        return got

    monkeypatch.setattr(gpu_check, "one_step", off_on_the_device)
    assert gpu_check.main(["--out", str(tmp_path), "--device", "cpu", "--tiny"]) == 1
    report = json.loads((tmp_path / "gpu-train-check.json").read_text())
    assert not report["ok"] and not report["checks"]["dflash"]["ok"]
    assert report["checks"]["eagle4"]["ok"] and report["checks"]["dspark"]["ok"]
    assert report["checks"]["dflash"]["rel_diff"]["loss"] == pytest.approx(0.01)


def test_full_shapes_without_a_gpu_and_a_bad_device_exit_2_in_one_line(tmp_path, capsys, monkeypatch):
    assert gpu_check.main(["--out", str(tmp_path), "--device", "cpu"]) == 2
    assert capsys.readouterr().out == ("gpu_check: SmolLM2-135M shapes need a CUDA GPU, not cpu; --tiny runs small "
                                       "shapes anywhere\n")
    assert gpu_check.main(["--out", str(tmp_path), "--device", "tpu", "--tiny"]) == 2
    assert capsys.readouterr().out == "gpu_check: --device 'tpu': choose auto, cpu, cuda or cuda:N\n"
    assert not (tmp_path / "gpu-train-check.json").exists()


def test_the_check_uses_the_default_targets_shapes(tmp_path):
    """The random target has the shapes the engine reads from SmolLM2-135M-Instruct's GGUF (the check itself
    never needs the file)."""
    from reference_eagle4.model import ModelArgs
    from reference_eagle4.weights import WeightsError, known_target_gguf

    try:
        gguf = known_target_gguf("smollm2-135m")
    except WeightsError as err:
        pytest.skip(str(err))
    pytest.importorskip("gguf")
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    (tmp_path / "config.json").write_text(json.dumps(load_gguf_checkpoint(str(gguf), return_tensors=False)["config"]))
    real = ModelArgs.from_hf_config(tmp_path / "config.json")
    assert real.norm_eps == pytest.approx(gpu_check.FULL.target.norm_eps)          # 1e-5 stored as float32
    assert dataclasses.replace(real, norm_eps=gpu_check.FULL.target.norm_eps) == gpu_check.FULL.target
