"""What the vLLM and SGLang runners share: launch or attach a server, stream requests, record, count.

A server runner drives an engine behind HTTP with the same dataset rows and writes the same records as the
reference runner (`specbench.records`), so one analysis compares engines. It implements the `Runner`
protocol (`runners/base.py`); the engine-specific subclass supplies the launch command, the request and
response format and the counters.

- Launch or attach. With `--endpoint URL` the runner talks to a running server. Without it, it builds the
  engine's launch command for the method (`runners.vllm.launch_command`, `runners.sglang.launch_command`),
  starts it as a subprocess whose output goes to `RUN_DIR/server.log`, waits for `GET /health`, and stops
  it when the variant closes. Variants run one after another (`in_process` is False), each as a single
  block of all its requests, so C requests stay in flight continuously and one machine holds one server at
  a time.
- Cache and warm-up. Before a variant's first block the runner empties the server's prefix cache
  (`flush_cache`, which the vLLM and SGLang runners override; here it does nothing and the manifest says
  `cache_flushed: false`), so no variant starts on another's cached prompts. It then sends `warmup` requests
  of the variant's own prompts (default 2 * C, `--option warmup=N`, 0 = none) at concurrency C, records
  none of them, and flushes again so the warm-up does not prime the measured prompts
  (`runners/server_traffic.py` says how this follows `vllm bench serve`). The manifest's `warmup` and the
  progress output say what was sent.
- Streaming. Requests go out at concurrency C from one asyncio loop (httpx), each timed on the client:
  t_start when sent, TTFT at the first chunk carrying output, latency at the last such chunk, and `itl_s`
  the gaps between consecutive chunks carrying output (vllm bench serve's ITL: a chunk that carries several
  tokens, as a speculative step's does, is one gap). With `--request-rate R` requests arrive on a seeded
  gamma schedule (`server_traffic.arrival_offsets`) and wait for one of the C slots; without it all arrive
  at once.
- Failures. A server that is busy or not reachable for a moment (HTTP 429/502/503/504, a connection lost before
  any output) is asked again, `retries` times at most, after an exponential backoff with jitter
  (`runners/server_faults.py`); the record counts its `retries` and the manifest their sum
  (`request_retries`). A request that still fails (any other HTTP error, an error event, a stream that broke
  after output began, no event for `stall_timeout` seconds, no complete answer within `request_timeout`)
  becomes a record with status "failed" and the error; the run goes on, `specbench run` exits 1 at the end,
  and `--resume` retries exactly those. A record is timed from the start of the attempt that produced it.
  A server that is gone (a launched server that exited, or one that fails its health check after a request
  used up its retries) fails the rest of the block at once, as it does at the start of a block.
- Counters. The engine-specific subclass reads run-level counters (vLLM: `/metrics` deltas around the
  block; SGLang: sums of per-request `meta_info`) and per-request step data where the server returns it
  (`runners/server_metrics.py`). Counters are server totals over the block: another client of the same
  server would be counted too, and a request that failed half-way has its steps counted although its
  record is retried.

Engine-specific options ride on `--option KEY=VALUE` (recorded in the manifest with the settings):
`drafter=PATH` (draft checkpoint), `tp=N` (tensor parallel size), `port=N`, `max_model_len=N`,
`server_args="..."` (extra launch arguments), `server_python=PATH` (interpreter that has the engine),
`startup_timeout=S`, `request_extra={...}` (JSON merged into each request body), `device="4x NVIDIA B300"`
(what a server on another machine runs on; one here is detected, `runners/hardware.py`), `warmup=N`, the fault
options `retries=N` (3), `retry_backoff=S` (1), `stall_timeout=S` (60) and `request_timeout=S` (600), plus method
options (`max_n`, `min_n`, `matches`, `top_k`, `depth`). The options that do not change what a run measures
(`OPERATIONAL_OPTIONS`: where the server listens, its Python, the timeouts and retries) may change on `--resume`.
`entropy=inline|off` (default inline) has the runner ask for each output token's top logprobs and estimate the
request's mean entropy from them (runners/server_entropy.py); off asks for none, and records then carry an entropy
only where the server gives the exact one (`specbench serve`).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable

from specbench.dataset import Row, chat_messages
from specbench.errors import SpecbenchError
from specbench.records import MANIFEST_FILE, read_manifest, write_manifest
from specbench.runners.base import OnRecord, Record
from specbench.runners.hardware import server_hardware
from specbench.runners.server_entropy import entropy_mode
from specbench.runners.server_faults import (
    FAULT_OPTIONS, RETRY_STATUSES, EngineHTTPError, FaultPolicy, RetryableError, retry_after_s,
)
from specbench.runners.server_metrics import add_counters, counters_summary
from specbench.runners.server_traffic import WARMUP_OPTION, arrival_offsets, warmup_requests
from specbench.settings import Job, MethodSpec, Settings

# Every --option the server runners read: their own, then the method options they map to server flags.
# Anything else is an error (`ServerRunner.check_options`), never an option a server silently ignored.
SERVER_OPTIONS = ("drafter", "tp", "port", "max_model_len", "server_args", "server_python", "startup_timeout",
                  "host", "request_extra", "device", "entropy", WARMUP_OPTION, *FAULT_OPTIONS,
                  "max_n", "min_n", "matches", "top_k", "depth", "token_cost", "datastore")
OPERATIONAL_OPTIONS = frozenset({"port", "host", "server_python", "startup_timeout", *FAULT_OPTIONS})


def _need(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise SpecbenchError(f"the {extra} runner needs the Python package {module.split('.')[0]}: "
                             f"pip install 'specbench[{extra}]'") from None


# -- requests and records --------------------------------------------------------------------------------

@dataclass
class ServerRequest:
    """One row as a server request: chat messages (and token ids where the runner tokenizes itself)."""

    id: str
    messages: list[dict[str, str]]
    meta: dict[str, Any] = field(default_factory=dict)
    prompt_ids: list[int] | None = None


@dataclass
class Stream:
    """What came back for one request, timed on the client."""

    t_start: float
    t_first: float = 0.0
    t_last: float = 0.0
    t_end: float = 0.0
    text: list[str] = field(default_factory=list)
    token_ids: list[int] | None = None
    prompt_ids: list[int] | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    itl: list[float] = field(default_factory=list)      # seconds between consecutive chunks carrying output

    def got_output(self, t: float) -> None:
        """A chunk carrying output arrived at time t."""
        if not self.t_first:
            self.t_first = t
        else:
            self.itl.append(t - self.t_last)
        self.t_last = t

    def itl_s(self) -> list[float]:
        """The record's `itl_s`: the inter-chunk gaps to the microsecond (a record stays short)."""
        return [round(gap, 6) for gap in self.itl]


