"""Traces that belong to their event, and spans masked like logs: ``kstage run`` on the
real broker, the real HTTP sink posting to a real local server that records each
request's headers, spans exported over OTLP/HTTP to a real receiver on loopback.

Twenty events from ten producers' traces, interleaved, are consumed as one batch: a
request made for one event must continue that event's own trace; a request of several
events belongs to the batch's write span, which links to every event."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from settings.secrets import MASK
from tests.http_server import HttpTestServer, RecordedRequest
from tests.integration.test_dead_letter_topic import produce_with_headers as send
from tests.integration.test_tracing import with_observability
from tests.kafkautil import read_jsonl, write_config
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan

pytestmark = pytest.mark.kafka

EVENTS = 20
TRACES = [f"{k + 1:02x}" * 16 for k in range(10)]  # ten producers' trace ids
PARENTS = [f"{k + 0xa1:02x}" * 8 for k in range(10)]  # their spans


def trace_of(i: int) -> int:
    """Event ``i``'s producer: neighbours never share a trace."""
    return i % len(TRACES)


async def produce_events(broker: str, topic: str) -> None:
    await send(broker, topic, [
        (f"k{i}".encode(), json.dumps({"i": i}).encode(),
         [("traceparent", f"00-{TRACES[trace_of(i)]}-{PARENTS[trace_of(i)]}-01".encode())])
        for i in range(EVENTS)])


async def run_traced(broker: str, tmp_path: Path, kstage: Any, fresh: Any, otlp: OtlpReceiver,
                     sink: dict[str, Any]) -> None:
    config = with_observability(write_config(
        tmp_path / "kstage.yml", broker, fresh.group,
        [{"topic": fresh.topic, "processor": "json_rows", "sink": sink}]),
        {"tracing": True, "endpoint": otlp.url})
    proc = kstage(config, "--drain")
    assert await proc.wait(90) == 0, proc.output()


def sent_span(request: RecordedRequest) -> tuple[str, str]:
    """(trace id, span id) of the ``traceparent`` a request carried."""
    version, trace_id, span_id, flags = request.headers["traceparent"].split("-")
    assert (version, flags) == ("00", "01"), request.headers
    return trace_id, span_id


def events_of(request: RecordedRequest) -> list[int]:
    body = request.json
    return [row["i"] for row in body] if isinstance(body, list) else [body["i"]]


def process_spans(otlp: OtlpReceiver) -> dict[int, ReceivedSpan]:
    """Each event's ``process`` span, by event (= offset)."""
    spans = {s.attributes["messaging.kafka.offset"]: s for s in otlp.named("process ")}
    assert sorted(spans) == list(range(EVENTS)), otlp.spans
    for i, span in spans.items():  # each continues its producer's trace
        assert (span.trace_id, span.parent_span_id) == (TRACES[trace_of(i)],
                                                        PARENTS[trace_of(i)])
    return spans


async def test_each_request_for_one_event_continues_that_events_trace(
        fresh: Any, broker: str, tmp_path: Path, kstage: Any) -> None:
    await produce_events(broker, fresh.topic)
    with OtlpReceiver() as otlp, HttpTestServer() as api:
        await run_traced(broker, tmp_path, kstage, fresh, otlp,
                         {"type": "http", "url": f"{api.url}/hook"})
        requests = list(api.requests)
    process = process_spans(otlp)
    posts = {s.span_id: s for s in otlp.named("POST")}
    writes = {s.span_id: s for s in otlp.named("write ")}
    assert len(requests) == EVENTS
    wrong = []
    for request in requests:
        [i] = events_of(request)
        trace_id, span_id = sent_span(request)
        post = posts[span_id]
        # a span of the event's own trace, the child of the event's process span
        if (trace_id, post.trace_id, post.parent_span_id) != (
                TRACES[trace_of(i)], TRACES[trace_of(i)], process[i].span_id):
            wrong.append((i, trace_id, post.parent_span_id))
    assert not wrong, f"{len(wrong)} of {EVENTS} requests not in their event's trace: {wrong}"
    for post in posts.values():  # each still tied to the write that sent it
        assert any(link[1] in writes for link in post.links), post


