"""Real OTLP trace receivers on loopback: over HTTP (:class:`OtlpReceiver`: ``POST
/v1/traces``, protobuf, gzip or not) and gRPC (:class:`OtlpGrpcReceiver`: the
``TraceService/Export`` call); each decodes the ``ExportTraceServiceRequest`` with
opentelemetry-proto and keeps the spans as plain :class:`ReceivedSpan` values."""

from __future__ import annotations

import gzip
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (
    TraceServiceServicer,
    add_TraceServiceServicer_to_server,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER",
         5: "CONSUMER"}


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return None if kind is None else getattr(v, kind)


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs if isinstance(kv, KeyValue)}


@dataclass
class ReceivedSpan:
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    links: list[tuple[str, str]]
    service: str
    status: int = 0
    status_message: str = ""
    resource: dict[str, Any] = field(default_factory=dict)


class OtlpReceiver:
    """``with OtlpReceiver() as otlp:`` ... ``otlp.url`` (the base, http://127.0.0.1:PORT),
    ``otlp.spans``; ``wait_for(predicate)``."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._add(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _add(self, request: ExportTraceServiceRequest) -> None:
        got: list[ReceivedSpan] = []
        for rs in request.resource_spans:
            resource = _attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(ReceivedSpan(
                        name=s.name, kind=KINDS.get(s.kind, str(s.kind)),
                        trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        attributes=_attrs(s.attributes),
                        events=[(e.name, _attrs(e.attributes)) for e in s.events],
                        links=[(lk.trace_id.hex(), lk.span_id.hex()) for lk in s.links],
                        service=str(resource.get("service.name", "")),
                        status=s.status.code, status_message=s.status.message,
                        resource=resource))
        with self._lock:
            self.requests += 1
            self.spans.extend(got)

    def named(self, prefix: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.name.startswith(prefix)]

    def wait_for(self, count: int, prefix: str = "", timeout: float = 30) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout
        while len(self.named(prefix)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.named(prefix))} of {count} spans "
                                     f"{prefix!r} within {timeout}s: {self.spans}")
            time.sleep(0.05)
        return self.named(prefix)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class OtlpGrpcReceiver(OtlpReceiver):
    """The same receiver over gRPC: ``otlp.url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self) -> None:
        super().__init__()  # its HTTP server stays unstarted
        import grpc  # the gRPC exporter's dependency

        receiver = self

        class Service(TraceServiceServicer):
            def Export(self, request: ExportTraceServiceRequest,
                       context: Any) -> ExportTraceServiceResponse:
                receiver._add(request)
                return ExportTraceServiceResponse()

        self._grpc = grpc.server(ThreadPoolExecutor(2))
        add_TraceServiceServicer_to_server(Service(), self._grpc)
        self._port = self._grpc.add_insecure_port("127.0.0.1:0")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def __enter__(self) -> OtlpGrpcReceiver:
        self._grpc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._grpc.stop(None)
        self._server.server_close()


__all__ = ["OtlpGrpcReceiver", "OtlpReceiver", "ReceivedSpan"]
