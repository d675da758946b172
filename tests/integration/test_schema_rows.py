"""``schema_rows`` end to end, on the real broker, the tests' registry and a real Iceberg
catalog, through both append paths (``spark.appends: pyiceberg`` and ``spark``):

* Avro topics land in their own staging tables by configuration alone, each table made on
  first sight (at start from the subject's latest schema when it has one);
* a producer registers v2 (an optional field added, int -> long) mid-run and writes
  interleaved with v1's: every row once, v1 rows NULL in the new column, the table's
  schema evolved in the same process (no restart);
* an incompatible writer schema (a string field become int) is dead-lettered per message,
  naming the field and both schema ids, while the rest flows; with ``on_incompatible:
  stop`` the worker fails and nothing past it is committed;
* a recursive latest schema is refused at start, naming the cycle's path, and the table
  is made at start from the subject's latest schema (Avro and JSON Schema).
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer
from fastavro import parse_schema

from actors.codecs.avro import encode
from tests.fake_registry import FakeRegistry
from tests.kafkautil import (
    KstageProcess,
    committed,
    create_topic,
    read_jsonl,
    unique,
    wait_until,
    write_config,
)
from tests.lake import IcebergReader, spark_section

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def schema(*fields: tuple[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "Order", "namespace": "shop",
            "fields": [{"name": n, "type": t, **({"default": None} if isinstance(t, list)
                                                 else {})} for n, t in fields]}


V1 = schema(("id", "string"), ("qty", "int"))
V2 = schema(("id", "string"), ("qty", "long"), ("note", ["null", "string"]))  # compatible
BAD = schema(("id", "int"), ("qty", "int"))  # id: string -> int


async def send(broker: str, topic: str, records: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        for value in records:
            await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()


@pytest.mark.timeout(400)
async def test_avro_topics_land_and_evolve_by_configuration(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], appends: str) -> None:
    group = unique("g-schema-rows")
    topics = [unique(f"orders{i}") for i in range(3)]
    tables = [f"stg_schema_rows_{i}" for i in range(3)]
    catalog = {"uri": f"jdbc:sqlite:{tmp_path / 'lake' / 'catalog.db'}",
               "warehouse": str(tmp_path / "lake" / "wh")}
    with FakeRegistry() as registry:
        # v1 the latest of the subject at start; the bad one under a subject of its own
        # (a registry enforcing compatibility refuses it under the topic's)
        ids = {"v1": registry.register(f"{topics[0]}-value", json.dumps(V1)),
               "bad": registry.register(f"{topics[0]}-other", json.dumps(BAD))}
        parsed = {k: parse_schema(s) for k, s in (("v1", V1), ("v2", V2), ("bad", BAD))}

        def rec(kind: str, value: dict[str, Any]) -> bytes:
            return encode(parsed[kind], ids[kind], value)

        first = [rec("v1", {"id": "a", "qty": 1})]
        for topic in topics:
            await create_topic(broker, topic)
        await send(broker, topics[0], first)
        for topic in topics[1:]:  # v1 only
            await send(broker, topic, [rec("v1", {"id": "x", "qty": 9})])
        cfg = write_config(tmp_path / "kstage.yml", broker, group, [
            {"topic": topic, "format": "avro", "processor": "schema_rows",
             "sink": {"type": "spark", "table": table}}
            for topic, table in zip(topics, tables, strict=True)])
        data = yaml.safe_load(cfg.read_text())
        data["schema_registry"] = {"url": registry.url}
        data["spark"] = spark_section(catalog, appends=appends)
        cfg.write_text(yaml.safe_dump(data))
        proc = kstage(cfg)
        reader = IcebergReader(data["spark"])
        await wait_until(lambda: all(len(reader.rows(t)) == 1 for t in tables), 240,
                         "the first row of each table")
        assert "note" not in reader.rows(tables[0])[0]  # made with v1
        # a producer registers v2 mid-run and writes interleaved with v1's, a bad one
        # in between
        ids["v2"] = registry.register(f"{topics[0]}-value", json.dumps(V2))
        await send(broker, topics[0], [rec("v2", {"id": "b", "qty": 2**40, "note": "new"}),
                                       rec("v1", {"id": "c", "qty": 3}),
                                       rec("bad", {"id": 7, "qty": 4}),
                                       rec("v2", {"id": "d", "qty": 5, "note": None}),
                                       rec("v1", {"id": "e", "qty": 6})])
        await wait_until(lambda: len(reader.rows(tables[0])) == 5, 240, "every good row")
        await proc.wait_for_log("evolved with the writer schema: added note, widened qty")
        proc.signal(signal.SIGTERM)
        assert await proc.wait(timeout=60) == 0, proc.output()
        assert not re.search(r"restarts=[1-9]", proc.output()), proc.output()

    rows = sorted(reader.rows(tables[0]), key=lambda r: r["_offset"])
    assert [(r["_offset"], r["id"], r["qty"], r["note"]) for r in rows] == [
        (0, "a", 1, None), (1, "b", 2**40, "new"), (2, "c", 3, None), (4, "d", 5, None),
        (5, "e", 6, None)]
    fields = {f.name: str(f.field_type) for f in
              reader.catalog.load_table((reader.settings.catalog.namespace, tables[0]))
              .schema().fields}
    assert fields["qty"] == "long" and fields["note"] == "string"
    for table in tables[1:]:
        assert [(r["id"], r["qty"]) for r in reader.rows(table)] == [("x", 9)]
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [d["offset"] for d in dead] == [3]
    error = dead[0]["error"]
    assert (f"writer schema id {ids['bad']} does not fit the table: field 'id' is int in "
            f"writer schema id {ids['bad']}, string in the table's column") in error
    assert f"typed by writer schema id {ids['v1']}" in error


def config(tmp_path: Path, broker: str, group: str, topic: str, table: str, registry: str,
           catalog: dict[str, Any], fmt: str = "avro", **options: Any,
           ) -> tuple[Path, dict[str, Any]]:
    """A configuration of ``topic`` (``format: fmt``) through ``schema_rows`` into
    ``table`` (pyiceberg)."""
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [
        {"topic": topic, "format": fmt, "processor": "schema_rows",
         **({"options": options} if options else {}),
         "sink": {"type": "spark", "table": table}}])
    data = yaml.safe_load(cfg.read_text())
    data["schema_registry"] = {"url": registry}
    data["spark"] = spark_section(catalog, appends="pyiceberg")
    cfg.write_text(yaml.safe_dump(data))
    return cfg, data


def lake(tmp_path: Path) -> dict[str, Any]:
    return {"uri": f"jdbc:sqlite:{tmp_path / 'lake' / 'catalog.db'}",
            "warehouse": str(tmp_path / "lake" / "wh")}


@pytest.mark.timeout(300)
async def test_on_incompatible_stop_fails_the_worker_and_commits_nothing_past_it(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    group, topic, table = unique("g-schema-stop"), unique("orders-stop"), "stg_schema_stop"
    with FakeRegistry() as registry:
        v1 = registry.register(f"{topic}-value", json.dumps(V1))
        bad = registry.register(f"{topic}-other", json.dumps(BAD))
        await create_topic(broker, topic)
        await send(broker, topic, [encode(parse_schema(V1), v1, {"id": "a", "qty": 1}),
                                   encode(parse_schema(BAD), bad, {"id": 2, "qty": 2}),
                                   encode(parse_schema(V1), v1, {"id": "c", "qty": 3})])
        cfg, data = config(tmp_path, broker, group, topic, table, registry.url, lake(tmp_path),
                           on_incompatible="stop")
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=240) == 1, proc.output()
    out = proc.output()
    assert (f"{topic}[0]@1 failed: StopTopic: writer schema id {bad} does not fit the "
            f"table: field 'id' is int in writer schema id {bad}") in out, out
    assert f"typed by writer schema id {v1}" in out
    assert (await committed(broker, group, topic, 1)).get(0, 0) <= 1
    assert [r["_offset"] for r in IcebergReader(data["spark"]).rows(table)] == [0]
    assert not (tmp_path / "dead.jsonl").exists()


NODE = {"type": "record", "name": "Node", "namespace": "t", "fields": [
    {"name": "v", "type": "int"},
    {"name": "kids", "type": {"type": "array", "items": "t.Node"}}]}
JSON_NODE = {"type": "object", "properties": {"root": {"$ref": "#/$defs/node"}},
             "$defs": {"node": {"type": "object", "properties": {
                 "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}}
JSON_V2 = {"type": "object", "properties": {"id": {"type": "string"},
                                            "qty": {"type": "integer"},
                                            "note": {"type": ["null", "string"]}}}


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("fmt", "kind", "node", "cycle"), [
    ("avro", "AVRO", NODE, "recursive type 't.Node': kids.element refers back to it"),
    ("json_schema", "JSON", JSON_NODE,
     "recursive type '#/$defs/node': root.kids.element refers back to it")])
async def test_a_recursive_schema_is_refused_at_start_with_the_cycle(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], fmt: str, kind: str,
        node: dict[str, Any], cycle: str) -> None:
    group, topic = unique("g-schema-rec"), unique("tree")
    with FakeRegistry() as registry:
        registry.register(f"{topic}-value", json.dumps(node), kind)
        await create_topic(broker, topic)
        cfg, _ = config(tmp_path, broker, group, topic, "stg_schema_rec", registry.url,
                        lake(tmp_path), fmt=fmt)
        proc = kstage(cfg)
        assert await proc.wait(timeout=120) != 0, proc.output()
    assert cycle in proc.output()


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("fmt", "kind", "latest"), [
    ("avro", "AVRO", V2), ("json_schema", "JSON", JSON_V2)])
async def test_the_table_is_made_at_start_from_the_subjects_latest_schema(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], fmt: str, kind: str,
        latest: dict[str, Any]) -> None:
    group, topic, table = unique("g-schema-start"), unique("empty"), "stg_schema_start"
    with FakeRegistry() as registry:
        registry.register(f"{topic}-value", json.dumps(latest), kind)
        await create_topic(broker, topic)
        cfg, data = config(tmp_path, broker, group, topic, table, registry.url,
                           lake(tmp_path), fmt=fmt)
        proc = kstage(cfg)
        reader = IcebergReader(data["spark"])
        await wait_until(lambda: reader.exists(table), 120, "the table, before any message")
        proc.signal(signal.SIGTERM)
        assert await proc.wait(timeout=60) == 0, proc.output()
    fields = {f.name: str(f.field_type) for f in
              reader.catalog.load_table((reader.settings.catalog.namespace, table))
              .schema().fields}
    assert {k: fields[k] for k in ("id", "qty", "note")} == {
        "id": "string", "qty": "long", "note": "string"}


@pytest.mark.timeout(300)
async def test_after_a_restart_writer_schemas_are_judged_against_the_table_as_it_is(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], appends: str) -> None:
    """A restarted kstage knows the table it left: the first record after the restart
    is of a schema that does not fit the table (id string -> int) and is dead-lettered;
    the old schema's records after it land (before: the first schema seen after a
    restart was taken for the table's, the old records dead-lettered and the worker
    failed on the real table: a stall on every restart)."""
    group, topic, table = unique("g-schema-restart"), unique("orders-restart"), \
        "stg_schema_restart"
    with FakeRegistry() as registry:
        v1 = registry.register(f"{topic}-other", json.dumps(V1))
        bad = registry.register(f"{topic}-bad", json.dumps(BAD))
        await create_topic(broker, topic)
        await send(broker, topic, [encode(parse_schema(V1), v1, {"id": "a", "qty": 1})])
        cfg, data = config(tmp_path, broker, group, topic, table, registry.url,
                           lake(tmp_path))
        data["spark"]["appends"] = appends
        cfg.write_text(yaml.safe_dump(data))
        first = kstage(cfg, "--drain")
        assert await first.wait(timeout=240) == 0, first.output()
        await send(broker, topic, [encode(parse_schema(BAD), bad, {"id": 2, "qty": 2}),
                                   encode(parse_schema(V1), v1, {"id": "c", "qty": 3})])
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=240) == 0, proc.output()
    assert [(r["_offset"], r["id"]) for r in sorted(
        IcebergReader(data["spark"]).rows(table), key=lambda r: r["_offset"])] == [
        (0, "a"), (2, "c")]
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [d["offset"] for d in dead] == [1]
    assert (f"writer schema id {bad} does not fit the table: field 'id' is int in writer "
            f"schema id {bad}, string in the table's column (typed by the table as kstage "
            "found it at start)") in dead[0]["error"]
    assert (await committed(broker, group, topic, 1)).get(0) == 3