def failed_record(req: ServerRequest, settings: Settings, error: str, t_start: float, t_end: float | None = None,
                  ) -> dict[str, Any]:
    """The record of a request that got no complete answer: no output, the error in words."""
    t_end = t_end or time.time()
    return {
        "question_id": req.id, "category": req.meta.get("category", ""), "method": settings.method,
        "concurrency": settings.concurrency, "status": "failed", "error": error,
        "prompt_token_ids": req.prompt_ids or [], "output_token_ids": [], "output_text": "", "steps": [],
        "mean_entropy": None, "t_start": t_start, "t_end": t_end, "ttft_s": 0.0, "latency_s": t_end - t_start,
        "retries": 0,
    }


async def sse_events(client: Any, url: str, body: dict[str, Any], stall: float | None = None,
                     ) -> AsyncIterator[dict[str, Any]]:
    """POST `body` and yield each `data:` JSON event of the server-sent stream until [DONE].

    Raises RetryableError for HTTP 429/502/503/504 and for a connection that fails before the first event, and
    EngineHTTPError for any other HTTP status, an error event, a malformed event, a stream that breaks after
    its first event or ends without [DONE], and no event for `stall` seconds (the wait for the answer and its
    first event included; None waits as long as the client's timeouts allow)."""
    import httpx

    events = 0

    def no_output() -> EngineHTTPError:
        return EngineHTTPError(f"no output for {stall:g} s (stall_timeout)"
                               + (f" after {events} events" if events else ""))

    def broken(err: Exception) -> EngineHTTPError:
        if isinstance(err, httpx.TimeoutException) and not isinstance(err, httpx.ConnectTimeout):
            return EngineHTTPError(f"the server stopped answering ({describe_error(err)})")
        if events:
            return EngineHTTPError(f"the stream broke after {events} events ({describe_error(err)})")
        return RetryableError(f"no answer: {describe_error(err)}", connection=True)

    try:
        resp = await asyncio.wait_for(client.send(client.build_request("POST", url, json=body), stream=True), stall)
    except asyncio.TimeoutError:
        raise no_output() from None
    except httpx.TransportError as err:
        raise broken(err) from None
    try:
        if resp.status_code != 200:
            raw = (await asyncio.wait_for(resp.aread(), stall)).decode("utf-8", "replace")
            message = f"HTTP {resp.status_code}: {' '.join(raw.split())[:300]}"
            if resp.status_code in RETRY_STATUSES:
                raise RetryableError(message, retry_after_s(resp.headers.get("retry-after")))
            raise EngineHTTPError(message)
        lines = resp.aiter_lines()
        while True:
            try:
                line = await asyncio.wait_for(lines.__anext__(), stall)
            except StopAsyncIteration:
                break
            if not line.startswith("data:"):
                continue
            data = line[len("data:"):].strip()
            if data == "[DONE]":
                return
            event = parse_event(data)
            events += 1
            yield event
    except asyncio.TimeoutError:
        raise no_output() from None
    except httpx.TransportError as err:
        raise broken(err) from None
    finally:
        await resp.aclose()
    raise EngineHTTPError("the stream ended without [DONE]" + (f" after {events} events" if events else ""))


