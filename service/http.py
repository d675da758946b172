"""The status HTTP server: ``/metrics`` (Prometheus), ``/healthz``, ``/readyz``, and the
control API (:mod:`service.control`: ``/status``, pause, resume, restart) when
``service.control_token`` is set.

It runs in its own thread, so it still answers when the event loop is stuck, and says so:

* ``/healthz``: 200 while the event loop is responsive (a loop task refreshes a heartbeat
  every 0.5 s) and no consumer is stuck (:mod:`actors.liveness`); 503 with
  ``{"status": "unhealthy", "reason": ...}`` once it is 5 s stale or a worker stalled.
* ``/readyz``: 200 once every worker has joined its consumer group and opened its sink,
  and no sink's writes keep failing (``supervisor.sink_unready_after_s``; at once when
  its credentials are refused); 503 with the reasons per worker otherwise. Topics an
  operator paused are listed (``"paused"``), never a reason.
* ``/metrics``: Prometheus text format (prometheus-client); worker state is snapshotted
  on the event loop, never read concurrently from this thread.

Several processes may share one config on one host (that is how a group scales out), so
a taken ``http_port`` is not fatal: :func:`bind_status_server` takes the next free port of
``http_port .. http_port + http_port_tries - 1`` (predictable ports for a static scrape
config), then any free port, and logs a WARNING naming the port it took and why.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from actors.master import Master
from actors.metrics import Metrics
from service.control import ControlApi
from settings.models import ServiceSettings

logger = logging.getLogger(__name__)

HEARTBEAT_S = 0.5
STALE_S = 5.0
_LOOP_CALL_TIMEOUT_S = 2.0
MAX_BODY = 65536  # bytes of a POST body read (and dropped: the control API uses none)


class StatusServer:
    """Serves the three endpoints for one master on ``host:port`` (port 0: any free port)."""

    def __init__(self, master: Master, metrics: Metrics, loop: asyncio.AbstractEventLoop,
                 host: str = "127.0.0.1", port: int = 9108, token: str | None = None,
                 ) -> None:
        self.master = master
        self.metrics = metrics
        self.loop = loop
        self.heartbeat = time.monotonic()
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="kstage-status", daemon=True)
        metrics.watch(lambda: self.on_loop(master.snapshot))
        self.control = ControlApi(master, self.on_loop, token)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        logger.info("status server on port %d: /metrics /healthz /readyz%s", self.port,
                    " /status and the control API" if self.control.enabled else "")

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for serve_forever: never if unstarted
            self._server.shutdown()
        self._server.server_close()

    async def beat(self) -> None:
        """Refresh the heartbeat until cancelled (runs on the event loop)."""
        while True:
            self.heartbeat = time.monotonic()
            await asyncio.sleep(HEARTBEAT_S)

    def on_loop(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the event loop and return its result (from the server thread)."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except Exception as exc:  # noqa: BLE001 - handed to the caller
                    future.set_exception(exc)

        self.loop.call_soon_threadsafe(run)
        try:
            return future.result(_LOOP_CALL_TIMEOUT_S)
        except TimeoutError:
            future.cancel()  # if the loop wakes up later, it skips the call
            raise

    def health(self) -> tuple[int, dict[str, Any]]:
        """The event loop's heartbeat, then the stall watch (read from this thread: it
        swaps whole dicts on the loop, so a read never sees one half updated)."""
        stale = time.monotonic() - self.heartbeat
        if stale > STALE_S:
            return 503, {"status": "unhealthy",
                         "reason": f"event loop unresponsive for {stale:.1f}s"}
        stuck = self.master.liveness()
        if stuck:
            return 503, {"status": "unhealthy", "reason": stuck[0], "reasons": stuck}
        return 200, {"status": "ok"}

    def ready(self) -> tuple[int, dict[str, Any]]:
        try:
            reasons = self.on_loop(self.master.readiness)
        except (TimeoutError, RuntimeError) as exc:
            return 503, {"status": "not ready", "reasons": [f"event loop: {exc!r}"]}
        paused = sorted(name for name, c in self.master.controls.items() if c.paused)
        extra = {"paused": paused} if paused else {}  # paused by an operator: not a failure
        if reasons:
            return 503, {"status": "not ready", "reasons": reasons, **extra}
        return 200, {"status": "ready", **extra}


def bind_status_server(master: Master, metrics: Metrics, loop: asyncio.AbstractEventLoop,
                       service: ServiceSettings) -> StatusServer:
    """The status server on ``service.http_port``, or on the next free port if another
    process (e.g. one sharing this config) holds it; OSError for any other bind failure."""
    host, first = service.http_host, service.http_port
    token = (service.control_token.get_secret_value()
             if service.control_token is not None else None)
    ports = [p for p in range(first, first + service.http_port_tries) if p <= 65535]
    for port in ports:
        try:
            server = StatusServer(master, metrics, loop, host, port, token)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            continue
        if port != first:
            logger.warning("service.http_port %d on %s is in use (another process sharing "
                           "this config?): the status server of this process (pid %d) is on "
                           "port %d instead", first, host, os.getpid(), port)
        return server
    server = StatusServer(master, metrics, loop, host, 0, token)
    logger.warning("service.http_port %d on %s and the %d port(s) after it are in use: the "
                   "status server of this process (pid %d) is on port %d instead (raise "
                   "service.http_port_tries for predictable ports)", first, host,
                   len(ports) - 1, os.getpid(), server.port)
    return server


def _handler(server: StatusServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's naming
            path = self.path.split("?", 1)[0]
            if path == "/status":
                self._json(*server.control.status(self._caller(), self._authorization()))
            elif path == "/metrics":
                try:
                    body = generate_latest(server.metrics.registry)
                except (TimeoutError, RuntimeError) as exc:
                    self._send(503, "text/plain", f"metrics unavailable: {exc!r}\n".encode())
                    return
                self._send(200, CONTENT_TYPE_LATEST, body)
            elif path in ("/healthz", "/readyz"):
                code, data = server.health() if path == "/healthz" else server.ready()
                self._send(code, "application/json", json.dumps(data).encode())
            else:
                self._send(404, "application/json", b'{"error": "not found"}')

        def do_POST(self) -> None:  # http.server's naming
            given = (self.headers.get("Content-Length") or "0").strip()
            if not re.fullmatch(r"[0-9]{1,18}", given):
                self.close_connection = True  # where the body ends is unknown
                self._json(400, {"error": f"Content-Length {given[:40]!r} is not a byte "
                                          "count"})
                return
            length = int(given)
            if length > MAX_BODY:
                self.close_connection = True  # the body is not read
                self._json(413, {"error": f"a body of {length} bytes: the control API "
                                          f"reads none, and refuses one past {MAX_BODY}"})
                return
            if length:
                self.rfile.read(length)  # no body is used: read and drop it
            self._json(*server.control.act(self.path.split("?", 1)[0], self._caller(),
                                           self._authorization()))

        def _caller(self) -> str:
            return f"{self.client_address[0]}:{self.client_address[1]}"

        def _authorization(self) -> str | None:
            return self.headers.get("Authorization")

        def _json(self, code: int, data: dict[str, Any]) -> None:
            self._send(code, "application/json", json.dumps(data).encode(),
                       {"WWW-Authenticate": "Bearer"} if code == 401 else None)

        def _send(self, code: int, content_type: str, body: bytes,
                  headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("status %s", format % args)

    return Handler
