"""Avro over a schema registry, end to end on the real broker with the fake registry.

Every sample event of every built-in processor (the unit tests' samples, built from the
real schemas) is produced in the wire format; the rows that land must equal what the
processor's pure ``transform`` returns for the same event.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema
from fastavro import schemaless_writer as write

from actors.codecs.avro import MAGIC
from actors.master import Master
from actors.sinks.files import _default
from processors import COORDINATE_COLUMNS, SCHEMA_DIR, Message, Processor
from settings import load_settings
from tests.fake_registry import FakeRegistry
from tests.kafkautil import committed, create_topic, produce, read_jsonl, unique, write_config
from tests.unit import test_processors_datahub as dh
from tests.unit import test_processors_wherehows as wh

pytestmark = pytest.mark.kafka

SAMPLES: dict[type[Processor], list[Any]] = {**wh.SAMPLES, **dh.SAMPLES}


def schema_path(proc: type[Processor], message: Message) -> str:
    value = message.value
    if "metastoreTableAuditContent" in value:
        return wh.TABLE_SCHEMA
    if "metastorePartitionAuditContent" in value:
        return wh.PARTITION_SCHEMA
    if "payload" in value:
        return dh.PLATFORM_EVENT
    if "entityType" in value:
        return dh.MCL
    assert proc.reader_schema is not None
    return proc.reader_schema


def wire(schema_id: int | str, body: bytes, id_type: str = "int") -> bytes:
    if id_type == "uuid":
        return bytes([MAGIC]) + bytes.fromhex(str(schema_id)) + body
    return bytes([MAGIC]) + int(schema_id).to_bytes(4, "big") + body


def expected_rows(proc: type[Processor], messages: list[Message]) -> list[dict[str, Any]]:
    processor = proc({})
    rows = [row for m in messages for row in processor.transform(m)]  # type: ignore[union-attr]
    return [json.loads(json.dumps(strip(r), default=_default)) for r in rows]


def strip(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in COORDINATE_COLUMNS}


def registry_yaml(url: str, id_type: str = "int", **extra: Any) -> str:
    lines = [f"schema_registry:\n  url: {url}\n  id_type: {id_type}\n"]
    lines += [f"  {k}: {v}\n" for k, v in extra.items()]
    return "".join(lines)


async def drain(broker: str, cfg: Path, extra_yaml: str, timeout: float = 90) -> None:
    cfg.write_text(cfg.read_text() + extra_yaml)
    await asyncio.wait_for(Master(load_settings(cfg), broker, drain=True).run(), timeout)


async def test_every_builtin_event_type_lands_as_its_rows(broker, tmp_path):
    topics: list[dict[str, Any]] = []
    plan: list[tuple[type[Processor], str, list[Message]]] = []
    with FakeRegistry() as registry:
        for proc, builders in SAMPLES.items():
            messages = [build() for build in builders]
            topic = unique(proc.name)
            await create_topic(broker, topic)
            values = []
            for m in messages:
                path = schema_path(proc, m)
                sid = registry.register(f"{topic}-value", (SCHEMA_DIR / path).read_text())
                values.append(wire(sid, m.raw or b""))
            await produce(broker, topic, values)
            topics.append({"topic": topic, "processor": proc.name, "format": "avro",
                           "sink": {"type": "jsonl", "path": str(tmp_path / f"{topic}.jsonl")}})
            plan.append((proc, topic, messages))
        group = unique("g-builtins")
        cfg = write_config(tmp_path / "kstage.yml", broker, group, topics)
        await drain(broker, cfg, registry_yaml(registry.url))
    assert not (tmp_path / "dead.jsonl").exists(), (tmp_path / "dead.jsonl").read_text()
    for proc, topic, messages in plan:
        rows = read_jsonl(tmp_path / f"{topic}.jsonl")
        assert [strip(r) for r in rows] == expected_rows(proc, messages), proc.name
        assert all(r["_topic"] == topic and r["_partition"] == 0 for r in rows)
        assert {r["_offset"] for r in rows} <= set(range(len(messages)))
        assert (await committed(broker, group, topic, 1))[0] == len(messages)


async def test_wherehows_16_byte_ids_and_an_evolved_writer_schema(broker, tmp_path):
    proc = wh.GobblinCompactionProcessor
    messages = [wh.gobblin(proc, "compaction.tracking.events", "CompactionCompleted",
                           {**wh.COMPACTION_COMPLETED, "recordCount": str(n)}) for n in (1, 2)]
    original = json.loads((SCHEMA_DIR / "wherehows/GobblinTrackingEvent.avsc").read_text())
    evolved = {**original, "fields": [*original["fields"], {
        "name": "producer", "type": "string", "default": "gobblin"}]}
    def body(schema: dict[str, Any], m: Message) -> bytes:
        out = io.BytesIO()
        record = dict(m.value)
        if any(f["name"] == "producer" for f in schema["fields"]):
            record["producer"] = "gobblin-0.14"
        write(out, parse_schema(schema), record)
        return out.getvalue()

    uuid_topic, evolved_topic = unique("wh-uuid"), unique("evolved")
    with FakeRegistry() as registry:
        hex_id = "0123456789abcdef0123456789abcdef"
        registry.add_uuid(hex_id, json.dumps(evolved))
        await create_topic(broker, uuid_topic)
        await produce(broker, uuid_topic, [wire(hex_id, body(evolved, m), "uuid")
                                           for m in messages])
        cfg = write_config(tmp_path / "uuid.yml", broker, unique("g-uuid"), [
            {"topic": uuid_topic, "processor": proc.name, "format": "avro",
             "reader_schema": str(SCHEMA_DIR / "wherehows/GobblinTrackingEvent.avsc"),
             "sink": {"type": "jsonl", "path": str(tmp_path / "uuid.jsonl")}}])
        await drain(broker, cfg, registry_yaml(registry.url, "uuid"))
        assert registry.count("GET", f"/schemas/id={hex_id}") == 1

        sid = registry.register(f"{evolved_topic}-value", json.dumps(evolved))
        await create_topic(broker, evolved_topic)
        await produce(broker, evolved_topic, [wire(sid, body(evolved, m)) for m in messages])
        cfg2 = write_config(tmp_path / "evolved.yml", broker, unique("g-evolved"), [
            {"topic": evolved_topic, "processor": proc.name, "format": "avro",
             "reader_schema": str(SCHEMA_DIR / "wherehows/GobblinTrackingEvent.avsc"),
             "sink": {"type": "jsonl", "path": str(tmp_path / "evolved.jsonl")}}])
        await drain(broker, cfg2, registry_yaml(registry.url))
    expected = expected_rows(proc, messages)
    assert [r["record_count"] for r in expected] == [1, 2]
    assert [strip(r) for r in read_jsonl(tmp_path / "uuid.jsonl")] == expected
    assert [strip(r) for r in read_jsonl(tmp_path / "evolved.jsonl")] == expected


async def test_bad_input_is_dead_lettered_and_registry_outage_is_not(broker, tmp_path):
    proc = wh.GobblinCompactionProcessor
    good = wh.gobblin(proc, "compaction.tracking.events", "CompactionCompleted",
                      wh.COMPACTION_COMPLETED)
    topic, group = unique("bad-avro"), unique("g-bad-avro")
    with FakeRegistry() as registry:
        sid = registry.register(f"{topic}-value",
                                (SCHEMA_DIR / "wherehows/GobblinTrackingEvent.avsc").read_text())
        ok = wire(sid, good.raw or b"")
        values = [
            ok,
            b"\x01" + ok[1:],             # wrong magic byte
            wire(999, good.raw or b""),    # unknown schema id (404)
            ok[:-7],                       # truncated body
            b"\x00\x00",                   # header cut short
            ok,
        ]
        await create_topic(broker, topic)
        await produce(broker, topic, values)
        registry.fail_next(12, status=503)  # the registry is down when consumption starts
        cfg = write_config(tmp_path / "kstage.yml", broker, group, [
            {"topic": topic, "processor": proc.name, "format": "avro",
             "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}])
        # not_found_retry_s 0: id 999 is poison at its first 404 (the 404 window has its
        # own tests in test_registry_404.py)
        await drain(broker, cfg, registry_yaml(registry.url, max_retries=1,
                                               min_backoff_s=0.01, max_backoff_s=0.05,
                                               not_found_retry_s=0))
        lookups = registry.count("GET")
    # 12 answers of 503 (more than the client's own retries: the worker backed off too),
    # then one 200 for the good id and one 404 for id 999, each cached afterwards.
    assert lookups == 14, lookups
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert [r["_offset"] for r in rows] == [0, 5], "nothing lost to the outage"
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [d["offset"] for d in dead] == [1, 2, 3, 4]
    assert "wrong magic byte 0x01" in dead[0]["error"]
    assert "unknown schema id 999" in dead[1]["error"] and dead[1]["schema_id"] == 999
    assert "undecodable Avro body" in dead[2]["error"] and dead[2]["schema_id"] == sid
    assert "shorter than the 5-byte" in dead[3]["error"]
    assert all(d["error_type"].endswith("PoisonMessage") or
               d["error_type"].endswith("SchemaNotFound") for d in dead)
    assert dead[0]["value_head_hex"] == values[1][:32].hex()
    assert (await committed(broker, group, topic, 1))[0] == 6


async def test_slow_registry_is_waited_out_not_poison(broker, tmp_path):
    """Fault matrix, registry slow: answers slower than ``timeout_s`` (six in a row, more
    than the client's own retries) are an outage, not poison: the worker backs off, and
    once the registry answers in time every message lands; nothing dead-lettered."""
    proc = wh.GobblinCompactionProcessor
    good = wh.gobblin(proc, "compaction.tracking.events", "CompactionCompleted",
                      wh.COMPACTION_COMPLETED)
    topic, group = unique("slow-registry"), unique("g-slow-registry")
    with FakeRegistry() as registry:
        sid = registry.register(f"{topic}-value",
                                (SCHEMA_DIR / "wherehows/GobblinTrackingEvent.avsc").read_text())
        await create_topic(broker, topic)
        await produce(broker, topic, [wire(sid, good.raw or b"")] * 3)
        registry.hang_next(6, seconds=1.0)
        cfg = write_config(tmp_path / "kstage.yml", broker, group, [
            {"topic": topic, "processor": proc.name, "format": "avro",
             "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}])
        await drain(broker, cfg, registry_yaml(registry.url, timeout_s=0.2, max_retries=1,
                                               min_backoff_s=0.01, max_backoff_s=0.05))
        lookups = registry.count("GET", f"/schemas/ids/{sid}")
    assert lookups == 7, "six answers too slow, then one in time"
    assert [r["_offset"] for r in read_jsonl(tmp_path / "out.jsonl")] == [0, 1, 2]
    assert not (tmp_path / "dead.jsonl").exists()
    assert (await committed(broker, group, topic, 1))[0] == 3
