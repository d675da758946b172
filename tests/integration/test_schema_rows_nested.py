"""``schema_rows`` with nested Avro end to end, on the real broker, the tests' registry
and a real Iceberg catalog, through both append paths (``spark.appends: spark`` and
``pyiceberg``), read back with Spark and with pyiceberg:

* a topic whose Avro schema has a nested record, an array of records, a map, a non-null
  union, decimal, date, timestamp-micros, local-timestamp-micros, uuid, fixed, enum and
  float lands by configuration alone, every value exact;
* v2 adds an optional field inside the nested record and inside the array's element
  record mid-run: the table evolves in the same process (the structs gain the fields),
  older rows read NULL there.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastavro import parse_schema

from actors.codecs.avro import encode
from actors.sinks.spark import pyiceberg_nulls
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import qualified
from tests.fake_registry import FakeRegistry
from tests.integration.test_schema_rows import send
from tests.kafkautil import (
    KstageProcess,
    create_topic,
    unique,
    wait_until,
    write_config,
)
from tests.lake import IcebergReader, spark_section

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

OPTIONAL = {"default": None}


def order(v2: bool) -> dict[str, Any]:
    """The writer schema: v2 adds ``color`` inside ``item`` and ``note`` inside the
    elements of ``lines`` (optional, default null)."""
    item = [{"name": "sku", "type": "string"},
            {"name": "price", "type": {"type": "bytes", "logicalType": "decimal",
                                       "precision": 9, "scale": 2}}]
    line = [{"name": "n", "type": "int"}, {"name": "w", "type": "float"}]
    if v2:
        item.append({"name": "color", "type": ["null", "string"], **OPTIONAL})
        line.append({"name": "note", "type": ["null", "string"], **OPTIONAL})
    return {"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "string"},
        {"name": "item", "type": {"type": "record", "name": "Item", "fields": item}},
        {"name": "lines", "type": {"type": "array", "items": {
            "type": "record", "name": "Line", "fields": line}}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "choice", "type": ["int", "string"]},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "raw", "type": {"type": "fixed", "name": "Raw", "size": 4}},
        {"name": "state", "type": {"type": "enum", "name": "State",
                                   "symbols": ["NEW", "PAID"]}},
        {"name": "f", "type": "float"}]}


AT = dt.datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=dt.UTC)
LOCAL = dt.datetime(2024, 3, 1, 8, 30, 0, 1)
UID = uuid.UUID(int=0x1234)


def record(i: int, *, v2: bool) -> dict[str, Any]:
    item: dict[str, Any] = {"sku": f"s{i}", "price": Decimal(f"{i}.25")}
    line: dict[str, Any] = {"n": i, "w": 1.5}
    if v2:
        item["color"] = f"c{i}"
        line["note"] = f"n{i}"
    return {"id": f"o{i}", "item": item, "lines": [line, {**line, "n": -i}],
            "attrs": {"a": i, "b": -(2**40)}, "choice": i if i % 2 else f"t{i}",
            "day": dt.date(2024, 2, 29), "at": AT, "local": LOCAL, "uid": UID,
            "raw": bytes([i, 0, 255, 7]), "state": "PAID" if i % 2 else "NEW", "f": 0.5}


def want(i: int, *, v2: bool) -> dict[str, Any]:
    """Record ``i`` as a table row (the new fields NULL in v1's rows)."""
    extra = v2 or None
    line = {"n": i, "w": 1.5, "note": f"n{i}" if extra else None}
    return {"id": f"o{i}",
            "item": {"sku": f"s{i}", "price": Decimal(f"{i}.25"),
                     "color": f"c{i}" if extra else None},
            "lines": [line, {**line, "n": -i}], "attrs": {"a": i, "b": -(2**40)},
            "choice": {"int": i, "string": None} if i % 2 else {"int": None,
                                                                 "string": f"t{i}"},
            "day": dt.date(2024, 2, 29), "at": AT, "local": LOCAL, "uid": str(UID),
            "raw": bytes([i, 0, 255, 7]), "state": "PAID" if i % 2 else "NEW", "f": 0.5}


def plain(value: Any) -> Any:
    """A value as both readers compare: Spark's Rows as dicts, pyarrow's map entries as a
    dict, bytearrays as bytes, Spark's UTC wall times of ``timestamp`` made aware."""
    if hasattr(value, "asDict"):
        return {k: plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list) and value and all(
            isinstance(e, tuple) and not hasattr(e, "asDict") for e in value):
        return {k: plain(v) for k, v in value}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def table_rows(rows: list[dict[str, Any]], *, spark: bool) -> list[dict[str, Any]]:
    out = []
    for row in sorted(rows, key=lambda r: r["_offset"]):
        got = {k: plain(row[k]) for k in want(0, v2=False)}
        if spark:  # Spark hands a timestamp as its UTC wall time (session time zone)
            got["at"] = got["at"].replace(tzinfo=dt.UTC)
        out.append(got)
    return out


@pytest.mark.timeout(500)
async def test_nested_avro_lands_and_evolves_inside_structs(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], jdbc_spark: SparkActor,
        appends: str) -> None:
    group, topic = unique("g-schema-nested"), unique("nested-orders")
    table = unique(f"stg_nested_{appends}").replace("-", "_")
    settings = jdbc_spark.settings
    with FakeRegistry() as registry:
        ids = {"v1": registry.register(f"{topic}-value", json.dumps(order(False)))}
        parsed = {"v1": parse_schema(order(False)), "v2": parse_schema(order(True))}

        def rec(kind: str, i: int) -> bytes:
            return encode(parsed[kind], ids[kind], record(i, v2=kind == "v2"))

        await create_topic(broker, topic)
        await send(broker, topic, [rec("v1", 1)])
        cfg = write_config(tmp_path / "kstage.yml", broker, group, [
            {"topic": topic, "format": "avro", "processor": "schema_rows",
             "sink": {"type": "spark", "table": table}}])
        data = yaml.safe_load(cfg.read_text())
        data["schema_registry"] = {"url": registry.url}
        # the catalog of the test's own Spark session (its warehouse), to read back
        data["spark"] = {**spark_section({}, appends=appends), "catalog": {},
                         "warehouse": settings.warehouse}
        cfg.write_text(yaml.safe_dump(data))
        proc = kstage(cfg)
        reader = IcebergReader({"warehouse": settings.warehouse})

        async def rows(count: int, what: str) -> None:
            try:
                await wait_until(lambda: len(reader.rows(table)) == count, 240, what)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{proc.output()[-6000:]}") from None

        await rows(1, "v1's first row")
        # a producer registers v2 mid-run; v1's producer keeps writing
        ids["v2"] = registry.register(f"{topic}-value", json.dumps(order(True)))
        await send(broker, topic, [rec("v2", 2), rec("v1", 3), rec("v2", 4)])
        await rows(4, "every row")
        await proc.wait_for_log("evolved with the writer schema")
        proc.signal(signal.SIGTERM)
        assert await proc.wait(timeout=60) == 0, proc.output()
        assert not re.search(r"restarts=[1-9]", proc.output()), proc.output()
    dead = tmp_path / "dead.jsonl"
    assert not dead.exists() or not dead.read_text().strip(), dead.read_text()

    expected = [want(1, v2=False), want(2, v2=True), want(3, v2=False), want(4, v2=True)]
    schema = reader._table(table).schema()
    for struct, fields in (("item", ["sku", "price", "color"]),
                           ("lines.element", ["n", "w", "note"])):
        found = schema.find_field(struct).field_type.fields
        assert [(f.name, f.required) for f in found] == [(n, False) for n in fields]
    pyiceberg_nulls.install()
    assert table_rows(reader.rows(table), spark=False) == expected

    def spark_read(spark: Any) -> list[dict[str, Any]]:
        name = qualified(settings, table)
        spark.sql(f"REFRESH TABLE {name}")
        return [r.asDict() for r in spark.table(name).collect()]

    assert table_rows(await jdbc_spark.call(spark_read), spark=True) == expected
