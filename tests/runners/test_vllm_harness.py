"""`--engine vllm --method eagle4-harness`: launched with the schedule compiled from the server's cost table, recorded
in the manifest, refused in one line without a table, and planned without torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from specbench.cli import app
from specbench.errors import SpecbenchError
from specbench.runners.server_calibrate import table_key, table_path
from specbench.runners.vllm import VllmRunner, facts_mismatch, launch_command
from specbench.settings import Settings

from test_harness_policy import server_table

TARGET = "HuggingFaceTB/SmolLM2-135M-Instruct"       # a Hub id: the runner never loads it here
DRAFTER = "/ckpt/eagle3"


def spec_of(cmd: list[str]) -> dict:
    return json.loads(cmd[cmd.index("--speculative-config") + 1])


def test_the_launch_command_carries_the_schedule_and_its_largest_k():
    cmd = launch_command(TARGET, "eagle4-harness", 16, drafter=DRAFTER, schedule=[[1, 2, 7], [3, 8, 1]])
    assert spec_of(cmd) == {"method": "eagle3", "model": DRAFTER, "num_speculative_tokens": 7,
                            "num_speculative_tokens_per_batch_size": [[1, 2, 7], [3, 8, 1]]}
    with pytest.raises(SpecbenchError, match="specbench calibrate --engine vllm"):
        launch_command(TARGET, "eagle4-harness", 16, drafter=DRAFTER)


@pytest.fixture
def calibrated(tmp_path, monkeypatch):
    """A server Python that says vLLM 0.32.0 and a cost table saved under its key: the run's options."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 0.32.0\n")
    python.chmod(0o755)
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    options = {"drafter": DRAFTER, "server_python": str(python), "device": "cpu: test"}
    key = table_key("vllm", "0.32.0", "cpu: test", 1, TARGET, DRAFTER, "bfloat16")
    table = server_table()
    table.key = key
    table.save(table_path(key))
    return options, key


def test_the_run_launches_the_compiled_schedule_and_the_manifest_holds_it(calibrated):
    options, key = calibrated
    runner = VllmRunner(TARGET, "bfloat16")
    settings = Settings(method="eagle4-harness", budget=16, concurrency=8, options=options)
    config = runner.method_config(settings)
    harness = config["harness"]
    assert harness["cost_table"] == key and harness["table_file"].endswith(".json")
    assert harness["schedule"][0][:2] == [1, 1] and harness["per_batch"][0]["k"] == 9
    assert "batch-aware chain" in harness["runs_on_engine"] and "reference engine only" in harness["not_on_engine"]
    spec = spec_of(runner.launch_command(settings))
    assert spec["num_speculative_tokens_per_batch_size"] == harness["schedule"] == \
        config["speculative_config"]["num_speculative_tokens_per_batch_size"]
    assert spec["num_speculative_tokens"] == 9 and spec["method"] == "eagle3"


def test_a_server_with_no_table_is_refused_in_one_line(calibrated):
    options, _ = calibrated
    runner = VllmRunner(TARGET, "float32")           # calibrated in bfloat16 only
    with pytest.raises(SpecbenchError, match=r"no cost table .*specbench calibrate --engine vllm") as err:
        runner.method_config(Settings(method="eagle4-harness", budget=16, options=options))
    assert "\n" not in str(err.value)
    res = CliRunner().invoke(app, ["run", "--engine", "vllm", "--target", TARGET, "--dtype", "float32", "--method",
                                   "eagle4-harness", "--budget", "16", "--limit", "1", "--no-report",
                                   *[f"--option={k}={v}" for k, v in options.items()]])
    assert isinstance(res.exception, SpecbenchError) and "specbench calibrate --engine vllm" in str(res.exception)


def test_a_served_schedule_is_checked_against_the_compiled_one():
    facts = {"tensor_parallel_size": 1, "speculative": {"enabled": True, "method": "eagle3",
                                                        "num_speculative_tokens": 9, "source": "GET /server_info"}}
    assert facts_mismatch(facts, "eagle4-harness", 16, drafts=9) is None
    assert "at most 7 drafts" in facts_mismatch(facts, "eagle4-harness", 16, drafts=7)


def test_the_harness_plans_without_torch(calibrated, env_without):
    options, _ = calibrated
    code = ("import sys; from specbench.runners.vllm import VllmRunner; from specbench.settings import Settings\n"
            f"c = VllmRunner({TARGET!r}, 'bfloat16').method_config(Settings(method='eagle4-harness', budget=16, "
            f"options={options!r}))\n"
            "print(c['harness']['schedule'], 'torch' in sys.modules, 'reference_eagle4.planner' in sys.modules)")
    import os

    env = {**env_without("torch"), "SPECBENCH_CACHE": os.environ["SPECBENCH_CACHE"]}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("False True")


def test_specbench_methods_says_what_of_the_harness_runs_on_vllm():
    res = CliRunner().invoke(app, ["methods"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())           # the table folds long cells over several lines
    row = text[text.index("eagle4-harness reference, vllm"):]
    assert row.index("on vllm: the batch-aware chain length only") < row.index("eagle4-tree")
    assert "per-step cost-aware trees, lookup and datastore: reference engine only" in row
