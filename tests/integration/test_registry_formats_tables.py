"""``format: protobuf`` and ``format: json_schema`` into the table sinks: records written by
confluent-kafka's own ``ProtobufSerializer`` and ``JSONSerializer`` (against the fake
Confluent registry) on the real broker, read by a processor with typed columns
(tests/plugins' ``test_shop_orders``: an enum's name, an int64 of a nested message, a
timestamp), landed by one ``kstage run --drain`` in PostgreSQL through Spark's JDBC writer
and in Iceberg staging tables written by Spark; read back with PostgreSQL and Spark: each
record once, typed, exact; the poison of each format dead-lettered once and in no table.

One Spark session in this process (``jdbc_spark``) reads the Iceberg tables.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from actors.sinks.spark.actor import SparkActor
from tests.fake_registry import FakeRegistry
from tests.integration.test_jdbc_sink import PASSWORD
from tests.integration.test_record_columns import pg_types, spark_read
from tests.integration.test_registry_formats import proto_registry
from tests.kafkautil import committed, create_topic, produce, read_jsonl, unique, write_config
from tests.postgres import JAR, USER, Postgres
from tests.unit.test_json_schema_format import serialize as json_serialize
from tests.unit.test_protobuf_format import CLASSES
from tests.unit.test_protobuf_format import serialize as proto_serialize

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

UNITS = -(2**62) - 3  # an int64 no double holds exactly
STATUSES = ["STATUS_UNKNOWN", "PLACED", "SHIPPED"]
ORDER_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "properties": {
        "id": {"type": "string"}, "status": {"enum": STATUSES},
        "lines": {"type": "array", "items": {"type": "object"}},
        "total": {"type": "object", "properties": {"currency": {"type": "string"},
                                                   "units": {"type": "integer"}},
                  "required": ["currency", "units"]},
        "placed_at": {"type": "string", "format": "date-time"}},
    "required": ["id", "status"]}


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).astimezone(dt.UTC)


# (status, lines, currency, units, placed_at) of each order that lands, by its id's number
ORDERS = [("SHIPPED", 2, "EUR", 2**40, "2024-05-01T12:00:00Z"),
          ("PLACED", 0, None, None, "2024-05-01T12:00:00.123456Z"),
          ("STATUS_UNKNOWN", 1, "USD", UNITS, None)]


def proto_values(registry: FakeRegistry) -> list[bytes]:
    """The orders as Protobuf, a poison one (a message index naming no message) at 1."""
    order, money = CLASSES["shop.Order"], CLASSES["shop.common.Money"]
    out = []
    for n, (status, lines, currency, units, placed) in enumerate(ORDERS, 1):
        msg = order(id=f"p-{n}", status=order.Status.Value(status))
        for i in range(lines):
            msg.lines.add(sku=f"k-{i}")
        if currency is not None:
            msg.total.CopyFrom(money(currency=currency, units=units))
        if placed is not None:
            msg.placed_at.FromJsonString(placed)
        out.append(proto_serialize(registry, msg))
    good = out[0]
    return [out[0], good[:5] + b"\x02\x0a" + good[6:], *out[1:]]


def json_values(registry: FakeRegistry) -> list[bytes]:
    """The orders as JSON Schema records, a poison one (a status not in the enum) at 1."""
    out = []
    for n, (status, lines, currency, units, placed) in enumerate(ORDERS, 1):
        value: dict[str, Any] = {"id": f"j-{n}", "status": status,
                                 "lines": [{"sku": f"k-{i}"} for i in range(lines)]}
        if currency is not None:
            value["total"] = {"currency": currency, "units": units}
        if placed is not None:
            value["placed_at"] = placed
        out.append(json_serialize(registry, ORDER_SCHEMA, value))
    return [out[0], out[0][:5] + b'{"id": "j-x", "status": "LOST"}', *out[1:]]


def expected(prefix: str) -> list[tuple[Any, ...]]:
    """The rows of a table, by offset: (id, status, lines, currency, units, placed_at,
    offset); offset 1 (the poison) in none."""
    return [(f"{prefix}-{n}", s, ln, c, u, p and utc(p), offset)
            for n, ((s, ln, c, u, p), offset) in enumerate(zip(ORDERS, (0, 2, 3),
                                                               strict=True), 1)]


def pg_rows(pg: Postgres, table: str) -> list[tuple[Any, ...]]:
    got = pg.psql(
        "SELECT id, status, lines, coalesce(currency, '<null>'), "  # noqa: S608
        "coalesce(units::text, '<null>'), coalesce(to_char(placed_at AT TIME ZONE 'UTC', "
        "'YYYY-MM-DD\"T\"HH24:MI:SS.US'), '<null>'), _offset "
        f'FROM "{table}" ORDER BY _offset')

    def null(text: str) -> str | None:
        return None if text == "<null>" else text

    return [(i, s, int(ln), null(c), None if u == "<null>" else int(u),
             None if p == "<null>" else utc(p + "+00:00"), int(o))
            for i, s, ln, c, u, p, o in got]


@pytest.mark.timeout(500)  # kstage starts a JVM; its waits inside add up past 180 s
async def test_protobuf_and_json_schema_records_land_typed_in_postgresql_and_iceberg(
        broker: str, running: Postgres, jdbc_spark: SparkActor, tmp_path: Path,
        kstage: Any) -> None:
    pg, spark_settings = running, jdbc_spark.settings
    group = unique("g-fmt-tables")
    topics = {"pb": unique("fmt-pb"), "js": unique("fmt-js")}
    tables = {f"{kind}_{sink}": unique(f"{sink}_{kind}").replace("-", "_")
              for kind in topics for sink in ("pg", "stg")}
    jdbc = {"url": pg.url, "user": USER, "password": PASSWORD, "jar": JAR}
    with FakeRegistry() as registry:
        proto_registry(registry, topics["pb"])
        values = {"pb": proto_values(registry), "js": json_values(registry)}
        for kind, topic in topics.items():
            await create_topic(broker, topic)
            await produce(broker, topic, values[kind])
        cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
            "topic": topic, "processor": "test_shop_orders",
            "format": "protobuf" if kind == "pb" else "json_schema",
            "sinks": [{"type": "jdbc", "name": f"pg_{kind}", "table": tables[f"{kind}_pg"],
                       **jdbc},
                      {"type": "spark", "name": f"lake_{kind}",
                       "table": tables[f"{kind}_stg"]}]} for kind, topic in topics.items()])
        data = yaml.safe_load(cfg.read_text())
        data["schema_registry"] = {"url": registry.url}
        data["spark"] = {"master": "local[1]", "warehouse": spark_settings.warehouse,
                         "flush_max_interval_s": 0.3, "conf": {"spark.driver.memory": "512m"}}
        cfg.write_text(yaml.safe_dump(data))
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=300) == 0, proc.output()
    for topic in topics.values():
        assert await committed(broker, group, topic, 1) == {0: 4}

    # the poison of each format dead-lettered, by the worker (no sink got it). Dead
    # letters are at least once (docs/operations.md#dead-letter-lines): a batch re-read
    # after a revoke whose drain timed out (a worker's join moves the other's partition)
    # is dead-lettered again; its lines name the same coordinates.
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert {(d["topic"], d["partition"], d["offset"], "sink" in d) for d in dead} == {
        (topic, 0, 1, False) for topic in topics.values()}, dead
    reasons = {d["topic"]: d["error"] for d in dead}
    assert "unknown message index [5]" in reasons[topics["pb"]], reasons
    assert "not valid for its JSON Schema" in reasons[topics["js"]], reasons

    # PostgreSQL: typed columns, every record, exact values (an append is at least
    # once, as above: a re-read batch is written again, with the same coordinates)
    for kind in topics:
        types = pg_types(pg, tables[f"{kind}_pg"])
        assert {k: types[k] for k in ("status", "lines", "units", "placed_at")} == {
            "status": "text", "lines": "integer", "units": "bigint",
            "placed_at": "timestamp with time zone"}
        assert sorted(set(pg_rows(pg, tables[f"{kind}_pg"])), key=lambda r: r[-1]) == (
            expected("p" if kind == "pb" else "j"))

    # Iceberg, read with Spark: the same types and values, every record once (its
    # commits hold the offsets they cover: exactly once)
    for kind, topic in topics.items():
        rows, dtypes = await jdbc_spark.call(spark_read(spark_settings, tables[f"{kind}_stg"]))
        assert {k: dtypes[k] for k in ("status", "lines", "units", "placed_at")} == {
            "status": "string", "lines": "int", "units": "bigint", "placed_at": "timestamp"}
        # Spark hands TIMESTAMP as wall time in the session's zone (UTC in kstage's sessions)
        assert [(r["id"], r["status"], r["lines"], r["currency"], r["units"],
                 r["placed_at"] and r["placed_at"].replace(tzinfo=dt.UTC), r["_offset"])
                for r in rows] == expected("p" if kind == "pb" else "j")
        assert {r["_topic"] for r in rows} == {topic}
