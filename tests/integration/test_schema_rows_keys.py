"""``schema_rows`` with a natural key and deletes by tombstone, through the final table's
MERGE, on the real broker, the tests' registry and a real Iceberg catalog (staging through
either append path, the merge on Spark): ``kstage run --drain`` with ``merge.interval_s`` lands an
Avro topic keyed by a JSON record key and merges it once more after the drain:

* the final table holds the newest row per ``options.key`` (an update of a key replaces
  its row), with the columns the staging table has at the merge (the writer schema's, one
  added by v2 mid-topic);
* a tombstone (null value) of a key deletes that key's row: the staging table keeps the
  deletion as a row marked ``_is_deleted``, the final table loses the row, and its
  deletions table records it (an older upsert replayed later stays out);
* a tombstone whose record key is not one (no ``id``) is dead-lettered naming why, and the
  rest of the topic is committed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer
from fastavro import parse_schema

from actors.codecs.avro import encode
from actors.tables.final_deletions import deletions_name
from actors.tables.merge import final_name
from tests.fake_registry import FakeRegistry
from tests.kafkautil import KstageProcess, committed, create_topic, read_jsonl, unique, write_config
from tests.lake import IcebergReader, spark_section

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

V1 = {"type": "record", "name": "Customer", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]}
V2 = {"type": "record", "name": "Customer", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"}, {"name": "qty", "type": "int"},
    {"name": "note", "type": ["null", "string"], "default": None}]}


@pytest.mark.timeout(400)
async def test_the_final_merge_keeps_the_newest_row_per_key_and_tombstones_delete(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], appends: str) -> None:
    group, topic, staging = unique("g-keys"), unique("customers"), "stg_keyed"
    with FakeRegistry() as registry:
        v1 = registry.register(f"{topic}-value", json.dumps(V1))
        parsed = {"v1": (parse_schema(V1), v1)}

        def rec(version: str, value: dict[str, Any]) -> bytes:
            schema, sid = parsed[version]
            return encode(schema, sid, value)

        await create_topic(broker, topic)
        producer = AIOKafkaProducer(bootstrap_servers=broker)
        await producer.start()
        try:
            async def send(key: Any, value: bytes | None) -> None:
                await producer.send_and_wait(topic, value, key=json.dumps(key).encode(),
                                             partition=0)

            await send({"id": "a"}, rec("v1", {"id": "a", "qty": 1}))          # 0
            await send({"id": "b"}, rec("v1", {"id": "b", "qty": 2}))          # 1
            await send({"id": "a"}, rec("v1", {"id": "a", "qty": 10}))         # 2 update
            await send({"id": "b"}, None)                                       # 3 delete
            parsed["v2"] = (parse_schema(V2), registry.register(f"{topic}-value",
                                                                 json.dumps(V2)))
            await send({"id": "c"}, rec("v2", {"id": "c", "qty": 3, "note": "new"}))  # 4
            await send("c", None)                                               # 5 poison
            await send({"id": "d"}, rec("v2", {"id": "d", "qty": 4, "note": None}))  # 6
            await send({"id": "d"}, None)                                       # 7 delete
        finally:
            await producer.stop()
        cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
            "topic": topic, "format": "avro", "key_format": "json",
            "processor": "schema_rows", "options": {"key": ["id"], "deletes": True},
            "sink": {"type": "spark", "table": staging}}])
        data = yaml.safe_load(cfg.read_text())
        data["schema_registry"] = {"url": registry.url}
        data["spark"] = spark_section({
            "uri": f"jdbc:sqlite:{tmp_path / 'lake' / 'catalog.db'}",
            "warehouse": str(tmp_path / "lake" / "wh")}, appends=appends)
        data["merge"] = {"interval_s": 3600}  # the merge after the drain
        cfg.write_text(yaml.safe_dump(data))
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=300) == 0, proc.output()
    out = proc.output()
    assert f"merge: {staging} -> {final_name(staging)}: 7 staging rows" in out, out
    assert await committed(broker, group, topic, 1) == {0: 8}
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [d["offset"] for d in dead] == [5]
    assert ("a tombstone (null value) at offset 5 deletes its key, and its record key gives "
            "no id (got str); decode the key with key_format: json or avro") in dead[0]["error"]

    reader = IcebergReader(data["spark"])
    marked = sorted((r["_offset"], r["id"], r["_is_deleted"]) for r in reader.rows(staging))
    assert marked == [(0, "a", False), (1, "b", False), (2, "a", False), (3, "b", True),
                      (4, "c", False), (6, "d", False), (7, "d", True)]
    final = sorted((r["id"], r["qty"], r["note"], r["_offset"])
                   for r in reader.rows(final_name(staging)))
    assert final == [("a", 10, None, 2), ("c", 3, "new", 4)]
    deletions = sorted((r["id"], r["_offset"])
                       for r in reader.rows(deletions_name(final_name(staging))))
    assert deletions == [("b", 3), ("d", 7)]
