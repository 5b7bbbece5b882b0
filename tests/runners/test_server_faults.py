"""Server runs that meet a faulty server: what is retried, what becomes a failed record, how the run ends.

Every case goes through the CLI (`specbench run --engine vllm --endpoint URL ...`) against the stub server of
`stub_openai.py`, with short timeouts and backoffs passed as options so each test takes about a second.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stub_openai import StubServer
from typer.testing import CliRunner

from specbench.cli import app
from specbench.errors import SpecbenchError
from specbench.records import read_manifest, read_records
from specbench.runners.server import OPERATIONAL_OPTIONS, SERVER_OPTIONS, free_port
from specbench.runners.server_faults import FAULT_OPTIONS, FaultPolicy

cli = CliRunner()
# no warm-up: each test's plan of server answers is for its measured requests
FAST = ["--option", "retry_backoff=0.01", "--option", "stall_timeout=0.5", "--option", "warmup=0"]


@pytest.fixture
def stub(request):
    """stub(plan, **kwargs) -> a running StubServer, closed after the test."""
    servers = []

    def start(plan="ok", **kwargs):
        servers.append(StubServer(plan, **kwargs).start())
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def run_args(out: Path, url: str, *extra: str, limit: int = 3) -> list[str]:
    return ["run", "--engine", "vllm", "--endpoint", url, "--target", "stub-model", "--method", "vanilla",
            "--budget", "1", "--limit", str(limit), "--max-new-tokens", "6", "--no-report", "--out", str(out),
            *FAST, *extra]


def by_order(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: r["t_start"])


def test_http_500_fails_the_request_unretried_and_the_run_exits_1(stub, tmp_path):
    server = stub("ok,500,ok")
    out = tmp_path / "run"
    res = cli.invoke(app, run_args(out, server.url))
    assert res.exit_code == 1, res.output
    records = read_records(out)
    failed = [r for r in records if r["status"] == "failed"]
    assert len(records) == 3 and len(failed) == 1
    assert failed[0]["error"].startswith("HTTP 500") and "stub failure 500" in failed[0]["error"]
    assert failed[0]["output_token_ids"] == [] and failed[0]["retries"] == 0
    assert server.actions == ["ok", "500", "ok"]                 # a 500 is not asked again
    assert "1 of 3 requests failed (first: HTTP 500" in res.output
    assert "rerun with --resume to retry them" in res.output
    ok = [r for r in records if r["status"] == "ok"]
    assert all(r["output_token_ids"] == [100, 101, 102, 103, 104, 105] and r["retries"] == 0 for r in ok)


def test_allow_failures_exits_0_with_the_same_records_and_summary(stub, tmp_path):
    server = stub("500")
    out = tmp_path / "run"
    res = cli.invoke(app, run_args(out, server.url, "--allow-failures"))
    assert res.exit_code == 0, res.output
    assert [r["status"] for r in read_records(out)] == ["failed"] * 3
    assert "3 of 3 requests failed" in res.output


@pytest.mark.parametrize("busy", ["429", "503"])
def test_busy_answers_are_retried_with_backoff_then_succeed(stub, tmp_path, busy):
    server = stub(f"{busy},{busy},ok")
    out = tmp_path / "run"
    res = cli.invoke(app, run_args(out, server.url, "--concurrency", "1"))
    assert res.exit_code == 0, res.output
    records = by_order(read_records(out))
    assert [r["status"] for r in records] == ["ok"] * 3
    assert [r["retries"] for r in records] == [2, 0, 0]
    assert server.actions == [busy, busy, "ok", "ok", "ok"]
    assert read_manifest(out)["request_retries"] == 2


def test_retries_are_bounded_and_the_last_error_is_kept(stub, tmp_path):
    server = stub("429")
    out = tmp_path / "run"
    res = cli.invoke(app, run_args(out, server.url, "--limit", "1", "--option", "retries=2"))
    assert res.exit_code == 1, res.output
    [rec] = read_records(out)
    assert rec["status"] == "failed" and rec["retries"] == 2
    assert rec["error"].startswith("HTTP 429") and "(after 2 retries)" in rec["error"]
    assert len(server.actions) == 3                              # the first attempt and two retries
    assert read_manifest(out)["request_retries"] == 2


def test_a_connection_dropped_before_output_is_retried(stub, tmp_path):
    server = stub("drop,ok")
    out = tmp_path / "run"
    res = cli.invoke(app, run_args(out, server.url, "--limit", "2"))
    assert res.exit_code == 0, res.output
    records = by_order(read_records(out))
    assert [(r["status"], r["retries"]) for r in records] == [("ok", 1), ("ok", 0)]


@pytest.mark.parametrize("fault, said", [
    ("close-mid", "the stream broke after 2 events"),
    ("stall-mid", "no output for 0.5 s (stall_timeout) after 2 events"),
    ("error-event", "engine step failed"),
])
def test_a_stream_that_already_produced_output_is_not_retried(stub, tmp_path, fault, said):
    server = stub(f"{fault},ok")
    out = tmp_path / "run"
    res = cli.invoke(app, run_args(out, server.url, "--limit", "2"))
    assert res.exit_code == 1, res.output
    first, second = by_order(read_records(out))
    assert first["status"] == "failed" and said in first["error"] and first["retries"] == 0
    assert first["output_token_ids"] == []
    assert second["status"] == "ok"
    assert server.actions == [fault, "ok"]


def test_a_stall_before_any_output_fails_the_request_instead_of_a_slow_ok_record(stub, tmp_path):
    server = stub("stall,ok")
    out = tmp_path / "run"
    t0 = time.time()
    res = cli.invoke(app, run_args(out, server.url, "--limit", "2"))
    assert res.exit_code == 1, res.output
    assert time.time() - t0 < 10
    first, second = by_order(read_records(out))
    assert first["status"] == "failed" and first["error"] == "no output for 0.5 s (stall_timeout)"
    assert second["status"] == "ok"


def test_request_timeout_bounds_one_attempt(stub, tmp_path):
    server = stub("stall-mid,ok")
    out = tmp_path / "run"
    res = cli.invoke(app, run_args(out, server.url, "--limit", "2", "--option", "stall_timeout=30",
                                   "--option", "request_timeout=0.5"))
    assert res.exit_code == 1, res.output
    first, _ = by_order(read_records(out))
    assert first["error"] == "no complete answer within 0.5 s (request_timeout)"


def test_a_server_gone_mid_run_fails_the_rest_at_once_and_resume_completes_them(stub, tmp_path):
    """Attached to a server that goes away after its first answer: the other requests fail without each
    waiting through its retries, and --resume against the server (back on the same port) completes them, with
    the stall timeout raised (an operational option may change on resume)."""
    server = stub("exit")
    port = server.httpd.server_address[1]
    out = tmp_path / "run"
    t0 = time.time()
    res = cli.invoke(app, run_args(out, server.url, "--limit", "6", "--option", "retry_backoff=0.2"))
    elapsed = time.time() - t0
    assert res.exit_code == 1, res.output
    records = by_order(read_records(out))
    assert len(records) == 6 and records[0]["status"] == "ok"
    failed = records[1:]
    assert all(r["status"] == "failed" for r in failed)
    assert f"server unreachable at {server.url}" in failed[-1]["error"]
    assert sum(r["retries"] for r in failed) == 3                # one request used its retries; the rest none
    assert elapsed < 8, "a gone server must not cost every request its full backoff"
    assert "5 of 6 requests failed" in res.output

    again = stub("ok", port=port)
    res = cli.invoke(app, [*run_args(out, again.url, "--limit", "6", "--resume"), "--option", "stall_timeout=5"])
    assert res.exit_code == 0, res.output
    records = read_records(out)
    assert len(records) == 6 and all(r["status"] == "ok" for r in records)
    assert len(again.actions) == 5                               # only the failed requests ran again


def test_models_route_answering_500_is_one_line_naming_url_and_status(stub, tmp_path):
    server = stub("ok", models_status=500)
    with pytest.raises(SpecbenchError, match=rf"GET {server.url}/v1/models answered HTTP 500"):
        cli.invoke(app, run_args(tmp_path / "run", server.url), catch_exceptions=False)
    proc = subprocess.run([sys.executable, "-m", "specbench.cli", *run_args(tmp_path / "run2", server.url)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "/v1/models answered HTTP 500" in proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if ln.strip()]) == 1


def test_models_route_not_json_is_one_line(stub, tmp_path):
    server = stub("ok", models_status="text")
    with pytest.raises(SpecbenchError, match=r"/v1/models answered no model list \(<html>not json</html>\)"):
        cli.invoke(app, run_args(tmp_path / "run", server.url), catch_exceptions=False)


def test_sglang_server_info_answering_500_is_one_line(stub, tmp_path):
    server = stub("ok", info_status=500)
    args = run_args(tmp_path / "run", server.url)
    args[args.index("--engine") + 1] = "sglang"
    with pytest.raises(SpecbenchError, match=rf"GET {server.url}/get_server_info answered HTTP 500"):
        cli.invoke(app, args, catch_exceptions=False)


def test_sglang_requests_are_retried_too(stub, tmp_path, tiny_target):
    server = stub("503,ok")
    out = tmp_path / "run"
    args = run_args(out, server.url, "--limit", "2")
    args[args.index("--engine") + 1] = "sglang"
    args[args.index("--target") + 1] = str(tiny_target)
    res = cli.invoke(app, args)
    assert res.exit_code == 0, res.output
    records = by_order(read_records(out))
    assert [(r["status"], r["retries"]) for r in records] == [("ok", 1), ("ok", 0)]
    assert records[1]["output_token_ids"] == [100, 101, 102, 103, 104, 105]


def test_compare_exits_1_naming_each_run_with_failures(tmp_path, monkeypatch):
    """Launch mode: each variant's server (the stub as a process) fails its requests with HTTP 500."""
    from specbench.runners import vllm as vllm_mod

    stub_script = str(Path(__file__).with_name("stub_openai.py"))

    def stub_command(self, settings):
        return [sys.executable, stub_script, "--port", str(free_port()), "--plan", "ok,500"]

    monkeypatch.setattr(vllm_mod.VllmRunner, "launch_command", stub_command)
    out = tmp_path / "cmp"
    res = cli.invoke(app, ["compare", "--engine", "vllm", "--methods", "ngram", "--budget", "4", "--limit", "2",
                           "--max-new-tokens", "4", "--target", "stub-model", "--out", str(out),
                           "--report", str(tmp_path / "report"), *FAST])
    assert res.exit_code == 1, res.output
    for run in ("vanilla-L1-C1", "ngram-L4-C1"):
        assert sorted(r["status"] for r in read_records(out / run)) == ["failed", "ok"]
        assert f"{out / run}: 1 of 2 requests failed" in res.output
    assert "2 of 4 requests failed (first: HTTP 500" in res.output
    assert (tmp_path / "report" / "index.html").exists()        # everything is written before the exit


