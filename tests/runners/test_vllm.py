"""The vLLM runner against a live `specbench serve`: same AL as the in-process engine, failures, resume."""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest
from typer.testing import CliRunner

from specbench.analysis.metrics import hit_rates, summarize_records
from specbench.cli import app
from specbench.records import read_manifest, read_records
from specbench.runners.server import free_port
from specbench.runners.server_metrics import (
    counter_delta, counters_summary, fit_steps, parse_spec_counters, steps_from_histogram, steps_from_per_step,
)

cli = CliRunner()


def run_args(target, out, *extra):
    return ["run", "--target", str(target), "--method", "ngram", "--budget", "4", "--limit", "6",
            "--max-new-tokens", "24", "--dtype", "float32", "--no-report", "--out", str(out), *extra]


def vllm_al(records):
    """AL as vLLM's counters define it: 1 + accepted / steps that drafted something."""
    steps = [s for r in records for s in r["steps"] if s["drafted"] > 0]
    return 1 + sum(s["accepted"] for s in steps) / len(steps)


@pytest.mark.parametrize("concurrency", [1, 8])
def test_same_al_as_the_in_process_run(tiny_target, served, tmp_path, concurrency):
    ref, remote = tmp_path / "reference", tmp_path / "vllm"
    res = cli.invoke(app, run_args(tiny_target, ref, "--concurrency", str(concurrency)))
    assert res.exit_code == 0, res.output
    res = cli.invoke(app, run_args(tiny_target, remote, "--concurrency", str(concurrency), "--engine", "vllm",
                                   "--endpoint", served.url))
    assert res.exit_code == 0, res.output
    ours, theirs = read_records(ref), read_records(remote)
    assert len(theirs) == 6 and all(r["status"] == "ok" for r in theirs)
    by_id = {r["question_id"]: r for r in ours}
    for r in theirs:   # same prompts, same (lossless, fp32) outputs
        assert r["prompt_token_ids"] == by_id[r["question_id"]]["prompt_token_ids"]
        assert r["output_token_ids"] == by_id[r["question_id"]]["output_token_ids"]
        assert r["ttft_s"] <= r["latency_s"] and r["steps_source"] == "server"
    m = read_manifest(remote)
    assert m["engine"] == "vllm" and m["method_config"]["speculative_config"]["num_speculative_tokens"] == 3
    counters = m["engine_counters"]
    assert not counters["incomplete"]
    # both definitions from the counters: vLLM's own (drafting steps only) and the project's (every step)
    assert counters["summary"]["al_engine"] == pytest.approx(vllm_al(ours), rel=0.02)
    al_metrics = counters["summary"]["al"]
    assert al_metrics == pytest.approx(summarize_records(ours)["al_token_weighted"], rel=0.02)
    assert al_metrics > 1.2, "the tiny target repeats itself: prompt lookup must be accepted"
    hits = hit_rates(ours)["unconditional"]
    assert counters["summary"]["hit_rate_unconditional"][: len(hits)] == pytest.approx(hits, rel=0.02)
    # the records the runner wrote give the in-process run's AL too
    assert summarize_records(theirs)["al_token_weighted"] == pytest.approx(
        summarize_records(ours)["al_token_weighted"], rel=0.02)


def test_killed_server_fails_requests_and_resume_completes_them(tiny_target, tmp_path, monkeypatch):
    """Launch mode: the runner starts the server (here `specbench serve` in place of vLLM), the server dies
    mid-run, the run finishes with failed records, and --resume launches a new server and completes them."""
    from specbench import run as run_mod
    from specbench.runners import vllm as vllm_mod

    runners = []

    def serve_command(self, settings):
        runners.append(self)
        return [sys.executable, "-m", "specbench.cli", "serve", "--target", str(tiny_target), "--method", "ngram",
                "--budget", "4", "--concurrency", "2", "--dtype", "float32", "--max-model-len", "1024",
                "--port", str(free_port())]

    monkeypatch.setattr(vllm_mod.VllmRunner, "launch_command", serve_command)
    real_write = run_mod.RecordWriter.write
    written = []

    def write_then_kill(self, rec):
        real_write(self, rec)
        written.append(rec)
        if len(written) == 1:
            os.killpg(runners[-1]._proc.pid, signal.SIGKILL)

    monkeypatch.setattr(run_mod.RecordWriter, "write", write_then_kill)
    out = tmp_path / "run"
    args = run_args(tiny_target, out, "--concurrency", "2", "--engine", "vllm")
    res = cli.invoke(app, [*args, "--allow-failures"])        # requests failed: exit 1 without the flag
    assert res.exit_code == 0, res.output
    records = read_records(out)
    failed = [r for r in records if r["status"] == "failed"]
    assert len(records) == 6 and records[0]["status"] == "ok" and failed
    assert all(r["error"] and r["output_token_ids"] == [] for r in failed)
    assert "--resume" in res.output
    assert "specbench.cli serve" in (out / "server.log").read_text()
    assert read_manifest(out)["engine_counters"]["incomplete"]

    monkeypatch.setattr(run_mod.RecordWriter, "write", real_write)
    res = cli.invoke(app, [*args, "--resume"])
    assert res.exit_code == 0, res.output
    again = read_records(out)
    assert len(again) == 6 and all(r["status"] == "ok" for r in again)
    assert again[0] == records[0]                              # the finished record is kept as it was
    assert runners[-1]._proc is None                           # the launched server is stopped at the end


