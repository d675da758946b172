"""OpenTelemetry tracing of the record walk, the sink writes and the dead letters.

Off by default; on with ``observability.tracing: true`` or the standard variables
(:func:`enabled`). With tracing off nothing here imports opentelemetry: the process
lifecycle asks :func:`enabled` and only then calls :meth:`Tracing.start`; the pipeline,
the sink loop and the sinks hold ``None`` and check it once per batch (or per write).

The spans follow the OpenTelemetry messaging semantic conventions for Kafka:

* ``process <topic>`` (kind CONSUMER), one per message, parented to the producer's
  context when the record has a W3C ``traceparent`` header; attributes
  ``messaging.system``, ``messaging.operation.type``/``.name``,
  ``messaging.destination.name``, ``messaging.consumer.group.name``,
  ``messaging.destination.partition.id``, ``messaging.kafka.offset`` and
  ``messaging.kafka.message.key`` (when the key is set and UTF-8);
  children ``decode`` and ``transform <processor>``; a dead letter is an event
  (``kstage.dead_letter``) on it, with the exception recorded;
* ``write <sink>`` (kind INTERNAL), one per sink write of a batch, the child of the
  batch's first message whose producer sent a ``traceparent`` (else of its first
  message), linked to every message span of the batch (up to :data:`MAX_LINKS`);
* an HTTP sink's requests, ``<METHOD>`` spans (kind CLIENT) whose ``traceparent`` the
  request carries (:meth:`Tracing.http`): a request made for one message continues that
  message's trace (the child of its ``process`` span, linked to the write span), a
  request of several messages is the child of the write span, linked to each of them.
  Otherwise the write's first traced message would lend its trace to every request of
  the batch, and a receiver would file the events under another event's trace.

Spans leave the process through :class:`~actors.tracing_mask.MaskingExporter`: the
process's secrets are masked from what they carry (exception messages and stack traces,
status descriptions, attributes) as from log and dead-letter lines.

One span per message, not per batch with links: a consumer's trace then reads as the
producer's trace continued (the parent is the producer's span), which is what an
operator follows; the per-batch write span keeps the sinks' cost at one span per write.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from settings.models import ObservabilitySettings

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, SpanContext, Tracer

    from actors.worker.records import RecordLike

logger = logging.getLogger(__name__)

MAX_LINKS = 128
"""Links of one write span to its messages' spans (the rest are counted, not linked)."""

TRACEPARENT = "traceparent"

_WRITING: ContextVar[tuple[BatchTrace, Span] | None] = ContextVar("kstage_writing",
                                                                  default=None)
"""The sink write in progress in this task (:meth:`BatchTrace.write`) and its span."""