def parse_event(data: str) -> dict[str, Any]:
    """One `data:` payload as a JSON object; an error event or anything else malformed is an EngineHTTPError."""
    try:
        event = json.loads(data)
    except ValueError:
        raise EngineHTTPError(f"the server sent an event that is not JSON: {data[:200]!r}") from None
    if not isinstance(event, dict):
        raise EngineHTTPError(f"the server sent an event that is not a JSON object: {data[:200]!r}")
    if "error" in event and "choices" not in event or event.get("object") == "error":
        err = event.get("error", event)
        raise EngineHTTPError(str(err.get("message", err) if isinstance(err, dict) else err))
    return event


def describe_error(err: BaseException) -> str:
    """An exception in one line: its text, led by its type unless it is one of ours."""
    text = " ".join(str(err).split())
    if isinstance(err, EngineHTTPError):
        return text or type(err).__name__
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


# -- one variant on a server ----------------------------------------------------------------------------------------------

@dataclass
class Session:
    """One (method, budget, concurrency) on a server: its launch command, counters, run directory."""

    settings: Settings
    command: list[str] | None              # launch command (None when attached to --endpoint)
    method_config: dict[str, Any]
    run_dir: Path | None = None
    counters: dict[str, Any] | None = None
    counters_incomplete: bool = False
    blocks: int = 0
    faults: FaultPolicy = field(default_factory=FaultPolicy)
    retries: int = 0                       # retries of this process's requests, added to the manifest at close
    warmup: dict[str, Any] | None = None   # what the warm-up sent, once it ran (the manifest's `warmup`)
    cache_flushed: bool = False            # whether the runner emptied the server's prefix cache


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


_PLACEHOLDER = re.compile(r"\$[A-Z_][A-Z0-9_]*")


