"""Faults around a run's directory: concurrent runs, crashes mid-write, resumes against a server that is down,
changed timeouts, run directories that cannot be written, budgets too large for the context.

Orchestration cases use `FakeRunner`, an engine-free `Runner` whose server can be down and whose requests can
fail, so they take milliseconds; crash cases run the real CLI on the tiny target."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from specbench import run as run_mod
from specbench.analysis.metrics import summarize_run
from specbench.cli import app
from specbench.errors import SpecbenchError
from specbench.records import read_all_records, read_manifest, read_records
from specbench.run_lock import LOCK_FILE
from specbench.settings import Job, Settings

cli = CliRunner()


def run_args(target, out, *extra):
    """A tiny reference-engine run of four requests (the same as test_run.py's)."""
    return ["run", "--target", str(target), "--method", "ngram", "--budget", "4", "--limit", "4",
            "--max-new-tokens", "12", "--dtype", "float32", "--no-report", "--out", str(out), *extra]


@dataclass
class FakeRequest:
    id: str
    category: str


@dataclass
class FakePrepared:
    settings: Settings
    method_config: dict[str, Any] = field(default_factory=dict)


class FakeRunner:
    """A server engine without a server: `down` raises at the start of `run` (as a server runner does when its
    server never answers), ids in `failing` get failed records, `gate` (an Event) holds `run` until set, and
    `entered` is set when `run` starts."""

    engine = "fake"
    in_process = False
    operational_options = frozenset({"request_timeout", "startup_timeout"})
    down = False
    failing: set[str] = set()
    gate: threading.Event | None = None
    entered = threading.Event()
    loads = 0

    @classmethod
    def methods(cls) -> tuple[str, ...]:
        return ("vanilla", "ngram")

    @classmethod
    def check_options(cls, methods, shared) -> None:
        pass

    @classmethod
    def from_job(cls, job: Job) -> "FakeRunner":
        FakeRunner.loads += 1
        return cls()

    def describe(self) -> dict[str, Any]:
        return {"engine": self.engine, "target": "fake", "dtype": "float32", "device": "nowhere"}

    def requests(self, rows) -> list[FakeRequest]:
        return [FakeRequest(r.question_id, r.category) for r in rows]

    def prepare(self, settings, requests, run_dir) -> FakePrepared:
        return FakePrepared(settings)

    def run(self, prepared, requests, on_record) -> None:
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(30)
        if self.down:
            raise SpecbenchError("no healthy fake server at http://127.0.0.1:9 after 1 s")
        for r in requests:
            status = "failed" if r.id in self.failing else "ok"
            on_record({"question_id": r.id, "category": r.category, "method": prepared.settings.method,
                       "concurrency": 1, "status": status, "error": "" if status == "ok" else "HTTP 500",
                       "prompt_token_ids": [1], "output_token_ids": [] if status != "ok" else [5, 6],
                       "output_text": "", "steps": [], "mean_entropy": None, "t_start": time.time(),
                       "t_end": time.time(), "ttft_s": 0.0, "latency_s": 0.0})

    def close(self, prepared, run_dir) -> None:
        pass


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(run_mod, "runner_class", lambda engine: FakeRunner)
    for key, value in (("down", False), ("failing", set()), ("gate", None), ("entered", threading.Event()),
                       ("loads", 0)):
        monkeypatch.setattr(FakeRunner, key, value)
    return FakeRunner


JOB = Job(dataset="prompt-enhancement", limit=4, engine="fake")


def settings(**options: Any) -> Settings:
    return Settings("ngram", 4, max_new_tokens=8, options=options)


def ids_of(path: Path) -> list[str]:
    return [r["question_id"] for r in read_all_records(path)]


# -- one owner per run directory --------------------------------------------------------------------------

def test_a_second_run_on_the_same_out_refuses_while_the_first_runs(fake, tmp_path):
    out = tmp_path / "run"
    fake.gate = threading.Event()
    first: dict[str, Any] = {}
    t = threading.Thread(target=lambda: first.setdefault("path", run_mod.run_one(JOB, settings(), out, False)))
    t.start()
    try:
        assert fake.entered.wait(30)                  # the first run holds the directory and runs
        for resume in (False, True):
            with pytest.raises(SpecbenchError, match=rf"^{out} is in use by another run \(pid \d+ on .*\)"):
                run_mod.run_one(JOB, settings(), out, resume)
        assert fake.loads == 1                         # the refused runs never reached the engine
    finally:
        fake.gate.set()
        t.join()
    assert first["path"] == out and not (out / LOCK_FILE).exists()
    assert len(read_all_records(out)) == 4 and summarize_run(out)["n_ok"] == 4


def test_concurrent_cli_runs_on_one_out_one_refuses_and_no_record_doubles(tiny_target, tmp_path):
    """Two real processes started together: one runs, the other exits 2 with one line naming the directory
    (in use, or already holding records if it came second); the records are the requests, once each."""
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "specbench.cli", *run_args(tiny_target, out)]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(120), p.stdout.read(), p.stderr.read()) for p in procs]
    assert sorted(rc for rc, _, _ in results) == [0, 2], results
    refused = next(err for rc, _, err in results if rc == 2)
    assert len(refused.strip().splitlines()) == 1 and str(out) in refused
    assert "in use by another run" in refused or "already holds records" in refused
    assert len(read_all_records(out)) == 4
    summary = summarize_run(out)
    assert (summary["n_ok"], summary["n_failed"]) == (4, 0)


