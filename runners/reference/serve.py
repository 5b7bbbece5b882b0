"""`specbench serve`: the reference engine behind an OpenAI-compatible HTTP server that speaks vLLM's dialect.

Endpoints (standard library only: http.server with one thread per connection, the engine in its own thread):

    POST /v1/chat/completions, /v1/completions   streaming (server-sent events) and non-streaming
    GET  /health                                 200 once the engine runs, 503 after it failed
    GET  /v1/models                              the served model (+ a `specbench` object: method, budget)
    GET  /metrics                                Prometheus text: vLLM's spec-decode counters, same meaning

Requests arriving while the engine runs join its continuous batch (up to --concurrency sequences in flight,
vLLM's max-num-seqs): the engine's request source yields `reference_eagle4.engine.PENDING` when nothing is
waiting, so the step loop goes on, and `on_progress` streams each step's tokens as they are emitted.

vLLM semantics reproduced, so the vLLM runner measures this server exactly as it measures vLLM:
- /metrics counters (vllm/v1/spec_decode/metrics.py, `SpecDecodingStats.observe_draft`), exposed only when a
  speculative method runs (as vLLM does): for each step of a sequence that drafted k > 0 tokens and accepted
  a of them, `vllm:spec_decode_num_drafts_total` += 1, `..._num_draft_tokens_total` += k,
  `..._num_accepted_tokens_total` += a, `..._num_accepted_tokens_per_pos_total{position=i}` += 1 for i < a.
  Accepted counts are not cut by EOS / max_tokens (vLLM counts them before the stop check). Steps that
  drafted nothing (prompt lookup found no match) are not drafts.
- per-request metrics as with `--per-request-spec-decode-metrics detailed`
  (docs/features/speculative_decoding/acceptance_metrics.md): `metrics.speculative_decoding` on the
  non-streaming response and on the final usage chunk of a stream (`stream_options.include_usage`).
- `return_token_ids`: `prompt_token_ids` on the first chunk / the response, `token_ids` on every choice.
Beyond vLLM, `metrics.specbench` carries the exact per-step records and the mean entropy of the request.

Sampling is fixed when the server starts (--temperature/--top-p/--top-k, per-request seeds from --seed): a
request asking for other sampling settings, or for features the engine lacks (n > 1, stop strings, logprobs,
tools, penalties, ignore_eos), gets HTTP 400 rather than a silently different answer.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("specbench.serve")


@dataclass
class ServeConfig:
    target: str = "smollm2-135m"
    method: str = "ngram"
    budget: int = 8
    concurrency: int = 8
    max_model_len: int = 2048
    dtype: str = "auto"
    threads: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


class SpecCounters:
    """vLLM's SpecDecodingStats, accumulated over the server's life (see the module docstring)."""

    def __init__(self, num_spec_tokens: int):
        self.drafts = 0
        self.draft_tokens = 0
        self.accepted = 0
        self.per_pos = [0] * max(num_spec_tokens, 0)

    def observe(self, step: dict[str, Any]) -> None:
        if step["drafted"] <= 0:
            return
        self.drafts += 1
        self.draft_tokens += step["drafted"]
        self.accepted += step["accepted"]
        if step["accepted"] > len(self.per_pos):
            self.per_pos += [0] * (step["accepted"] - len(self.per_pos))
        for i in range(step["accepted"]):
            self.per_pos[i] += 1


def request_spec_metrics(steps: list[dict[str, Any]], num_spec_tokens: int) -> dict[str, Any]:
    """`metrics.speculative_decoding` of one request, as vLLM's `detailed` level reports it."""
    drafting = [s for s in steps if s["drafted"] > 0]
    width = max([num_spec_tokens, *(s["drafted"] for s in drafting)])
    hist = [0] * (width + 1)
    by_len: dict[str, list[int]] = {}
    for s in drafting:
        hist[s["accepted"]] += 1
        row = by_len.setdefault(str(s["drafted"]), [0] * (s["drafted"] + 1))
        row[min(s["accepted"], s["drafted"])] += 1
    accepted = sum(s["accepted"] for s in drafting)
    drafted = sum(s["drafted"] for s in drafting)
    return {
        "mean_acceptance_length": 1.0 + accepted / len(drafting) if drafting else 1.0,
        "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
        "acceptance_histogram": hist,
        "acceptance_histogram_by_draft_length": by_len,
        "num_spec_steps": len(drafting),
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": drafted,
        "num_spec_tokens": num_spec_tokens,
        "per_step_accepted": [s["accepted"] for s in drafting],
        "per_step_drafted": [s["drafted"] for s in drafting],
    }


