"""`specbench serve`: the reference engine behind an OpenAI-compatible HTTP server that speaks vLLM's dialect.

Endpoints (standard library only: http.server with one thread per connection, the engine in its own thread):

    POST /v1/chat/completions, /v1/completions   streaming (server-sent events) and non-streaming
    GET  /health                                 200 while the engine can serve, 503 while it cannot
    GET  /v1/models                              the served model (+ a `specbench` object: method, budget)
    GET  /metrics                                Prometheus text: vLLM's spec-decode counters, same meaning

Requests arriving while the engine runs join its continuous batch (up to --concurrency sequences in flight,
vLLM's max-num-seqs): the engine's request source yields `reference_eagle4.engine.PENDING` when nothing is
waiting, so the step loop goes on, and `on_progress` streams each step's tokens as they are emitted.

vLLM semantics reproduced, so the vLLM runner measures this server exactly as it measures vLLM:
- /metrics counters and per-request `metrics.speculative_decoding` (`--per-request-spec-decode-metrics
  detailed`), on the non-streaming response and on the final usage chunk of a stream
  (`stream_options.include_usage`): serve_metrics.py has their definitions.
- `return_token_ids`: `prompt_token_ids` on the first chunk / the response, `token_ids` on every choice.
- logprobs: chat `logprobs: true, top_logprobs: K` and completions `logprobs: K` (K <= 20, vLLM's default
  --max-logprobs) return, per output token, its logprob and the top K of the target's raw next-token
  distribution in vLLM's shapes and order (serve_logprobs.py), streamed with the tokens they belong to;
  `return_tokens_as_token_ids` names tokens "token_id:N".
Beyond vLLM, `metrics.specbench` carries the exact per-step records and the mean entropy of the request, the
exact value a runner's estimate from the top-K logprobs (runners/server_entropy.py) is checked against.

Sampling is fixed when the server starts (--temperature/--top-p/--top-k, per-request seeds from --seed): a
request asking for other sampling settings, or for features the engine lacks (n > 1, stop strings, prompt
logprobs, tools, penalties, ignore_eos), gets HTTP 400 rather than a silently different answer.

Threat model. The server is meant for benchmarking on one machine or a trusted network: it has no
authentication, no TLS and no per-client quotas, and it listens on 127.0.0.1 unless told otherwise
(`--host 0.0.0.0` prints a warning). Within that, no single client can take it down or starve it for long:
- every request is checked in full before it reaches the engine (serve_requests.py): malformed JSON, fields
  of the wrong type, message shapes, token ids outside the vocabulary and prompts longer than the context
  (bounded by length before they are tokenised) are answered 4xx JSON;
- bodies are limited in size (--max-body-bytes, 413 before reading them) and every request must arrive within
  --read-timeout seconds; connection threads are capped (--max-connections; beyond them 503): serve_http.py;
- an engine failure fails the requests it hit and not the server (`Engine.generate(isolate_failures=True)`):
  a failure while admitting one request (its prefill) fails that request alone; a failure in a batched step,
  which cannot be pinned on one sequence, fails the requests of that batch; the scheduler goes on with the
  next request, and /health answers 503 only after the engine thread itself is gone.
What it does not defend against: a client that sends many valid requests (each is served in turn, up to
--max-connections at once), or a client that reads a stream slowly (its thread waits up to --read-timeout per
write).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from specbench.runners.reference.serve_http import (
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS, DEFAULT_READ_TIMEOUT_S, ApiError, GuardedServer, JsonHandler)
from specbench.runners.reference.serve_logprobs import chat_logprobs, completion_logprobs
from specbench.runners.reference.serve_metrics import (
    CONTENT_TYPE, MetricsSnapshot, SpecCounters, exposition, request_spec_metrics)
from specbench.runners.reference.serve_requests import Completion, Limits, RequestReader, Sampling

log = logging.getLogger("specbench.serve")


@dataclass
class ServeConfig:
    """What `specbench serve` runs (the engine, its sampling) and how it guards its HTTP side (serve_http.py)."""

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
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    read_timeout: float = DEFAULT_READ_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    device: str = "auto"                             # auto, cpu, cuda, cuda:N
    cuda_graphs: bool = True                         # on CUDA: batch-1 decoding steps replayed from a graph


def is_loopback(host: str) -> bool:
    """Whether `host` only accepts connections from this machine (a name other than localhost counts as not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Handle:
    """One request between an HTTP thread and the engine thread."""

    def __init__(self, rid: str, prompt_ids: list[int], max_tokens: int, top_logprobs: int | None = None):
        self.id, self.prompt_ids, self.max_tokens, self.top_logprobs = rid, prompt_ids, max_tokens, top_logprobs
        self.events: queue.Queue = queue.Queue()
        self.sent = 0
        self.steps_seen = 0


class EngineService:
    """The reference engine running in one thread, fed from a queue of requests, surviving its own failures."""

    def __init__(self, cfg: ServeConfig):
        from specbench.runners.reference.runner import ReferenceRunner
        from specbench.settings import Settings

        self.cfg = cfg
        self.runner = ReferenceRunner(cfg.target, cfg.dtype, cfg.threads, device=cfg.device,
                                      cuda_graphs=cfg.cuda_graphs)
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
        vocab = int(self.runner.model.embed.weight.shape[0])
        self.reader = RequestReader(
            self.model_name, Sampling(cfg.temperature, cfg.top_p, cfg.top_k),
            Limits(self.max_model_len, vocab, max(map(len, self.tokenizer.get_vocab()), default=1)),
            self.tokenizer)
        self.lock = threading.Lock()
        self.spec = SpecCounters(self.num_spec_tokens)
        self.stats = {"prompt_tokens": 0, "generation_tokens": 0, "requests": 0}
        self.running = 0
        self.handles: dict[str, Handle] = {}
        self.waiting: queue.Queue = queue.Queue()
        self.error: str | None = None           # set when the engine thread is gone for good
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
            yield Request(h.id, h.prompt_ids, max_new_tokens=h.max_tokens, top_logprobs=h.top_logprobs)

    def _on_progress(self, seq: Any) -> None:
        h = self.handles.get(seq.request.id)
        if h is None or seq.error:
            return
        new, lps = seq.output[h.sent:], seq.logprobs[h.sent:]
        h.sent = len(seq.output)
        steps = seq.steps[h.steps_seen:]
        h.steps_seen = len(seq.steps)
        if steps and self.speculative:
            with self.lock:
                for s in steps:
                    self.spec.observe(s)
        if new:
            h.events.put(("tokens", (list(new), list(lps))))

    def _on_done(self, seq: Any) -> None:
        self._active -= 1
        h = self.handles.pop(seq.request.id, None)
        failure = f"the engine failed on this request: {seq.error}" if seq.error else None
        if failure:
            log.warning("request %s: %s", seq.request.id, failure)
        with self.lock:
            self.running -= 1
            if failure is None:
                self.stats["requests"] += 1
                self.stats["prompt_tokens"] += len(seq.request.prompt_ids)
                self.stats["generation_tokens"] += len(seq.output)
        if h is None:
            return
        if failure is not None:
            h.events.put(("error", failure))
            return
        last = seq.output[-1] if seq.output else None
        ents = [e for e in seq.entropies if math.isfinite(e)]
        h.events.put(("done", {
            "output": list(seq.output), "steps": list(seq.steps), "logprobs": list(seq.logprobs),
            "finish_reason": "stop" if last in self.engine.config.eos_ids else "length",
            "mean_entropy": sum(ents) / len(ents) if ents else None,
            "engine_ttft_s": seq.t_first - seq.t_start, "engine_latency_s": seq.t_end - seq.t_start,
        }))

    def _loop(self) -> None:
        try:
            self.engine.generate(self._source(), self._on_done, self._on_progress, isolate_failures=True)
        except BaseException as err:            # the server must report it, not hang its clients
            self.error = f"engine failed: {type(err).__name__}: {err}"
            log.exception("engine thread failed")
            for h in list(self.handles.values()):
                h.events.put(("error", self.error))

    # -- HTTP threads --------------------------------------------------------------------------------
    def submit(self, request: Completion) -> Handle:
        if self.error:
            raise ApiError(503, self.error, "ServiceUnavailableError")
        h = Handle(f"{'chatcmpl' if request.chat else 'cmpl'}-{uuid.uuid4().hex}", request.prompt_ids,
                   request.max_tokens, request.logprobs)
        self.handles[h.id] = h
        self.waiting.put(h)
        return h

    def reset_prefix_cache(self) -> bool:
        """vLLM's POST /reset_prefix_cache: forget the cached prompts. Refused (False) while requests run, as
        vLLM refuses while blocks are held; holding the lock keeps a new request from being admitted meanwhile."""
        with self.lock:
            if self.running:
                return False
            if self.engine.prefix is not None:
                self.engine.prefix.clear()
            return True

    def healthy(self) -> bool:
        return self.error is None and self.thread.is_alive()

    def close(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self.thread.join(timeout)

    def metrics_text(self) -> bytes:
        with self.lock:
            spec = (self.spec.drafts, self.spec.draft_tokens, self.spec.accepted, list(self.spec.per_pos))
            snap = MetricsSnapshot(self.model_name, self.running, self.waiting.qsize(), self.stats["prompt_tokens"],
                                   self.stats["generation_tokens"], self.stats["requests"],
                                   spec if self.speculative else None)
        return exposition(snap)

    def model_card(self) -> dict[str, Any]:
        return {"id": self.model_name, "object": "model", "created": int(self.started), "owned_by": "specbench",
                "root": str(self.runner.folder), "max_model_len": self.max_model_len,
                "specbench": {"method": self.cfg.method, "budget": self.cfg.budget,
                              "concurrency": self.cfg.concurrency, "dtype": self.runner.dtype_name,
                              "method_config": self.method_config}}


class Handler(JsonHandler):
    server_version = "specbench-serve"

    @property
    def svc(self) -> EngineService:
        return self.server.service  # type: ignore[attr-defined]

    # -- plumbing ------------------------------------------------------------------------------------
    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, payload: Any) -> None:
        self._chunk(b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n")

    # -- routes --------------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self.send_payload(200 if self.svc.healthy() else 503, b"", "text/plain")
        elif path == "/v1/models":
            self.send_payload(200, {"object": "list", "data": [self.svc.model_card()]})
        elif path == "/metrics":
            self.send_payload(200, self.svc.metrics_text(), CONTENT_TYPE)
        elif path == "/version":
            from importlib import metadata

            try:
                version = metadata.version("specbench")
            except metadata.PackageNotFoundError:
                version = "unknown"
            self.send_payload(200, {"version": version, "engine": "specbench-reference"})
        else:
            self.send_api_error(ApiError(404, f"no route {path}"))

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        try:
            body = self.read_json_body()        # read before routing, so the connection stays in step
            if path == "/reset_prefix_cache":
                self.send_payload(200, {"success": self.svc.reset_prefix_cache()})
                return
            if path not in ("/v1/chat/completions", "/v1/completions"):
                raise ApiError(404, f"no route {path}")
            request = self.svc.reader.read(body, chat=path == "/v1/chat/completions")
            handle = self.svc.submit(request)
        except ApiError as err:
            self.send_api_error(err)
            return
        except Exception as err:                # a bug of this server's, not the sender's: 500, and logged
            log.exception("request to %s failed", path)
            self.send_api_error(ApiError(500, f"internal error: {type(err).__name__}: {err}", close=True))
            return
        try:
            if request.stream:
                self._stream(handle, request)
            else:
                self._complete(handle, request)
        except OSError:                         # the client hung up or stopped reading (TimeoutError included)
            self.close_connection = True
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

    def _logprobs(self, request: Completion, ids: list[int], logprobs: list[Any], offset: int,
                  ) -> dict[str, Any] | None:
        """The choice's `logprobs` for these output tokens in vLLM's shape; None when the request asks for none."""
        if request.logprobs is None:
            return None
        tokenizer = self.svc.tokenizer

        def text(token: int) -> str:
            return f"token_id:{token}" if request.tokens_as_ids else tokenizer.decode([token])

        if request.chat:
            return chat_logprobs(ids, logprobs, request.logprobs, text)
        return completion_logprobs(ids, logprobs, request.logprobs, text, offset)

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

    def _complete(self, handle: Handle, request: Completion) -> None:
        kind, done = self._wait(handle)
        while kind == "tokens":
            kind, done = self._wait(handle)
        if kind == "error":
            self.send_api_error(ApiError(500, str(done)))
            return
        text = self._decode(done["output"])
        choice: dict[str, Any] = {"index": 0, "finish_reason": done["finish_reason"],
                                  "logprobs": self._logprobs(request, done["output"], done["logprobs"], 0)}
        if request.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        if request.return_token_ids:
            choice["token_ids"] = done["output"]
        payload: dict[str, Any] = {
            "id": handle.id, "object": "chat.completion" if request.chat else "text_completion",
            "created": int(time.time()), "model": self.svc.model_name, "choices": [choice],
            "usage": self._usage(handle, done), "metrics": self._metrics(done),
        }
        if request.return_token_ids:
            payload["prompt_token_ids"] = handle.prompt_ids
        self.send_payload(200, payload)

    def _stream(self, handle: Handle, request: Completion) -> None:
        """Server-sent events from the first output on; a request that fails before any is a 500 JSON answer."""
        kind, payload = self._wait(handle)
        if kind == "error":
            self.send_api_error(ApiError(500, str(payload)))
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chat, want_ids = request.chat, request.return_token_ids
        obj = "chat.completion.chunk" if chat else "text_completion"
        base = {"id": handle.id, "object": obj, "created": int(time.time()), "model": self.svc.model_name}

        def choice(text: str, ids: list[int], logprobs: list[Any], offset: int, finish: str | None = None,
                   ) -> dict[str, Any]:
            c: dict[str, Any] = {"index": 0, "logprobs": self._logprobs(request, ids, logprobs, offset),
                                 "finish_reason": finish}
            if chat:
                c["delta"] = {"content": text} if text or finish else {"content": ""}
            else:
                c["text"] = text
            if want_ids:
                c["token_ids"] = ids
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
            if kind == "error":
                self._event({"error": {"message": str(payload), "type": "InternalServerError", "code": 500}})
                break
            if kind == "tokens":
                ids, logprobs = payload
                offset = len(sent_text)
                out += ids
                full = self._decode(out)
                delta = ""
                if not full.endswith("\ufffd") and full.startswith(sent_text):
                    delta, sent_text = full[len(sent_text):], full
                event = {**base, "choices": [choice(delta, ids, logprobs, offset)]}
                if want_ids and first_ids and not chat:
                    event["prompt_token_ids"] = handle.prompt_ids
                first_ids = False
                self._event(event)
                kind, payload = self._wait(handle)
                continue
            full = self._decode(payload["output"])
            tail = full[len(sent_text):] if full.startswith(sent_text) else ""
            self._event({**base, "choices": [choice(tail, [], [], len(sent_text), payload["finish_reason"])]})
            if request.include_usage:
                self._event({**base, "choices": [], "usage": self._usage(handle, payload),
                             "metrics": self._metrics(payload)})
            break
        self._event(b"[DONE]")
        self._chunk(b"")


class SpecbenchServer:
    """The HTTP server and the engine service; `start()` serves from a background thread (tests, notebooks)."""

    def __init__(self, cfg: ServeConfig):
        self.service = EngineService(cfg)
        try:
            self.httpd = GuardedServer((cfg.host, cfg.port), Handler, max_connections=cfg.max_connections,
                                       read_timeout=cfg.read_timeout, max_body_bytes=cfg.max_body_bytes)
        except BaseException:
            self.service.close()
            raise
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
