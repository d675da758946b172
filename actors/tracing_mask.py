"""The last guard of the spans: the process's secrets masked from what they carry.

Log lines and dead-letter lines go through :func:`settings.secrets.redact_known` whatever
wrote them; spans go to the collector through :class:`MaskingExporter`, which masks the
same values the same way: exception messages and stack traces (the ``exception`` events
that ``record_exception`` adds, ours and the SDK's own when an exception leaves a span),
status descriptions, attributes and event attributes, span names.

A span that carries no secret is exported as it was made; one that does is exported as a
copy with its texts masked (a copy made without the SDK's counts of dropped attributes,
events and links: the few spans that carry a secret lose those counts).

Imported only with tracing on (it needs the OpenTelemetry SDK).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Status

from settings.secrets import redact_known

Redact = Callable[[str], str]


class MaskingExporter(SpanExporter):
    """``exporter``, its spans masked with ``redact`` (the process's secrets by default)."""

    def __init__(self, exporter: SpanExporter, redact: Redact = redact_known) -> None:
        self.exporter = exporter
        self._redact = redact

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.exporter.export([masked(span, self._redact) for span in spans])

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def masked(span: ReadableSpan, redact: Redact) -> ReadableSpan:
    """``span``, or a copy of it whose texts ``redact`` changed."""
    name = redact(span.name)
    attributes = _attributes(span.attributes, redact)
    events = [(event, _event(event, redact)) for event in span.events]
    status = span.status
    if status.description is not None:
        description = redact(status.description)
        if description != status.description:
            status = Status(status.status_code, description)
    if (name == span.name and attributes is None and status is span.status
            and all(new is None for _, new in events)):
        return span
    return ReadableSpan(
        name=name, context=span.context, parent=span.parent, resource=span.resource,
        attributes=span.attributes if attributes is None else attributes,
        events=[old if new is None else new for old, new in events], links=span.links,
        kind=span.kind, status=status, start_time=span.start_time, end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope)


def _event(event: Event, redact: Redact) -> Event | None:
    """A masked copy of ``event``; None when ``redact`` changes none of its texts."""
    attributes = _attributes(event.attributes, redact)
    name = redact(event.name)
    if attributes is None and name == event.name:
        return None
    return Event(name, event.attributes if attributes is None else attributes,
                 event.timestamp)


def _attributes(attributes: Mapping[str, Any] | None, redact: Redact
                ) -> dict[str, Any] | None:
    """A masked copy of ``attributes``; None when ``redact`` changes none of its texts."""
    changed: dict[str, Any] = {}
    for key, value in (attributes or {}).items():
        if isinstance(value, str):
            new: Any = redact(value)
        elif isinstance(value, Sequence) and any(isinstance(v, str) for v in value):
            new = tuple(redact(v) if isinstance(v, str) else v for v in value)
        else:
            continue
        if new != value:
            changed[key] = new
    if not changed or attributes is None:
        return None
    return {**attributes, **changed}


__all__ = ["MaskingExporter", "masked"]
