"""A slow Iceberg REST catalog for the tests: an HTTP proxy on loopback that forwards every
request to a real REST catalog (tests/rest_catalog.py's Nessie) and holds each table
commit (``POST .../namespaces/NS/tables/NAME``, ``POST .../transactions/commit``) for
:attr:`CatalogProxy.latency_s` before forwarding it, so the commit lands that much later,
as behind a slow or distant catalog. Every commit is noted with its table, the time it
came and the status the catalog answered (409: another writer committed first);
:attr:`CatalogProxy.before_commit`, when set, runs before a commit is forwarded (a test's
second writer commits there, making that commit conflict).

Reads (configuration, table loads) and everything else pass at once. The catalog's own
address in an answer is rewritten to the proxy's, so a client keeps talking through it.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import httpx

_COMMIT = re.compile(r"/v1/(?:.+/)?namespaces/[^/]+/tables/(?P<table>[^/?]+)$"
                     r"|/v1/(?:.+/)?transactions/commit$")
# Hop-by-hop headers and those the proxy sets itself (the body is sent decoded, whole).
_SKIP = {"connection", "keep-alive", "transfer-encoding", "content-length",
         "content-encoding", "host", "te", "trailer", "upgrade", "proxy-connection"}


@dataclass(frozen=True)
class Commit:
    """A commit request through the proxy: the table (None: a multi-table transaction),
    when it came (``time.monotonic()``) and the catalog's answer."""

    table: str | None
    at: float
    status: int


class CatalogProxy:
    """The proxy in front of ``target`` (the REST catalog's base URL, e.g.
    ``http://127.0.0.1:PORT/iceberg``); a context manager. :attr:`uri` is the base URL
    to give the clients."""

    def __init__(self, target: str, latency_s: float = 0.0) -> None:
        self.target = target.rstrip("/")
        split = urlsplit(self.target)
        self._origin = f"{split.scheme}://{split.netloc}"
        self.latency_s = latency_s
        self.before_commit: Callable[[str | None], None] | None = None
        self.commits: list[Commit] = []
        self._lock = threading.Lock()
        self._client = httpx.Client(timeout=120)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def _forward(self) -> None:
                proxy._handle(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="catalog-proxy")

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def uri(self) -> str:
        return self.origin + urlsplit(self.target).path

    def conflicts(self, table: str | None = None) -> int:
        """Commits the catalog answered 409 (of ``table``, else of any)."""
        return sum(1 for c in self.table_commits(table) if c.status == 409)

    def table_commits(self, table: str | None = None) -> list[Commit]:
        with self._lock:
            return [c for c in self.commits if table is None or c.table == table]

    def __enter__(self) -> CatalogProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()

    # -- one request -----------------------------------------------------------------

    def _body(self, handler: BaseHTTPRequestHandler) -> bytes:
        if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(handler.rfile.read(size))
                handler.rfile.readline()
        length = int(handler.headers.get("Content-Length") or 0)
        return handler.rfile.read(length) if length else b""

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        came = time.monotonic()
        body = self._body(handler)
        path = handler.path.split("?", 1)[0]
        commit = _COMMIT.search(path) if handler.command == "POST" else None
        if commit is not None:
            table = commit.group("table")
            hook = self.before_commit
            if hook is not None:
                hook(table)
            left = self.latency_s - (time.monotonic() - came)
            if left > 0:
                time.sleep(left)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _SKIP}
        try:
            answer = self._client.request(handler.command, self._origin + handler.path,
                                          content=body, headers=headers)
        except httpx.HTTPError as exc:
            handler.send_error(502, f"catalog proxy: {exc}")
            return
        content = answer.content.replace(self._origin.encode(), self.origin.encode())
        if commit is not None:
            with self._lock:
                self.commits.append(Commit(commit.group("table"), came, answer.status_code))
        handler.send_response(answer.status_code)
        for key, value in answer.headers.items():
            if key.lower() not in _SKIP:
                handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(content)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(content)
