"""`--engine sglang --method eagle4-harness`: `specbench calibrate --engine sglang` measures a server's step costs and
acceptance by depth from SGLang's per-request histograms (against the stub server), and a run launches the tree
shape compiled from that table for its concurrency, records it in the manifest, and is refused in one line without
a table."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from specbench.cli import app
from specbench.errors import SpecbenchError
from specbench.records import read_manifest
from specbench.runners.harness_policy import sglang_policy
from specbench.runners.server_calibrate import find_server_table, reach_by_depth, table_key, table_path
from specbench.runners.sglang import SglangRunner
from specbench.settings import Settings

from stub_openai import StubServer
from test_harness_policy import server_table

DRAFTER = "/ckpt/eagle3"
DEVICE = "cpu: test"
# what the stub's every request reports: 2 verify steps accepted no draft, 3 one, 4 two and 1 all three (K = 3)
HIST = [2, 3, 4, 1]
SERVED_REACH = [8 / 10, 5 / 10, 1 / 10]          # steps whose accepted path reached depth 1, 2, 3


def sglang_info(steps: int, topk: int = 1, draft_tokens: int | None = None) -> dict:
    """GET /server_info of an SGLang 0.5.23 EAGLE-3 server drafting that shape."""
    return {"version": "0.5.23", "tp_size": 1, "speculative_algorithm": "EAGLE3", "speculative_num_steps": steps,
            "speculative_eagle_topk": topk, "speculative_num_draft_tokens": draft_tokens or steps + 1,
            "speculative_draft_model_path": DRAFTER}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path


def test_calibrate_measures_acceptance_by_depth_from_sglangs_histograms(tiny_target, cache):
    stub = StubServer("ok", sglang_info=sglang_info(3), sglang_hist=HIST).start()
    try:
        argv = ["calibrate", "--engine", "sglang", "--endpoint", stub.url, "--target", str(tiny_target), "--dtype",
                "float32", "--drafter", DRAFTER, "--max-batch", "2", "--prompts", "2", "--max-new-tokens", "8",
                "--repeats", "1", "--budget", "4", "--option", f"device={DEVICE}"]
        res = CliRunner().invoke(app, argv, catch_exceptions=False)
        assert "compiled at L=4, C=1: num_steps 3, topk 1, num_draft_tokens 4" in " ".join(res.output.split())
        key = table_key("sglang", "0.5.23", DEVICE, 1, str(tiny_target.resolve()), DRAFTER, "float32")
        table, path = find_server_table(key)
        assert path.name in "".join(res.output.split())
        # the K the server drafts (its num_steps), batch sizes 1..2, and the depths the stub's histograms gave
        assert table.tokens == [4] and table.batches == [1, 2]
        assert reach_by_depth(table.raw) == pytest.approx(SERVED_REACH)
        # timed blocks decode in lockstep: SGLang reads ignore_eos from sampling_params
        lockstep = [b for b in stub.requests if b["sampling_params"].get("ignore_eos")]
        assert len(lockstep) == 1 + 2 and all(b["sampling_params"]["max_new_tokens"] == 8 for b in lockstep)
        sent = len(stub.requests)
        again = CliRunner().invoke(app, [*argv, "--if-missing"], catch_exceptions=False)
        assert "(exists; kept)" in " ".join(again.output.split()) and len(stub.requests) == sent
    finally:
        stub.close()


def test_calibrate_refuses_a_tree_server(tiny_target, cache):
    stub = StubServer("ok", sglang_info=sglang_info(3, topk=4, draft_tokens=8), sglang_hist=HIST).start()
    try:
        with pytest.raises(SpecbenchError, match="drafts a tree .*--speculative-eagle-topk 1"):
            CliRunner().invoke(app, ["calibrate", "--engine", "sglang", "--endpoint", stub.url, "--target",
                                     str(tiny_target), "--drafter", DRAFTER, "--option", f"device={DEVICE}"],
                               catch_exceptions=False)
    finally:
        stub.close()


def save_table(target: str, dtype: str = "float32") -> None:
    """The synthetic server table (long chains pay alone, K = 1 at batch 8) under an SGLang 0.5.23 server's key."""
    key = table_key("sglang", "0.5.23", DEVICE, 1, target, DRAFTER, dtype)
    table = server_table()
    table.key = key
    table.save(table_path(key))