class Handle:
    """One request between an HTTP thread and the engine thread."""

    def __init__(self, rid: str, prompt_ids: list[int], max_tokens: int):
        self.id, self.prompt_ids, self.max_tokens = rid, prompt_ids, max_tokens
        self.events: queue.Queue = queue.Queue()
        self.sent = 0
        self.steps_seen = 0


class EngineService:
    """The reference engine running forever in one thread, fed from a queue of requests."""

    def __init__(self, cfg: ServeConfig):
        from specbench.runners.reference.runner import ReferenceRunner
        from specbench.settings import Settings

        self.cfg = cfg
        self.runner = ReferenceRunner(cfg.target, cfg.dtype, cfg.threads)
        self.tokenizer = self.runner.tokenizer
        limit = self.runner.model.args.max_position
        headroom = max(cfg.budget, 64) + 1
        self.max_model_len = min(cfg.max_model_len, limit - headroom)
        settings = Settings(cfg.method, cfg.budget, cfg.concurrency, self.max_model_len, cfg.temperature,
                            cfg.top_p, cfg.top_k, cfg.seed, dict(cfg.options))
        self.engine = self.runner.make_engine(settings, self.max_model_len + headroom)
        self.method_config = self.engine.proposer.config()
        self.model_name = cfg.model_name or cfg.target
        self.speculative = cfg.method != "vanilla"
        self.num_spec_tokens = cfg.budget - 1 if self.speculative else 0
        self.lock = threading.Lock()
        self.spec = SpecCounters(self.num_spec_tokens)
        self.stats = {"prompt_tokens": 0, "generation_tokens": 0, "requests": 0}
        self.running = 0
        self.handles: dict[str, Handle] = {}
        self.waiting: queue.Queue = queue.Queue()
        self.error: str | None = None
        self._stop = threading.Event()
        self._active = 0                        # admitted, not finished (engine thread only)
        self.started = time.time()
        self.thread = threading.Thread(target=self._loop, name="specbench-engine", daemon=True)
        self.thread.start()

    # -- engine thread -------------------------------------------------------------------------------
    def _source(self):
        from reference_eagle4.engine import PENDING, Request

        while not self._stop.is_set():
            try:
                h = self.waiting.get(timeout=0.05) if self._active == 0 else self.waiting.get_nowait()
            except queue.Empty:
                yield PENDING
                continue
            self._active += 1
            with self.lock:
                self.running += 1
            yield Request(h.id, h.prompt_ids, max_new_tokens=h.max_tokens)

    def _on_progress(self, seq: Any) -> None:
        h = self.handles.get(seq.request.id)
        if h is None:
            return
        new = seq.output[h.sent:]
        h.sent = len(seq.output)
        steps = seq.steps[h.steps_seen:]
        h.steps_seen = len(seq.steps)
        if steps and self.speculative:
            with self.lock:
                for s in steps:
                    self.spec.observe(s)
        if new:
            h.events.put(("tokens", list(new)))

    def _on_done(self, seq: Any) -> None:
        self._active -= 1
        h = self.handles.pop(seq.request.id, None)
        with self.lock:
            self.running -= 1
            self.stats["requests"] += 1
            self.stats["prompt_tokens"] += len(seq.request.prompt_ids)
            self.stats["generation_tokens"] += len(seq.output)
        if h is None:
            return
        last = seq.output[-1] if seq.output else None
        ents = [e for e in seq.entropies if math.isfinite(e)]
        h.events.put(("done", {
            "output": list(seq.output), "steps": list(seq.steps),
            "finish_reason": "stop" if last in self.engine.config.eos_ids else "length",
            "mean_entropy": sum(ents) / len(ents) if ents else None,
            "engine_ttft_s": seq.t_first - seq.t_start, "engine_latency_s": seq.t_end - seq.t_start,
        }))

    def _loop(self) -> None:
        try:
            self.engine.generate(self._source(), self._on_done, self._on_progress)
        except BaseException as err:            # the server must report it, not hang its clients
            self.error = f"engine failed: {type(err).__name__}: {err}"
            log.exception("engine thread failed")
            for h in list(self.handles.values()):
                h.events.put(("error", self.error))

    # -- HTTP threads --------------------------------------------------------------------------------
    def submit(self, prompt_ids: list[int], max_tokens: int, prefix: str) -> Handle:
        if self.error:
            raise ApiError(503, self.error, "ServiceUnavailableError")
        h = Handle(f"{prefix}-{uuid.uuid4().hex}", prompt_ids, max_tokens)
        self.handles[h.id] = h
        self.waiting.put(h)
        return h

    def healthy(self) -> bool:
        return self.error is None and self.thread.is_alive()

    def close(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self.thread.join(timeout)

    def metrics_text(self) -> str:
        name = self.model_name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        labels = f'engine="0",model_name="{name}"'
        with self.lock:
            spec = (self.spec.drafts, self.spec.draft_tokens, self.spec.accepted, list(self.spec.per_pos))
            stats, running, waiting = dict(self.stats), self.running, self.waiting.qsize()
        lines: list[str] = []

        def metric(metric_name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {metric_name} {help_text}")
            lines.append(f"# TYPE {metric_name} {kind}")
            suffix = "_total" if kind == "counter" else ""
            for extra, value in samples:
                lines.append(f"{metric_name}{suffix}{{{labels}{extra}}} {float(value)}")

        metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
               [("", running)])
        metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", [("", waiting)])
        metric("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", [("", stats["prompt_tokens"])])
        metric("vllm:generation_tokens", "counter", "Number of generation tokens processed.",
               [("", stats["generation_tokens"])])
        metric("vllm:request_success", "counter", "Count of successfully processed requests.",
               [("", stats["requests"])])
        if self.speculative:
            drafts, draft_tokens, accepted, per_pos = spec
            metric("vllm:spec_decode_num_drafts", "counter", "Number of spec decoding drafts.", [("", drafts)])
            metric("vllm:spec_decode_num_draft_tokens", "counter", "Number of draft tokens.", [("", draft_tokens)])
            metric("vllm:spec_decode_num_accepted_tokens", "counter", "Number of accepted tokens.",
                   [("", accepted)])
            metric("vllm:spec_decode_num_accepted_tokens_per_pos", "counter",
                   "Accepted tokens per draft position.",
                   [(f',position="{i}"', v) for i, v in enumerate(per_pos)])
        return "\n".join(lines) + "\n"

    def model_card(self) -> dict[str, Any]:
        return {"id": self.model_name, "object": "model", "created": int(self.started), "owned_by": "specbench",
                "root": str(self.runner.folder), "max_model_len": self.max_model_len,
                "specbench": {"method": self.cfg.method, "budget": self.cfg.budget,
                              "concurrency": self.cfg.concurrency, "dtype": self.runner.dtype_name,
                              "method_config": self.method_config}}

    # -- request validation --------------------------------------------------------------------------
    UNSUPPORTED = ("tools", "functions", "response_format", "logit_bias", "suffix", "guided_json",
                   "guided_regex", "guided_choice", "structured_outputs")

    def check(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if model not in (None, "", self.model_name):
            raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
        if int(body.get("n") or 1) != 1 or int(body.get("best_of") or 1) != 1:
            raise ApiError(400, "specbench serve returns one choice per request (n = 1)")
        for key in self.UNSUPPORTED:
            if body.get(key):
                raise ApiError(400, f"`{key}` is not supported by specbench serve")
        if body.get("stop") or body.get("stop_token_ids"):
            raise ApiError(400, "stop strings / stop_token_ids are not supported by specbench serve")
        if body.get("logprobs") or body.get("top_logprobs") or body.get("prompt_logprobs"):
            raise ApiError(400, "logprobs are not supported by specbench serve")
        if body.get("ignore_eos") or body.get("echo") or int(body.get("min_tokens") or 0) > 0:
            raise ApiError(400, "ignore_eos / echo / min_tokens are not supported by specbench serve")
        for key, neutral in (("presence_penalty", 0.0), ("frequency_penalty", 0.0), ("repetition_penalty", 1.0)):
            if body.get(key) is not None and float(body[key]) != neutral:
                raise ApiError(400, f"`{key}` is not supported by specbench serve")
        cfg = self.cfg
        for key, have in (("temperature", cfg.temperature), ("top_p", cfg.top_p)):
            if body.get(key) is not None and abs(float(body[key]) - have) > 1e-6:
                raise ApiError(400, f"this server samples with {key}={have} (set when it starts); "
                                    f"the request asks for {body[key]}")
        top_k = body.get("top_k")
        if top_k is not None and max(int(top_k), 0) != cfg.top_k:
            raise ApiError(400, f"this server samples with top_k={cfg.top_k}; the request asks for {top_k}")

    def prompt_ids(self, body: dict[str, Any], chat: bool) -> list[int]:
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise ApiError(400, "`messages` must be a non-empty list")
            flat = []
            for m in messages:
                content = m.get("content")
                if isinstance(content, list):
                    content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
                flat.append({"role": m.get("role", "user"), "content": content or ""})
            return list(self.tokenizer.apply_chat_template(flat, add_generation_prompt=True, tokenize=True,
                                                           return_dict=False))
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            return list(self.tokenizer.encode(prompt))
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return list(prompt)
        raise ApiError(400, "`prompt` must be a string or a list of token ids (one prompt per request)")

    def max_tokens(self, body: dict[str, Any], n_prompt: int) -> int:
        room = self.max_model_len - n_prompt
        asked = body.get("max_completion_tokens", body.get("max_tokens"))
        if asked is None:
            asked = room
        asked = int(asked)
        if asked < 1:
            raise ApiError(400, "max_tokens must be at least 1")
        if n_prompt + asked > self.max_model_len:
            raise ApiError(400, f"This model's maximum context length is {self.max_model_len} tokens. However, "
                                f"you requested {n_prompt + asked} tokens ({n_prompt} in the messages, "
                                f"{asked} in the completion).")
        return asked


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "specbench-serve"

    @property
    def svc(self) -> EngineService:
        return self.server.service  # type: ignore[attr-defined]

    def log_message(self, fmt: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), fmt % args)

    # -- plumbing ------------------------------------------------------------------------------------
    def _send(self, status: int, payload: Any, content_type: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else (
            payload.encode() if isinstance(payload, str) else json.dumps(payload).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, err: ApiError) -> None:
        self._send(err.status, {"error": {"message": err.message, "type": err.kind, "param": None,
                                          "code": err.status}})

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, payload: Any) -> None:
        self._chunk(b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n")

    # -- routes --------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send(200 if self.svc.healthy() else 503, b"", "text/plain")
        elif path == "/v1/models":
            self._send(200, {"object": "list", "data": [self.svc.model_card()]})
        elif path == "/metrics":
            self._send(200, self.svc.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/version":
            from importlib import metadata

            try:
                version = metadata.version("specbench")
            except metadata.PackageNotFoundError:
                version = "unknown"
            self._send(200, {"version": version, "engine": "specbench-reference"})
        else:
            self._error(ApiError(404, f"no route {path}", "NotFoundError"))

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        if path not in ("/v1/chat/completions", "/v1/completions"):
            self._error(ApiError(404, f"no route {path}", "NotFoundError"))
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                raise ApiError(400, "the request body is not valid JSON") from None
            if not isinstance(body, dict):
                raise ApiError(400, "the request body must be a JSON object")
            chat = path == "/v1/chat/completions"
            svc = self.svc
            svc.check(body)
            prompt = svc.prompt_ids(body, chat)
            handle = svc.submit(prompt, svc.max_tokens(body, len(prompt)), "chatcmpl" if chat else "cmpl")
        except ApiError as err:
            self._error(err)
            return
        except (TypeError, ValueError) as err:
            self._error(ApiError(400, f"bad request: {err}"))
            return
        try:
            if body.get("stream"):
                self._stream(handle, body, chat)
            else:
                self._complete(handle, body, chat)
        except (BrokenPipeError, ConnectionResetError):
            log.info("client went away during %s", handle.id)   # the sequence runs out its max_tokens

    # -- generation ----------------------------------------------------------------------------------
    def _wait(self, handle: Handle) -> tuple[str, Any]:
        while True:
            try:
                return handle.events.get(timeout=1.0)
            except queue.Empty:
                if self.svc.error:
                    return ("error", self.svc.error)

    def _decode(self, ids: list[int]) -> str:
        return self.svc.tokenizer.decode(ids, skip_special_tokens=True)

    def _usage(self, handle: Handle, done: dict[str, Any]) -> dict[str, int]:
        n_out = len(done["output"])
        return {"prompt_tokens": len(handle.prompt_ids), "completion_tokens": n_out,
                "total_tokens": len(handle.prompt_ids) + n_out}

    def _metrics(self, done: dict[str, Any]) -> dict[str, Any]:
        svc = self.svc
        return {
            "speculative_decoding": request_spec_metrics(done["steps"], svc.num_spec_tokens)
            if svc.speculative else None,
            "specbench": {"steps": done["steps"], "mean_entropy": done["mean_entropy"],
                          "engine_ttft_s": done["engine_ttft_s"], "engine_latency_s": done["engine_latency_s"]},
        }

    def _complete(self, handle: Handle, body: dict[str, Any], chat: bool) -> None:
        kind, done = self._wait(handle)
        while kind == "tokens":
            kind, done = self._wait(handle)
        if kind == "error":
            self._error(ApiError(500, str(done), "InternalServerError"))
            return
        text = self._decode(done["output"])
        choice: dict[str, Any] = {"index": 0, "finish_reason": done["finish_reason"], "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        if body.get("return_token_ids"):
            choice["token_ids"] = done["output"]
        payload: dict[str, Any] = {
            "id": handle.id, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": self.svc.model_name, "choices": [choice], "usage": self._usage(handle, done),
            "metrics": self._metrics(done),
        }
        if body.get("return_token_ids"):
            payload["prompt_token_ids"] = handle.prompt_ids
        self._send(200, payload)

    def _stream(self, handle: Handle, body: dict[str, Any], chat: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        want_ids = bool(body.get("return_token_ids"))
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        base = {"id": handle.id, "object": obj, "created": created, "model": self.svc.model_name}

        def choice(text: str, ids: list[int] | None, finish: str | None = None) -> dict[str, Any]:
            c: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
            if chat:
                c["delta"] = {"content": text} if text or finish else {"content": ""}
            else:
                c["text"] = text
            if want_ids:
                c["token_ids"] = ids or []
            return c

        if chat:
            first = {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                          "logprobs": None, "finish_reason": None}]}
            if want_ids:
                first["prompt_token_ids"] = handle.prompt_ids
                first["choices"][0]["token_ids"] = []
            self._event(first)
        out: list[int] = []
        sent_text = ""
        first_ids = True
        while True:
            kind, payload = self._wait(handle)
            if kind == "error":
                self._event({"error": {"message": str(payload), "type": "InternalServerError", "code": 500}})
                break
            if kind == "tokens":
                out += payload
                full = self._decode(out)
                delta = ""
                if not full.endswith("\ufffd") and full.startswith(sent_text):
                    delta, sent_text = full[len(sent_text):], full
                event = {**base, "choices": [choice(delta, payload)]}
                if want_ids and first_ids and not chat:
                    event["prompt_token_ids"] = handle.prompt_ids
                first_ids = False
                self._event(event)
                continue
            full = self._decode(payload["output"])
            tail = full[len(sent_text):] if full.startswith(sent_text) else ""
            self._event({**base, "choices": [choice(tail, [], payload["finish_reason"])]})
            if usage:
                self._event({**base, "choices": [], "usage": self._usage(handle, payload),
                             "metrics": self._metrics(payload)})
            break
        self._event(b"[DONE]")
        self._chunk(b"")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        err = sys.exc_info()[1]
        if isinstance(err, (ConnectionError, TimeoutError)):
            return                              # a client hung up on a kept-alive connection: not an error
        log.exception("error while handling a request from %s", client_address)


class SpecbenchServer:
    """The HTTP server and the engine service; `start()` serves from a background thread (tests, notebooks)."""

    def __init__(self, cfg: ServeConfig):
        self.service = EngineService(cfg)
        self.httpd = _HTTPServer((cfg.host, cfg.port), Handler)
        self.httpd.service = self.service  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "SpecbenchServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="specbench-http", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        try:
            self.httpd.serve_forever()
        finally:
            self.close()

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(10)
            self._thread = None
        self.httpd.server_close()
        self.service.close()

    def __enter__(self) -> "SpecbenchServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