def test_endpoint_needs_a_server_engine_and_refuses_a_mismatched_server(tiny_target, served, tmp_path):
    from specbench.errors import SpecbenchError

    with pytest.raises(SpecbenchError, match="--engine vllm"):
        cli.invoke(app, run_args(tiny_target, tmp_path / "a", "--endpoint", served.url), catch_exceptions=False)
    args = run_args(tiny_target, tmp_path / "b", "--engine", "vllm", "--endpoint", served.url)
    args[args.index("--budget") + 1] = "8"
    with pytest.raises(SpecbenchError, match="serves ngram L=4"):
        cli.invoke(app, args, catch_exceptions=False)


def test_a_vllm_run_needs_neither_torch_nor_the_reference_engine(tiny_target, served, tmp_path, env_without):
    """What a GPU user's `--engine vllm` run imports: no torch, no reference engine (the server returns token ids)."""
    import subprocess

    out = tmp_path / "vllm"
    argv = run_args(tiny_target, out, "--engine", "vllm", "--endpoint", served.url)
    argv[argv.index("--limit") + 1] = "2"
    res = subprocess.run([sys.executable, "-m", "specbench.cli", *argv], capture_output=True, text=True,
                         env=env_without("torch", "reference_eagle4"))
    assert res.returncode == 0, res.stdout + res.stderr
    records = read_records(out)
    assert len(records) == 2 and all(r["status"] == "ok" and r["output_token_ids"] for r in records)


METRICS = """\
# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 45.0
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 21.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 3.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 99.0
# TYPE vllm:request_success counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 2.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 1.0
"""


def test_metrics_parsing_deltas_and_summary():
    c = parse_spec_counters(METRICS)
    assert c == {"num_drafts": 15.0, "num_draft_tokens": 45.0, "num_accepted_tokens": 21.0,
                 "num_accepted_tokens_per_pos": [12.0, 6.0, 3.0], "generation_tokens": 99.0,
                 "requests_finished": 3.0}
    assert parse_spec_counters("# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total 3.0\n") is None
    d = counter_delta({"num_drafts": 5.0, "num_draft_tokens": 15.0, "num_accepted_tokens": 1.0,
                       "num_accepted_tokens_per_pos": [1.0]}, c)
    assert d["num_drafts"] == 10.0 and d["num_accepted_tokens_per_pos"] == [11.0, 6.0, 3.0]
    s = counters_summary(c)
    # vLLM's own AL counts drafting steps only; the project's counts every step: 99 - 3 prefill tokens = 96
    # decode tokens, of which 21 were accepted drafts, so 75 steps (15 drafting, 60 that drafted nothing)
    assert s["al_engine"] == pytest.approx(1 + 21 / 15) and s["al"] == pytest.approx(96 / 75)
    assert s["acceptance_rate"] == pytest.approx(21 / 45)
    assert s["hit_rate_unconditional"] == pytest.approx([12 / 15, 6 / 15, 3 / 15])
    assert s["hit_rate_conditional"] == pytest.approx([12 / 15, 6 / 12, 3 / 6])


