"""The device the engine runs on: choosing it (`--device`), naming it (manifests and cost-table keys), its
default dtype, and moving a step's host-built indices onto it without a host sync."""

from __future__ import annotations

import importlib.metadata
import platform
from pathlib import Path
from typing import Any, Iterable

import torch
from torch import Tensor


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


def resolve_device(name: str, gpus: int | None = None) -> torch.device:
    """A `--device` value (auto, cpu, cuda, cuda:N) as a torch device; ValueError in one line for a name it
    does not know or a GPU this machine lacks. `gpus`: how many CUDA devices torch sees (tests pass it)."""
    if gpus is None:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    text = name.strip().lower()
    if text == "auto":
        return torch.device("cuda:0" if gpus else "cpu")
    if text == "cpu":
        return torch.device("cpu")
    kind, _, index = text.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise ValueError(f"{name!r}: choose auto, cpu, cuda or cuda:N")
    n = int(index or 0)
    if not gpus:
        raise ValueError(f"{name!r}: torch sees no CUDA GPU on this machine (torch {torch.__version__}); "
                         "use --device cpu")
    if n >= gpus:
        raise ValueError(f"{name!r}: torch sees {gpus} CUDA GPU{'s' if gpus > 1 else ''} (cuda:0..cuda:{gpus - 1})")
    return torch.device("cuda", n)


def device_label(device: torch.device) -> str:
    """The manifest's `device`: "cpu: <model>" or "cuda: <GPU name>" (speedups pair runs on this label)."""
    return f"{device.type}: {device_name(device)}"


def gpu_facts(device: torch.device) -> dict[str, Any]:
    """What torch knows of the GPU a run used: name, visible count, compute capability, the CUDA runtime torch
    was built with, torch's and Triton's versions; every field None on the CPU, so manifests share a shape."""
    facts: dict[str, Any] = dict.fromkeys(("name", "count", "capability", "cuda", "torch", "triton"))
    if device.type != "cuda":
        return facts
    major, minor = torch.cuda.get_device_capability(device)
    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = None
    return {**facts, "name": torch.cuda.get_device_name(device), "count": torch.cuda.device_count(),
            "capability": f"{major}.{minor}", "cuda": torch.version.cuda, "torch": torch.__version__,
            "triton": triton}


def upload(values: Iterable[Any] | Tensor, device: torch.device | str, dtype: torch.dtype = torch.long) -> Tensor:
    """Host values (a list, or a CPU tensor, which keeps its dtype) as a tensor on `device`, without making the
    host wait. `torch.tensor(values, device="cuda")` and `.to("cuda")` copy and then wait for every kernel
    queued before; here the values go to page-locked memory and the copy is queued behind those kernels, so
    the step loop keeps running ahead of the GPU. On the CPU: the host tensor itself."""
    host = values if isinstance(values, Tensor) else torch.tensor(
        values if isinstance(values, (list, tuple)) else list(values), dtype=dtype)
    if torch.device(device).type == "cuda":
        host = host.pin_memory()
    return host.to(device, non_blocking=True)


HOST_MARK = "_reference_eagle4_on_host"


def on_host(t: Tensor) -> Tensor:
    """Mark `t` as state the host keeps on purpose, whatever the device (cache lengths, positions): reading it
    makes nobody wait, which `host_syncs` counts accordingly. Returns `t`."""
    setattr(t, HOST_MARK, True)
    return t


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a timer's end on CUDA; nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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


def resolve_dtype(name: str, device: torch.device | None = None) -> torch.dtype:
    """A dtype option ("auto", "float32", "bfloat16") as a torch dtype. "auto" on a GPU is bf16 where it
    computes in bf16 (Ampere and later), else fp32; on the CPU, `auto_dtype`."""
    if name not in DTYPE_NAMES:
        raise ValueError(f"dtype {name!r}: choose {', '.join(DTYPE_NAMES)}")
    if name != "auto":
        return getattr(torch, name)
    if device is not None and device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return getattr(torch, auto_dtype())
