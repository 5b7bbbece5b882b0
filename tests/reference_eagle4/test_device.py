"""Choosing the device (`--device`) and moving a step's indices onto it."""

from __future__ import annotations

import pytest
import torch

from reference_eagle4.device import gpu_facts, resolve_device, resolve_dtype, upload


@pytest.mark.parametrize("name,gpus,want", [("auto", 0, "cpu"), ("auto", 2, "cuda:0"), ("CPU", 2, "cpu"),
                                            ("cuda", 1, "cuda:0"), ("cuda:1", 2, "cuda:1")])
def test_auto_takes_a_gpu_where_torch_sees_one(name, gpus, want):
    assert resolve_device(name, gpus) == torch.device(want)


@pytest.mark.parametrize("name,gpus,message", [
    ("cuda", 0, "torch sees no CUDA GPU on this machine"),
    ("cuda:2", 2, r"torch sees 2 CUDA GPUs \(cuda:0..cuda:1\)"),
    ("tpu", 1, "choose auto, cpu, cuda or cuda:N"),
    ("cuda:-1", 1, "choose auto, cpu, cuda or cuda:N"),
])
def test_a_device_it_cannot_use_is_one_line(name, gpus, message):
    with pytest.raises(ValueError, match=message) as err:
        resolve_device(name, gpus)
    assert "\n" not in str(err.value)


def test_the_cpu_keeps_its_dtype_rule_and_has_empty_gpu_facts():
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == resolve_dtype("auto")
    assert resolve_dtype("float32", cpu) == torch.float32
    assert set(gpu_facts(cpu)) == {"name", "count", "capability", "cuda", "torch", "triton"}
    assert all(v is None for v in gpu_facts(cpu).values())


def test_upload_keeps_values_and_dtypes():
    assert upload(range(3), "cpu").tolist() == [0, 1, 2]
    assert upload([0.5], "cpu", torch.float32).dtype == torch.float32
    mask = torch.tensor([True, False])
    assert upload(mask, "cpu").dtype == torch.bool