def test_steps_from_what_vllm_reports_add_up_to_the_output():
    # 3 drafting steps (2, 0, 3 accepted of 3), output 1 + 3 + 1 + 4 = 9 tokens: exact
    steps = steps_from_per_step([2, 0, 3], [3, 3, 3], 9)
    assert [s["emitted"] for s in steps] == [3, 1, 4] and [s["budget"] for s in steps] == [4, 4, 4]
    # the last step was cut by max_tokens to 2 tokens
    assert [s["emitted"] for s in steps_from_per_step([2, 0, 3], [3, 3, 3], 7)] == [3, 1, 2]
    # two steps drafted nothing (vLLM omits them): they come back as one-token steps
    steps = steps_from_per_step([1], [3], 5)
    assert [(s["emitted"], s["drafted"]) for s in steps] == [(2, 3), (1, 0), (1, 0)]
    hist = steps_from_histogram([1, 2, 0, 1], 3, 1 + 1 + 4 + 4)
    assert sorted(s["accepted"] for s in hist) == [0, 1, 1, 3]
    assert fit_steps([], 1) == []


def test_records_from_a_recorded_vllm_final_chunk(tiny_target):
    """A real vLLM gives no per-step records of its own: the runner rebuilds them from `per_step_*`."""
    from specbench.runners.server import ServerRequest, Stream
    from specbench.settings import Settings
    from specbench.runners.vllm import VllmRunner

    final = json.loads((__import__("pathlib").Path(__file__).parent / "fixtures" / "vllm_final_chunk.json").read_text())
    st = Stream(t_start=100.0, t_first=100.2, t_last=101.0, t_end=101.1, text=["abc"], token_ids=list(range(12)),
                prompt_ids=[1, 2], finish_reason="length", usage=final["usage"], extra={"metrics": final["metrics"]})
    runner = VllmRunner(str(tiny_target), "float32", "http://127.0.0.1:1")
    rec = runner.record(ServerRequest("q1", [], {"category": "chat"}), Settings("ngram", 4), st)
    assert rec["steps_source"] == "per-step" and rec["mean_entropy"] is None
    assert 1 + sum(s["emitted"] for s in rec["steps"]) == len(rec["output_token_ids"]) == 12
    assert [s["accepted"] for s in rec["steps"] if s["drafted"]] == final["metrics"]["speculative_decoding"][
        "per_step_accepted"]
    assert rec["ttft_s"] == pytest.approx(0.2) and rec["latency_s"] == pytest.approx(1.0)
    assert "per_step_accepted" not in rec["engine_spec"]


def test_compare_launches_one_server_per_method_in_turn(tiny_target, tmp_path, monkeypatch):
    from specbench.runners import vllm as vllm_mod

    commands = []

    def serve_command(self, settings):
        commands.append((settings.method, settings.budget))
        return [sys.executable, "-m", "specbench.cli", "serve", "--target", str(tiny_target), "--method",
                settings.method, "--budget", str(settings.budget), "--concurrency", "2", "--dtype", "float32",
                "--max-model-len", "1024", "--port", str(free_port())]

    monkeypatch.setattr(vllm_mod.VllmRunner, "launch_command", serve_command)
    out = tmp_path / "cmp"
    res = cli.invoke(app, ["compare", "--engine", "vllm", "--methods", "ngram", "--budget", "4", "--limit", "2",
                           "--max-new-tokens", "12", "--dtype", "float32", "--target", str(tiny_target),
                           "--out", str(out), "--report", str(tmp_path / "report")])
    assert res.exit_code == 0, res.output
    assert commands == [("vanilla", 1), ("ngram", 4)]
    vanilla, ngram = read_records(out / "vanilla-L1-C1"), read_records(out / "ngram-L4-C1")
    assert [r["output_token_ids"] for r in vanilla] == [r["output_token_ids"] for r in ngram]   # lossless
    assert "engine_counters" not in read_manifest(out / "vanilla-L1-C1")        # vanilla vLLM has no counters
    assert read_manifest(out / "ngram-L4-C1")["engine_counters"]["summary"]["al"] > 1
    assert (out / "ngram-L4-C1" / "server.log").exists() and (tmp_path / "report" / "index.html").exists()


def test_flush_cache_empties_the_served_prefix_cache(served):
    """`specbench serve` answers vLLM's POST /reset_prefix_cache: a prompt sent again after the flush prefills
    whole, where before it reused its cached prefix."""
    import httpx

    from specbench.runners.vllm import VllmRunner

    prefix = served.service.engine.prefix

    def send() -> int:
        hits = prefix.stats()["hit_tokens"]
        r = httpx.post(served.url + "/v1/completions", json={"prompt": "a red fox in the snow", "max_tokens": 2},
                       timeout=60)
        assert r.status_code == 200
        return prefix.stats()["hit_tokens"] - hits

    send()
    assert send() > 0                                               # cached: the repeat reuses its prefix
    VllmRunner("m", endpoint=served.url).flush_cache(served.url)
    assert send() == 0
