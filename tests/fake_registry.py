"""A fake Confluent schema registry: a real HTTP server on 127.0.0.1, in a daemon thread.

Real sockets, so clients under test use their real transport (httpx, or a ``kstage run``
child process). It follows the documented REST API for what kstage uses::

    POST /subjects/{s}/versions          {"schema": "..."} -> {"id": N}
    POST /subjects/{s}                   is this schema registered under s? -> version
    GET  /subjects                       ["s1", ...]
    GET  /subjects/{s}/versions          [1, 2, ...]                  404 40401
    GET  /subjects/{s}/versions/{v}      {"subject","version","id","schema"}  (v = N | latest)
                                         404 40401 subject / 40402 version, 422 42202
    GET  /schemas/ids/{id}               {"schema": "..."}            404 40403
    GET  /schemas/id=<32 hex>            WhereHows: the plain schema text (add_uuid)
    GET  /config, /config/{s}            {"compatibilityLevel": L}  (a subject's: 404 40408
                                         when it has none)
    PUT  /config, /config/{s}            {"compatibility": L} -> same   422 42203 invalid
    POST /compatibility/subjects/{s}/versions/{v}   {"is_compatible": bool, "messages"}
                                         (v = N | latest; /versions: all, as the level says)

Compatibility levels (:mod:`tests.registry_compat`: BACKWARD, FORWARD, FULL, NONE and
their ``_TRANSITIVE`` variants) are enforced on ``POST /subjects/{s}/versions`` as the
Confluent registry does: a schema new to the subject that its level refuses answers
``409 {"error_code": 409, "message": "Schema being registered is incompatible with an
earlier schema for subject ..., details: [...]"}``; one already registered under the
subject returns its id unchecked. The level is the subject's, else the global one: the
``compatibility`` argument, ``NONE`` by default (Confluent's default is ``BACKWARD``;
the fake's lets the tests that register unrelated schemas under one subject keep doing
so). The in-process :meth:`FakeRegistry.register` is not checked (a test's setup, as an
import would be). Protobuf schemas with references are not checked.

Schema types as in the API: a registration's ``schemaType`` (``AVRO`` when absent,
``JSON``, ``PROTOBUF``) and ``references`` (``[{"name", "subject", "version"}]``, each
an existing subject version) are kept, and answered by id and by version (``schemaType``
only when not Avro, ``references`` only when there are some, as the Confluent registry
does). Protobuf schemas are ``.proto`` text, served as registered; with
``?format=serialized`` the answer is the file's ``FileDescriptorProto`` in base64, made
by protoc (:mod:`tests.proto_files`) as the Confluent registry does (confluent-kafka's
``ProtobufSerializer`` asks for that with ``use.latest.version``). A Protobuf schema
registered as a base64 descriptor (confluent-kafka's ``auto.register.schemas``) is
refused: the real registry turns it into ``.proto`` text, which the fake cannot; looked
up as one (``POST /subjects/{s}``, the serializer's ``use.schema.id``), it is found by
the descriptor protoc makes of each version.

Like the real registry, the same schema (compared as parsed JSON, Protobuf text as is,
with its type and references) gets the same id in every subject, ids count from 1, JSON
schemas are stored and served in compact JSON, and errors
are ``{"error_code": ..., "message": ...}`` as ``application/vnd.schemaregistry.v1+json``.
Auth (``basic_auth=(user, password)`` or ``bearer_token=``) answers 401 when missing or
wrong. Scripted trouble: :meth:`FakeRegistry.fail_next`, :meth:`FakeRegistry.hang_next` and
:meth:`FakeRegistry.start_reloading` (404 40403 for ids that exist, like Karapace while it
re-reads its ``_schemas`` topic after a restart).
Every request is logged (:attr:`FakeRegistry.requests`) before any scripted trouble.

Usage::

    with FakeRegistry() as reg:
        schema_id = reg.register("events-value", schema_text)
        ... point the client or the service at reg.url ...
        assert reg.count("GET", f"/schemas/ids/{schema_id}") == 1
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import unquote, urlsplit

from tests.registry_compat import LEVELS, problems

logger = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_REASONS = {429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake received it (header names in lower case)."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


class FakeRegistryError(Exception):
    """Raised by the in-process helpers (``register`` with an invalid schema)."""


class FakeRegistry:
    """A fake Confluent schema registry server; see the module docstring.

    Args:
        basic_auth: ``(username, password)`` every request must carry.
        bearer_token: token every request must carry as ``Authorization: Bearer ...``.
        ssl_context: a server-side context to serve HTTPS instead of HTTP.
        compatibility: the global compatibility level (``PUT /config`` changes it).
    """

    def __init__(
        self,
        *,
        basic_auth: tuple[str, str] | None = None,
        bearer_token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        compatibility: str = "NONE",
    ) -> None:
        if compatibility not in LEVELS:
            raise ValueError(f"unknown compatibility level {compatibility!r}")
        self._levels: dict[str | None, str] = {None: compatibility}  # subject (None: global)
        self._expected_auth: str | None = None
        if basic_auth is not None:
            token = base64.b64encode(f"{basic_auth[0]}:{basic_auth[1]}".encode()).decode()
            self._expected_auth = f"Basic {token}"
        elif bearer_token is not None:
            self._expected_auth = f"Bearer {bearer_token}"
        self._ssl_context = ssl_context
        self._lock = threading.RLock()
        self._schemas: dict[int, str] = {}  # id -> compact schema text
        self._types: dict[int, str] = {}  # id -> schemaType
        self._references: dict[int, list[dict[str, Any]]] = {}  # id -> references
        self._ids: dict[str, int] = {}  # type, references and canonical text -> id
        self._subjects: dict[str, list[int]] = {}  # subject -> ids by version - 1
        self._uuids: dict[str, str] = {}  # 32 hex -> plain text
        self._log: list[RecordedRequest] = []
        self._failures: list[tuple[int, float | None]] = []  # (status, retry_after)
        self._hangs: list[float] = []
        self._reloading_until: float | None = None  # time.monotonic() deadline
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Listen on a free 127.0.0.1 port and serve from a daemon thread."""
        if self._server is not None:
            raise RuntimeError("FakeRegistry already started")
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-registry-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake hung requests, close every connection (idempotent)."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeRegistry is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:40123``."""
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    # ---------------------------------------------------------- in-process helpers

    def register(self, subject: str, schema_text: str, schema_type: str = "AVRO",
                 references: list[dict[str, Any]] | None = None) -> int:
        """Register a schema under a subject (as ``POST /subjects/{s}/versions``)."""
        references = references or []
        stored, canonical = self._canonical(schema_text, schema_type, references)
        with self._lock:
            schema_id = self._ids.get(canonical)
            if schema_id is None:
                schema_id = len(self._schemas) + 1
                self._ids[canonical] = schema_id
                self._schemas[schema_id] = stored
                self._types[schema_id] = schema_type
                self._references[schema_id] = references
            versions = self._subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id

    def _canonical(self, schema_text: str, schema_type: str,
                   references: list[dict[str, Any]]) -> tuple[str, str]:
        """``(stored text, identity)`` of a schema; FakeRegistryError when invalid."""
        if schema_type not in ("AVRO", "JSON", "PROTOBUF"):
            raise FakeRegistryError(f"unknown schemaType {schema_type!r}")
        for ref in references:
            versions = self._subjects.get(ref.get("subject", ""), [])
            if not 0 < int(ref.get("version", 0)) <= len(versions) or "name" not in ref:
                raise FakeRegistryError(f"invalid reference {ref}")
        if schema_type == "PROTOBUF":
            if "message" not in schema_text and "enum" not in schema_text:
                raise FakeRegistryError("the fake takes .proto text only (not a base64 "
                                        "descriptor)")
            stored = schema_text
            text = schema_text.strip()
        else:
            try:
                parsed = json.loads(schema_text)
            except ValueError as exc:
                raise FakeRegistryError(f"invalid schema: {exc}") from exc
            stored = json.dumps(parsed, separators=(",", ":"))
            text = json.dumps(parsed, sort_keys=True, separators=(",", ":"))
        refs = json.dumps(references, sort_keys=True)
        return stored, f"{schema_type}\n{refs}\n{text}"

    def add_uuid(self, hex_id: str, schema_text: str) -> None:
        """Serve ``schema_text`` as is at WhereHows' ``GET /schemas/id=<hex_id>``."""
        with self._lock:
            self._uuids[hex_id.lower().replace("-", "")] = schema_text

    def schema(self, schema_id: int) -> str:
        """The stored (compact) text of an id."""
        with self._lock:
            return self._schemas[schema_id]

    def fail_next(self, n: int = 1, status: int = 503, *, retry_after: float | None = None) -> None:
        """Answer the next ``n`` requests with ``status`` (and ``Retry-After``, if given)."""
        with self._lock:
            self._failures.extend([(status, retry_after)] * n)

    def clear_failures(self) -> None:
        """Drop the failures :meth:`fail_next` scripted and not answered yet (back up)."""
        with self._lock:
            self._failures.clear()

    def delete_subject(self, subject: str) -> None:
        """Forget a subject's versions (as a hard delete; the ids stay)."""
        with self._lock:
            self._subjects.pop(subject, None)

    def hang_next(self, n: int = 1, seconds: float = 30.0) -> None:
        """Hold the next ``n`` requests ``seconds`` before answering (``stop`` wakes them)."""
        with self._lock:
            self._hangs.extend([seconds] * n)

    def start_reloading(self, seconds: float = float("inf")) -> None:
        """Answer ``404 40403`` for every schema id, known or not, for ``seconds`` or until
        :meth:`finish_reloading` (Karapace for ~5 s after a restart: its ``/_health``
        already says 200 while it re-reads its ``_schemas`` topic)."""
        with self._lock:
            self._reloading_until = time.monotonic() + seconds

    def finish_reloading(self) -> None:
        """Serve the known ids again."""
        with self._lock:
            self._reloading_until = None

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of the request log, oldest first."""
        with self._lock:
            return list(self._log)

    def count(self, method: str | None = None, path: str | None = None) -> int:
        """How many logged requests match ``method`` and ``path`` (None matches any)."""
        return sum(
            1
            for r in self.requests
            if (method is None or r.method == method) and (path is None or r.path == path)
        )

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()

    # ------------------------------------------------------------------- serving

    def _handle(self, handler: _Handler, method: str) -> None:
        split = urlsplit(handler.path)
        path = unquote(split.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in handler.headers.items()}
        with self._lock:
            self._log.append(RecordedRequest(method, path, split.query, headers, body))
            hang = self._hangs.pop(0) if self._hangs else None
            failure = self._failures.pop(0) if self._failures else None
        if hang is not None and self._stopping.wait(hang):
            return  # stopped while hanging: drop the connection
        if failure is not None:
            status, retry_after = failure
            extra = {} if retry_after is None else {"Retry-After": _seconds(retry_after)}
            code = 42901 if status == 429 else 50001 if status >= 500 else status
            message = _REASONS.get(status, "Scripted failure")
            handler.send(status, {"error_code": code, "message": message}, extra)
            return
        if self._expected_auth is not None and headers.get("authorization") != self._expected_auth:
            handler.send(401, {"error_code": 401, "message": "Unauthorized"})
            return
        status, answer = self._route(method, split.path, body, split.query)
        if isinstance(answer, str):
            handler.send_text(status, answer)
        else:
            handler.send(status, answer)

    def _route(self, method: str, path: str, body: bytes, query: str = "") -> tuple[int, Any]:
        serialized = "format=serialized" in query.split("&")
        parts = [unquote(part) for part in path.strip("/").split("/")]  # "a%2Fb": one part
        with self._lock:
            reloading = (self._reloading_until is not None
                         and time.monotonic() < self._reloading_until)
            if reloading and method == "GET" and parts[0] == "schemas":
                return _error(404, 40403, "Schema not found")
            if method == "GET" and len(parts) == 3 and parts[:2] == ["schemas", "ids"]:
                schema_id = int(parts[2]) if parts[2].isdigit() else -1
                if schema_id not in self._schemas:
                    return _error(404, 40403, "Schema not found")
                return 200, self._answer(schema_id, serialized)
            if method == "GET" and len(parts) == 2 and parts[0] == "schemas":
                hex_id = parts[1].removeprefix("id=") if parts[1].startswith("id=") else None
                if hex_id is None or hex_id not in self._uuids:
                    return _error(404, 40403, "Schema not found")
                return 200, self._uuids[hex_id]
            if method == "GET" and parts == ["subjects"]:
                return 200, sorted(self._subjects)
            if parts[0] == "config" and len(parts) <= 2:
                return self._config(method, parts[1] if len(parts) == 2 else None, body)
            if method == "POST" and parts[:2] == ["compatibility", "subjects"] \
                    and len(parts) in (4, 5) and parts[3] == "versions":
                return self._test_compatibility(parts[2], parts[4:], body)
            if parts[0] != "subjects" or len(parts) < 2 or len(parts) > 4:
                return _error(404, 404, "HTTP 404 Not Found")
            subject = parts[1]
            if method == "POST" and len(parts) in (2, 3) and parts[2:] in ([], ["versions"]):
                return self._post_subject(subject, body, lookup=len(parts) == 2)
            versions = self._subjects.get(subject)
            if method != "GET" or len(parts) < 3 or parts[2] != "versions":
                return _error(405, 405, "HTTP 405 Method Not Allowed")
            if versions is None:
                return _error(404, 40401, f"Subject '{subject}' not found.")
            if len(parts) == 3:
                return 200, list(range(1, len(versions) + 1))
            wanted = parts[3]
            if wanted == "latest":
                version = len(versions)
            elif wanted.isdigit() and int(wanted) > 0:
                version = int(wanted)
            else:
                return _error(422, 42202, f"The specified version '{wanted}' is not valid.")
            if version > len(versions):
                return _error(404, 40402, f"Version {version} not found.")
            return 200, self._version(subject, version, serialized)

    def _answer(self, schema_id: int, serialized: bool = False) -> dict[str, Any]:
        """``schema`` with ``schemaType`` (not for Avro) and ``references`` (if any)."""
        answer: dict[str, Any] = {"schema": self._schemas[schema_id]}
        if self._types[schema_id] != "AVRO":
            answer["schemaType"] = self._types[schema_id]
        if self._references[schema_id]:
            answer["references"] = self._references[schema_id]
        if serialized and self._types[schema_id] == "PROTOBUF":
            answer["schema"] = self._serialized(schema_id)
        return answer

    def _serialized(self, schema_id: int) -> str:
        """The base64 ``FileDescriptorProto`` of a Protobuf schema (protoc's)."""
        from tests.proto_files import compile_files

        files: dict[str, str] = {}

        def gather(sid: int) -> None:
            for ref in self._references[sid]:
                ref_id = self._subjects[ref["subject"]][int(ref["version"]) - 1]
                files[ref["name"]] = self._schemas[ref_id]
                gather(ref_id)

        gather(schema_id)
        main = f"schema_{schema_id}.proto"
        files[main] = self._schemas[schema_id]
        compiled = {f.name: f for f in compile_files(files)}
        return base64.b64encode(compiled[main].SerializeToString()).decode("ascii")

    def _post_subject(self, subject: str, body: bytes, *, lookup: bool) -> tuple[int, Any]:
        try:
            request = json.loads(body)
            schema_text = request["schema"]
            schema_type = request.get("schemaType") or "AVRO"
            references = request.get("references") or []
            if not isinstance(schema_text, str) or not isinstance(references, list):
                raise TypeError("schema must be a string, references a list")
        except (ValueError, KeyError, TypeError) as exc:
            return _error(422, 42201, f"Invalid schema: {exc}")
        if not lookup:
            try:
                refused = self._refused(subject, schema_text, schema_type, references)
                if refused:
                    return _error(409, 409, "Schema being registered is incompatible with "
                                  f"an earlier schema for subject \"{subject}\", details: "
                                  f"[{', '.join(refused)}]")
                return 200, {"id": self.register(subject, schema_text, schema_type,
                                                 references)}
            except FakeRegistryError as exc:
                return _error(422, 42201, str(exc))
        if subject not in self._subjects:
            return _error(404, 40401, f"Subject '{subject}' not found.")
        if schema_type == "PROTOBUF" and "message" not in schema_text:
            # a base64 descriptor (confluent-kafka's ProtobufSerializer with use.schema.id
            # looks its schema up so): the version whose descriptor it is
            for version, sid in enumerate(self._subjects[subject], 1):
                if self._types[sid] == "PROTOBUF" and self._serialized(sid) == schema_text:
                    return 200, self._version(subject, version)
            return _error(404, 40403, "Schema not found")
        try:
            _, canonical = self._canonical(schema_text, schema_type, references)
        except FakeRegistryError as exc:
            return _error(422, 42201, f"Invalid schema: {exc}")
        schema_id = self._ids.get(canonical)
        if schema_id is None or schema_id not in self._subjects[subject]:
            return _error(404, 40403, "Schema not found")
        return 200, self._version(subject, self._subjects[subject].index(schema_id) + 1)

    def level(self, subject: str | None = None) -> str:
        """The compatibility level of ``subject`` (its own, else the global one)."""
        with self._lock:
            return self._levels.get(subject) or self._levels[None]

    def _config(self, method: str, subject: str | None, body: bytes) -> tuple[int, Any]:
        if method == "GET":
            if subject is not None and subject not in self._levels:
                return _error(404, 40408, f"Subject '{subject}' does not have subject-level "
                              "compatibility configured")
            return 200, {"compatibilityLevel": self.level(subject)}
        if method != "PUT":
            return _error(405, 405, "HTTP 405 Method Not Allowed")
        try:
            level = json.loads(body)["compatibility"]
        except (ValueError, KeyError, TypeError):
            level = None
        if level not in LEVELS:
            return _error(422, 42203, "Invalid compatibility level. Valid values are none, "
                          "backward, forward, full, backward_transitive, "
                          "forward_transitive, and full_transitive")
        self._levels[subject] = level
        return 200, {"compatibility": level}

    def _refused(self, subject: str, schema_text: str, schema_type: str,
                 references: list[dict[str, Any]], earlier: list[int] | None = None,
                 level: str | None = None) -> list[str]:
        """Why the subject's level refuses the schema (empty: it may be registered)."""
        _, canonical = self._canonical(schema_text, schema_type, references)
        versions = self._subjects.get(subject, []) if earlier is None else earlier
        if self._ids.get(canonical) in versions and earlier is None:
            return []  # already registered: its id, unchecked
        if schema_type == "PROTOBUF" and (references or any(
                self._references[i] for i in versions)):
            return []  # the fake does not check Protobuf schemas with references
        older = [self._schemas[i] for i in versions if self._types[i] == schema_type]
        try:
            return problems(level or self.level(subject), schema_type, schema_text, older)
        except ValueError as exc:
            raise FakeRegistryError(str(exc)) from exc

    def _test_compatibility(self, subject: str, version: list[str], body: bytes
                            ) -> tuple[int, Any]:
        """``POST /compatibility/subjects/{s}/versions[/{v}]``: against one version
        (always a one-to-one check, in the direction the level says) or all of them."""
        try:
            request = json.loads(body)
            schema_text, schema_type = request["schema"], request.get("schemaType") or "AVRO"
            references = request.get("references") or []
        except (ValueError, KeyError, TypeError) as exc:
            return _error(422, 42201, f"Invalid schema: {exc}")
        versions = self._subjects.get(subject)
        if versions is None:
            return _error(404, 40401, f"Subject '{subject}' not found.")
        level = self.level(subject)
        if version:
            wanted = len(versions) if version[0] == "latest" else \
                int(version[0]) if version[0].isdigit() else 0
            if not 0 < wanted <= len(versions):
                return _error(404, 40402, f"Version {version[0]} not found.")
            earlier = [versions[wanted - 1]]
            level = level.removesuffix("_TRANSITIVE")
        else:
            earlier = list(versions)
        try:
            refused = self._refused(subject, schema_text, schema_type, references, earlier,
                                    level)
        except FakeRegistryError as exc:
            return _error(422, 42201, f"Invalid schema: {exc}")
        return 200, {"is_compatible": not refused, "messages": refused}

    def _version(self, subject: str, version: int, serialized: bool = False
                 ) -> dict[str, Any]:
        schema_id = self._subjects[subject][version - 1]
        return {"subject": subject, "version": version, "id": schema_id,
                **self._answer(schema_id, serialized)}


def _error(status: int, error_code: int, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"error_code": error_code, "message": message}


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like a real registry
    timeout = 30  # an idle keep-alive connection does not hold its thread forever
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms ACK stalls
    server: _Server

    def do_GET(self) -> None:
        self.server.registry._handle(self, "GET")

    def do_POST(self) -> None:
        self.server.registry._handle(self, "POST")

    def do_PUT(self) -> None:
        self.server.registry._handle(self, "PUT")

    def do_DELETE(self) -> None:
        self.server.registry._handle(self, "DELETE")

    def send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._write(status, json.dumps(body).encode(), CONTENT_TYPE, headers)

    def send_text(self, status: int, text: str) -> None:
        self._write(status, text.encode(), "text/plain; charset=utf-8", None)

    def _write(
        self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("fake registry: %s", format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, registry: FakeRegistry) -> None:
        self.registry = registry
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # Runs in the connection's thread: the TLS handshake does not block accept().
        # wrap_socket detaches ``request``; the TLS socket it returns is closed here.
        context = self.registry._ssl_context
        connection = request if context is None else context.wrap_socket(request, server_side=True)
        with self._connections_lock:
            self._connections.add(connection)
        try:
            super().finish_request(connection, client_address)
        finally:
            with self._connections_lock:
                self._connections.discard(connection)
            if connection is not request:
                connection.close()

    def close_connections(self) -> None:
        """Shut down open (keep-alive or hung) connections so their threads end."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that drops the connection, a failed TLS handshake: not test failures.
        logger.debug("fake registry: error serving %s", client_address, exc_info=True)


@contextlib.asynccontextmanager
async def kstage_client(registry: FakeRegistry) -> AsyncIterator[Any]:
    """kstage's registry client on the fake, started: no retries, no backoff waits."""
    from actors.codecs.schema_registry import SchemaRegistryClient
    from settings import SchemaRegistrySettings

    async def no_sleep(_: float) -> None:
        return None

    settings = SchemaRegistrySettings(url=registry.url, max_retries=0)
    async with SchemaRegistryClient(settings, sleep=no_sleep) as client:
        yield client
