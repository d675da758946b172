"""Values whose JSON Schema validation would never end, on the real broker (issue 33).

A ``uniqueItems`` array of 4,000 objects (jsonschema compares every pair: ~23 s of CPU)
and a 40-character ``"aaa...!"`` under ``pattern: ^(a+)+$`` (exponential backtracking),
among good values, read by a running ``kstage run``: the hostile value is dead-lettered
naming the budget, its schema id and its coordinates, the good ones land, offsets are
committed past it, and ``/healthz`` answers 200 at every look meanwhile (validation runs
in a child process killed past its budget: the event loop never waits on it). A value
past ``max_message_bytes`` is poison before any decoding.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.broker import free_port
from tests.fake_registry import FakeRegistry
from tests.integration.test_avro_pipeline import registry_yaml
from tests.kafkautil import (
    committed,
    create_topic,
    produce,
    read_jsonl,
    status_port,
    unique,
    write_config,
)
from tests.unit.test_json_schema_format import serialize

pytestmark = pytest.mark.kafka

SCHEMAS: dict[str, tuple[dict[str, Any], Any, Any]] = {
    # schema, a good value, the hostile value
    "unique_items": (
        {"type": "object", "properties": {"items": {
            "type": "array", "uniqueItems": True, "items": {"type": "object"}}}},
        {"items": [{"i": 1}, {"i": 2}]}, {"items": [{"i": i} for i in range(4000)]}),
    "pattern": (
        {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}},
        {"s": "aaaa"}, {"s": "a" * 39 + "!"}),
}


async def _health(client: httpx.AsyncClient, base: str) -> tuple[int, Any]:
    response = await client.get(f"{base}/healthz")
    return response.status_code, response.json()


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
async def test_a_hostile_value_is_dead_lettered_within_its_budget(
        broker: str, tmp_path: Path, kstage: Any, kind: str) -> None:
    schema, good, hostile = SCHEMAS[kind]
    topic, group = unique(f"hostile-{kind}"), unique("g-hostile")
    with FakeRegistry() as registry:
        first = serialize(registry, schema, good)  # registers the schema
        # the producer's own validation would never end either: framed by hand
        values = [first[:5] + json.dumps(v).encode() for v in (good, hostile, good, good)]
        values.append(first[:5] + b" " * 120_000 + json.dumps(good).encode())
        sid = int.from_bytes(values[0][1:5], "big")
        await create_topic(broker, topic)
        await produce(broker, topic, values)
        cfg = write_config(tmp_path / "kstage.yml", broker, group, [
            {"topic": topic, "processor": "json_rows", "format": "json_schema",
             "validate_budget_s": 1, "max_message_bytes": 100_000,
             "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}],
            service={"http_port": free_port(), "http_host": "127.0.0.1"})
        cfg.write_text(cfg.read_text() + registry_yaml(registry.url))
        proc = kstage(cfg)
        base = f"http://127.0.0.1:{await status_port(proc)}"
        looks: list[tuple[int, Any]] = []
        async with httpx.AsyncClient(timeout=5) as client:
            await proc.wait_for_log("assigned partitions")
            deadline = time.monotonic() + 120
            # every look at /healthz until the hostile value is dead-lettered and the
            # good ones landed (the signal), bounded by the deadline
            while not ((tmp_path / "dead.jsonl").exists()
                       and len(read_jsonl(tmp_path / "out.jsonl")) == 3):
                looks.append(await _health(client, base))
                assert looks[-1][0] == 200, (looks[-1], proc.output()[-3000:])
                assert time.monotonic() < deadline and proc.proc.poll() is None, \
                    proc.output()[-3000:]
                await asyncio.sleep(0.2)
            looks.append(await _health(client, base))
        for _ in range(600):  # commits follow the sink
            if (await committed(broker, group, topic, 1))[0] == 5:
                break
            await asyncio.sleep(0.1)
        proc.signal(signal.SIGTERM)
        assert await proc.wait() == 0, proc.output()[-3000:]
    assert looks and all(code == 200 for code, _ in looks), looks
    assert [r["_offset"] for r in read_jsonl(tmp_path / "out.jsonl")] == [0, 2, 3]
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [(d["topic"], d["partition"], d["offset"]) for d in dead] == [
        (topic, 0, 1), (topic, 0, 4)]
    assert dead[0]["schema_id"] == sid
    assert (f"JSON Schema validation of {topic}[0]@1 (schema id {sid}) took more than its "
            "budget of 1s (validate_budget_s)") in dead[0]["error"], dead[0]["error"]
    assert (f"value of {len(values[4])} bytes at {topic}[0]@4 is over max_message_bytes "
            "100000") in dead[1]["error"], dead[1]["error"]
    assert (await committed(broker, group, topic, 1))[0] == 5
