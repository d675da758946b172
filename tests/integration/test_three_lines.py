"""docs/configuration.md's "Land a topic in three lines" runs as written: its block is the
configuration (only the addresses are this test's: its broker, registry, catalog, and a
fresh topic and group), a producer writes Avro records of one writer schema, then, while
kstage runs, registers a second version that adds an optional field and writes with it:
every record lands once in the table, evolved once without a restart, the new column
filled from the second version on."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
import yaml
from aiokafka import AIOKafkaProducer
from fastavro import parse_schema

from actors.codecs.avro import encode
from tests.fake_registry import FakeRegistry
from tests.kafkautil import (
    ROOT,
    KstageProcess,
    create_topic,
    unique,
    wait_until,
    write_config,
)
from tests.lake import IcebergReader, spark_section

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]

V1 = {"type": "record", "name": "Order", "namespace": "shop",
      "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]}
V2 = {**V1, "fields": [*V1["fields"],
                       {"name": "note", "type": ["null", "string"], "default": None}]}


def three_lines() -> str:
    """The first yaml block after the section's heading."""
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    at = text.index("## Land a topic in three lines")
    start = text.index("```yaml\n", at) + len("```yaml\n")
    return text[start:text.index("```", start)]


async def send(broker: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()


async def test_the_three_lines_land_a_topic_and_follow_its_schema_change(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    block = three_lines()
    assert len(block.strip().splitlines()) == 3, block
    doc = yaml.safe_load(block)
    assert set(doc) == {"schema_registry", "groups"} and len(doc["groups"]) == 1, doc
    assert set(doc["groups"][0]) == {"topics"}, doc  # the rest is defaults
    [entry] = doc["groups"][0]["topics"]
    topic, group = unique(entry["topic"]), unique("g-three-lines")
    table = entry["sink"]["table"]
    with FakeRegistry() as registry:
        v1 = registry.register(f"{topic}-value", json.dumps(V1))
        await create_topic(broker, topic)
        # the block's topic as written (its name made unique); the test's group settings
        cfg = write_config(tmp_path / "kstage.yml", broker, group, [{**entry, "topic": topic}])
        data = yaml.safe_load(cfg.read_text())
        data["schema_registry"] = {**doc["schema_registry"], "url": registry.url}
        catalog = {"uri": f"jdbc:sqlite:{tmp_path / 'lake' / 'catalog.db'}",
                   "warehouse": str(tmp_path / "lake" / "wh")}
        data["spark"] = spark_section(catalog, appends="pyiceberg")
        cfg.write_text(yaml.safe_dump(data))
        proc = kstage(cfg)  # the table is made at start, from version 1
        reader = IcebergReader(data["spark"])
        await send(broker, topic, [encode(parse_schema(V1), v1, {"id": f"a{i}", "qty": i})
                                   for i in range(3)])
        await wait_until(lambda: len(reader.rows(table)) == 3, 120, "the rows of version 1")
        # while kstage runs, the producer registers version 2 and writes with it
        v2 = registry.register(f"{topic}-value", json.dumps(V2))
        await send(broker, topic, [encode(parse_schema(V2), v2, {
            "id": f"b{i}", "qty": i, "note": f"n{i}"}) for i in range(3, 5)])
        await wait_until(lambda: len(reader.rows(table)) == 5, 120, "the rows of version 2")
        proc.signal(signal.SIGTERM)
        assert await proc.wait(timeout=60) == 0, proc.output()
    out = proc.output()
    assert re.search(rf"table \S*{table} evolved with the writer schema: added note", out), out
    assert out.count(": assigned partitions ") == 1, out  # no restart
    rows = sorted(reader.rows(table), key=lambda r: r["_offset"])
    assert [(r["_offset"], r["id"], r["qty"], r["note"]) for r in rows] == [
        (0, "a0", 0, None), (1, "a1", 1, None), (2, "a2", 2, None),
        (3, "b3", 3, "n3"), (4, "b4", 4, "n4")]
