"""A stub OpenAI-compatible (vLLM-like) and SGLang-like server that misbehaves on request, for fault tests.

It answers GET /health, /v1/models, /get_server_info and /metrics, and POST /v1/chat/completions (a streamed
chat completion as vLLM sends it: token ids, usage on the final chunk), /generate (SGLang's stream),
/reset_prefix_cache (always {"success": true}) and /flush_cache (SGLang's, always 200). Each chat or generate POST
takes the next action of its plan (the last action repeats):

    ok          a complete stream of max_tokens tokens
    500, 400    that HTTP error as JSON
    429, 503    that HTTP error with Retry-After: 0 (the runner retries these)
    drop        close the connection without an answer (a connection error before any output)
    stall       send the headers, then nothing
    stall-mid   send two events, then nothing
    close-mid   send two events, then close the connection in the middle of the chunked body
    error-event send one event, then an error event
    exit        answer ok, then go away: the process exits (as a script) or the server stops (in a thread)

`models_status` / `info_status` make /v1/models and /get_server_info answer that status instead ("text" for a
200 that is not JSON). As a speculating SGLang server: `sglang_info` is what GET /server_info answers (SGLang
0.5.23's resolved ServerArgs plus "version"; without it that route is 404), and `sglang_hist` an acceptance
histogram (index j: verify steps that accepted j drafts) that every /generate's final meta_info carries as
`spec_correct_drafts_histogram`, with `spec_verify_ct` its sum and `spec_num_correct_drafts` its weighted sum, as
SGLang's tokenizer_manager.py `_calculate_spec_decoding_metrics` sends them. Runs in a thread
(`StubServer(...).start()`) or as a process: `python stub_openai.py --port N --plan 500,ok` (what a
monkeypatched launch command starts in place of vLLM).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROMPT_IDS = [1, 2, 3]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args: Any) -> None:
        pass

    # -- helpers ------------------------------------------------------------------------------------------------
    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, payload: Any) -> None:
        self._chunk(b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n")

    def _hang(self) -> None:
        self.server.release.wait(60)
        self.close_connection = True

    # -- routes -------------------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802
        s = self.server
        if s.gone:
            return self._drop()
        if self.path == "/health":
            self._json(200, {})
        elif self.path == "/v1/models":
            self._status_or(s.models_status, {"object": "list", "data": [{"id": "stub-model", "object": "model"}]})
        elif self.path == "/server_info" and s.sglang_info is not None:
            self._json(200, s.sglang_info)
        elif self.path == "/get_server_info":
            self._status_or(s.info_status, {"speculative_num_draft_tokens": 4})
        elif self.path == "/metrics":
            data = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._json(404, {"error": "no route"})

    def _status_or(self, status: Any, payload: Any) -> None:
        if status == "text":
            self._json(200, b"<html>not json</html>")
        elif status and status != 200:
            self._json(int(status), {"error": {"message": "internal failure", "code": int(status)}})
        else:
            self._json(200, payload)

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def do_POST(self) -> None:  # noqa: N802
        s = self.server
        if s.gone:
            return self._drop()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/reset_prefix_cache":              # vLLM's cache reset (development mode), not a plan step
            return self._json(200, {"success": True})
        if self.path.startswith("/flush_cache"):            # SGLang's cache flush, not a plan step either
            return self._json(200, b"Cache flushed.")
        action = s.next_action(body)
        if action in ("500", "400"):
            return self._json(int(action), {"object": "error", "message": f"stub failure {action}", "code": 1})
        if action in ("429", "503"):
            return self._json(int(action), {"object": "error", "message": "busy"}, {"Retry-After": "0"})
        if action == "drop":
            return self._drop()
        sglang = self.path == "/generate"
        n = body["sampling_params"]["max_new_tokens"] if sglang else body["max_tokens"]
        events = self._sglang_events(n, s.sglang_hist) if sglang else self._vllm_events(n)
        self._start_stream()
        if action == "stall":
            return self._hang()
        cut = {"stall-mid": 2, "close-mid": 2, "error-event": 1}.get(action)
        for i, event in enumerate(events):
            if cut is not None and i == cut:
                if action == "stall-mid":
                    return self._hang()
                if action == "close-mid":
                    self.wfile.write(b"ff\r\ndata: {")          # a chunk cut short: the body is incomplete
                    self.wfile.flush()
                    return self._drop()
                self._event({"object": "error", "message": "engine step failed", "code": 500})
                self._chunk(b"")
                return
            self._event(event)
        self._event(b"[DONE]")
        self._chunk(b"")
        if action == "exit":
            self.close_connection = True
            s.exit()

    def _vllm_events(self, n: int) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for i in range(n):
            choice = {"index": 0, "delta": {"content": f"t{i} "}, "token_ids": [100 + i], "finish_reason": None}
            event: dict[str, Any] = {"object": "chat.completion.chunk", "choices": [choice]}
            if i == 0:
                event["prompt_token_ids"] = PROMPT_IDS
            events.append(event)
        events.append({"object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        events.append({"object": "chat.completion.chunk", "choices": [],
                       "usage": {"prompt_tokens": len(PROMPT_IDS), "completion_tokens": n}})
        return events

    def _sglang_events(self, n: int, hist: list[int] | None = None) -> list[dict[str, Any]]:
        out = [100 + i for i in range(n)]
        events = [{"output_ids": out[: i + 1], "meta_info": {"completion_tokens": i + 1, "finish_reason": None}}
                  for i in range(n)]
        if hist and events:
            events[-1]["meta_info"].update(
                finish_reason={"type": "length", "length": n}, spec_verify_ct=sum(hist),
                spec_num_correct_drafts=sum(j * c for j, c in enumerate(hist)),
                spec_correct_drafts_histogram=list(hist))
        return events


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, plan: list[str], models_status: Any = 200, info_status: Any = 200,
                 in_process: bool = True, sglang_info: dict[str, Any] | None = None,
                 sglang_hist: list[int] | None = None):
        super().__init__(("127.0.0.1", port), Handler)
        self.plan = list(plan)
        self.models_status = models_status
        self.info_status = info_status
        self.sglang_info = sglang_info
        self.sglang_hist = sglang_hist
        self.in_process = in_process
        self.release = threading.Event()        # set at shutdown: hanging handlers return
        self.gone = False
        self.requests: list[dict[str, Any]] = []
        self.actions: list[str] = []
        self._lock = threading.Lock()

    def next_action(self, body: dict[str, Any]) -> str:
        with self._lock:
            action = self.plan[len(self.requests)] if len(self.requests) < len(self.plan) else self.plan[-1]
            self.requests.append(body)
            self.actions.append(action)
            return action

    def exit(self) -> None:
        if not self.in_process:
            os._exit(3)
        self.gone = True
        threading.Thread(target=self._stop_listening, daemon=True).start()

    def _stop_listening(self) -> None:
        self.shutdown()
        self.socket.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass                                    # a client that went away mid-answer is part of the test


class StubServer:
    """The stub in a background thread on 127.0.0.1 (port 0: any free port)."""

    def __init__(self, plan: str | list[str] = "ok", port: int = 0, models_status: Any = 200,
                 info_status: Any = 200, sglang_info: dict[str, Any] | None = None,
                 sglang_hist: list[int] | None = None):
        self.httpd = _Server(port, plan.split(",") if isinstance(plan, str) else plan, models_status, info_status,
                             sglang_info=sglang_info, sglang_hist=sglang_hist)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def actions(self) -> list[str]:
        return self.httpd.actions

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The bodies of every chat or generate POST, in arrival order."""
        return self.httpd.requests

    def start(self) -> "StubServer":
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.release.set()
        if not self.httpd.gone:
            self.httpd.shutdown()
        self.httpd.server_close()
        time.sleep(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--plan", default="ok")
    args = parser.parse_args()
    _Server(args.port, args.plan.split(","), in_process=False).serve_forever()


if __name__ == "__main__":
    main()
