"""Names for the hardware a measurement was taken on (manifests and cost-table keys)."""

from __future__ import annotations

import platform
from pathlib import Path

import torch


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device | str) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_name()


def auto_dtype(cpuinfo: str | None = None) -> str:
    """bf16 where the CPU multiplies it natively (AVX512-BF16 / AMX), fp32 elsewhere.

    Without native support a bf16 matmul is emulated and several times slower than fp32 (`python -m
    reference_eagle4.linear_bench --out-features 32768 --layers 1 --rows 120` compares them), so decoding,
    drafter training and its data generation all follow this choice."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "float32"
    return "bfloat16" if ("avx512_bf16" in cpuinfo or "amx_bf16" in cpuinfo) else "float32"


DTYPE_NAMES = ("auto", "float32", "bfloat16")


def resolve_dtype(name: str) -> torch.dtype:
    """A dtype option ("auto", "float32", "bfloat16") as a torch dtype."""
    if name not in DTYPE_NAMES:
        raise ValueError(f"dtype {name!r}: choose {', '.join(DTYPE_NAMES)}")
    return getattr(torch, auto_dtype() if name == "auto" else name)
