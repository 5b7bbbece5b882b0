"""The meter that tells a run whether other processes took CPU while it measured speed.

The meter reads /proc/stat, this process's CPU time and the clock; the tests inject all three (a stat file
written by the test, a fixed getrusage, a clock that moves when told), so what they assert does not depend on
what else the machine runs.
"""

import os
from types import SimpleNamespace

import pytest

from specbench import machine_load
from specbench.machine_load import CpuTimes, LoadMeter, parse_stat, sample, warning
from specbench.records import read_manifest

TICK = os.sysconf("SC_CLK_TCK")


def stat_line(user: int, system: int = 0, idle: int = 0, steal: int = 0) -> str:
    return f"cpu  {user} 0 {system} {idle} 0 0 0 {steal} 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n"


class FakeMachine:
    """/proc/stat, getrusage and the monotonic clock of a machine the test drives: `advance` adds machine-wide
    work (seconds of CPU, all processes), this process's share of it, steal and wall time."""

    def __init__(self, tmp_path, monkeypatch):
        self.stat = tmp_path / "stat"
        self.busy = self.steal = self.own = self.wall = 0.0
        self._write()
        monkeypatch.setattr(machine_load, "STAT", self.stat)
        monkeypatch.setattr(machine_load, "resource", SimpleNamespace(
            RUSAGE_SELF=0, getrusage=lambda who: SimpleNamespace(ru_utime=self.own, ru_stime=0.0)))
        monkeypatch.setattr(machine_load, "time", SimpleNamespace(monotonic=lambda: self.wall))

    def _write(self) -> None:
        self.stat.write_text(stat_line(round(self.busy * TICK), steal=round(self.steal * TICK), idle=12345))

    def advance(self, wall: float, busy: float, own: float = 0.0, steal: float = 0.0) -> None:
        self.wall += wall
        self.busy += busy
        self.own += own
        self.steal += steal
        self._write()


@pytest.fixture
def machine(tmp_path, monkeypatch) -> FakeMachine:
    return FakeMachine(tmp_path, monkeypatch)


def test_parse_stat_counts_work_and_steal_apart():
    text = "cpu  100 5 20 9000 40 3 2 7 0 0\ncpu0 50 2 10 4500 20 1 1 3 0 0\n"
    assert parse_stat(text) == (130.0, 7.0)       # user + nice + system + irq + softirq; idle/iowait excluded


def test_a_sample_reads_the_stat_file_in_seconds_with_this_process_s_time(machine):
    machine.advance(wall=3.0, busy=5.0, own=1.25, steal=0.5)
    assert sample() == CpuTimes(wall=3.0, busy=5.0, steal=0.5, own=1.25)


def test_without_a_stat_file_nothing_is_measured(machine):
    """Not Linux (or /proc unreadable): no sample, no share, no warning; the run goes on."""
    machine.stat.unlink()
    meter = LoadMeter(cpus=2)
    meter.start()
    meter.stop()
    assert sample() is None and meter.shares() is None


def test_another_process_spinning_during_a_window_is_measured(machine):
    """One core of two busy with another process for the whole window, this process using half a core."""
    meter = LoadMeter(cpus=2)
    meter.start()
    machine.advance(wall=2.0, busy=2.0 + 1.0, own=1.0)
    meter.stop()
    shares = meter.shares()
    assert shares["foreign_cpu_share"] == pytest.approx(0.5)
    assert shares["foreign_cpu_s"] == pytest.approx(2.0) and shares["wall_s"] == pytest.approx(2.0)
    assert warning("vanilla L=1 C=1", shares) is not None


def test_this_process_s_own_work_is_not_counted_as_foreign(machine):
    """All the machine's work was this process's; /proc counts whole ticks, so its own time may exceed the
    machine's by a tick, which must not make the foreign share negative."""
    meter = LoadMeter(cpus=2)
    meter.start()
    machine.advance(wall=1.0, busy=1.0, own=1.0 + 1.0 / TICK)
    meter.stop()
    assert meter.shares()["foreign_cpu_share"] == 0.0
    assert warning("x", meter.shares()) is None


def test_windows_add_up_and_steal_is_counted_apart(machine):
    """Only the time inside start/stop windows counts: work between windows (another variant's) is not this
    variant's load, and the hypervisor's steal is reported beside the other processes' share."""
    meter = LoadMeter(cpus=2)
    for _ in range(2):
        meter.start()
        machine.advance(wall=1.0, busy=0.5, own=0.5, steal=0.2)
        meter.stop()
        machine.advance(wall=5.0, busy=10.0)                       # between windows: not measured
    shares = meter.shares()
    assert shares["wall_s"] == pytest.approx(2.0)
    assert shares["foreign_cpu_share"] == 0.0
    assert shares["steal_share"] == pytest.approx(0.4 / 4.0)


def test_warning_names_the_variant_only_above_the_threshold():
    quiet = {"foreign_cpu_share": 0.01, "steal_share": 0.0}
    busy = {"foreign_cpu_share": 0.3, "steal_share": 0.02}
    assert warning("vanilla L=1 C=1", quiet) is None and warning("x", None) is None
    line = warning("vanilla L=1 C=1", busy)
    assert "vanilla L=1 C=1" in line and "30%" in line and "rerun" in line


def test_a_resumed_meter_adds_to_the_saved_totals():
    saved = {"cpus": 2, "wall_s": 10.0, "foreign_cpu_s": 2.0, "steal_s": 0.0}
    meter = LoadMeter.resumed(saved)
    meter.wall_s += 10.0
    assert meter.shares()["foreign_cpu_share"] == pytest.approx(2.0 / 40.0)


def test_a_run_records_the_load_it_ran_under(tiny_target, tmp_path, monkeypatch):
    """A run on a machine whose /proc/stat says others kept one core busy: the manifest records that share."""
    from typer.testing import CliRunner

    from specbench.cli import app

    clock = {"calls": 0}

    def busy_machine() -> CpuTimes:
        """Each reading one second later, with one more CPU-second of work by others."""
        clock["calls"] += 1
        return CpuTimes(wall=float(clock["calls"]), busy=float(clock["calls"]), steal=0.0, own=0.0)

    monkeypatch.setattr(machine_load, "sample", busy_machine)
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", "--target", str(tiny_target), "--method", "ngram", "--budget", "4",
                                   "--limit", "2", "--max-new-tokens", "8", "--dtype", "float32", "--no-report",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    load = read_manifest(out)["machine_load"]
    cpus = load["cpus"]
    assert load["wall_s"] > 0 and load["foreign_cpu_share"] == pytest.approx(1.0 / cpus, abs=1e-3)
    assert ("other processes took" in res.output) == (1.0 / cpus > machine_load.WARN_SHARE)
