"""The HTTP layer of `specbench serve`: a thread-per-connection server that no single client can exhaust.

`http.server` on its own reads whatever Content-Length a client announces, waits forever for a stalled upload
and starts one thread per connection without limit. `GuardedServer` and `JsonHandler` bound all three:

- at most `max_connections` connection threads; a connection beyond them is answered 503 (JSON, Retry-After)
  and closed at once, so a flood costs no threads;
- a request (its line, headers and body) must arrive within `read_timeout` seconds of its connection turning
  idle (opened, or its last response sent): a reaper thread shuts the read side of a connection past that
  deadline, which wakes the blocked read, so stalled uploads, slow headers and idle keep-alive connections
  all give their thread back (a stalled body is answered 408 first);
- a body needs a Content-Length of at most `max_body_bytes`: a larger one is answered 413 before a byte of
  it is read, a chunked upload 411;
- every error, http.server's own included (a malformed request line, headers too long, an unknown method),
  is a JSON object {"error": {"message", "type", "code"}}, as OpenAI-compatible clients expect.
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("specbench.serve")

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_READ_TIMEOUT_S = 30.0
DEFAULT_MAX_CONNECTIONS = 128

ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowed", 408: "RequestTimeout",
               411: "LengthRequired", 413: "RequestEntityTooLarge", 500: "InternalServerError",
               503: "ServiceUnavailableError"}


class ApiError(Exception):
    """An HTTP error answered as OpenAI's JSON error object; `close` also ends the connection (the request's
    body was not read, so the stream cannot carry another request)."""

    def __init__(self, status: int, message: str, kind: str | None = None, close: bool = False):
        super().__init__(message)
        self.status, self.message, self.close = status, message, close
        self.kind = kind or error_type(status)


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status) or HTTPStatus(status).phrase.replace(" ", "")


def error_body(status: int, message: str, kind: str | None = None) -> bytes:
    kind = kind or error_type(status)
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}}).encode()


class GuardedServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with a cap on connection threads and a deadline for every request to arrive."""

    daemon_threads = True
    # the listen backlog (socketserver's default is 5): a burst of connections beyond it completes the handshake
    # on the client's side only and then waits for the server's retransmitted SYN-ACK
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, read_timeout: float = DEFAULT_READ_TIMEOUT_S,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES):
        self.max_connections = max_connections
        self.read_timeout = read_timeout
        self.max_body_bytes = max_body_bytes
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        self._deadlines: dict[socket.socket, float] = {}    # connections reading a request, by deadline
        self._reaped: set[socket.socket] = set()
        self._closing = threading.Event()
        super().__init__(address, handler)
        self._reaper = threading.Thread(target=self._reap, name="specbench-http-reaper", daemon=True)
        self._reaper.start()

    # -- connection threads ----------------------------------------------------------------------------
    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._deadlines.pop(request, None)
                self._reaped.discard(request)
            self._slots.release()

    def _refuse(self, request: socket.socket) -> None:
        """503 to a connection over the cap, written from the accepting thread without reading the request."""
        body = error_body(503, f"the server holds its maximum of {self.max_connections} connections; retry later")
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: "
                f"{len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n").encode()
        try:
            request.settimeout(1.0)
            request.sendall(head + body)
        except OSError:
            pass
        self.shutdown_request(request)

    # -- read deadlines --------------------------------------------------------------------------------
    def watch(self, conn: socket.socket) -> None:
        """The connection starts waiting for a request: it has read_timeout seconds to deliver all of it."""
        with self._lock:
            self._deadlines[conn] = time.monotonic() + self.read_timeout

    def settle(self, conn: socket.socket) -> None:
        """The request has arrived in full; what follows (generation, streaming) has no read deadline."""
        with self._lock:
            self._deadlines.pop(conn, None)

    def reaped(self, conn: socket.socket) -> bool:
        with self._lock:
            return conn in self._reaped

    def _reap(self) -> None:
        interval = min(1.0, max(self.read_timeout / 4, 0.05))
        while not self._closing.wait(interval):
            now = time.monotonic()
            with self._lock:
                late = [c for c, deadline in self._deadlines.items() if deadline <= now]
                for c in late:
                    del self._deadlines[c]
                    self._reaped.add(c)
            for c in late:
                try:
                    c.shutdown(socket.SHUT_RD)       # the blocked read returns end-of-file; the reply still goes out
                except OSError:
                    pass

    def server_close(self) -> None:
        self._closing.set()
        super().server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        err = sys.exc_info()[1]
        if isinstance(err, (ConnectionError, TimeoutError)):
            return                              # a client hung up or stalled: not the server's error
        log.exception("error while handling a request from %s", client_address)


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler whose errors are JSON and whose request bodies are bounded in size and time."""

    protocol_version = "HTTP/1.1"
    default_request_version = "HTTP/1.0"        # not 0.9: an error on a garbled request line keeps its status line
    server: GuardedServer

    def setup(self) -> None:
        # every socket operation, a backstop: the reaper ends a late request first, so it can still answer 408
        self.timeout = self.server.read_timeout + 1.0
        super().setup()

    def log_message(self, fmt: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), fmt % args)

    def handle_one_request(self) -> None:
        self.server.watch(self.connection)
        super().handle_one_request()

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if self.server.reaped(self.connection):
            self.send_error(408)
            return False
        if self.command != "POST":
            self.server.settle(self.connection)
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors as JSON; an unknown method is 405 (http.server says 501)."""
        if code == HTTPStatus.NOT_IMPLEMENTED:
            code, message = 405, f"method {getattr(self, 'command', '?')} is not allowed"
        elif code == HTTPStatus.HTTP_VERSION_NOT_SUPPORTED:      # the sender's mistake: a 4xx like the others
            code, message = 400, "this server speaks HTTP/1.0 and HTTP/1.1 only"
        if code == 408 or (code == 400 and self.server.reaped(self.connection)):   # cut short by the deadline
            code, message, explain = 408, f"the request did not arrive within {self.server.read_timeout:g} s", None
        text = message or HTTPStatus(code).phrase
        if explain and explain != text:
            text = f"{text}: {explain}"
        self.close_connection = True
        try:
            self.send_payload(code, error_body(code, text), close=True)
        except OSError:
            pass

    # -- responses -----------------------------------------------------------------------------------
    def send_payload(self, status: int, payload: Any, content_type: str = "application/json",
                  close: bool = False) -> None:
        data = payload if isinstance(payload, bytes) else (
            payload.encode() if isinstance(payload, str) else json.dumps(payload).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_api_error(self, err: ApiError) -> None:
        self.send_payload(err.status, error_body(err.status, err.message, err.kind), close=err.close)

    # -- request bodies ------------------------------------------------------------------------------
    def read_json_body(self) -> Any:
        """The request's JSON body, read only when its declared size is within the limit."""
        encoding = (self.headers.get("Transfer-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            raise ApiError(411, "send the body with a Content-Length header (chunked uploads are not accepted)",
                           close=True)
        raw = self.headers.get("Content-Length")
        if raw is None:
            raise ApiError(411, "a POST request needs a Content-Length header", close=True)
        length = int(raw.strip()) if raw.strip().isascii() and raw.strip().isdigit() else -1
        if length < 0:
            raise ApiError(400, f"Content-Length {raw!r} is not a byte count", close=True)
        limit = self.server.max_body_bytes
        if length > limit:
            raise ApiError(413, f"the request body is {length} bytes; this server accepts at most {limit} "
                                "(serve --max-body-bytes)", close=True)
        try:
            data, timed_out = (self.rfile.read(length) if length else b""), False
        except OSError:                             # TimeoutError included: one read waited read_timeout
            data, timed_out = b"", True
        if len(data) < length:
            if timed_out or self.server.reaped(self.connection):
                raise ApiError(408, f"the request body did not arrive within {self.server.read_timeout:g} s",
                               close=True)
            raise ApiError(400, f"the body ended after {len(data)} of its {length} bytes", close=True)
        self.server.settle(self.connection)
        try:
            return json.loads(data) if data else {}
        except (ValueError, RecursionError):
            raise ApiError(400, "the request body is not valid JSON") from None