async def test_a_request_of_several_events_belongs_to_the_write_linked_to_each(
        fresh: Any, broker: str, tmp_path: Path, kstage: Any) -> None:
    await produce_events(broker, fresh.topic)
    with OtlpReceiver() as otlp, HttpTestServer() as api:
        await run_traced(broker, tmp_path, kstage, fresh, otlp,
                         {"type": "http", "url": f"{api.url}/hook", "batch": {"max_events": 8}})
        requests = list(api.requests)
    process = process_spans(otlp)
    posts = {s.span_id: s for s in otlp.named("POST")}
    writes = {s.span_id: s for s in otlp.named("write ")}
    assert sorted(i for r in requests for i in events_of(r)) == list(range(EVENTS))
    batched = [r for r in requests if len(events_of(r)) > 1]
    assert batched, [events_of(r) for r in requests]
    for request in requests:
        events = events_of(request)
        trace_id, span_id = sent_span(request)
        post = posts[span_id]
        contexts = {(TRACES[trace_of(i)], process[i].span_id) for i in events}
        if len(events) == 1:  # a request for one event: its own trace
            assert (trace_id, post.parent_span_id) == (TRACES[trace_of(events[0])],
                                                       process[events[0]].span_id)
            continue
        # the write span's context, the write linked to every event of the request
        write = writes[post.parent_span_id]
        assert trace_id == post.trace_id == write.trace_id
        assert contexts <= set(write.links), (contexts, write.links)
        # and the request's own span links to exactly its events
        assert set(post.links) == contexts, (events, post.links)
    linked = {link for w in writes.values() for link in w.links}
    assert {(TRACES[trace_of(i)], process[i].span_id) for i in range(EVENTS)} <= linked


SECRET = "tok-Pa55w0rd-of-the-backend"  # noqa: S105 - the secret to mask


def strings(span: ReceivedSpan) -> list[str]:
    """Every text a span carried to the collector."""
    values = [span.name, span.status_message, *map(str, span.attributes.values())]
    for name, attributes in span.events:
        values += [name, *map(str, attributes.values())]
    return values


async def test_an_exception_on_a_span_reaches_the_collector_masked(
        fresh: Any, broker: str, tmp_path: Path, kstage: Any) -> None:
    """A processor's error quotes its configured token (as a client library's error may
    quote its credentials): the spans carry the error with the token masked, as the
    dead-letter line does."""
    await send(broker, fresh.topic, [
        (None, b'{"i": 0}', [("traceparent", f"00-{TRACES[0]}-{PARENTS[0]}-01".encode())]),
        (None, b'{"i": 1, "fail": true}',
         [("traceparent", f"00-{TRACES[1]}-{PARENTS[1]}-01".encode())])])
    with OtlpReceiver() as otlp:
        config = with_observability(write_config(
            tmp_path / "kstage.yml", broker, fresh.group,
            [{"topic": fresh.topic, "processor": "test_leaky",
              "options": {"api_token": SECRET},
              "sink": {"type": "jsonl", "path": str(tmp_path / "o.jsonl")}}]),
            {"tracing": True, "endpoint": otlp.url})
        proc = kstage(config, "--drain")
        assert await proc.wait(90) == 0, proc.output()
    [dead] = read_jsonl(tmp_path / "dead.jsonl")
    assert "backend refused token" in dead["error"] and SECRET not in json.dumps(dead)
    [poison] = [s for s in otlp.named("process ") if s.trace_id == TRACES[1]]
    transform = next(s for s in otlp.spans
                     if s.name == "transform test_leaky" and s.parent_span_id == poison.span_id)
    recorded = [(s, attributes) for s in (poison, transform)
                for name, attributes in s.events if name == "exception"]
    assert len(recorded) >= 2, (poison.events, transform.events)
    for _, exception in recorded:
        # the error is there, its token masked in its message and its stack trace
        assert exception["exception.type"] == "PermissionError", exception
        assert f"backend refused token '{MASK}'" in exception["exception.message"], exception
        assert f"PermissionError: backend refused token '{MASK}'" in (
            exception["exception.stacktrace"]), exception
    assert transform.status_message == f"PermissionError: backend refused token '{MASK}'"
    [dead_letter] = [a for name, a in poison.events if name == "kstage.dead_letter"]
    assert MASK in dead_letter["exception.message"], dead_letter
    leaked = [(s.name, text) for s in otlp.spans for text in strings(s) if SECRET in text]
    assert not leaked, leaked
