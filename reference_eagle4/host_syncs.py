"""Where a decoding step makes the host wait for the GPU, counted per step, on any device.

On CUDA the host queues kernels and runs ahead; it waits when it reads a result (`.item()`, `.tolist()`,
`int(t)`, `bool(t)`, `torch.equal`, `nonzero`, `.cpu()`) and when it copies host data to the GPU with a
blocking copy (`torch.tensor(data, device=...)`, `.to(device)` without `non_blocking`), which waits for the
whole queue first. Each wait leaves the GPU idle while Python catches up, so the step loop keeps them to the
ones it cannot do without: the verifier walks the tree on the host (its tokens must come back), and the
drafters' trees are built on the host (their tokens and scores must come back).

`HostReads` counts those calls on any device by intercepting torch's functions and tensor methods and
following which tensors would live on the GPU. A tensor stays on the host when it is made from host data
without a device (`torch.tensor`, `torch.zeros`, ...), computed from host tensors alone, or marked as the
host's where it is made (`device.on_host`: the KV cache's lengths, the drafter cache's positions). Every
other tensor is the device's: the weights, the caches, what is computed from them, what is made with
`device=`, and what the CPU's C kernels in `kernels/` return (they stand in for the GPU's kernels). So the
count taken on the CPU, where waiting costs nothing, is the count on a GPU, and a test asserts it per method
(tests/reference_eagle4/test_host_syncs.py). `CudaSyncs` counts the synchronisations CUDA itself reports
(`torch.cuda.set_sync_debug_mode`), which `gpu_check` records on a GPU. `per_step` runs requests through an
engine and counts inside its steps only (admission and prefill wait for the device by design).
"""

from __future__ import annotations

import traceback
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from reference_eagle4.device import HOST_MARK as HOST, on_host

if TYPE_CHECKING:
    from reference_eagle4.engine import Engine, Request

READS = frozenset({"item", "tolist", "__int__", "__float__", "__bool__", "__index__", "equal", "nonzero", "cpu",
                   "numpy"})
PACKAGE = Path(__file__).resolve().parent


TO_HOST = frozenset({"cpu", "numpy"})


def _tensors(tree: Any) -> Iterator[Tensor]:
    return (t for t in tree_flatten(tree)[0] if isinstance(t, Tensor))


def _moves(name: str, args: tuple, kwargs: dict[str, Any]) -> bool:
    """Whether a call copies to the device: `.cuda()`, or `.to(...)` naming a device (dtype casts do not)."""
    given = [*args[1:], kwargs.get("device")]
    return name == "cuda" or (name == "to" and any(
        isinstance(a, torch.device) or (isinstance(a, str) and a.split(":")[0] in ("cpu", "cuda")) for a in given))


def _site() -> str:
    """The engine's line that made the call ("proposers/eagle4.py:168"), for the count's breakdown."""
    for frame in reversed(traceback.extract_stack()[:-1]):
        path = Path(frame.filename).resolve()
        if path.is_relative_to(PACKAGE) and path.name != "host_syncs.py":
            return f"{path.relative_to(PACKAGE)}:{frame.lineno}"
    return "elsewhere"


class HostReads(TorchFunctionMode):
    """Counts, by call site, the calls that would make the host wait for a GPU (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: Counter[str] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        inputs = list(_tensors((args, kwargs)))
        device_inputs = [t for t in inputs if not getattr(t, HOST, False)]
        if name in READS and device_inputs:
            self.sites[_site()] += 1                      # a device result read on the host
        moved = _moves(name, args, kwargs)
        if (moved and not kwargs.get("non_blocking", False) and not device_inputs) or (
                name in ("tensor", "as_tensor") and kwargs.get("device") is not None):
            self.sites[_site()] += 1                      # host data copied with a blocking copy
        out = func(*args, **kwargs)
        # where the result lives: copied to the host or the device, else made without a device (a factory
        # given no device, or computed from host tensors alone: the host), else the device
        host = name in TO_HOST or (not moved and (
            inputs and not device_inputs
            or not inputs and kwargs.get("device") is None and not _site().startswith("kernels/")))
        if host:
            for t in _tensors(out):
                on_host(t)
        return out


class CudaSyncs:
    """Counts the synchronisations CUDA reports while it is entered (`torch.cuda.set_sync_debug_mode`), by the
    line that warned; it may be entered again and again, and adds up."""

    def __init__(self) -> None:
        self.sites: Counter[str] = Counter()

    def __enter__(self) -> "CudaSyncs":
        self._mode = torch.cuda.get_sync_debug_mode()
        self._caught = warnings.catch_warnings(record=True)
        self._log = self._caught.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: object) -> None:
        torch.cuda.set_sync_debug_mode(self._mode)
        self._caught.__exit__(*exc)
        for w in self._log:
            if "synchroniz" in str(w.message):
                self.sites[f"{Path(w.filename).name}:{w.lineno}"] += 1


@dataclass
class StepWaits:
    """Host waits counted inside an engine's steps: total, steps, and by call site."""

    steps: int = 0
    sites: Counter[str] = field(default_factory=Counter)

    @property
    def per_step(self) -> float:
        return sum(self.sites.values()) / max(self.steps, 1)

    def summary(self) -> dict[str, Any]:
        return {"steps": self.steps, "per_step": round(self.per_step, 3),
                "by_site": {k: round(v / max(self.steps, 1), 3) for k, v in sorted(self.sites.items())}}


def per_step(engine: "Engine", requests: Iterable["Request"], counter: HostReads | CudaSyncs) -> StepWaits:
    """Decode `requests` with `engine`, counting with `counter` inside its steps only."""
    waits = StepWaits(sites=counter.sites)
    step = engine._step

    def counted(seqs: list) -> None:
        waits.steps += 1
        with counter:
            step(seqs)

    engine._step = counted
    try:
        engine.generate(requests, lambda seq: None)
    finally:
        del engine._step
    return waits
