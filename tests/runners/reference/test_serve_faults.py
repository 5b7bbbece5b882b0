"""`specbench serve` under bad requests, stalled clients and engine failures: every answer is JSON, one client or
one request cannot take the server down, and the next request is served as if nothing had happened."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import httpx
import pytest

READ_TIMEOUT = 1.0
MAX_CONNECTIONS = 12
CONTEXT = 256
PROMPT = [5, 40, 41, 5, 40, 41, 42]            # token ids of the tiny target
GOOD = {"prompt": PROMPT, "max_tokens": 24, "return_token_ids": True}


@pytest.fixture(scope="module")
def server(tiny_target):
    from specbench.runners.reference.serve import ServeConfig, SpecbenchServer

    srv = SpecbenchServer(ServeConfig(target=str(tiny_target), method="ngram", budget=4, concurrency=4,
                                      max_model_len=CONTEXT, dtype="float32", port=0, model_name="tiny",
                                      read_timeout=READ_TIMEOUT, max_connections=MAX_CONNECTIONS)).start()
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def expected(server):
    """GOOD's output on a healthy server (greedy: every later answer to GOOD must equal it)."""
    r = httpx.post(server.url + "/v1/completions", json=GOOD, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


def post(server, body, path="/v1/completions", headers=None):
    """POST a JSON body (bytes as they are; anything else through json.dumps, which escapes lone surrogates)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(server.url + path, content=data, timeout=60,
                      headers={"Content-Type": "application/json", **(headers or {})})


def error_of(r) -> str:
    """The message of an OpenAI-style JSON error (fails the test when the answer is not one)."""
    body = r.json()
    assert body["error"]["code"] == r.status_code and body["error"]["type"], body
    return body["error"]["message"]


def assert_serves(server, expected):
    assert httpx.get(server.url + "/health").status_code == 200
    r = post(server, GOOD)
    assert r.status_code == 200 and r.json()["choices"][0]["token_ids"] == expected


def raw(server, data: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    """Send raw bytes on a fresh connection; read until the server closes it. (status, body); (0, b"") when the
    server closed without answering."""
    url = urlsplit(server.url)
    with socket.create_connection((url.hostname, url.port), timeout=timeout) as s:
        s.sendall(data)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    if not reply:
        return 0, b""
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


# -- item 4: token ids, and an engine failure that is permanent --------------------------------------------

@pytest.mark.parametrize("prompt", [[1_000_000_000], [5, -1], [5, 320], [True, 5], [5, 2.5]])
def test_token_ids_outside_the_vocabulary_are_refused_and_the_server_goes_on(server, expected, prompt):
    r = post(server, {"prompt": prompt, "max_tokens": 4})
    assert r.status_code == 400
    message = error_of(r)
    assert "vocabulary" in message or "token ids" in message
    assert_serves(server, expected)


def test_a_request_failing_in_the_engine_fails_alone_and_the_engine_stays_usable(server, expected, monkeypatch):
    """A prefill that raises (here: injected for prompts ending in token 299) answers that request 500 JSON,
    streaming or not; a request decoding in the same batch at that moment finishes with its exact output."""
    svc = server.service
    target, proposer = svc.engine.target, svc.engine.proposer
    real_prefill, real_propose = target.prefill, proposer.propose

    def prefill(ids, *args, **kw):
        if int(ids[0, -1]) == 299:
            raise RuntimeError("injected prefill failure")
        return real_prefill(ids, *args, **kw)

    held = []

    def propose(seqs):                        # hold the good request's first step until the bad one waits
        deadline = time.time() + 10
        while not held and svc.waiting.empty() and time.time() < deadline:
            time.sleep(0.005)
        held.append(len(seqs))
        return real_propose(seqs)

    monkeypatch.setattr(target, "prefill", prefill)
    monkeypatch.setattr(proposer, "propose", propose)
    good: dict = {}
    thread = threading.Thread(target=lambda: good.update(r=post(server, GOOD)))
    thread.start()
    deadline = time.time() + 10
    while svc.running == 0 and time.time() < deadline:
        time.sleep(0.005)
    bad = post(server, {"prompt": [5, 6, 299], "max_tokens": 8})
    thread.join(60)
    assert bad.status_code == 500 and "injected prefill failure" in error_of(bad)
    assert good["r"].status_code == 200 and good["r"].json()["choices"][0]["token_ids"] == expected
    assert held[0] == 1 and not svc.waiting.qsize()        # the bad request arrived while the good one ran
    monkeypatch.setattr(proposer, "propose", real_propose)
    streamed = post(server, {"prompt": [5, 6, 299], "max_tokens": 8, "stream": True})
    assert streamed.status_code == 500 and "injected prefill failure" in error_of(streamed)
    assert_serves(server, expected)
    assert svc.healthy()                      # the scheduler never stopped


def test_a_failed_step_fails_its_batch_and_the_engine_goes_on(server, expected, monkeypatch):
    svc = server.service
    proposer = svc.engine.proposer
    real_propose, calls = proposer.propose, []

    def propose(seqs):
        calls.append(len(seqs))
        if len(calls) == 1:
            raise RuntimeError("injected step failure")
        return real_propose(seqs)

    monkeypatch.setattr(proposer, "propose", propose)
    r = post(server, GOOD)
    assert r.status_code == 500 and "injected step failure" in error_of(r)
    assert svc.healthy()
    assert_serves(server, expected)
    assert svc.running == 0


# -- item 5: body size, stalled uploads, idle connections, connection threads ------------------------------

def test_a_body_over_the_limit_is_refused_before_it_is_sent(server):
    """413 arrives in answer to the headers alone: the server reads none of the 20 MB it was promised."""
    status, body = raw(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               b"Content-Length: 20000000\r\n\r\n")
    assert status == 413 and "at most 4194304" in json.loads(body)["error"]["message"]


def test_a_prompt_too_long_for_the_context_is_refused_without_tokenising_it(server, monkeypatch):
    calls = []
    tokenizer = server.service.tokenizer
    monkeypatch.setattr(tokenizer, "encode", lambda *a, **k: calls.append(1) or [])
    monkeypatch.setattr(tokenizer, "apply_chat_template", lambda *a, **k: calls.append(1) or [])
    text = "a red fox " * 300_000                # 3 MB: within the body limit, far beyond 256 tokens
    for path, body in (("/v1/completions", {"prompt": text}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": text}]})):
        r = post(server, body, path)
        assert r.status_code == 400 and "maximum context length is 256 tokens" in error_of(r)
        assert "not tokenised" in error_of(r)
    assert calls == []


def test_stalled_uploads_and_idle_connections_are_closed(server, expected):
    """A body that stops coming is answered 408 and closed, so are headers that stop, and an idle connection
    is closed: none holds a thread past the read timeout."""
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    status, body = raw(server, head + b"Content-Length: 100\r\n\r\n{\"prompt\":")
    assert status == 408 and "did not arrive within 1 s" in json.loads(body)["error"]["message"]
    status, body = raw(server, head)                           # headers never finished
    assert status == 408 and json.loads(body)["error"]["code"] == 408
    assert raw(server, b"") == (0, b"")                         # connected, said nothing: closed
    assert_serves(server, expected)


def test_connections_beyond_the_cap_get_503_and_cost_no_thread(server, expected):
    url = urlsplit(server.url)
    held = [socket.create_connection((url.hostname, url.port), timeout=10) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)                                         # all accepted, each on its own thread
        status, body = raw(server, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 503 and "maximum of 12 connections" in json.loads(body)["error"]["message"]
    finally:
        for s in held:
            s.close()
    time.sleep(0.2)
    assert_serves(server, expected)


@pytest.mark.parametrize("data,status", [
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 411),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 411),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -4\r\n\r\n", 400),
    (b"DELETE /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    (b"\x16\x03\x01\x02\x00 garbage\r\n\r\n", 400),
    (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414),
])
def test_malformed_http_is_answered_with_json_and_closed(server, data, status):
    got, body = raw(server, data)
    assert got == status and json.loads(body)["error"]["code"] == status


# -- item 6: message shapes and field types ---------------------------------------------------------------

@pytest.mark.parametrize("messages,match", [
    (["hello"], "`messages[0]` must be an object"),
    ([{"content": "hi"}], "`messages[0].role`"),
    ([{"role": "user"}], "`messages[0].content`"),
    ([{"role": "user", "content": 5}], "`messages[0].content`"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], "`messages[0].content[0]`"),
    ([{"role": "user", "content": [{"type": "text", "text": 3}]}], "`messages[0].content[0]`"),
    ([{"role": "system", "content": "x"}, {"role": ["user"], "content": "hi"}], "`messages[1].role`"),
    ("hello", "`messages` must be a non-empty list"),
    ([{"role": "user", "content": "a \udfff fox"}], "`messages[0].content` is not valid Unicode"),
])
def test_malformed_messages_get_400_json(server, expected, messages, match):
    r = post(server, {"messages": messages, "max_tokens": 4}, "/v1/chat/completions")
    assert r.status_code == 400 and match in error_of(r)
    assert_serves(server, expected)


@pytest.mark.parametrize("body,match", [
    (b'{"prompt": [5, 6], "max_tokens": Infinity}', "`max_tokens` must be a finite number"),
    (b'{"prompt": [5, 6], "max_tokens": 1e999}', "`max_tokens` must be a finite number"),
    (b'{"prompt": [5, 6], "max_tokens": 100000000000000000000000}', "`max_tokens` is out of range"),
    (b'{"prompt": [5, 6], "max_tokens": "4"}', "`max_tokens` must be a number"),
    (b'{"prompt": [5, 6], "max_tokens": 2.5}', "`max_tokens` must be an integer"),
    (b'{"prompt": [5, 6], "max_tokens": 0}', "`max_tokens` must be at least 1"),
    (b'{"prompt": [5, 6], "temperature": NaN}', "`temperature` must be a finite number"),
    (b'{"prompt": [5, 6], "stream": "yes"}', "`stream` must be true or false"),
    (b'{"prompt": [5, 6], "stream": true, "stream_options": "usage"}', "`stream_options` must be an object"),
    (b'{"prompt": [5, 6], "n": [2]}', "`n` must be a number"),
    (b'{"prompt": [5, 6], "model": ["tiny"]}', "`model` must be a string"),
    (b'{"prompt": ""}', "`prompt` is empty"),
    (b'{"prompt": "a \\ud800 fox"}', "`prompt` is not valid Unicode"),
    (b'{"prompt": {"text": "hi"}}', "`prompt` must be"),
    (b'[1, 2]', "must be a JSON object"),
    (b'{"prompt": ', "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    (b"\xff\xfe\x00", "not valid JSON"),
])
def test_malformed_fields_get_400_json(server, expected, body, match):
    r = post(server, body)
    assert r.status_code == 400 and match in error_of(r)
    assert_serves(server, expected)


# -- item 7: the context-length message --------------------------------------------------------------------

def test_a_prompt_over_the_context_names_the_context(server):
    long_prompt = PROMPT * 40                                   # 280 tokens > 256
    r = post(server, {"prompt": long_prompt})
    assert r.status_code == 400
    assert error_of(r).startswith("This model's maximum context length is 256 tokens. However, your prompt is "
                                  "280 tokens")
    r = post(server, {"prompt": PROMPT, "max_tokens": 250})
    assert r.status_code == 400 and "you requested 257 tokens (7 in the messages, 250 in the completion)" in \
        error_of(r)


def test_without_max_tokens_a_request_fills_the_context(server):
    r = post(server, {"prompt": PROMPT * 35, "return_token_ids": True})    # 245 tokens: room for 11
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 11


# -- what a client library sends still works ---------------------------------------------------------------

OPENAI_HEADERS = {"User-Agent": "OpenAI/Python 1.54.0", "X-Stainless-Lang": "python", "Accept": "application/json",
                  "Authorization": "Bearer EMPTY"}


def test_openai_client_style_requests_stream_and_not(server):
    messages = [{"role": "system", "content": "write a prompt"},
                {"role": "user", "content": [{"type": "text", "text": "a red fox "}, {"type": "text", "text": "jumps"}]}]
    body = {"model": "tiny", "messages": messages, "max_tokens": 12, "temperature": 0.0, "top_p": 1.0, "n": 1,
            "presence_penalty": 0, "frequency_penalty": 0, "stream": False, "seed": 3, "user": "u1"}
    r = post(server, body, "/v1/chat/completions", headers=OPENAI_HEADERS)
    assert r.status_code == 200, r.text
    text = r.json()["choices"][0]["message"]["content"]
    with httpx.Client(timeout=60, headers=OPENAI_HEADERS) as client:
        with client.stream("POST", server.url + "/v1/chat/completions",
                           json={**body, "stream": True, "stream_options": {"include_usage": True}}) as resp:
            assert resp.status_code == 200
            events = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
        models = client.get(server.url + "/v1/models").json()       # the same kept-alive connection
    assert events[-1] == "[DONE]" and models["data"][0]["id"] == "tiny"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == text
    assert chunks[-1]["usage"]["completion_tokens"] == 12


# -- the threat model: loopback by default, a warning otherwise ---------------------------------------------

def test_serving_beyond_loopback_warns(monkeypatch):
    from typer.testing import CliRunner

    from specbench.cli import app
    from specbench.runners.reference import serve as serve_mod

    class Fake:
        def __init__(self, cfg):
            self.url = f"http://{cfg.host}:{cfg.port}"
            self.service = type("S", (), {"model_name": "m", "max_model_len": 16,
                                          "runner": type("R", (), {"dtype_name": "float32", "device": "cpu"})})

        def serve_forever(self):
            raise KeyboardInterrupt

    monkeypatch.setattr(serve_mod, "SpecbenchServer", Fake)
    for host, warned in (("0.0.0.0", True), ("127.0.0.1", False), ("::1", False), ("localhost", False)):
        res = CliRunner().invoke(app, ["serve", "--host", host])
        assert res.exit_code == 0, res.output
        assert ("no authentication" in " ".join(res.output.split())) == warned, (host, res.output)


# -- memory: big bodies are refused or bounded before they cost anything -----------------------------------

def vm_kb(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="reads /proc (Linux)")
def test_big_bodies_do_not_grow_the_server_memory(tiny_target, tmp_path):
    """A `specbench serve` process: a 20 MB body is refused (413) as it arrives, 6 MB prompts under the body limit
    are refused without being tokenised (tokenising one would take many times that memory), a 7 MB padded body is served;
    the server's peak resident memory (VmHWM) grows by less than 150 MB over all of it."""
    import subprocess
    import sys

    from specbench.runners.server import free_port

    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "specbench.cli", "serve", "--target", str(tiny_target),
                                 "--method", "ngram", "--budget", "4", "--max-model-len", "256", "--dtype", "float32",
                                 "--port", str(port), "--max-body-bytes", "8000000"], stdout=out, stderr=out)
    srv = SimpleNamespace(url=f"http://127.0.0.1:{port}")
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            try:
                if httpx.get(srv.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        first = post(srv, GOOD)
        assert first.status_code == 200, log.read_text()
        before = vm_kb(proc.pid, "VmHWM")
        big = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 20000000\r\n\r\n" + b" " * 20_000_000
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            try:
                s.sendall(big)
            except OSError:                                      # answered and closed before the body was sent
                pass
            assert s.recv(4096).startswith(b"HTTP/1.1 413")
        text = "a red fox jumps over the lazy dog " * 180_000    # 6 MB
        for path, body in (("/v1/completions", {"prompt": text}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": text}]})):
            r = post(srv, body, path)
            assert r.status_code == 400 and "not tokenised" in error_of(r)
        padded = post(srv, json.dumps(GOOD).encode() + b" " * 7_000_000)
        assert padded.status_code == 200 and padded.json()["choices"][0]["token_ids"] == \
            first.json()["choices"][0]["token_ids"]
        grown_mb = (vm_kb(proc.pid, "VmHWM") - before) / 1024
        assert grown_mb < 150, f"peak RSS grew {grown_mb:.0f} MB"
    finally:
        proc.terminate()
        proc.wait(30)
    assert "Traceback" not in log.read_text()


@pytest.mark.slow
def test_a_short_fuzz_run_finds_no_violation(tiny_target, tmp_path):
    """tools/fuzz_serve.py for 20 s (`make fuzz-serve` runs it for 10 minutes on the default target)."""
    import subprocess
    import sys

    tool = Path(__file__).resolve().parents[3] / "tools" / "fuzz_serve.py"
    res = subprocess.run([sys.executable, str(tool), "--seconds", "20", "--seed", "1", "--target", str(tiny_target),
                          "--log", str(tmp_path / "serve.log")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "no violations" in res.stdout, res.stdout + res.stderr