def test_a_compare_and_a_run_sharing_a_run_dir_do_not_both_write_it(fake, tmp_path):
    root = tmp_path / "cmp"
    fake.gate = threading.Event()
    t = threading.Thread(target=lambda: run_mod.run_compare(JOB, settings(), [("ngram", {})], [4], [1], root,
                                                            False, None))
    t.start()
    try:
        assert fake.entered.wait(30)
        with pytest.raises(SpecbenchError, match=f"{root / 'ngram-L4-C1'} is in use"):
            run_mod.run_one(JOB, settings(), root / "ngram-L4-C1", False)
    finally:
        fake.gate.set()
        t.join()
    assert len(read_all_records(root / "ngram-L4-C1")) == 4


# -- resume: nothing removed before its replacement is written, the server checked first -------------------

def test_resume_against_a_down_server_keeps_every_record_and_the_manifest(fake, tmp_path):
    out = tmp_path / "run"
    fake.failing = {r.question_id for r in JOB.rows(0)[1:]}
    run_mod.run_one(JOB, settings(), out, False)
    before = ((out / "records.jsonl").read_bytes(), (out / "manifest.json").read_bytes())
    assert [r["status"] for r in read_records(out)] == ["ok", "failed", "failed", "failed"]

    fake.down = True
    with pytest.raises(SpecbenchError, match="no healthy fake server"):
        run_mod.run_one(JOB, settings(), out, True)
    assert ((out / "records.jsonl").read_bytes(), (out / "manifest.json").read_bytes()) == before
    assert not (out / LOCK_FILE).exists()

    fake.down, fake.failing = False, set()
    run_mod.run_one(JOB, settings(), out, True)
    assert [r["status"] for r in read_records(out)] == ["ok"] * 4
    assert len(read_all_records(out)) == 4           # the superseded failures are compacted away at the end
    assert "resumed" in read_manifest(out)


def test_resume_against_an_unreachable_endpoint_touches_nothing(tiny_target, tmp_path):
    """The real vLLM runner attached to a port nobody listens on: the resume stops at the server check."""
    from specbench.runners.server import free_port

    out = tmp_path / "run"
    args = [*run_args(tiny_target, out, "--engine", "vllm", "--endpoint", f"http://127.0.0.1:{free_port()}")]
    with pytest.raises(SpecbenchError, match="server"):
        cli.invoke(app, [*args, "--option", "startup_timeout=0.5"], catch_exceptions=False)
    rows = Job(limit=4).rows(0)
    recs = [{"question_id": r.question_id, "category": r.category, "method": "ngram", "concurrency": 1,
             "status": "failed" if i else "ok", "error": "" if not i else "connection refused",
             "prompt_token_ids": [], "output_token_ids": [] if i else [1, 2], "output_text": "", "steps": [],
             "mean_entropy": None, "t_start": 0.0, "t_end": 1.0, "ttft_s": 0.0, "latency_s": 1.0}
            for i, r in enumerate(rows)]
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    before = ((out / "records.jsonl").read_bytes(), (out / "manifest.json").read_bytes())
    with pytest.raises(SpecbenchError, match="server"):        # a longer startup wait is allowed on resume
        cli.invoke(app, [*args, "--option", "startup_timeout=1", "--resume"], catch_exceptions=False)
    assert ((out / "records.jsonl").read_bytes(), (out / "manifest.json").read_bytes()) == before


def test_resume_may_raise_a_timeout_and_the_manifest_records_each_resumption(fake, tmp_path):
    out = tmp_path / "run"
    fake.failing = {JOB.rows(0)[0].question_id}
    run_mod.run_one(JOB, settings(request_timeout=60), out, False)
    fake.failing = set()
    run_mod.run_one(JOB, settings(request_timeout=600), out, True)
    m = read_manifest(out)
    assert m["options"] == {"request_timeout": 60}
    assert [r["options"] for r in m["resumptions"]] == [{"request_timeout": 600}]
    assert m["resumed"] == m["resumptions"][0]["at"]
    with pytest.raises(SpecbenchError, match=r"settings differ \(options: \{\} there, \{'matches': 2\} now\)"):
        run_mod.run_one(JOB, settings(request_timeout=600, matches=2), out, True)


