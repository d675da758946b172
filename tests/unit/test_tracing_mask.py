"""The spans' last guard (actors/tracing_mask.py): the real SDK's spans, exported through
:class:`MaskingExporter` to the SDK's in-memory exporter, carry no secret; spans without
one are exported as they were made."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from actors.tracing_mask import MaskingExporter, masked
from settings.secrets import MASK, redact

SECRET = "s3cr3t-of-the-catalog"  # noqa: S105 - the secret to mask
URL = f"postgresql://kstage:{SECRET}@db:5432/lake"


def tracer_to(memory: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(
        MaskingExporter(memory, lambda text: redact(text, [SECRET]))))
    return provider


def test_an_exception_leaving_a_span_is_exported_masked() -> None:
    memory = InMemorySpanExporter()
    tracer = tracer_to(memory).get_tracer("test")
    with pytest.raises(ConnectionError), tracer.start_as_current_span(
            "write jdbc", attributes={"db.url": URL, "tags": ("plain", URL), "rows": 3}):
        raise ConnectionError(f"cannot reach {URL}")  # the SDK records it on the span
    [span] = memory.get_finished_spans()
    [event] = span.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "ConnectionError"
    assert event.attributes["exception.message"] == (
        f"cannot reach postgresql://kstage:{MASK}@db:5432/lake")
    assert f"ConnectionError: cannot reach postgresql://kstage:{MASK}@db" in str(
        event.attributes["exception.stacktrace"])
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description is not None and MASK in span.status.description
    assert span.attributes == {"db.url": f"postgresql://kstage:{MASK}@db:5432/lake",
                               "tags": ("plain", f"postgresql://kstage:{MASK}@db:5432/lake"),
                               "rows": 3}
    assert SECRET not in repr(span.to_json())


def test_a_span_without_a_secret_is_exported_as_it_was_made() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("test").start_as_current_span("process orders") as made:
        made.add_event("kstage.dead_letter", {"exception.message": "not JSON"})
        made.set_attribute("messaging.kafka.message.key", "k0")
    [span] = memory.get_finished_spans()
    assert masked(span, lambda text: redact(text, [SECRET])) is span
    assert masked(span, lambda text: redact(text, ["JSON"])) is not span
