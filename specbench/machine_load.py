"""How much of the CPU other processes took while a run measured its speed.

Throughput on a shared 2-core machine is only comparable when nothing else runs: a test suite or a second
benchmark in the background slows whichever variant it overlaps, and interleaving cancels slow drift, not
a burst. The meter reads the machine's CPU time (/proc/stat) and this process's own (getrusage, all its
threads) around each block of requests; what the machine spent beyond this process is another process's
work, and `steal` is time the hypervisor gave to other guests. Linux only; elsewhere nothing is measured.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

STAT = Path("/proc/stat")
# A share of the machine's CPU above this, taken by others while a variant ran, is worth a warning.
WARN_SHARE = 0.05


@dataclass(frozen=True)
class CpuTimes:
    wall: float          # seconds (monotonic)
    busy: float          # machine-wide CPU seconds doing work (all CPUs), steal excluded
    steal: float         # machine-wide CPU seconds the hypervisor gave to other guests
    own: float           # this process's user + system CPU seconds


def parse_stat(text: str) -> tuple[float, float]:
    """(busy, steal) in clock ticks from the aggregate `cpu` line of /proc/stat."""
    fields = [int(x) for x in text.splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return float(user + nice + system + irq + softirq), float(steal)


def sample() -> CpuTimes | None:
    try:
        busy, steal = parse_stat(STAT.read_text())
    except (OSError, ValueError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return CpuTimes(time.monotonic(), busy / tick, steal / tick, usage.ru_utime + usage.ru_stime)


@dataclass
class LoadMeter:
    """Accumulates, over the windows it is given, the CPU others took: call `start` and `stop` around each."""

    cpus: int = os.cpu_count() or 1
    wall_s: float = 0.0
    foreign_s: float = 0.0
    steal_s: float = 0.0
    _t0: CpuTimes | None = None

    def start(self) -> None:
        self._t0 = sample()

    def stop(self) -> None:
        t1 = sample()
        if self._t0 is None or t1 is None:
            return
        t0, self._t0 = self._t0, None
        self.wall_s += t1.wall - t0.wall
        # /proc counts whole clock ticks: a window's own time can exceed the machine's by a tick
        self.foreign_s += max(0.0, (t1.busy - t0.busy) - (t1.own - t0.own))
        self.steal_s += t1.steal - t0.steal

    @classmethod
    def resumed(cls, saved: dict[str, float] | None) -> "LoadMeter":
        """A meter that goes on from the totals a run's manifest saved (a resumed run adds to them)."""
        if not saved:
            return cls()
        return cls(int(saved["cpus"]), saved["wall_s"], saved["foreign_cpu_s"], saved["steal_s"])

    def shares(self) -> dict[str, float] | None:
        """Shares of the machine's CPU capacity over the measured windows, with the totals behind them
        (None: nothing measured)."""
        if self.wall_s <= 0:
            return None
        capacity = self.wall_s * self.cpus
        return {"foreign_cpu_share": round(self.foreign_s / capacity, 4),
                "steal_share": round(self.steal_s / capacity, 4), "wall_s": round(self.wall_s, 3),
                "foreign_cpu_s": round(self.foreign_s, 3), "steal_s": round(self.steal_s, 3), "cpus": self.cpus}


def others_share(shares: dict[str, float]) -> float:
    """What other processes and other guests took together, as a share of the machine's CPU."""
    return shares["foreign_cpu_share"] + shares["steal_share"]


def warning(label: str, shares: dict[str, float] | None) -> str | None:
    """A line for the user when other processes or guests took enough CPU to skew this variant's speed."""
    if shares is None or others_share(shares) <= WARN_SHARE:
        return None
    return (f"warning: while {label} ran, other processes took {shares['foreign_cpu_share']:.0%} of the CPU and "
            f"other guests {shares['steal_share']:.0%} (manifest.json: machine_load); its speed is not comparable "
            "with a quiet run: rerun it with nothing else running")