def test_a_run_launches_the_shape_compiled_for_its_concurrency_and_the_manifest_holds_it(tiny_target, cache):
    save_table(str(tiny_target.resolve()))
    table = find_server_table(table_key("sglang", "0.5.23", DEVICE, 1, str(tiny_target.resolve()), DRAFTER,
                                        "float32"))[0]
    shape, _ = sglang_policy(table, 16, 1)
    assert (shape.topk, shape.num_steps, shape.num_draft_tokens) == (1, 9, 10)    # the chain the table pays for
    stub = StubServer("ok", sglang_info=sglang_info(9), sglang_hist=[1, 1, 2, 0, 0, 0, 0, 0, 0, 3]).start()
    out = cache / "run"
    try:
        res = CliRunner().invoke(app, [
            "run", "--engine", "sglang", "--endpoint", stub.url, "--target", str(tiny_target), "--dtype", "float32",
            "--method", "eagle4-harness", "--budget", "16", "--concurrency", "1", "--limit", "2", "--max-new-tokens",
            "8", "--no-report", "--option", f"drafter={DRAFTER}", "--option", f"device={DEVICE}", "--option",
            "warmup=0", "--out", str(out)], catch_exceptions=False)
        assert res.exit_code == 0, res.output
    finally:
        stub.close()
    config = read_manifest(out)["method_config"]
    harness = config["harness"]
    assert (harness["concurrency"], harness["num_steps"], harness["topk"], harness["num_draft_tokens"]) == (1, 9, 1, 10)
    assert harness["cost_table"]["engine"] == "sglang" and harness["table_file"].endswith(".json")
    assert "tree shape per expected concurrency" in harness["runs_on_engine"]
    assert "reference engine only" in harness["not_on_engine"]
    assert config["speculative_args"][-6:] == ["--speculative-num-steps", "9", "--speculative-eagle-topk", "1",
                                               "--speculative-num-draft-tokens", "10"]


def test_each_concurrency_launches_its_own_shape(tiny_target, cache, monkeypatch):
    from specbench.runners import server_calibrate

    monkeypatch.setattr(server_calibrate, "engine_version", lambda python, engine="vllm": "0.5.23")
    save_table(str(tiny_target.resolve()))
    runner = SglangRunner(str(tiny_target), "float32")
    options = {"drafter": DRAFTER, "device": DEVICE, "port": 30000}
    alone, busy = (runner.launch_command(Settings(method="eagle4-harness", budget=16, concurrency=c, options=options))
                   for c in (1, 8))
    flags = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")
    assert [alone[alone.index(f) + 1] for f in flags] == ["9", "1", "10"]
    assert [busy[busy.index(f) + 1] for f in flags] == ["1", "1", "2"]   # at batch 8 a drafted token costs more


def test_a_server_serving_another_shape_is_refused(tiny_target, cache):
    save_table(str(tiny_target.resolve()))
    stub = StubServer("ok", sglang_info=sglang_info(7), sglang_hist=HIST).start()
    try:
        with pytest.raises(SpecbenchError, match=r"verifies 8 tokens .*--budget 16 compiled to 10"):
            CliRunner().invoke(app, [
                "run", "--engine", "sglang", "--endpoint", stub.url, "--target", str(tiny_target), "--dtype",
                "float32", "--method", "eagle4-harness", "--budget", "16", "--concurrency", "1", "--limit", "1",
                "--no-report", "--option", f"drafter={DRAFTER}", "--option", f"device={DEVICE}", "--out",
                str(cache / "r")], catch_exceptions=False)
    finally:
        stub.close()


def test_a_server_with_no_table_is_refused_in_one_line_naming_the_calibrate_command(tiny_target, cache):
    save_table(str(tiny_target.resolve()), dtype="bfloat16")           # calibrated in bfloat16 only
    stub = StubServer("ok", sglang_info=sglang_info(3), sglang_hist=HIST).start()
    try:
        with pytest.raises(SpecbenchError, match=r"no cost table .*run `specbench calibrate --engine sglang "
                                                 r".*--dtype float32 --tp 1 --endpoint") as err:
            CliRunner().invoke(app, [
                "run", "--engine", "sglang", "--endpoint", stub.url, "--target", str(tiny_target), "--dtype",
                "float32", "--method", "eagle4-harness", "--budget", "16", "--limit", "1", "--no-report",
                "--option", f"drafter={DRAFTER}", "--option", f"device={DEVICE}", "--out", str(cache / "r")],
                catch_exceptions=False)
        assert "\n" not in str(err.value)
    finally:
        stub.close()


def test_specbench_methods_says_what_of_the_harness_runs_on_sglang():
    res = CliRunner().invoke(app, ["methods"])
    text = " ".join(res.output.split())
    row = text[text.index("eagle4-harness reference, vllm, sglang"):]
    assert row.index("on sglang: the calibrated EAGLE-2 tree shape per expected concurrency only") < \
        row.index("eagle4-tree")
