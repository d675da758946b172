"""OpenTelemetry tracing end to end: ``kstage run`` on the real broker exporting OTLP/HTTP
to a real receiver on loopback (tests/otlp_receiver.py), an HTTP sink on a real local
server; and ``kstage run`` with tracing off does not import opentelemetry."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.http_server import HttpTestServer
from tests.integration.test_dead_letter_topic import produce_with_headers as send
from tests.integration.test_dead_letter_topic import read_all
from tests.kafkautil import create_topic, read_jsonl, unique, write_config
from tests.otlp_receiver import OtlpGrpcReceiver, OtlpReceiver

pytestmark = pytest.mark.kafka

PRODUCER_TRACES = ("4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c")
PRODUCER_SPANS = ("00f067aa0ba902b7", "b7ad6b7169203331")


def traceparent(n: int) -> bytes:
    return f"00-{PRODUCER_TRACES[n]}-{PRODUCER_SPANS[n]}-01".encode()


def with_observability(path: Path, observability: dict[str, Any] | None) -> Path:
    cfg = yaml.safe_load(path.read_text())
    if observability is not None:
        cfg["observability"] = observability
    path.write_text(yaml.safe_dump(cfg))
    return path


def traceparent_of(headers: Any) -> str:
    return str(headers["traceparent"])


async def test_spans_follow_the_producers_trace_to_the_api_and_the_dead_letter(
        broker: str, tmp_path: Path, kstage: Any) -> None:
    topic, group, dlq = unique("trace"), unique("g-trace"), unique("trace-dlq")
    await create_topic(broker, topic)
    await create_topic(broker, dlq)
    await send(broker, topic, [
        (b"k0", b'{"i": 0}', [("traceparent", traceparent(0))]),
        (None, b'{"i": 1}', []),
        (b"k2", b"\xffnot json", [("traceparent", traceparent(1))]),
    ])
    with OtlpReceiver() as otlp, HttpTestServer() as api:
        config = with_observability(write_config(
            tmp_path / "kstage.yml", broker, group,
            [{"topic": topic, "processor": "json_rows",
              "sink": {"type": "http", "url": f"{api.url}/hook?token=secret"}}],
            failure={"dead_letter_topic": dlq}),
            {"tracing": True, "endpoint": otlp.url, "service_name": "kstage-test"})
        proc = kstage(config, "--drain")
        assert await proc.wait(90) == 0, proc.output()
        # the spans were flushed at exit: all are there once the process ended
        process = {s.attributes["messaging.kafka.offset"]: s for s in otlp.named("process ")}
        requests = list(api.requests)
    assert sorted(process) == [0, 1, 2], otlp.spans
    for offset, span in process.items():
        assert span.name == f"process {topic}" and span.kind == "CONSUMER"
        assert span.service == "kstage-test"
        assert span.attributes["messaging.system"] == "kafka"
        assert span.attributes["messaging.operation.type"] == "process"
        assert span.attributes["messaging.destination.name"] == topic
        assert span.attributes["messaging.consumer.group.name"] == group
        assert span.attributes["messaging.destination.partition.id"] == "0"
        assert span.attributes["messaging.kafka.offset"] == offset
    # parented to the producer's span when the record carried a traceparent
    assert (process[0].trace_id, process[0].parent_span_id) == (PRODUCER_TRACES[0],
                                                                PRODUCER_SPANS[0])
    assert (process[2].trace_id, process[2].parent_span_id) == (PRODUCER_TRACES[1],
                                                                PRODUCER_SPANS[1])
    assert process[1].parent_span_id == "" and process[1].trace_id not in PRODUCER_TRACES
    assert process[0].attributes["messaging.kafka.message.key"] == "k0"
    assert "messaging.kafka.message.key" not in process[1].attributes
    # decode and transform children
    children = {(s.name, s.parent_span_id) for s in otlp.spans}
    for span in process.values():
        assert ("decode", span.span_id) in children
    assert ("transform json_rows", process[0].span_id) in children
    # the poison message: a dead-letter event with the exception recorded
    names = [name for name, _ in process[2].events]
    assert "kstage.dead_letter" in names and "exception" in names, process[2].events
    assert not process[0].events
    # the sink write and the HTTP requests: of the producer's trace, traceparent passed on
    writes = otlp.named("write ")
    assert writes and all(w.attributes["kstage.sink.type"] == "http" for w in writes)
    first = next(w for w in writes if (PRODUCER_TRACES[0], process[0].span_id) in w.links)
    assert first.trace_id == PRODUCER_TRACES[0] and first.parent_span_id == process[0].span_id
    posts = {s.span_id: s for s in otlp.named("POST")}
    assert posts and all(p.kind == "CLIENT" for p in posts.values())
    assert all(p.attributes["url.full"] == f"{api.url}/hook" for p in posts.values())
    assert all(p.attributes["http.response.status_code"] == 200 for p in posts.values())
    by_event = {r.json["i"]: r for r in requests}
    version, trace_id, span_id, flags = traceparent_of(by_event[0].headers).split("-")
    assert (version, trace_id, flags) == ("00", PRODUCER_TRACES[0], "01")
    assert span_id in posts and posts[span_id].trace_id == PRODUCER_TRACES[0]
    assert all("traceparent" in r.headers for r in requests)
    # the dead-letter record carries the poison message's span as its traceparent
    [dead] = await read_all(broker, dlq, 1)
    headers = dict(dead.headers)
    assert headers["traceparent"].decode() == f"00-{PRODUCER_TRACES[1]}-{process[2].span_id}-01"


async def test_tracing_on_from_the_environment_over_http(fresh, broker: str, tmp_path: Path,
                                                        kstage: Any) -> None:
    topic, group = fresh.topic, fresh.group
    await send(broker, topic, [(None, b'{"i": 0}', [])])
    with OtlpReceiver() as otlp:
        config = write_config(tmp_path / "kstage.yml", broker, group,
                              [{"topic": topic, "processor": "json_rows",
                                "sink": {"type": "jsonl", "path": str(tmp_path / "o.jsonl")}}])
        proc = kstage(config, "--drain", env={"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
                                              "OTEL_SERVICE_NAME": "from-env"})
        assert await proc.wait(60) == 0, proc.output()
        [span] = otlp.named("process ")
    assert span.service == "from-env"
    [write] = otlp.named("write ")
    assert write.attributes["kstage.sink.type"] == "jsonl"
    assert write.parent_span_id == span.span_id and write.trace_id == span.trace_id
    assert len(read_jsonl(tmp_path / "o.jsonl")) == 1


async def test_tracing_over_grpc(fresh, broker: str, tmp_path: Path, kstage: Any) -> None:
    topic, group = fresh.topic, fresh.group
    await send(broker, topic, [(b"k", b'{"i": 0}', [("traceparent", traceparent(0))])])
    with OtlpGrpcReceiver() as otlp:
        config = with_observability(write_config(
            tmp_path / "kstage.yml", broker, group,
            [{"topic": topic, "processor": "json_rows",
              "sink": {"type": "jsonl", "path": str(tmp_path / "o.jsonl")}}]),
            {"tracing": True, "endpoint": otlp.url, "protocol": "grpc"})
        proc = kstage(config, "--drain")
        assert await proc.wait(60) == 0, proc.output()
        [span] = otlp.named("process ")
    assert (span.trace_id, span.parent_span_id) == (PRODUCER_TRACES[0], PRODUCER_SPANS[0])
    assert span.attributes["messaging.kafka.message.key"] == "k"
    assert span.service == group  # the configuration's name


NOT_IMPORTED = """
import asyncio, sys
from service.lifecycle import serve
from settings import load_settings
code = asyncio.run(serve(load_settings(sys.argv[1]), sys.argv[2], drain=True))
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
print("OTEL-MODULES", loaded)
sys.exit(code)
"""


async def test_tracing_off_kstage_run_imports_no_opentelemetry(fresh, broker: str,
                                                              tmp_path: Path) -> None:
    topic, group = fresh.topic, fresh.group
    await send(broker, topic, [(None, json.dumps({"i": i}).encode(), []) for i in range(3)])
    config = write_config(tmp_path / "kstage.yml", broker, group,
                          [{"topic": topic, "processor": "json_rows",
                            "sink": {"type": "jsonl", "path": str(tmp_path / "o.jsonl")}}])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", NOT_IMPORTED, str(config), broker,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    assert "OTEL-MODULES []" in text, text
    assert len(read_jsonl(tmp_path / "o.jsonl")) == 3
