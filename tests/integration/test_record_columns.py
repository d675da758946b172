"""A topic's record columns (key, headers, timestamp type) and the ``timestamp`` and
``decimal(P,S)`` column types, end to end: ``kstage run --drain`` on the real broker into
every sink at once (JSONL, PostgreSQL append and upsert through Spark's JDBC writer, an
Iceberg staging table written by Spark, and its final table merged after the drain), read
back with PostgreSQL, with Spark and with pyiceberg: the declared types in each table's
schema (never strings or floats), the exact values, the poison (an undecodable key, a
header that is not UTF-8) dead-lettered once, and the values a table refuses (a float for
a decimal, a decimal it would round) dead-lettered by each table sink, never written,
never lost.

The Iceberg staging table exists before the run, without the record columns (as written
before the topic declared them): the run adds them as nullable columns. An existing
PostgreSQL table without them is refused at open, naming them and the ALTER TABLE that
adds them; after it, the sink writes.

One Spark session in this process (the module's ``jdbc_spark``): it creates the old
staging table, reads the run's tables, and drives the JDBC sink of the refusal test.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from fastavro import parse_schema

from actors.codecs.avro import encode
from actors.errors import FatalError
from actors.sinks import SinkContext
from actors.sinks.jdbc import JdbcSink, create_table_sql
from actors.sinks.spark import iceberg
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import qualified
from actors.sinks.table.columns import COORDINATES
from actors.tables.merge import final_name
from processors.base import Column
from settings.models import SparkSettings
from tests.brokers import KAFKA
from tests.fake_registry import FakeRegistry
from tests.http_server import HttpTestServer
from tests.integration.test_jdbc_sink import PASSWORD, settings
from tests.kafkautil import committed, create_topic, read_jsonl, unique, write_config
from tests.lake import IcebergReader
from tests.postgres import JAR, USER, Postgres

pytestmark = pytest.mark.slow

PAYMENTS = (Column("id", nullable=False), Column("amount", "decimal(12,2)"),
            Column("paid_at", "timestamp"))  # the columns of tests/plugins' test_payments
DECLARED = [{"name": "message_key", "from": "key"},
            {"name": "trace", "from": "header", "header": "traceparent"},
            {"name": "sig", "from": "header", "header": "signature", "type": "binary"},
            {"name": "ts_type", "from": "timestamp_type"}]
EXTRA = (Column("message_key"), Column("trace"), Column("sig", "binary"), Column("ts_type"))
PAID = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z

# (key, value, headers): offsets 0..6 of the topic's one partition
RECORDS: list[tuple[bytes | None, Any, list[tuple[str, bytes]]]] = [
    (b"p1", {"id": "p1", "amount": "12.34", "paid_ms": PAID},
     [("traceparent", b"00-abc-01"), ("signature", b"\xff\x00"), ("traceparent", b"2nd")]),
    (None, {"id": "p2", "amount": "-0.5", "paid_ms": None}, []),
    (b"p3", {"id": "p3", "amount": 9.99, "paid_ms": PAID}, []),  # a float: refused
    (b"\xff\xfe", {"id": "p4", "amount": "1", "paid_ms": PAID}, []),  # key not UTF-8
    (b"p5", {"id": "p5", "amount": "1", "paid_ms": PAID}, [("traceparent", b"\xc3\x28")]),
    (b"p6", {"id": "p6", "amount": "1.005", "paid_ms": PAID}, []),  # would round: refused
    (b"p1", {"id": "p1", "amount": "9999999999.99", "paid_ms": PAID + 1000},
     [("traceparent", b"00-def-01")]),
]
LANDED = [0, 1, 6]  # the offsets every table holds


async def produce_records(broker: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        for key, value, headers in RECORDS:
            await producer.send_and_wait(topic, json.dumps(value).encode(), key=key,
                                         headers=headers, partition=0)
    finally:
        await producer.stop()


def at(ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)


# (id, amount, paid_at, message_key, trace, sig, ts_type) of the offsets in LANDED
EXPECTED = [
    ("p1", Decimal("12.34"), at(PAID), "p1", "00-abc-01", b"\xff\x00", "CreateTime"),
    ("p2", Decimal("-0.50"), None, None, None, None, "CreateTime"),
    ("p1", Decimal("9999999999.99"), at(PAID + 1000), "p1", "00-def-01", None, "CreateTime"),
]


def pg_rows(pg: Postgres, table: str) -> list[tuple[Any, ...]]:
    """The rows of ``table`` as EXPECTED has them, by offset."""
    got = pg.psql(
        "SELECT id, amount::text, coalesce(to_char(paid_at AT TIME ZONE 'UTC', "  # noqa: S608
        "'YYYY-MM-DD\"T\"HH24:MI:SS.US'), ''), coalesce(message_key, '<null>'), "
        "coalesce(trace, '<null>'), coalesce(encode(sig, 'hex'), '<null>'), ts_type "
        f'FROM "{table}" ORDER BY _offset')

    def value(text: str) -> Any:
        return None if text == "<null>" else text

    return [(i, Decimal(a), dt.datetime.fromisoformat(p).replace(tzinfo=dt.UTC) if p else None,
             value(k), value(t), None if s == "<null>" else bytes.fromhex(s), ts)
            for i, a, p, k, t, s, ts in got]


def pg_types(pg: Postgres, table: str) -> dict[str, str]:
    return dict(pg.psql("SELECT attname, format_type(atttypid, atttypmod) "  # noqa: S608
                        f"FROM pg_attribute WHERE attrelid = '\"{table}\"'::regclass "
                        "AND attnum > 0 AND NOT attisdropped"))


def spark_read(settings: SparkSettings, table: str) -> Any:
    """A call for ``SparkActor.call``: the rows of ``table`` (refreshed) by offset, as
    dicts, and its column types."""
    def run(spark: Any) -> tuple[list[dict[str, Any]], dict[str, str]]:
        name = qualified(settings, table)
        spark.sql(f"REFRESH TABLE {name}")
        frame = spark.table(name).orderBy("_offset")
        return [r.asDict() for r in frame.collect()], dict(frame.dtypes)
    return run


@pytest.mark.kafka
@pytest.mark.timeout(500)  # kstage starts a JVM; its waits inside add up past 180 s
async def test_record_columns_and_money_land_typed_in_every_sink(
        broker: str, running: Postgres, jdbc_spark: SparkActor, tmp_path: Path,
        kstage: Any) -> None:
    pg, spark_settings = running, jdbc_spark.settings
    group, topic = unique("g-cols"), unique("cols")
    staging, appended, upserted = unique("stg_pay").replace("-", "_"), *(
        unique(name).replace("-", "_") for name in ("pg_pay", "pg_pay_up"))
    await create_topic(broker, topic)
    await produce_records(broker, topic)
    # the staging table as written before the topic declared its record columns
    await jdbc_spark.call(lambda spark: iceberg.create_staging(spark, spark_settings, staging,
                                                               PAYMENTS))
    jdbc = {"url": pg.url, "user": USER, "password": PASSWORD, "jar": JAR}
    with HttpTestServer() as api:
        cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
            "topic": topic, "processor": "test_payments", "format": "json",
            "columns": DECLARED,
            "sinks": [{"type": "jsonl", "path": str(tmp_path / "out.jsonl")},
                      {"type": "http", "url": f"{api.url}/payments"},
                      {"type": "jdbc", "name": "pg", "table": appended, **jdbc},
                      {"type": "jdbc", "name": "pg_upsert", "table": upserted,
                       "mode": "upsert", **jdbc},
                      {"type": "spark", "name": "lake", "table": staging}]}])
        data = yaml.safe_load(cfg.read_text())
        data["spark"] = {"master": "local[1]", "warehouse": spark_settings.warehouse,
                         "flush_max_interval_s": 0.3, "conf": {"spark.driver.memory": "512m"}}
        data["merge"] = {"interval_s": 3600}  # once, after the drain
        cfg.write_text(yaml.safe_dump(data))
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=300) == 0, proc.output()
        bodies = [r.json for r in api.requests]
    assert await committed(broker, group, topic, 1) == {0: len(RECORDS)}

    # dead letters: the two poison messages once each (no sink got them), and each row a
    # table refused once per table sink, naming the column
    dead = read_jsonl(tmp_path / "dead.jsonl")
    poison = {d["offset"]: d["error"] for d in dead if "sink" not in d}
    assert sorted(poison) == [3, 4]
    assert poison[3].startswith("key (key_format string): key is not UTF-8")
    assert poison[4].startswith(f"header 'traceparent' of topic {topic!r} partition 0 offset "
                                "4 is not UTF-8")
    refused = sorted((d["sink"], d["offset"]) for d in dead if "sink" in d)
    assert refused == sorted((sink, offset) for sink in ("pg", "pg_upsert", "lake")
                             for offset in (2, 5))
    reasons = {d["offset"]: d["error"] for d in dead if d.get("sink") == "pg"}
    assert "column 'amount': value 9.99 is a float, not a decimal(12,2)" in reasons[2]
    assert ("column 'amount': value 1.005 has more than 2 digit(s) after the point of "
            "decimal(12,2); it is refused, not rounded") in reasons[5]

    # JSONL: every row the processor made (no table types to check), the record columns in
    lines = read_jsonl(tmp_path / "out.jsonl")
    assert [r["_offset"] for r in lines] == [0, 1, 2, 5, 6]
    assert lines[0] | {"_timestamp": 0} == {
        "id": "p1", "amount": "12.34", "paid_at": "2023-11-14 22:13:20.123000+00:00",
        "message_key": "p1", "trace": "00-abc-01", "sig": "\\xff\x00", "ts_type": "CreateTime",
        "_topic": topic, "_partition": 0, "_offset": 0, "_timestamp": 0}
    assert lines[1]["message_key"] is None and lines[1]["trace"] is None
    # HTTP: each row one JSON request body, the record columns in, as in the JSONL
    assert bodies == lines

    # PostgreSQL: NUMERIC(12,2) and TIMESTAMPTZ, the record columns typed, exact values
    types = pg_types(pg, appended)
    assert {k: types[k] for k in ("amount", "paid_at", "message_key", "trace", "sig",
                                  "ts_type")} == {
        "amount": "numeric(12,2)", "paid_at": "timestamp with time zone", "message_key": "text",
        "trace": "text", "sig": "bytea", "ts_type": "text"}
    assert pg_rows(pg, appended) == EXPECTED
    assert pg_types(pg, upserted)["amount"] == "numeric(12,2)"
    assert sorted(pg_rows(pg, upserted)) == sorted(EXPECTED[1:])  # p1: its newest record

    # Iceberg, read with Spark: the old table gained the record columns; DECIMAL, TIMESTAMP
    rows, dtypes = await jdbc_spark.call(spark_read(spark_settings, staging))
    # the old table's columns, then the ones added (a new column goes last in Iceberg)
    assert list(dtypes) == [c.name for c in PAYMENTS] + [
        iceberg.column_name(c.name) for c in COORDINATES] + ["_ingested_at"] + [
        c.name for c in EXTRA]
    assert {k: dtypes[k] for k in ("amount", "paid_at", "message_key", "sig", "ts_type")} == {
        "amount": "decimal(12,2)", "paid_at": "timestamp", "message_key": "string",
        "sig": "binary", "ts_type": "string"}
    spark_got = [(r["id"], r["amount"], r["paid_at"], r["message_key"], r["trace"],
                  None if r["sig"] is None else bytes(r["sig"]), r["ts_type"]) for r in rows]
    # Spark hands TIMESTAMP as wall time in the session's zone (UTC in kstage's sessions)
    assert [(*r[:2], r[2] and r[2].replace(tzinfo=dt.UTC), *r[3:]) for r in spark_got] == \
        EXPECTED
    assert [r["_offset"] for r in rows] == LANDED

    # the final table (the merge after the drain): one row per id, the newest; typed too
    final, final_types = await jdbc_spark.call(spark_read(spark_settings, final_name(staging)))
    assert [(r["id"], r["amount"], r["message_key"], r["trace"], r["_offset"])
            for r in sorted(final, key=lambda r: r["id"])] == [
        ("p1", Decimal("9999999999.99"), "p1", "00-def-01", 6), ("p2", Decimal("-0.50"), None,
                                                                 None, 1)]
    assert {k: final_types[k] for k in ("amount", "paid_at", "sig")} == {
        "amount": "decimal(12,2)", "paid_at": "timestamp", "sig": "binary"}

    # Iceberg, read with pyiceberg (no Spark): the same types in the table's schema
    reader = IcebergReader({"warehouse": spark_settings.warehouse})
    schema = {f.name: str(f.field_type) for f in reader._table(staging).schema().fields}
    assert {k: schema[k] for k in ("amount", "paid_at", "message_key", "sig")} == {
        "amount": "decimal(12, 2)", "paid_at": "timestamptz", "message_key": "string",
        "sig": "binary"}
    by_offset = {r["_offset"]: r for r in reader.rows(staging)}
    assert sorted(by_offset) == LANDED
    assert [(by_offset[o]["amount"], by_offset[o]["paid_at"]) for o in LANDED] == [
        (e[1], e[2]) for e in EXPECTED]


async def test_an_existing_jdbc_table_without_the_record_columns_is_refused_then_written(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    pg, table = running, "stg_pay_old"
    pg.psql(create_table_sql(table, PAYMENTS))  # as created before the record columns
    pg.psql(f'ALTER TABLE "{table}" OWNER TO {USER}')
    sink = JdbcSink(settings(pg, table), jdbc_spark)
    sink.bind(SinkContext(columns=(*PAYMENTS, *EXTRA), processor="test_payments"))
    with pytest.raises(FatalError) as refused:
        async with asyncio.timeout(90):
            await sink.open()
    message = str(refused.value)
    assert f"table {table} has no column(s) message_key, trace, sig, ts_type" in message
    alter = re.search(r"\(ALTER TABLE .*? adds the nullable ones\)", message)
    assert alter is not None, message
    pg.psql(alter.group(0)[1:-len(" adds the nullable ones)")])
    sink = JdbcSink(settings(pg, table), jdbc_spark)
    sink.bind(SinkContext(columns=(*PAYMENTS, *EXTRA), processor="test_payments"))
    async with asyncio.timeout(90):
        await sink.open()
        await sink.write([{"id": "a", "amount": Decimal("0.01"), "paid_at": at(PAID),
                           "message_key": "k", "trace": None, "sig": b"\x00",
                           "ts_type": "LogAppendTime", "_topic": "t", "_partition": 0,
                           "_offset": 0, "_timestamp": PAID}])
        await sink.close()
    assert pg_rows(pg, table) == [("a", Decimal("0.01"), at(PAID), "k", None, b"\x00",
                                   "LogAppendTime")]


@pytest.mark.kafka
async def test_the_timestamp_type_column_says_log_append_time_when_the_broker_stamped(
        broker: str, broker_kind: str, tmp_path: Path, kstage: Any) -> None:
    """A topic with ``message.timestamp.type=LogAppendTime``: the broker's stamp replaces
    the producer's, and the column says so; a JSON key lands as its JSON text, a string
    key as it is. Tansu accepts the topic setting but keeps the producer's CreateTime
    (its records say so, and so does the column)."""
    group, topic = unique("g-cols-lat"), unique("cols-lat")
    admin = AIOKafkaAdminClient(bootstrap_servers=broker)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1, topic_configs={
            "message.timestamp.type": "LogAppendTime"})])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        for key in (b'{"order":7}', b'"s-1"'):
            await producer.send_and_wait(topic, b'{"v":1}', key=key, timestamp_ms=1000,
                                         partition=0)
    finally:
        await producer.stop()
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
        "topic": topic, "processor": "json_rows", "format": "json", "key_format": "json",
        "columns": [{"name": "k", "from": "key"}, {"name": "tt", "from": "timestamp_type"}],
        "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}])
    proc = kstage(cfg, "--drain")
    assert await proc.wait(timeout=120) == 0, proc.output()
    lines = read_jsonl(tmp_path / "out.jsonl")
    stamped = broker_kind == KAFKA
    kind = "LogAppendTime" if stamped else "CreateTime"
    assert [(r["k"], r["tt"]) for r in lines] == [('{"order":7}', kind), ("s-1", kind)]
    # the broker's time, not the producer's, exactly when the type says so
    assert [r["_timestamp"] > 1000 for r in lines] == [stamped, stamped]


@pytest.mark.kafka
async def test_an_avro_key_lands_as_its_json_text_and_a_bad_one_is_poison(
        broker: str, tmp_path: Path, kstage: Any) -> None:
    """``key_format: avro`` through the schema registry, like an Avro value: a record key
    lands as its JSON text; a key whose schema id is unknown is poison, dead-lettered with
    the key format named, and the message never reaches the sink."""
    group, topic = unique("g-cols-avro"), unique("cols-avro")
    await create_topic(broker, topic)
    schema = {"type": "record", "name": "OrderKey",
              "fields": [{"name": "shop", "type": "string"}, {"name": "n", "type": "long"}]}
    with FakeRegistry() as registry:
        sid = registry.register(f"{topic}-key", json.dumps(schema))
        producer = AIOKafkaProducer(bootstrap_servers=broker)
        await producer.start()
        try:
            for key in (encode(parse_schema(schema), sid, {"shop": "é", "n": 7}),
                        encode(parse_schema(schema), sid + 99, {"shop": "x", "n": 1})):
                await producer.send_and_wait(topic, b'{"v":1}', key=key, partition=0)
        finally:
            await producer.stop()
        cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
            "topic": topic, "processor": "json_rows", "format": "json", "key_format": "avro",
            "columns": [{"name": "k", "from": "key"}],
            "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}])
        data = yaml.safe_load(cfg.read_text())
        data["schema_registry"] = {"url": registry.url, "not_found_retry_s": 0}
        cfg.write_text(yaml.safe_dump(data))
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=120) == 0, proc.output()
    assert [(r["k"], r["_offset"]) for r in read_jsonl(tmp_path / "out.jsonl")] == [
        ('{"shop":"é","n":7}', 0)]
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [d["offset"] for d in dead] == [1]
    assert dead[0]["error"].startswith("key (key_format avro): "), dead[0]["error"]
    assert await committed(broker, group, topic, 1) == {0: 2}
