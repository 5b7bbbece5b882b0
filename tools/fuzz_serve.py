"""Fuzz `specbench serve`: a bounded loop of hostile and malformed traffic against a server it starts itself.

    python tools/fuzz_serve.py --minutes 10 [--seed 0] [--target smollm2-135m] [--workers 4]

The server runs in its own process on 127.0.0.1 (ngram, L = 4, its log in --log). Worker threads send, for as
long as asked, a random mix of: valid chat and text completions (streamed or not); random JSON shapes; valid
bodies with one field replaced by a random value; token-id prompts in and out of the vocabulary; bodies from a
few bytes to past the size limit; raw HTTP garbage (bad request lines, methods, headers, lengths); connections
dropped before, during and after the answer; stalled uploads (headers, then part of the body, then silence);
and GETs of /health, /metrics, /v1/models and unknown paths.

It fails (exit 1) on any violation:
- an answer that is not 2xx or 4xx, a 4xx that is not an OpenAI-style JSON error, a 2xx whose JSON or event
  stream is malformed, or no answer at all to a complete request (a dropped connection, a hang);
- /health not 200, /metrics not parsed by prometheus_client into counter and gauge families;
- the server's resident memory growing more than --max-rss-growth-mb over its size after a warm-up of valid
  requests;
- the server process exiting, or writing a traceback to its log;
- at the end, a greedy completion that fails or differs from the same request's answer at the start.
The summary gives requests sent by kind, answers by status, and the server's peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import string
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import httpx

HOST = "127.0.0.1"
CONTEXT = 512
READ_TIMEOUT = 2.0
MAX_BODY = 1024 * 1024
MAX_STALLS = 8                       # stalled uploads in flight at once (the server allows 64 connections)
WORDS = ("a red fox jumps over the lazy dog at golden hour cinematic slow pan write a python function that "
         "reverses a list user prompt image caption system assistant").split()
ENDPOINTS = ("/v1/completions", "/v1/chat/completions")


# -- the server under test ---------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def rss_kb(pid: int) -> int:
    """The process's resident memory (VmRSS) in KiB; 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Server:
    """`specbench serve` in a child process; stopped (and waited for) on close."""

    def __init__(self, target: str, log_path: Path):
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log_path = log_path
        argv = [sys.executable, "-m", "specbench.cli", "serve", "--target", target, "--method", "ngram", "--budget",
                "4", "--concurrency", "4", "--max-model-len", str(CONTEXT), "--dtype", "float32", "--host", HOST,
                "--port", str(self.port), "--read-timeout", str(READ_TIMEOUT), "--max-body-bytes", str(MAX_BODY),
                "--max-connections", "64"]
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = log_path.open("w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited ({self.proc.returncode}) before it was ready; see {self.log_path}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"the server was not ready within {timeout:g} s; see {self.log_path}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# -- raw HTTP ----------------------------------------------------------------------------------------------

def request_bytes(method: str, path: str, body: bytes | None, extra: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n{extra}"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + (body or b"")


def exchange(url: str, data: bytes, timeout: float = 60.0) -> bytes:
    """Send `data` on a fresh connection and read until the server closes it."""
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass                                    # answered (413) and closed before the body was all sent
        reply = b""
        try:
            while chunk := s.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
    return reply


def split_reply(reply: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2:]
        body = out
    return status, headers, body


# -- random inputs -----------------------------------------------------------------------------------------

def random_text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def random_json(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["null", "bool", "int", "float", "str", "list", "dict"] if depth < 4 else ["null", "int", "str"]
    kind = rng.choice(kinds)
    if kind == "null":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice([0, 1, -1, 2, 7, 255, 4096, 2 ** 31, -2 ** 63, 10 ** 30, rng.randint(-10 ** 6, 10 ** 6)])
    if kind == "float":
        return rng.choice([0.0, -0.0, 0.5, 1.0, 1e308, -1e-308, 2.5, float("nan"), float("inf")])
    if kind == "str":
        alphabet = string.printable + "éü漢字\u202e\x00\ud800"
        return "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 5, 40])))
    if kind == "list":
        return [random_json(rng, depth + 1) for _ in range(rng.choice([0, 1, 3]))]
    keys = ["role", "content", "type", "text", "prompt", "messages", "max_tokens", "stream", "model", "x"]
    return {rng.choice(keys): random_json(rng, depth + 1) for _ in range(rng.choice([0, 1, 3]))}


def valid_body(rng: random.Random, chat: bool, vocab: int) -> dict[str, Any]:
    body: dict[str, Any] = {"max_tokens": rng.randint(1, 12)}
    if chat:
        body["messages"] = [{"role": "system", "content": "write a prompt"},
                            {"role": "user", "content": random_text(rng, rng.randint(1, 20))}]
    elif rng.random() < 0.5:
        body["prompt"] = random_text(rng, rng.randint(1, 30))
    else:
        body["prompt"] = [rng.randrange(vocab) for _ in range(rng.randint(1, 30))]
    if rng.random() < 0.5:
        body["stream"] = True
        if rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
    if rng.random() < 0.3:
        body["return_token_ids"] = True
    return body


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()              # ensure_ascii: lone surrogates go out as \ud800 escapes


# -- checking answers --------------------------------------------------------------------------------------

class Fuzz:
    def __init__(self, server: Server, seed: int, vocab: int):
        self.server, self.seed, self.vocab = server, seed, vocab
        self.lock = threading.Lock()
        self.sent: Counter = Counter()
        self.statuses: Counter = Counter()
        self.violations: list[str] = []
        self.stalls = threading.Semaphore(MAX_STALLS)

    def violation(self, kind: str, what: str) -> None:
        with self.lock:
            self.violations.append(f"{kind}: {what}")

    def check(self, kind: str, status: int, headers: dict[str, str], body: bytes, head: bool = False) -> None:
        """A complete request's answer: 2xx with a well-formed body, or a 4xx JSON error (HEAD: no body)."""
        with self.lock:
            self.statuses[status] += 1
        if not (200 <= status < 300 or 400 <= status < 500):
            self.violation(kind, f"status {status}: {body[:300]!r}")
            return
        if head:
            return
        ctype = headers.get("content-type", "")
        if status >= 400:
            try:
                err = json.loads(body)["error"]
                assert err["code"] == status and isinstance(err["message"], str)
            except Exception:                       # any shape other than the error object is the violation
                self.violation(kind, f"{status} is not a JSON error: {body[:300]!r}")
            return
        if ctype.startswith("text/event-stream"):
            events = [line[6:] for line in body.decode("utf-8", "replace").split("\n") if line.startswith("data: ")]
            if not events or events[-1] != "[DONE]":
                self.violation(kind, f"stream without [DONE]: {body[-300:]!r}")
                return
            for event in events[:-1]:
                try:
                    payload = json.loads(event)
                except ValueError:
                    self.violation(kind, f"stream event is not JSON: {event[:200]!r}")
                    return
                if "error" in payload:
                    self.violation(kind, f"stream failed: {event[:300]}")
                    return
        elif ctype.startswith("application/json"):
            try:
                json.loads(body)
            except ValueError:
                self.violation(kind, f"2xx body is not JSON: {body[:300]!r}")

    def send(self, kind: str, data: bytes) -> None:
        """Send one complete request on its own connection and check the answer."""
        with self.lock:
            self.sent[kind] += 1
        try:
            reply = exchange(self.server.url, data)
        except OSError as err:
            self.violation(kind, f"no answer: {type(err).__name__}: {err}")
            return
        if not reply:
            self.violation(kind, "the server closed the connection without answering")
            return
        try:
            status, headers, body = split_reply(reply)
        except (ValueError, IndexError):
            self.violation(kind, f"not an HTTP answer: {reply[:200]!r}")
            return
        self.check(kind, status, headers, body, head=data.startswith(b"HEAD "))

    # -- the cases ---------------------------------------------------------------------------------------
    def case_valid(self, rng: random.Random) -> None:
        chat = rng.random() < 0.5
        self.send("valid", request_bytes("POST", ENDPOINTS[chat], dumps(valid_body(rng, chat, self.vocab))))

    def case_random_json(self, rng: random.Random) -> None:
        self.send("random-json", request_bytes("POST", rng.choice(ENDPOINTS), dumps(random_json(rng))))

    def case_mutated(self, rng: random.Random) -> None:
        chat = rng.random() < 0.5
        body = valid_body(rng, chat, self.vocab)
        key = rng.choice([*body, "messages", "prompt", "temperature", "top_k", "n", "stop", "model", "stream_options",
                          "max_completion_tokens", "top_p", "logprobs", "seed"])
        if rng.random() < 0.2:
            body.pop(key, None)
        else:
            body[key] = random_json(rng)
        if chat and rng.random() < 0.5 and isinstance(body.get("messages"), list) and body["messages"]:
            body["messages"][rng.randrange(len(body["messages"]))] = random_json(rng)
        self.send("mutated", request_bytes("POST", ENDPOINTS[chat], dumps(body)))

    def case_token_ids(self, rng: random.Random) -> None:
        pool = [0, 1, self.vocab - 1, self.vocab, -1, 10 ** 9, 2 ** 63, 3.5, True, None, "7"]
        ids = [rng.choice(pool) if rng.random() < 0.2 else rng.randrange(self.vocab)
               for _ in range(rng.choice([1, 5, 50, CONTEXT + 10]))]
        self.send("token-ids", request_bytes("POST", "/v1/completions", dumps({"prompt": ids, "max_tokens": 4})))

    def case_size(self, rng: random.Random) -> None:
        size = rng.choice([1_000, 100_000, MAX_BODY - 100, 4 * MAX_BODY])
        if rng.random() < 0.5:
            body = dumps({"prompt": "fox " * (size // 4), "max_tokens": 2})
        else:
            body = dumps({"prompt": "a red fox", "max_tokens": 2}) + b" " * size      # padded: valid JSON
        self.send("size", request_bytes("POST", rng.choice(ENDPOINTS), body))

    def case_garbage(self, rng: random.Random) -> None:
        body = bytes(rng.randrange(256) for _ in range(rng.choice([0, 3, 64])))
        data = rng.choice([
            request_bytes("POST", "/v1/completions", body),
            request_bytes("POST", "/v1/completions", b'{"prompt": [1, 2'),
            request_bytes(rng.choice(["PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "BREW"]), "/v1/models", None),
            request_bytes("GET", "/" + "".join(rng.choice(string.printable[:94]) for _ in range(30)), None),
            request_bytes("POST", "/v1/completions", None, "Transfer-Encoding: chunked\r\n") + b"3\r\nabc\r\n0\r\n\r\n",
            b"POST /v1/completions HTTP/1.1\r\nContent-Length: nine\r\nConnection: close\r\n\r\n",
            b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + body + b"\r\n\r\n",
            b"GET /health HTTP/9.9\r\n\r\n",
            b"GET /health HTTP/1.1\r\n" + b"X-Long: " + b"h" * 70_000 + b"\r\n\r\n",
            request_bytes("POST", "/v1/completions", b"[" * 50_000 + b"]" * 50_000),
        ])
        self.send("garbage", data)

    def case_drop(self, rng: random.Random) -> None:
        """Connections closed early: before the body ends, right after sending, or after the first event."""
        with self.lock:
            self.sent["drop"] += 1
        chat = rng.random() < 0.5
        body = valid_body(rng, chat, self.vocab)
        body["stream"] = rng.random() < 0.7
        data = request_bytes("POST", ENDPOINTS[chat], dumps(body))
        port = int(self.server.url.rsplit(":", 1)[1])
        try:
            with socket.create_connection((HOST, port), timeout=30) as s:
                how = rng.choice(["partial", "sent", "first-bytes"])
                s.sendall(data[: len(data) // 2] if how == "partial" else data)
                if how == "first-bytes":
                    s.recv(64)
        except OSError:
            pass

    def case_stall(self, rng: random.Random) -> None:
        """A stalled upload on its own thread: it must be answered 408 (or, idle, closed) in bounded time."""
        if not self.stalls.acquire(blocking=False):
            return self.case_valid(rng)
        with self.lock:
            self.sent["stall"] += 1
        data = request_bytes("POST", "/v1/completions", dumps({"prompt": "a red fox", "max_tokens": 2}))
        cut = rng.choice([0, 20, len(data) - 5])

        def stall() -> None:
            port = int(self.server.url.rsplit(":", 1)[1])
            try:
                with socket.create_connection((HOST, port), timeout=READ_TIMEOUT * 4 + 5) as s:
                    s.sendall(data[:cut])
                    reply = b""
                    while chunk := s.recv(65536):
                        reply += chunk
                if cut == 0 and not reply:
                    return                          # idle, then closed: nothing was asked
                status, headers, body = split_reply(reply)
                if status != 408:
                    self.violation("stall", f"expected 408, got {status}: {body[:200]!r}")
                self.check("stall", status, headers, body)
            except (OSError, ValueError, IndexError) as err:
                self.violation("stall", f"not closed in time or no answer: {type(err).__name__}: {err}")
            finally:
                self.stalls.release()

        threading.Thread(target=stall, daemon=True).start()

    def case_get(self, rng: random.Random) -> None:
        path = rng.choice(["/health", "/metrics", "/v1/models", "/version", "/nope", "/v1/completions"])
        with self.lock:
            self.sent["get"] += 1
        try:
            r = httpx.get(self.server.url + path, timeout=30)
        except httpx.HTTPError as err:
            self.violation("get", f"GET {path}: {type(err).__name__}: {err}")
            return
        if path == "/health" and r.status_code != 200:
            self.violation("get", f"/health answered {r.status_code}")
        if path == "/metrics":
            from prometheus_client.parser import text_string_to_metric_families

            try:
                kinds = {f.type for f in text_string_to_metric_families(r.text)}
                assert kinds <= {"counter", "gauge"} and "counter" in kinds, kinds
            except Exception as err:                # a parse failure of any kind is the violation
                self.violation("get", f"/metrics does not parse: {err}")
        self.check("get", r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content)

    CASES: list[tuple[str, float]] = [("case_valid", 3), ("case_random_json", 3), ("case_mutated", 4),
                                      ("case_token_ids", 2), ("case_size", 0.6), ("case_garbage", 2),
                                      ("case_drop", 1.5), ("case_stall", 0.5), ("case_get", 1.5)]

    def worker(self, index: int, deadline: float, only: set[str] | None = None) -> None:
        rng = random.Random(self.seed * 1000 + index)
        names, weights = zip(*[(n, w) for n, w in self.CASES if only is None or n.removeprefix("case_") in only])
        while time.time() < deadline:
            case: Callable[[random.Random], None] = getattr(self, rng.choices(names, weights)[0])
            try:
                case(rng)
            except Exception as err:                # a fault in the fuzzer itself must not pass as success
                self.violation("fuzzer", f"{type(err).__name__}: {err}")


def completion(url: str) -> list[int] | None:
    body = {"messages": [{"role": "user", "content": "a red fox jumps over the lazy dog"}], "max_tokens": 16,
            "return_token_ids": True}
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
    return r.json()["choices"][0]["token_ids"] if r.status_code == 200 else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=None, help="how long to fuzz (default 10)")
    ap.add_argument("--seconds", type=float, default=None, help="how long to fuzz, in seconds (tests)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", default="smollm2-135m", help="the served target (a name, .gguf or HF folder)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--max-rss-growth-mb", type=float, default=256.0,
                    help="how far the server's memory may grow over its size after a warm-up of valid requests "
                         "(a quarter of the run, 30 s at most)")
    ap.add_argument("--cases", default=None, help="comma-separated subset of: " +
                    ", ".join(n.removeprefix("case_") for n, _ in Fuzz.CASES))
    ap.add_argument("--log", type=Path, default=Path("fuzz-serve.log"), help="the server's log")
    args = ap.parse_args(argv)
    only = set(args.cases.split(",")) if args.cases else None
    known = {n.removeprefix("case_") for n, _ in Fuzz.CASES}
    if only is not None and not only <= known:
        ap.error(f"unknown case(s) {', '.join(sorted(only - known))}; known: {', '.join(sorted(known))}")
    seconds = args.seconds if args.seconds is not None else 60 * (args.minutes if args.minutes is not None else 10)

    server = Server(args.target, args.log)
    fuzz = Fuzz(server, args.seed, 0)
    warm = 0.0
    peak_kb, base_kb, timeline = 0, 0, []        # RSS in KiB: peak, after warm-up, at each quarter of the run
    try:
        server.wait_ready(600)
        from transformers import AutoTokenizer   # the vocabulary size, to draw valid and invalid ids

        root = httpx.get(server.url + "/v1/models", timeout=30).json()["data"][0]["root"]
        fuzz.vocab = len(AutoTokenizer.from_pretrained(root))
        first = completion(server.url)
        warm = min(30.0, seconds / 4)               # valid traffic first: the engine's memory settles under load
        threads = [threading.Thread(target=fuzz.worker, args=(i, time.time() + warm, {"valid"}), daemon=True)
                   for i in range(args.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        fuzz.sent.clear()
        fuzz.statuses.clear()
        base_kb = rss_kb(server.proc.pid)
        deadline = time.time() + seconds
        threads = [threading.Thread(target=fuzz.worker, args=(i, deadline, only), daemon=True) for i in range(args.workers)]
        for t in threads:
            t.start()
        marks = [deadline - seconds * (1 - q) for q in (0.25, 0.5, 0.75, 1.0)]
        while any(t.is_alive() for t in threads):
            time.sleep(0.5)
            now_kb = rss_kb(server.proc.pid)
            peak_kb = max(peak_kb, now_kb)
            while marks and time.time() >= marks[0]:
                marks.pop(0)
                timeline.append(now_kb)
            if server.proc.poll() is not None:
                fuzz.violation("server", f"the server exited with {server.proc.returncode}")
                break
        for t in threads:
            t.join(120)
        for _ in range(MAX_STALLS):                  # the stalled uploads finish
            fuzz.stalls.acquire(timeout=READ_TIMEOUT * 4 + 5)
        if peak_kb - base_kb > args.max_rss_growth_mb * 1024:
            fuzz.violation("memory", f"RSS grew {(peak_kb - base_kb) / 1024:.0f} MB over {base_kb / 1024:.0f} MB")
        health = httpx.get(server.url + "/health", timeout=30).status_code
        if health != 200:
            fuzz.violation("end", f"/health answered {health}")
        last = completion(server.url)
        if last is None or last != first:
            fuzz.violation("end", f"the final completion {last} differs from the first {first}")
    except KeyboardInterrupt:
        fuzz.violation("fuzzer", "interrupted: the summary covers what was sent until then")
    finally:
        server.close()
    log_text = args.log.read_text(errors="replace")
    if "Traceback" in log_text:
        fuzz.violation("server", f"a traceback in {args.log}")
    total = sum(fuzz.sent.values())
    print(f"fuzz-serve: {total} requests in {seconds:g} s (seed {args.seed}, {args.workers} workers, "
          f"target {args.target})")
    print("  sent:     " + ", ".join(f"{k} {v}" for k, v in sorted(fuzz.sent.items())))
    print("  statuses: " + ", ".join(f"{k}: {v}" for k, v in sorted(fuzz.statuses.items())))
    print(f"  server RSS: {base_kb / 1024:.0f} MB after {warm:g} s of valid requests, peak {peak_kb / 1024:.0f} MB; "
          "at each quarter: " + ", ".join(f"{kb / 1024:.0f}" for kb in timeline) + " MB")
    if fuzz.violations:
        print(f"  {len(fuzz.violations)} violation(s):")
        for v in fuzz.violations[:20]:
            print("   - " + v[:400])
        return 1
    print("  no violations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