def test_a_resumed_comparison_starts_the_variants_it_had_not_reached(fake, tmp_path):
    root = tmp_path / "cmp"
    run_mod.run_compare(JOB, settings(), [("ngram", {})], [4], [1], root, False, None)
    paths = run_mod.run_compare(JOB, settings(), [("ngram", {})], [4], [1, 2], root, True, None)
    # a server engine serves both concurrencies of a variant on one launch, so its runs come variant by variant
    assert [p.name for p in paths] == ["vanilla-L1-C1", "vanilla-L1-C2", "ngram-L4-C1", "ngram-L4-C2"]
    assert all(len(read_records(p)) == 4 for p in paths)


# -- crashes mid-write ------------------------------------------------------------------------------------

KILL_ON_SECOND_WRITE = """
import json, os, signal, sys
from specbench import records
real = records.RecordWriter.write
calls = []
def write(self, rec):
    calls.append(rec)
    if len(calls) == 2:                   # half of the second line reaches the disk, then the process dies
        data = (json.dumps(rec) + "\\n").encode()
        os.write(self._fd, data[: len(data) // 2])
        os.fsync(self._fd)
        os.kill(os.getpid(), signal.SIGKILL)
    real(self, rec)
records.RecordWriter.write = write
sys.argv = ["specbench", *sys.argv[1:]]
from specbench.cli import main
main()
"""


def test_a_run_killed_mid_write_resumes_past_its_torn_line(tiny_target, tmp_path):
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-c", KILL_ON_SECOND_WRITE, *run_args(tiny_target, out)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == -signal.SIGKILL, res.stderr
    assert not (out / "records.jsonl").read_text().endswith("\n")
    assert len(read_records(out)) == 1                         # the torn line is left out when read

    res = cli.invoke(app, run_args(tiny_target, out, "--resume"))
    assert res.exit_code == 0, res.output
    assert "torn last line" in res.output and "records.jsonl.torn" in res.output
    records = read_records(out)
    assert len(records) == 4 and all(r["status"] == "ok" for r in records)
    assert len((out / "records.jsonl").read_text().splitlines()) == 4
    assert (out / "records.jsonl.torn").read_text().count("\n") == 1
    assert len(read_manifest(out)["resumptions"]) == 1 and not (out / LOCK_FILE).exists()


def test_a_torn_last_line_no_longer_blocks_resume(tiny_target, tmp_path):
    out = tmp_path / "run"
    assert cli.invoke(app, run_args(tiny_target, out)).exit_code == 0
    path = out / "records.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:3]) + "\n" + lines[3][:40])
    res = cli.invoke(app, run_args(tiny_target, out, "--resume"))
    assert res.exit_code == 0, res.output
    again = path.read_text().splitlines()
    assert again[:3] == lines[:3] and len(again) == 4
    assert json.loads(again[3])["question_id"] == json.loads(lines[3])["question_id"]


# -- one line for a run directory that cannot be written, a budget too large ------------------------------

def test_an_out_that_is_a_file_or_unwritable_is_one_line_before_the_engine_loads(fake, tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(SpecbenchError, match=f"^{afile}: a file is there, not a run directory"):
        run_mod.run_one(JOB, settings(), afile, False)
    with pytest.raises(SpecbenchError, match=f"^{afile / 'run'}: cannot write a run directory there"):
        run_mod.run_one(JOB, settings(), afile / "run", False)

    def denied(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("specbench.run_lock.RunLock.acquire", denied)
    with pytest.raises(SpecbenchError, match=r"ro: cannot write a run directory there \(Permission denied\)$"):
        run_mod.run_one(JOB, settings(), tmp_path / "ro", False)
    assert fake.loads == 0 and not (tmp_path / "ro").exists()


def test_a_budget_larger_than_the_context_is_blamed_on_budget(tiny_target, tmp_path):
    args = run_args(tiny_target, tmp_path / "r")
    args[args.index("--budget") + 1] = "100000"
    with pytest.raises(SpecbenchError, match=r"^--budget 100000: a step's tree needs 100000 KV positions"):
        cli.invoke(app, args, catch_exceptions=False)
    args = run_args(tiny_target, tmp_path / "r2")
    args[args.index("--max-new-tokens") + 1] = "5000"
    with pytest.raises(SpecbenchError, match=r"^a prompt of \d+ tokens \+ 5000 new tokens"):
        cli.invoke(app, args, catch_exceptions=False)


def test_a_truncated_or_corrupt_target_is_one_line_naming_the_file(tiny_target, tmp_path, monkeypatch):
    import shutil

    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "target"
    shutil.copytree(tiny_target, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    with pytest.raises(SpecbenchError, match=f"^{weights} is truncated"):
        cli.invoke(app, run_args(folder, tmp_path / "r"), catch_exceptions=False)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 21)
    with pytest.raises(SpecbenchError, match=f"^{bad}: cannot read it as a GGUF model"):
        cli.invoke(app, run_args(bad, tmp_path / "r"), catch_exceptions=False)