_ENV_ON = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def enabled(settings: ObservabilitySettings, environ: Mapping[str, str] | None = None) -> bool:
    """Whether tracing is on: ``observability.tracing``, or ``OTEL_TRACES_EXPORTER``
    naming ``otlp``, or ``OTEL_EXPORTER_OTLP_ENDPOINT``/``..._TRACES_ENDPOINT`` set;
    ``OTEL_SDK_DISABLED=true`` turns it off whatever the rest says."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",")}
    return (settings.tracing or "otlp" in exporters
            or any(env.get(name, "").strip() for name in _ENV_ON))


def missing(settings: ObservabilitySettings,
            environ: Mapping[str, str] | None = None) -> list[str]:
    """The packages tracing with ``settings`` needs that are not installed (the SDK, the
    exporter of the protocol); found without importing them."""
    env = os.environ if environ is None else environ
    transport = "grpc" if _protocol(settings, env) == "grpc" else "http"
    needed = {"opentelemetry.sdk": "opentelemetry-sdk",
              f"opentelemetry.exporter.otlp.proto.{transport}":
                  f"opentelemetry-exporter-otlp-proto-{transport}"}
    absent = []
    for module, package in needed.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package is missing
            found = False
        if not found:
            absent.append(package)
    return absent


def _protocol(settings: ObservabilitySettings, env: Mapping[str, str]) -> str:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        if env.get(name, "").strip():
            return env[name].strip()
    return settings.protocol


def _exporter(settings: ObservabilitySettings, env: Mapping[str, str]) -> Any:
    protocol = _protocol(settings, env)
    endpoint = settings.endpoint
    if protocol == "grpc":
        # Imported here: only a process tracing over gRPC loads grpcio.
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )
        if endpoint is None:
            return GrpcExporter()
        return GrpcExporter(endpoint=endpoint, insecure=endpoint.startswith("http://"))
    if protocol != "http/protobuf":
        raise ValueError(f"OTLP protocol {protocol!r}: kstage exports http/protobuf or grpc")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )
    if endpoint is None:
        return HttpExporter()
    base, sep, path = endpoint.partition("://")[2].partition("/")
    if not path:
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return HttpExporter(endpoint=endpoint)


class Tracing:
    """The process's tracer: a provider with a batch span processor and the OTLP
    exporter. Made by :meth:`start`, flushed and stopped by :meth:`shutdown`."""

    def __init__(self, provider: TracerProvider, service_name: str) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )

        self.provider = provider
        self.service_name = service_name
        self.tracer: Tracer = provider.get_tracer("kstage")
        self._propagator = TraceContextTextMapPropagator()
        self._trace = trace
        self._context = context
        self._consumer = trace.SpanKind.CONSUMER
        self._client = trace.SpanKind.CLIENT
        self._error = trace.StatusCode.ERROR

    @classmethod
    def start(cls, settings: ObservabilitySettings, name: str,
              environ: Mapping[str, str] | None = None) -> Tracing:
        """The tracer of ``settings`` (``name``: the configuration's, the default
        ``service.name``)."""
        # Imported here: a process with tracing off never loads opentelemetry.
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        env = os.environ if environ is None else environ
        service = settings.service_name or env.get("OTEL_SERVICE_NAME", "").strip() or name
        provider = TracerProvider(
            resource=Resource.create({"service.name": service}),
            sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)))
        from actors.tracing_mask import MaskingExporter

        provider.add_span_processor(
            BatchSpanProcessor(MaskingExporter(_exporter(settings, env))))
        logger.info("tracing: OTLP spans of service %r (%s)", service,
                    _protocol(settings, env))
        return cls(provider, service)

    def shutdown(self) -> None:
        """Export what is buffered, then stop the exporter."""
        self.provider.shutdown()

    # -- messages --------------------------------------------------------------------

    def producer_context(self, headers: Sequence[tuple[str, bytes]] | None) -> Context | None:
        """The producer's context of a record with a ``traceparent`` header, else None."""
        for name, value in headers or ():
            if name == TRACEPARENT and value:
                carrier = {TRACEPARENT: value.decode("latin-1")}
                for other, more in headers or ():
                    if other == "tracestate" and more:
                        carrier["tracestate"] = more.decode("latin-1")
                ctx = self._propagator.extract(carrier)
                if self._trace.get_current_span(ctx).get_span_context().is_valid:
                    return ctx
                return None
        return None

    def begin(self, rec: RecordLike, group_id: str) -> tuple[Span, Context, object, bool]:
        """Start the ``process <topic>`` span of ``rec`` and make it current: (the span,
        its context, the token that :meth:`end` detaches, whether the producer sent a
        context)."""
        parent = self.producer_context(rec.headers)  # type: ignore[arg-type]
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": rec.topic,
            "messaging.consumer.group.name": group_id,
            "messaging.destination.partition.id": str(rec.partition),
            "messaging.kafka.offset": rec.offset,
        }
        key = rec.key
        if key is not None:
            try:
                attributes["messaging.kafka.message.key"] = (
                    key.decode() if isinstance(key, bytes) else str(key))
            except UnicodeDecodeError:
                pass  # a binary key is not an attribute
        span = self.tracer.start_span(f"process {rec.topic}", context=parent,
                                      kind=self._consumer, attributes=attributes)
        ctx = self._trace.set_span_in_context(span)
        return span, ctx, self._context.attach(ctx), parent is not None

    def end(self, span: Span, token: object) -> None:
        self._context.detach(token)  # type: ignore[arg-type]
        span.end()

    @contextlib.contextmanager
    def walk(self, group_id: str, processor: str) -> Iterator[WalkTrace]:
        """The spans of one walk of a batch; the span a walk left open is ended."""
        walk = WalkTrace(self, group_id, processor)
        try:
            yield walk
        finally:
            walk.end()

    @contextlib.contextmanager
    def step(self, name: str, parent: Context) -> Iterator[Span]:
        """A child span of ``parent``'s (decode, transform), not made current (cheaper);
        an exception is recorded on it and sets its status."""
        span = self.tracer.start_span(name, context=parent)
        try:
            yield span
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(self._error, f"{type(exc).__name__}: {exc}")
            raise
        finally:
            span.end()

    def dead_letter(self, exc: BaseException, attempts: int) -> None:
        """A dead letter: an event on the current (message or write) span."""
        span = self._trace.get_current_span()
        span.record_exception(exc)
        span.add_event("kstage.dead_letter", {
            "exception.type": type(exc).__qualname__, "exception.message": str(exc),
            "kstage.attempts": attempts})

    # -- propagation -----------------------------------------------------------------

    def inject(self, headers: dict[str, str]) -> None:
        """Add the current span's ``traceparent`` (and ``tracestate``) to ``headers``."""
        self._propagator.inject(headers)

    def record_headers(self, headers: list[tuple[str, bytes | None]]
                       ) -> list[tuple[str, bytes | None]]:
        """``headers`` of a record with the current span's ``traceparent`` instead of
        the one they carried."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier)
        if not carrier:
            return headers
        kept = [(k, v) for k, v in headers if k not in carrier]
        return kept + [(k, v.encode()) for k, v in carrier.items()]

    # -- sink writes -----------------------------------------------------------------

    def batch(self, spans: Sequence[tuple[int, SpanContext, bool]]) -> BatchTrace | None:
        """What a batch's sink writes are traced with: its messages' offsets and span
        contexts, each with whether its producer sent a context."""
        if not spans:
            return None
        return BatchTrace(self, spans)

    @contextlib.contextmanager
    def http(self, method: str, url: str, offsets: Sequence[int] = ()) -> Iterator[Span]:
        """The current span of one HTTP request (the URL without its query) that sends
        the rows of messages at ``offsets`` (of the partition being written).

        In a sink write (:meth:`BatchTrace.write`), a request for one message is the
        child of that message's span, linked to the write span; a request for several is
        the child of the write span, linked to each message's span. Outside a write it
        is the child of the current span."""
        from opentelemetry.trace import Link, NonRecordingSpan

        shown = url.split("?", 1)[0].split("#", 1)[0]
        parent: Context | None = None
        links: list[Link] = []
        writing = _WRITING.get()
        if writing is not None:
            batch, write = writing
            contexts = batch.contexts(offsets)
            if len(contexts) == 1 and len(set(offsets)) == 1:
                parent = self._trace.set_span_in_context(NonRecordingSpan(contexts[0]))
                links = [Link(write.get_span_context())]
            else:
                links = [Link(ctx) for ctx in contexts[:MAX_LINKS]]
        with self.tracer.start_as_current_span(
                method, context=parent, kind=self._client, links=links,
                attributes={"http.request.method": method, "url.full": shown}) as span:
            yield span


class WalkTrace:
    """One walk's message spans: the open one (current) and those not yet shipped."""

    __slots__ = ("group_id", "open", "processor", "spans", "tracing")

    def __init__(self, tracing: Tracing, group_id: str, processor: str) -> None:
        self.tracing = tracing
        self.group_id = group_id
        self.processor = processor
        self.open: tuple[Span, Context, object] | None = None
        self.spans: list[tuple[int, SpanContext, bool]] = []

    def begin(self, rec: RecordLike) -> None:
        """Open the span of ``rec`` (the walk's record at hand)."""
        span, ctx, token, remote = self.tracing.begin(rec, self.group_id)
        self.open = (span, ctx, token)
        self.spans.append((rec.offset, span.get_span_context(), remote))

    def end(self) -> None:
        """End the open span (the walk is done with its record)."""
        if self.open is not None:
            (span, _, token), self.open = self.open, None
            self.tracing.end(span, token)

    def shipped(self, *, but_last: bool = False) -> BatchTrace | None:
        """The trace of the messages shipped now (``but_last``: all but the one at hand)."""
        spans, self.spans = ((self.spans[:-1], self.spans[-1:]) if but_last
                             else (self.spans, []))
        return self.tracing.batch(spans)

    async def transform(self, pipeline: Any, rec: RecordLike) -> tuple[Sequence[Any], bool]:
        """``pipeline``'s transform of ``rec`` in ``decode`` and ``transform <processor>``
        spans (a :class:`~actors.worker.pipeline.RecordPipeline`)."""
        assert self.open is not None  # noqa: S101 - begin() came first
        parent = self.open[1]
        with self.tracing.step("decode", parent):
            msg = pipeline.message(rec)
        with self.tracing.step(f"transform {self.processor}", parent):
            return await pipeline.transform_message(msg)  # type: ignore[no-any-return]