def test_a_launched_server_that_exits_fails_the_rest_at_once(tmp_path, monkeypatch):
    from specbench.runners import vllm as vllm_mod

    stub_script = str(Path(__file__).with_name("stub_openai.py"))
    monkeypatch.setattr(vllm_mod.VllmRunner, "launch_command", lambda self, settings: [
        sys.executable, stub_script, "--port", str(free_port()), "--plan", "exit"])
    out = tmp_path / "run"
    args = [a for a in run_args(out, "x", "--limit", "4") if a not in ("--endpoint", "x")]
    res = cli.invoke(app, [*args, "--option", "retry_backoff=5"])
    assert res.exit_code == 1, res.output
    records = by_order(read_records(out))
    assert records[0]["status"] == "ok"
    assert all("the vllm server exited with code 3" in r["error"] for r in records[1:])
    assert all(r["retries"] == 0 for r in records)                # no backoff against a server that is gone


# -- options -----------------------------------------------------------------------------------------------------

def test_fault_options_are_server_options_and_operational():
    assert set(FAULT_OPTIONS) <= set(SERVER_OPTIONS)
    assert set(FAULT_OPTIONS) <= OPERATIONAL_OPTIONS
    default = FaultPolicy()
    assert default.retries >= 1 and 0 < default.stall_timeout <= 60 and default.request_timeout < float("inf")