def shell_join(argv: Iterable[str]) -> str:
    """shlex.join, except that arguments holding $PLACEHOLDERS are double-quoted so the shell expands them
    (presets print commands with $TARGET / $DRAFTER for the user to set)."""
    out = []
    for a in argv:
        if _PLACEHOLDER.search(a):
            out.append('"' + a.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"')
        else:
            out.append(shlex.quote(a))
    return " ".join(out)


class ServerRunner:
    """Base of the vLLM and SGLang runners; subclasses supply the launch command and the request protocol."""

    engine = ""
    in_process = False
    operational_options = OPERATIONAL_OPTIONS
    extra = ""                                 # the pyproject extra that installs what this runner needs
    health_path = "/health"
    METHODS: tuple[str, ...] = ()

    def __init__(self, target: str, dtype: str = "auto", endpoint: str | None = None):
        self.httpx = _need("httpx", self.extra)
        self.target_spec = target
        self.dtype_name = dtype
        endpoint = endpoint.rstrip("/") if endpoint else None
        if endpoint and not re.match(r"https?://[^/\s]+", endpoint):
            raise SpecbenchError(f"--endpoint {endpoint!r}: expected a URL such as http://127.0.0.1:8000")
        if endpoint and endpoint.endswith("/v1"):   # an OpenAI client's base_url: the server root is above it
            endpoint = endpoint[: -len("/v1")]
        self.endpoint = endpoint
        self._proc: subprocess.Popen | None = None
        self._proc_cmd: list[str] | None = None
        self._proc_log: Any = None
        self._base: str | None = self.endpoint
        self._healthy_once = False
        self._model_name: str | None = None
        self._prepared_options: dict[str, Any] = {}
        self._facts: dict[str, Any] = {}       # what the server says about itself (`server_facts`)
        self._default_port: int | None = None

    # -- the Runner protocol --------------------------------------------------------------------------
    @classmethod
    def methods(cls) -> tuple[str, ...]:
        return cls.METHODS

    @classmethod
    def check_options(cls, methods: list[MethodSpec], shared: dict[str, Any]) -> None:
        named = [(f"--option {k}", k) for k in shared] + [(f"--methods {m}:{k}=...", k) for m, own in methods
                                                           for k in own]
        for flag, key in named:
            if key not in SERVER_OPTIONS:
                raise SpecbenchError(f"{flag}: the {cls.engine} runner takes no option {key!r} "
                                     f"(it takes {', '.join(SERVER_OPTIONS)})")
        FaultPolicy.from_options(shared)
        entropy_mode(shared)
        warmup_requests(shared, 1)
        for m, own in methods:
            FaultPolicy.from_options(own, f"--methods {m}:")
            entropy_mode(own, f"--methods {m}:")
            warmup_requests(own, 1, f"--methods {m}:")

    @classmethod
    def from_job(cls, job: Job) -> "ServerRunner":
        if job.threads:
            raise SpecbenchError("--threads is for the reference engine; a server engine's threads are its own "
                                 "(pass them with --option server_args=...)")
        if not job.prefix_cache:
            raise SpecbenchError("--no-prefix-cache is for the reference engine; vLLM and SGLang servers cache "
                                 "prefixes by default (launch them with --no-enable-prefix-caching or "
                                 "--disable-radix-cache and pass --endpoint)")
        return cls(job.target, job.dtype, job.endpoint)

    def describe(self) -> dict[str, Any]:
        """The server's hardware (`runners.hardware.server_hardware`: the GPUs or CPU of this machine when the
        server is here, what `--option device` declares, else "unknown") and tensor parallel size, with the
        options of the variant last prepared. The engine's version is added at close, once the server told it."""
        opts = self._prepared_options
        return {
            "engine": self.engine,
            "target": self.target_spec,
            "dtype": self.dtype_name,
            "endpoint": self.endpoint,
            **server_hardware(self.endpoint, opts.get("device")),
            "tensor_parallel_size": int(opts.get("tp", 1)),
        }

    def requests(self, rows: Iterable[Row]) -> list[ServerRequest]:
        return [ServerRequest(r.question_id, chat_messages(r), {"category": r.category}) for r in rows]

    def prepare(self, settings: Settings, requests: list[ServerRequest], run_dir: Path) -> Session:
        """The variant's server configuration and launch command; the server starts with its first block."""
        config = self.method_config(settings)
        self._prepared_options = self._options(settings)
        command = None if self.endpoint else self.launch_command(settings)
        if command:
            config = {**config, "launch_command": shell_join(command)}
        return Session(settings, command, config, run_dir, faults=FaultPolicy.from_options(self._options(settings)))

    def run(self, prepared: Session, requests: list[ServerRequest], on_record: OnRecord) -> None:
        session, settings = prepared, prepared.settings
        base = self._ensure_server(session)
        if base is None:
            now = time.time()
            for req in requests:
                on_record(failed_record(req, settings, self._gone_reason(), now, now))
            return
        self.prepare_requests(requests)
        session.blocks += 1
        asyncio.run(self._drive(base, session, requests, on_record))

    def close(self, prepared: Session, run_dir: Path) -> None:
        """Stop a launched server; add the variant's engine counters and retries to the manifest (to those of an
        earlier, resumed run of it)."""
        session = prepared
        self.stop_server()
        counted = session.counters is not None or session.counters_incomplete
        if not (session.blocks or session.retries or counted) or not (run_dir / MANIFEST_FILE).exists():
            return
        meta = read_manifest(run_dir)
        if self._facts:
            meta["server"] = self._facts
            meta["engine_version"] = self._facts.get("engine_version")
        if session.blocks or session.retries:
            meta["request_retries"] = int(meta.get("request_retries") or 0) + session.retries
        if session.warmup is not None:
            meta["warmup"] = session.warmup
            meta["cache_flushed"] = session.cache_flushed
        if counted:
            old = meta.get("engine_counters", {}).get("counters")
            total = (add_counters(old, session.counters) if old and session.counters
                     else (session.counters or old))
            meta["engine_counters"] = {
                "source": self.counters_source,
                "counters": total,
                "summary": self.summarize_counters(total) if total else None,
                "incomplete": bool(session.counters_incomplete
                                   or meta.get("engine_counters", {}).get("incomplete")),
            }
        write_manifest(run_dir, meta)

    # -- subclass hooks --------------------------------------------------------------------------------
    counters_source = ""

    def method_config(self, settings: Settings) -> dict[str, Any]:
        raise NotImplementedError

    def build_launch_command(self, settings: Settings, args: dict[str, Any]) -> list[str]:
        """The engine module's launch_command(target, method, budget, *, tp, drafter, host, port, dtype,
        max_model_len, python, extra, options) called with `args`, plus what the engine compiles for `settings`
        (vLLM: the harness's K schedule; SGLang: its tree shape at the run's concurrency)."""
        raise NotImplementedError

    def launch_command(self, settings: Settings) -> list[str]:
        """The server command for this run's method and options (--option tp, drafter, host, port, ...)."""
        opts = self._options(settings)
        folder = local_target_folder(self.target_spec)
        return self.build_launch_command(settings, dict(
            target=str(folder or self.target_spec), method=settings.method, budget=settings.budget,
            tp=int(opts.get("tp", 1)), drafter=opts.get("drafter"), host=str(opts.get("host", "127.0.0.1")),
            port=int(opts.get("port") or self._port()), dtype=self.dtype_name, max_model_len=opts.get("max_model_len"),
            python=python_for(opts), extra=shlex.split(str(opts.get("server_args", ""))), options=opts))

    def _port(self) -> int:
        """One free port for every server this runner launches, so variants with the same launch command share
        one server (a compare serves each concurrency of a variant on one launch)."""
        if self._default_port is None:
            self._default_port = free_port()
        return self._default_port

    def prepare_requests(self, requests: list[ServerRequest]) -> None:
        """Per block, before sending (e.g. tokenize prompts)."""

    def flush_cache(self, base: str) -> None:
        """Empty the server's prefix cache, between variants and after a warm-up. Subclasses whose server can
        do it override this (raising a one-line SpecbenchError when the server refuses); this default does
        nothing, and the manifest then says `cache_flushed: false`."""

    @property
    def flushes_cache(self) -> bool:
        """Whether this runner's `flush_cache` empties the server's cache (its class overrides the default)."""
        return type(self).flush_cache is not ServerRunner.flush_cache

    async def before_block(self, client: Any, base: str, session: Session) -> Any:
        return None

    async def after_block(self, client: Any, base: str, session: Session, state: Any,
                          records: list[dict[str, Any]]) -> None:
        return None

    async def one(self, client: Any, base: str, session: Session, req: ServerRequest) -> dict[str, Any]:
        raise NotImplementedError

    def summarize_counters(self, counters: dict[str, Any]) -> dict[str, Any]:
        return counters_summary(counters)

    # -- server lifecycle ------------------------------------------------------------------------------
    def _options(self, settings: Settings) -> dict[str, Any]:
        return dict(settings.options or {})

    def _ensure_server(self, session: Session) -> str | None:
        """Base URL of a healthy server for this variant; None when a server that answered before is gone."""
        opts = self._options(session.settings)
        if self.endpoint is None and (self._proc is None or self._proc_cmd != session.command
                                      or self._proc.poll() is not None):
            self._launch(session, float(opts.get("startup_timeout", 1800)))
            return self._base
        if self._healthy_once:
            return self._base if self._probe(self._base, 5.0) else None
        timeout = float(opts.get("startup_timeout", 60))
        if not self._wait_healthy(self._base, timeout):
            raise SpecbenchError(f"no healthy {self.engine} server at {self._base} after {timeout:.0f} s "
                                 f"(GET {self.health_path}); start it first, or leave out --endpoint to launch one")
        self._healthy_once = True
        self._facts = self.server_facts(self._base)
        self.check_server(self._base, session)
        return self._base

    def check_server(self, base: str, session: Session) -> None:
        """Once the server answers: learn the served model name and refuse a server that serves something else
        (what it says of itself is in `self._facts` by then)."""

    def server_facts(self, base: str) -> dict[str, Any]:
        """What the server says about itself ({"engine_version", "tensor_parallel_size", "speculative"}, None
        where it does not say), recorded in the manifest's `server`; engine runners override this."""
        return {}

    def get_json(self, url: str, timeout: float = 30.0) -> tuple[int, Any, str]:
        """GET `url`: (HTTP status, the body as JSON or None when it is not JSON, the body's first words).
        A request that gets no answer is a SpecbenchError naming the URL."""
        try:
            resp = self.httpx.get(url, timeout=timeout)
        except self.httpx.HTTPError as err:
            raise SpecbenchError(f"GET {url}: no answer ({describe_error(err)})") from None
        text = " ".join(resp.text.split())[:200]
        try:
            data = resp.json()
        except ValueError:
            data = None
        return resp.status_code, data, text

    def _probe(self, base: str, timeout: float) -> bool:
        try:
            return self.httpx.get(base + self.health_path, timeout=timeout).status_code == 200
        except self.httpx.HTTPError:
            return False

    def _wait_healthy(self, base: str, timeout: float, proc: subprocess.Popen | None = None) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self._probe(base, 5.0):
                return True
            if proc is not None and proc.poll() is not None:
                return False
            time.sleep(0.5)
        return False

    def _launch(self, session: Session, timeout: float) -> None:
        self.stop_server()
        cmd = list(session.command or [])
        host, port = self._host_port(cmd)
        log_path = (session.run_dir or Path(".")) / "server.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._proc_log = log_path.open("ab")
        self._proc_log.write(f"$ {shell_join(cmd)}\n".encode())
        self._proc_log.flush()
        try:
            self._proc = subprocess.Popen(cmd, stdout=self._proc_log, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        except OSError as err:
            raise SpecbenchError(f"cannot start the {self.engine} server ({cmd[0]}): {err}") from None
        self._proc_cmd = session.command
        atexit.register(self.stop_server)       # never leave a launched server behind (it has its own session)
        self._base = f"http://{host}:{port}"
        if not self._wait_healthy(self._base, timeout, self._proc):
            tail = log_path.read_text(errors="replace")[-2000:]
            self.stop_server()
            raise SpecbenchError(f"the {self.engine} server did not become healthy within {timeout:.0f} s; "
                                 f"last lines of {log_path}:\n{tail}")
        self._healthy_once = True
        self._facts = self.server_facts(self._base)
        self.check_server(self._base, session)

    @staticmethod
    def _host_port(cmd: list[str]) -> tuple[str, str]:
        host, port = "127.0.0.1", "8000"
        for flag, value in zip(cmd, cmd[1:]):
            if flag == "--host":
                host = value
            elif flag == "--port":
                port = value
        return ("127.0.0.1" if host in ("0.0.0.0", "::") else host), port

    def stop_server(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    proc.kill()
                proc.wait(timeout=30)
        if self._proc_log is not None:
            self._proc_log.close()
            self._proc_log = None
        self._proc_cmd = None
        if self.endpoint is None:
            self._healthy_once = False

    # -- one block of requests -------------------------------------------------------------------------
    async def _drive(self, base: str, session: Session, requests: list[ServerRequest], on_record: OnRecord) -> None:
        """One block: the variant's flush and warm-up before its first, then every request at concurrency C
        (arriving on the --request-rate schedule when there is one), each record handed over as it ends."""
        settings, faults = session.settings, session.faults
        # no read timeout of httpx's own: sse_events bounds each wait by stall_timeout, _attempts the whole
        # attempt by request_timeout
        timeout = self.httpx.Timeout(None, connect=10.0, write=faults.stall_timeout)
        limits = self.httpx.Limits(max_connections=settings.concurrency + 2,
                                   max_keepalive_connections=settings.concurrency + 2)
        sem = asyncio.Semaphore(settings.concurrency)
        gone: list[str] = []        # why the server is gone, once it is: the block's other requests fail at once
        async with self.httpx.AsyncClient(timeout=timeout, limits=limits) as client:
            if session.warmup is None:
                await self._warm_up(client, base, session, requests, sem)
            # after the warm-up, so the engine's counters around the block count measured requests only
            state = await self.before_block(client, base, session)
            offsets = arrival_offsets(len(requests), settings.request_rate, settings.burstiness, settings.seed)
            t0 = time.monotonic()

            async def guarded(req: ServerRequest, offset: float) -> dict[str, Any]:
                await asyncio.sleep(t0 + offset - time.monotonic())       # arrival; a slot may take longer
                async with sem:
                    rec = await self._attempts(client, base, session, req, gone)
                session.retries += rec["retries"]
                return rec

            records = []
            for fut in asyncio.as_completed([guarded(r, o) for r, o in zip(requests, offsets)]):
                rec = await fut
                records.append(rec)
                on_record(rec)
            await self.after_block(client, base, session, state, records)

    async def _warm_up(self, client: Any, base: str, session: Session, requests: list[ServerRequest],
                       sem: asyncio.Semaphore) -> None:
        """Flush the server's cache, send the variant's warm-up requests (its own prompts, cycling) at
        concurrency C without recording them, and flush again; note it in `session.warmup` and the progress
        output."""
        s = session.settings
        n = warmup_requests(self._options(s), s.concurrency)
        self.flush_cache(base)
        gone: list[str] = []

        async def one(req: ServerRequest) -> dict[str, Any]:
            async with sem:
                return await self._attempts(client, base, session, req, gone)

        sent = await asyncio.gather(*(one(requests[i % len(requests)]) for i in range(n))) if requests else []
        if sent:
            self.flush_cache(base)
        session.cache_flushed = self.flushes_cache
        failed = sum(r["status"] != "ok" for r in sent)
        session.warmup = {"requests": len(sent), "failed": failed, "flushed_after": bool(sent) and self.flushes_cache}
        cache = ("server cache flushed before" + (" and after" if sent else "") if self.flushes_cache
                 else f"server cache not flushed (the {self.engine} runner cannot)")
        print(f"{s.method} L={s.budget} C={s.concurrency}: warm-up {len(sent)} requests, not recorded"
              + (f" ({failed} failed)" if failed else "") + f"; {cache}", file=sys.stderr)

    async def _attempts(self, client: Any, base: str, session: Session, req: ServerRequest,
                        gone: list[str]) -> dict[str, Any]:
        """One request, asked again as the fault policy allows: its record, ok or failed, with `retries`."""
        settings, faults = session.settings, session.faults
        retries = 0
        while True:
            t0 = time.time()
            if gone:
                rec = failed_record(req, settings, gone[0], t0, t0)
                break
            try:
                rec = await asyncio.wait_for(self.one(client, base, session, req), faults.request_timeout)
                break
            except RetryableError as err:
                exited = await self._exited_async() if err.connection else self._exited()
                if exited is None and retries < faults.retries:
                    await asyncio.sleep(faults.wait_s(retries, err.retry_after))
                    retries += 1
                    continue
                if exited is None and not await self._healthy_async(client, base):
                    exited = f"server unreachable at {base} (GET {self.health_path} fails)"
                if exited is not None and not gone:
                    gone.append(exited)
                error = str(err) + (f" (after {retries} retries)" if retries else "")
                rec = failed_record(req, settings, error + (f"; {exited}" if exited else ""), t0)
                break
            except asyncio.TimeoutError:
                rec = failed_record(req, settings, f"no complete answer within {faults.request_timeout:g} s "
                                                   "(request_timeout)", t0)
                break
            except (self.httpx.HTTPError, EngineHTTPError, OSError, ValueError, KeyError, TypeError,
                    AttributeError) as err:        # a malformed answer fails its request, not the run
                rec = failed_record(req, settings, describe_error(err), t0)
                break
        rec["retries"] = retries
        return rec

    def _exited(self) -> str | None:
        """Why a server this runner launched is gone (it exited), or None while it runs or when attached."""
        code = self._proc.poll() if self._proc is not None else None
        if code is None:
            return None
        log = f"; see {self._proc_log.name}" if self._proc_log is not None else ""
        return f"the {self.engine} server exited with code {code}{log}"

    async def _exited_async(self, grace_s: float = 0.5) -> str | None:
        """`_exited` after a lost connection: a launched server's sockets close a moment before its exit can be
        seen, so look again for up to `grace_s` before calling it alive."""
        deadline = time.monotonic() + grace_s
        while (exited := self._exited()) is None and self._proc is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return exited

    def _gone_reason(self) -> str:
        return self._exited() or f"server unreachable at {self._base}"

    async def _healthy_async(self, client: Any, base: str) -> bool:
        try:
            return (await client.get(base + self.health_path, timeout=5.0)).status_code == 200
        except self.httpx.HTTPError:
            return False


def local_target_folder(spec: str) -> Path | None:
    """A local HF folder for the target, or None for a Hub id (the server resolves it itself).

    A folder is itself. A `.gguf` file or a name the bundled engine knows (`smollm2-135m`) becomes the folder
    the reference engine dequantises it into, so a server can serve the default target too; only then is the
    reference engine's weights module imported."""
    path = Path(spec).expanduser()
    if path.is_dir():
        return path if (path / "config.json").exists() else None
    if path.suffix != ".gguf" and "/" in spec:
        return None                                     # an org/name Hub id
    try:
        from reference_eagle4.weights import WeightsError, resolve_target
    except ImportError:
        return None
    try:
        return resolve_target(spec)
    except WeightsError:
        return None


def load_tokenizer(spec: str) -> Any:
    """The target's tokenizer: from the local folder specbench resolves, else `spec` as a Hub id."""
    from transformers import AutoTokenizer

    folder = local_target_folder(spec)
    try:
        return AutoTokenizer.from_pretrained(str(folder) if folder else spec)
    except (OSError, ValueError) as err:
        raise SpecbenchError(f"cannot load the tokenizer of target {spec!r}: {err}") from None


def python_for(options: dict[str, Any]) -> str:
    return str(options.get("server_python") or sys.executable)