class BatchTrace:
    """A batch's messages' span contexts, for its sinks' ``write <sink>`` spans and
    the requests a write makes for some of its messages."""

    __slots__ = ("_by_offset", "parent", "spans", "tracing")

    def __init__(self, tracing: Tracing,
                 spans: Sequence[tuple[int, SpanContext, bool]]) -> None:
        self.tracing = tracing
        self.spans = spans
        self.parent = next((ctx for _, ctx, remote in spans if remote), spans[0][1])
        self._by_offset: dict[int, SpanContext] | None = None

    def contexts(self, offsets: Sequence[int]) -> list[SpanContext]:
        """The span contexts of the messages at ``offsets`` (once each, in order; an
        offset not of this batch has none)."""
        if self._by_offset is None:
            self._by_offset = {offset: ctx for offset, ctx, _ in self.spans}
        found = (self._by_offset.get(offset) for offset in dict.fromkeys(offsets))
        return [ctx for ctx in found if ctx is not None]

    @contextlib.contextmanager
    def write(self, sink: str, sink_type: str, rows: int, partition: int) -> Iterator[Span]:
        """The current span of one sink write of the batch."""
        from opentelemetry.trace import Link, NonRecordingSpan, set_span_in_context

        parent = set_span_in_context(NonRecordingSpan(self.parent))
        links = [Link(ctx) for _, ctx, _ in self.spans[:MAX_LINKS]]
        with self.tracing.tracer.start_as_current_span(
                f"write {sink}", context=parent, links=links, attributes={
                    "kstage.sink.name": sink, "kstage.sink.type": sink_type,
                    "kstage.rows": rows, "kstage.messages": len(self.spans),
                    "messaging.destination.partition.id": str(partition)}) as span:
            token = _WRITING.set((self, span))
            try:
                yield span
            finally:
                _WRITING.reset(token)


__all__ = ["MAX_LINKS", "TRACEPARENT", "BatchTrace", "Tracing", "WalkTrace", "enabled",
           "missing"]
