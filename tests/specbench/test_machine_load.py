"""The meter that tells a run whether other processes took CPU while it measured speed."""

import subprocess
import sys
import time

import pytest

from specbench.machine_load import STAT, LoadMeter, parse_stat, warning
from specbench.records import read_manifest

needs_proc = pytest.mark.skipif(not STAT.exists(), reason="no /proc/stat (Linux only)")
SPIN = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"


def test_parse_stat_counts_work_and_steal_apart():
    text = "cpu  100 5 20 9000 40 3 2 7 0 0\ncpu0 50 2 10 4500 20 1 1 3 0 0\n"
    assert parse_stat(text) == (130.0, 7.0)       # user + nice + system + irq + softirq; idle/iowait excluded


@needs_proc
def test_another_process_spinning_during_a_window_is_measured():
    meter = LoadMeter()
    meter.start()
    subprocess.run([sys.executable, "-c", SPIN.format(s=1.0)], check=True)
    meter.stop()
    shares = meter.shares()
    assert shares["foreign_cpu_share"] > 0.5 / meter.cpus      # one busy core of `cpus` for most of the window


@needs_proc
def test_this_process_s_own_work_is_not_counted_as_foreign():
    meter = LoadMeter()
    meter.start()
    t = time.time()
    while time.time() - t < 1.0:
        pass
    meter.stop()
    assert meter.shares()["foreign_cpu_share"] < 0.25 / meter.cpus


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


@needs_proc
def test_a_run_records_the_load_it_ran_under(tiny_target, tmp_path):
    from typer.testing import CliRunner

    from specbench.cli import app

    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", "--target", str(tiny_target), "--method", "ngram", "--budget", "4",
                                   "--limit", "2", "--max-new-tokens", "8", "--dtype", "float32", "--no-report",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    load = read_manifest(out)["machine_load"]
    assert load["wall_s"] > 0 and 0 <= load["foreign_cpu_share"] <= 1 and load["cpus"] >= 1
