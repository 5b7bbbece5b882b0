"""The SGLang runner: meta_info parsing, and end to end against a stub SGLang server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specbench.cli import app
from specbench.records import read_manifest, read_records
from specbench.errors import SpecbenchError
from specbench.runners.sglang import SglangRunner, parse_meta_info, sglang_summary

cli = CliRunner()
FIXTURE = Path(__file__).parent / "fixtures" / "sglang_meta_info.json"


def test_parses_a_recorded_final_meta_info():
    final = json.loads(FIXTURE.read_text())
    meta, out = final["meta_info"], final["output_ids"]
    parsed = parse_meta_info(meta, budget=8, n_output=len(out), method="eagle3")
    steps = parsed["steps"]
    assert parsed["steps_source"] == "histogram" and len(steps) == meta["spec_verify_ct"] == 4
    assert sorted(s["accepted"] for s in steps) == [0, 1, 2, 4]
    assert sum(s["accepted"] for s in steps) == meta["spec_num_correct_drafts"]
    assert 1 + sum(s["emitted"] for s in steps) == len(out) == meta["completion_tokens"]
    assert all(s["drafted"] == 7 and s["budget"] == 8 for s in steps)
    c = parsed["counters"]
    assert (c["verify_steps"], c["accepted_drafts"], c["proposed_drafts"]) == (4, 7, 28)
    s = sglang_summary(c)
    assert s["al"] == pytest.approx(1 + 7 / 4) and s["al_engine"] == pytest.approx(meta["spec_accept_length"])
    assert s["hit_rate_unconditional"][:2] == pytest.approx([3 / 4, 2 / 4])
    # older SGLang names, and a vanilla server (no spec fields at all)
    old = {"completion_tokens": 12, "spec_verify_ct": 4, "spec_accept_token_num": 7, "spec_draft_token_num": 28,
           "spec_accept_histogram": meta["spec_accept_histogram"]}
    assert parse_meta_info(old, 8, 12)["counters"] == c
    assert parse_meta_info({"completion_tokens": 5}, 1, 5, "vanilla") == {"steps": [], "steps_source": "none",
                                                                          "counters": None}


class StubSGLang(BaseHTTPRequestHandler):
    """Enough of SGLang 0.5.23's HTTP server: /health, /server_info (`info`: its resolved arguments, a few of them),
    POST /flush_cache (answering `flush_status`, counted in `flushes`), streaming /generate with meta_info.

    Each request outputs the first max_new_tokens of its own prompt reversed, in steps accepting 2, 0, 3, ...
    drafts (cumulative `output_ids` like SGLang's default, or only the new ids with `incremental`)."""

    protocol_version = "HTTP/1.0"
    incremental = False
    seen: list = []
    flushes: list = []
    flush_status = 200
    info = {"version": "0.5.23", "tp_size": 1, "speculative_algorithm": "EAGLE3", "speculative_num_draft_tokens": 4,
            "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_draft_model_path": "/ckpt/eagle3"}

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/health":
            self._json(200, {})
        elif self.path == "/server_info":
            self._json(200, self.info)
        else:
            self._json(404, {"error": "no route"})

    def _json(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        if self.path.startswith("/flush_cache"):
            type(self).flushes.append(self.path)
            ok = self.flush_status == 200
            data = b"Cache flushed." if ok else b"Timed out waiting for idle state."
            self.send_response(self.flush_status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        n = body["sampling_params"]["max_new_tokens"]
        out = list(reversed(body["input_ids"]))[:n]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        pattern, hist, sent, steps = [2, 0, 3], [0, 0, 0, 0], 1, 0
        chunks = [1]                                  # the prefill token, then one chunk per verify step
        while sent < n:
            acc = pattern[steps % 3]
            emit = min(acc + 1, n - sent)
            hist[emit - 1] += 1
            steps += 1
            sent += emit
            chunks.append(sent)
        prev = 0
        for i, upto in enumerate(chunks):
            meta = {"id": "x", "prompt_tokens": len(body["input_ids"]), "completion_tokens": upto,
                    "finish_reason": None}
            if i == len(chunks) - 1:
                meta.update({"finish_reason": {"type": "length", "length": n}, "spec_verify_ct": steps,
                             "spec_num_correct_drafts": sum(j * h for j, h in enumerate(hist)),
                             "spec_num_proposed_drafts": 3 * steps, "spec_accept_histogram": hist,
                             "spec_accept_length": upto / steps})
            ids = out[prev:upto] if self.incremental else out[:upto]
            prev = upto
            self.wfile.write(f"data: {json.dumps({'text': None, 'output_ids': ids, 'meta_info': meta})}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def stub():
    StubSGLang.seen, StubSGLang.flushes = [], []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), StubSGLang)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("incremental", [False, True])
def test_end_to_end_against_a_stub_server(tiny_target, tmp_path, stub, monkeypatch, incremental):
    monkeypatch.setattr(StubSGLang, "incremental", incremental)
    out = tmp_path / "run"
    url = f"http://127.0.0.1:{stub.server_address[1]}"
    res = cli.invoke(app, ["run", "--engine", "sglang", "--endpoint", url, "--target", str(tiny_target),
                           "--method", "eagle3", "--budget", "4", "--option", "drafter=/ckpt/eagle3", "--limit", "3",
                           "--concurrency", "2", "--max-new-tokens", "10", "--dtype", "float32", "--no-report",
                           "--option", "warmup=0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert StubSGLang.flushes == ["/flush_cache?timeout=30"]              # the radix cache emptied first
    records = read_records(out)
    assert len(records) == 3 and all(r["status"] == "ok" for r in records)
    for r, sent in zip(sorted(records, key=lambda r: r["question_id"]),
                       sorted(StubSGLang.seen, key=lambda b: json.dumps(b))):
        assert len(r["output_token_ids"]) == 10
        assert r["output_token_ids"] == list(reversed(r["prompt_token_ids"]))[:10]
        assert 1 + sum(s["emitted"] for s in r["steps"]) == 10 and r["steps_source"] == "histogram"
        assert r["finish_reason"] == "length" and r["engine_spec"]["spec_verify_ct"] == len(r["steps"])
        assert r["ttft_s"] <= r["latency_s"]
    assert all(b["stream"] and b["sampling_params"]["max_new_tokens"] == 10 for b in StubSGLang.seen)
    m = read_manifest(out)
    assert m["engine"] == "sglang" and m["server"] == SglangRunner(str(tiny_target)).server_facts(url)
    assert m["server"]["engine_version"] == "0.5.23" and m["server"]["speculative"]["algorithm"] == "EAGLE3"
    assert m["method_config"]["speculative_args"] == [
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/ckpt/eagle3",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    c = m["engine_counters"]["counters"]
    steps = [s for r in records for s in r["steps"]]
    assert c["requests"] == 3 and c["verify_steps"] == len(steps)
    assert c["accepted_drafts"] == sum(s["accepted"] for s in steps)
    assert m["engine_counters"]["summary"]["al"] == pytest.approx(1 + c["accepted_drafts"] / c["verify_steps"])


def test_refuses_a_server_with_another_draft_width(tiny_target, tmp_path, stub):
    url = f"http://127.0.0.1:{stub.server_address[1]}"
    with pytest.raises(SpecbenchError, match="verifies 4 tokens"):
        cli.invoke(app, ["run", "--engine", "sglang", "--endpoint", url, "--target", str(tiny_target), "--method",
                         "eagle3", "--budget", "8", "--option", "drafter=/d", "--limit", "1", "--no-report",
                         "--out", str(tmp_path / "r")], catch_exceptions=False)


@pytest.mark.parametrize("temperature, seeded", [(0.0, False), (0.7, True)])
def test_a_sampled_run_sends_its_seed(tiny_target, temperature, seeded):
    """--seed must reach the server when the run samples, as it does for vLLM (greedy needs none)."""
    from types import SimpleNamespace

    from specbench.settings import Settings
    from specbench.runners.sglang import SglangRunner

    runner = SglangRunner(str(tiny_target), "float32", "http://127.0.0.1:1")
    body = runner._body(SimpleNamespace(prompt_ids=[1, 2, 3]), Settings("eagle3", 4, temperature=temperature, seed=5))
    assert body["sampling_params"].get("sampling_seed") == (5 if seeded else None)


def test_a_server_that_will_not_flush_is_one_line(tiny_target, stub, monkeypatch):
    monkeypatch.setattr(StubSGLang, "flush_status", 400)
    url = f"http://127.0.0.1:{stub.server_address[1]}"
    with pytest.raises(SpecbenchError, match=r"flush_cache\?timeout=30 answered HTTP 400 \(Timed out waiting for idle "
                                             r"state.\): the cache was not flushed"):
        SglangRunner(str(tiny_target), "float32", url).flush_cache(url)


@pytest.mark.parametrize("args, message", [
    (["--method", "ngram"], "runs as --method sglang-ngram"),
    (["--method", "vanilla", "--option", "drafter=/d"], "--method vanilla on SGLang takes no option 'drafter'"),
    (["--method", "sglang-ngram", "--option", "max_n=4"], "--option max_n: not on SGLang"),
    (["--method", "eagle3", "--option", "drafter=/d", "--option", "speculative_topk=2"], "takes no option "
                                                                                        "'speculative_topk'"),
    (["--method", "dspark", "--option", "drafter=/d"], "--option sps_table=PATH"),
    (["--method", "eagle3", "--option", "drafter=/d", "--option", "retries=-1"], "retries=-1"),
])
def test_options_and_methods_sglang_cannot_run_are_one_line(tiny_target, tmp_path, args, message):
    res = cli.invoke(app, ["run", "--engine", "sglang", "--endpoint", "http://127.0.0.1:9", "--target",
                           str(tiny_target), "--budget", "4", "--limit", "1", "--no-report", "--out",
                           str(tmp_path / "r"), *args])
    assert res.exit_code != 0 and isinstance(res.exception, (SpecbenchError, SystemExit))
    assert message in str(res.exception) + res.output


def test_a_compare_shares_an_option_that_one_of_its_methods_reads():
    SglangRunner.check_options([("vanilla", {}), ("sglang-ngram", {}), ("eagle3", {})], {"drafter": "/d"})
    with pytest.raises(SpecbenchError, match="--methods sglang-ngram:drafter=...: --method sglang-ngram on SGLang "
                                             "takes no option 'drafter'"):
        SglangRunner.check_options([("sglang-ngram", {"drafter": "/d"})], {})