@pytest.mark.parametrize("option, said", [
    ("retries=-1", "--option retries=-1: must be at least 0"),
    ("retries=1.5", "--option retries=1.5: expected a whole number"),
    ("stall_timeout=abc", "--option stall_timeout='abc': expected a number"),
    ("request_timeout=0", "--option request_timeout=0: must be at least"),
])
def test_bad_fault_options_are_refused_before_anything_runs(tmp_path, option, said):
    with pytest.raises(SpecbenchError, match=said.replace("(", r"\(")):
        cli.invoke(app, run_args(tmp_path / "run", "http://127.0.0.1:1", "--option", option),
                   catch_exceptions=False)
    assert not (tmp_path / "run").exists()


def test_backoff_grows_with_jitter_and_heeds_retry_after():
    import random

    policy = FaultPolicy(retry_backoff=1.0)
    rng = random.Random(0)
    for k in range(4):
        waits = [policy.wait_s(k, rng=rng) for _ in range(50)]
        assert 0.5 * 2 ** k <= min(waits) and max(waits) <= 2 ** k and len(set(waits)) > 1
    assert policy.wait_s(20, rng=rng) <= 30                     # capped
    assert policy.wait_s(0, retry_after=7, rng=rng) == 7
    assert policy.wait_s(0, retry_after=10_000, rng=rng) == 60


def test_an_endpoint_that_is_not_a_url_is_refused(tmp_path):
    with pytest.raises(SpecbenchError, match="--endpoint 'localhost:8000': expected a URL"):
        cli.invoke(app, run_args(tmp_path / "run", "localhost:8000"), catch_exceptions=False)


def test_records_and_manifest_of_a_clean_run_say_no_retries(stub, tmp_path):
    server = stub("ok")
    out = tmp_path / "run"
    res = cli.invoke(app, run_args(out, server.url))
    assert res.exit_code == 0, res.output
    assert [r["retries"] for r in read_records(out)] == [0, 0, 0]
    assert read_manifest(out)["request_retries"] == 0
    assert json.loads((out / "manifest.json").read_text())["options"]["stall_timeout"] == 0.5
