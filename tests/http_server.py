"""A real local HTTP server for tests and benchmarks, with scriptable answers.

:class:`HttpTestServer` listens on ``127.0.0.1`` (a free port), speaks keep-alive
HTTP/1.1 with TCP_NODELAY, serves each connection in its own thread and records every
request (method, path, lower-case headers, body, client port) *as it arrives*, before
answering. Answers come from a script queue; once it is empty every request gets
``200`` with an empty body (the fast path: no JSON parsing, one ``sendall``)::

    with HttpTestServer() as server:
        server.respond(500, times=2)          # the next two requests get 500
        server.respond(429, headers={"Retry-After": "2"})
        server.hang(1.0)                      # the next one waits 1 s, then gets 200
        ... # point the client at server.url
        server.wait_for(3)
        assert server.requests[0].json == {...}

Closing the server releases hanging answers and drops open keep-alive connections.
``HttpTestServer(ssl_context=...)`` serves HTTPS (the handshake runs in the connection's
thread; a failed one is recorded in :attr:`HttpTestServer.tls_failures`, no request).
"""

from __future__ import annotations

import contextlib
import http
import json
import socket
import ssl
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


@dataclass(frozen=True)
class _Answer:
    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0


@dataclass
class RecordedRequest:
    """One request as the server received it (``json`` is parsed on first access)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client_port: int
    answer: int = field(default=200)
    at: float = field(default_factory=time.monotonic)  # when it was received
    answered_at: float | None = None  # when the answer started to go out (None: not yet)

    @cached_property
    def json(self) -> Any:
        """The body parsed as JSON; None when empty or not JSON."""
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True  # TCP_NODELAY
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, add=True)

    def finish(self) -> None:
        self.server.track(self.connection, add=False)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: one stderr line per request would dominate a benchmark

    def _answer(self) -> None:
        owner = self.server.owner
        length = self.headers.get("Content-Length")
        if length is not None:
            body = self.rfile.read(int(length))
        elif "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = self._read_chunked()
        else:
            body = b""
        answer = owner._next_answer()
        headers = {k.lower(): v for k, v in self.headers.items()}
        request = RecordedRequest(self.command, self.path, headers, body,
                                  self.client_address[1], answer.status)
        owner._record(request)
        if answer.delay_s and owner._closing.wait(answer.delay_s):
            self.close_connection = True
            return  # the server is closing: give up the hanging answer
        request.answered_at = time.monotonic()  # before the bytes: no client sees it earlier
        if answer.status == 200 and not answer.body and not answer.headers:
            self.wfile.write(_OK)
            return
        phrase = http.HTTPStatus(answer.status).phrase if answer.status in _STATUSES else ""
        lines = [f"HTTP/1.1 {answer.status} {phrase}", f"Content-Length: {len(answer.body)}"]
        lines += [f"{k}: {v}" for k, v in answer.headers]
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + answer.body)

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer


_STATUSES = {s.value for s in http.HTTPStatus}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256

    def __init__(self, owner: HttpTestServer) -> None:
        self.owner = owner
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        context = self.owner.ssl_context
        if context is None:
            super().finish_request(request, client_address)
            return
        try:  # in the connection's thread: a slow handshake does not block accept()
            connection = context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as exc:
            self.owner._tls_failed(f"{type(exc).__name__}: {exc}")
            return
        try:
            super().finish_request(connection, client_address)
        finally:
            connection.close()

    def track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def drop_connections(self) -> None:
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that went away (timeout, reset) is normal in these tests


class HttpTestServer:
    """A threaded local HTTP server that records requests and plays scripted answers."""

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context
        self.tls_failures: list[str] = []  # failed TLS handshakes, oldest first
        self._script: deque[list[Any]] = deque()  # [answer, times left]
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._closing = threading.Event()
        self.requests: list[RecordedRequest] = []
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
            name="http-test-server", daemon=True)
        self._started = False

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:PORT`` (no trailing slash; https with TLS)."""
        scheme = "http" if self.ssl_context is None else "https"
        return f"{scheme}://127.0.0.1:{self.port}"

    # ------------------------------------------------------------------ script

    def respond(self, status: int, body: bytes | str = b"",
                headers: dict[str, str] | None = None, times: int = 1) -> None:
        """Answer the next ``times`` requests with ``status``, ``body`` and ``headers``."""
        data = body.encode("utf-8") if isinstance(body, str) else body
        self._push(_Answer(status, data, tuple((headers or {}).items())), times)

    def hang(self, seconds: float, times: int = 1) -> None:
        """Delay the answer (200) to each of the next ``times`` requests by ``seconds``."""
        self._push(_Answer(delay_s=seconds), times)

    def _push(self, answer: _Answer, times: int) -> None:
        if times < 1:
            raise ValueError("times must be >= 1")
        with self._lock:
            self._script.append([answer, times])

    def _next_answer(self) -> _Answer:
        if not self._script:  # fast path, no lock: the default answer
            return _DEFAULT
        with self._lock:
            if not self._script:
                return _DEFAULT
            step = self._script[0]
            step[1] -= 1
            if step[1] == 0:
                self._script.popleft()
            answer: _Answer = step[0]
            return answer

    def _tls_failed(self, reason: str) -> None:
        with self._arrived:
            self.tls_failures.append(reason)
            self._arrived.notify_all()

    def wait_for_tls_failures(self, count: int, timeout: float = 10.0) -> list[str]:
        """Block until ``count`` TLS handshakes failed; AssertionError after ``timeout``."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.tls_failures) >= count, timeout):
                raise AssertionError(f"{len(self.tls_failures)} of {count} failed TLS "
                                     f"handshakes within {timeout} s: {self.tls_failures}")
            return list(self.tls_failures)

    def _record(self, request: RecordedRequest) -> None:
        with self._arrived:
            self.requests.append(request)
            self._arrived.notify_all()

    # ----------------------------------------------------------------- queries

    def count(self) -> int:
        """Number of requests received so far."""
        return len(self.requests)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[RecordedRequest]:
        """Block until ``count`` requests arrived; AssertionError after ``timeout``."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(f"{len(self.requests)} of {count} requests within "
                                     f"{timeout} s")
            return list(self.requests)

    def release(self) -> None:
        """Forget the remaining script: from now on every request gets ``200`` at once
        (answers already hanging keep hanging); the recorded requests stay."""
        with self._lock:
            self._script.clear()

    def clear(self) -> None:
        """Forget the recorded requests and the remaining script."""
        with self._lock:
            self.requests.clear()
            self._script.clear()

    # --------------------------------------------------------------- lifecycle

    def start(self) -> Self:
        if not self._started:
            self._started = True
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, release hanging answers, drop connections (idempotent)."""
        self._closing.set()
        if self._started and self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.drop_connections()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


_DEFAULT = _Answer()
