"""The column types of issue 34 end to end: ``float``, ``date``, ``timestamp_ntz`` and the
nested ``struct``/``array``/``map`` (tests/plugins' ``test_nested``: a struct inside an
array inside a map, a decimal and a NOT NULL field inside a struct), landed by ``kstage run
--drain`` on the real broker in (1) an Iceberg staging table written by Spark and
PostgreSQL through Spark's JDBC writer, (2) an Iceberg staging table written by pyiceberg
(``spark.appends: pyiceberg``); read back with Spark, with pyiceberg and with psql, values
exact (a float32 is the nearest one to the value given, a naive datetime stays naive, a
date stays a date). Each staging table exists before the run without the nested columns:
the run adds them (``ALTER TABLE ADD COLUMNS`` through Spark, a schema update through
pyiceberg). The values that do not fit are dead-lettered by each table sink, naming the
column and the path inside it; the rest of the batch lands.

One Spark session in this process (``jdbc_spark``) creates the Spark-path table and reads
every table.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from kstage_test_plugins import NESTED_COLUMNS

from actors.sinks import SinkContext
from actors.sinks.jdbc import JdbcSink
from actors.sinks.spark import iceberg, pyiceberg_nulls
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import qualified
from tests.integration.test_jdbc_sink import PASSWORD
from tests.integration.test_jdbc_sink import settings as jdbc_settings
from tests.integration.test_pyiceberg_tables import created_by_pyiceberg
from tests.integration.test_record_columns import pg_types
from tests.kafkautil import committed, create_topic, produce, read_jsonl, unique, write_config
from tests.lake import IcebergReader
from tests.postgres import JAR, USER, Postgres

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

FLAT = tuple(c for c in NESTED_COLUMNS if c.name not in ("order", "tags"))
"""The columns of the tables as they were before the nested ones were declared."""

TAGS = {"x": [{"at": {"$ntz": "2024-01-01T00:00:00.000001"}, "raw": {"$hex": "ff00"},
               "when": {"$ts": "2024-01-01T01:00:00+01:00"}}, None], "y": []}
# offsets 0..8 of the topic's one partition; the good ones at 0, 1, 8
RECORDS: list[dict[str, Any]] = [
    {"id": "a", "f": 0.1, "d": {"$date": "2024-02-29"}, "n": {"$ntz": "2024-02-29T23:59:58.123456"},
     "order": {"id": 9007199254740993, "lines": [{"sku": "k1", "qty": 2}, {"qty": -1}],
               "placed": {"$date": "2024-03-01"}, "unit price": {"$dec": "1234567.89"}},
     "tags": TAGS, "xs": [1, None, -(2**63)]},
    {"id": "b", "f": 16777217},  # an int no float32 holds: the nearest, 16777216
    {"id": "c", "f": "1.5"},
    {"id": "d", "n": {"$ts": "2024-01-01T00:00:00+00:00"}},
    {"id": "e", "order": {"id": 1, "qty": 3}},
    {"id": "f", "order": [{"id": 1}]},
    {"id": "g", "order": {"id": 1, "lines": [{"qty": 1}, {"qty": 2**40}]}},
    {"id": "h", "tags": {"x": [{"raw": "ff"}]}},
    {"id": "i", "order": {"id": 2}, "xs": []},
]
LANDED = [0, 1, 8]
REFUSED = {
    2: "column 'f': value '1.5' (str) is not a float",
    3: "column 'n': datetime 2024-01-01T00:00:00+00:00 has a time zone, but a timestamp_ntz "
       "is a local date-time without one",
    4: "column 'order': unknown field(s) 'qty': struct<id:long NOT NULL,lines:",
    5: "column 'order': value [{'id': 1}] (list) is not a struct: give a dict",
    6: "column 'order': at lines[1].qty: value 1099511627776 (int) is not a int",
    7: "column 'tags': at ['x'][0].raw: value 'ff' (str) is not a binary",
}
NTZ = dt.datetime(2024, 2, 29, 23, 59, 58, 123456)
ORDER_A = {"id": 9007199254740993, "lines": [{"sku": "k1", "qty": 2}, {"sku": None, "qty": -1}],
           "placed": dt.date(2024, 3, 1), "unit price": Decimal("1234567.89")}
ORDER_I = {"id": 2, "lines": None, "placed": None, "unit price": None}


def tags(raw: Any, when: dt.datetime) -> dict[str, Any]:
    return {"x": [{"at": dt.datetime(2024, 1, 1, 0, 0, 0, 1), "raw": raw, "when": when}, None],
            "y": []}


def spark_rows(settings: Any, table: str) -> Any:
    """A call for ``SparkActor.call``: the rows of ``table`` by offset, nested values as
    dicts and lists, and the column types."""
    def run(spark: Any) -> tuple[list[dict[str, Any]], dict[str, str]]:
        name = qualified(settings, table)
        spark.sql(f"REFRESH TABLE {name}")
        frame = spark.table(name).orderBy("_offset")
        return [r.asDict(recursive=True) for r in frame.collect()], dict(frame.dtypes)
    return run


def check_dead(path: Path, sinks: tuple[str, ...]) -> None:
    """Every refused row dead-lettered once per table sink, naming column and path."""
    dead = read_jsonl(path)
    assert sorted((d["sink"], d["offset"]) for d in dead) == sorted(
        (sink, offset) for sink in sinks for offset in REFUSED), dead
    for d in dead:
        assert REFUSED[d["offset"]] in d["error"], d


def check_spark(rows: list[dict[str, Any]], dtypes: dict[str, str]) -> None:
    assert [r["_offset"] for r in rows] == LANDED
    assert {k: dtypes[k] for k in ("f", "d", "n", "order", "tags", "xs")} == {
        "f": "float", "d": "date", "n": "timestamp_ntz",
        "order": "struct<id:bigint,lines:array<struct<sku:string,qty:int>>,placed:date,"
                 "unit price:decimal(9,2)>",
        "tags": "map<string,array<struct<at:timestamp_ntz,raw:binary,when:timestamp>>>",
        "xs": "array<bigint>"}
    a, b, i = rows
    # a float32 widened back to a double: the nearest float32 to 0.1
    assert (a["f"], a["d"], a["n"]) == (0.10000000149011612, dt.date(2024, 2, 29), NTZ)
    assert a["n"].tzinfo is None
    assert a["order"] == ORDER_A
    # Spark hands a TIMESTAMP as wall time in the session's zone (UTC in kstage's)
    assert a["tags"] == tags(bytearray(b"\xff\x00"), dt.datetime(2024, 1, 1))
    assert a["xs"] == [1, None, -(2**63)]
    assert (b["f"], b["d"], b["order"], b["tags"], b["xs"]) == (16777216.0, None, None, None,
                                                                None)
    assert (i["order"], i["xs"]) == (ORDER_I, [])


def check_pyiceberg(rows: list[dict[str, Any]]) -> None:
    rows = sorted(rows, key=lambda r: r["_offset"])
    assert [r["_offset"] for r in rows] == LANDED
    a, b, i = rows
    assert (a["f"], a["d"], a["n"], a["order"]) == (0.10000000149011612, dt.date(2024, 2, 29),
                                                    NTZ, ORDER_A)
    assert a["n"].tzinfo is None
    # Arrow hands a map as its (key, value) pairs, a timestamptz aware in UTC
    assert dict(a["tags"]) == tags(b"\xff\x00", dt.datetime(2024, 1, 1, tzinfo=dt.UTC))
    assert (b["f"], b["order"], b["tags"]) == (16777216.0, None, None)
    assert (i["order"], i["xs"]) == (ORDER_I, [])


def config(tmp: Path, broker: str, group: str, topic: str, sinks: list[dict[str, Any]],
           spark: dict[str, Any]) -> Path:
    tmp.mkdir()
    cfg = write_config(tmp / "kstage.yml", broker, group, [{
        "topic": topic, "processor": "test_nested", "format": "json", "sinks": sinks}])
    data = yaml.safe_load(cfg.read_text())
    data["spark"] = {"master": "local[1]", "flush_max_interval_s": 0.3,
                     "conf": {"spark.driver.memory": "512m"}, **spark}
    cfg.write_text(yaml.safe_dump(data))
    return cfg


@pytest.mark.timeout(600)  # two kstage runs, one with a JVM
async def test_every_new_type_lands_in_iceberg_both_ways_and_in_postgresql(
        broker: str, running: Postgres, jdbc_spark: SparkActor, tmp_path: Path,
        kstage: Any) -> None:
    pg, settings = running, jdbc_spark.settings
    topic = unique("nested")
    staged, pyice, appended = (unique(n).replace("-", "_") for n in ("stg_n", "pyi_n", "pg_n"))
    await create_topic(broker, topic)
    await produce(broker, topic, RECORDS)
    # both staging tables as written before the nested columns were declared
    await jdbc_spark.call(lambda spark: iceberg.create_staging(spark, settings, staged, FLAT))
    assert await created_by_pyiceberg(settings, pyice, FLAT) == []

    # (1) Spark appends, and PostgreSQL through the JDBC sink
    group = unique("g-nested")
    jdbc = {"url": pg.url, "user": USER, "password": PASSWORD, "jar": JAR}
    cfg = config(tmp_path / "spark", broker, group, topic, [
        {"type": "spark", "name": "lake", "table": staged},
        {"type": "jdbc", "name": "pg", "table": appended, **jdbc}],
        {"warehouse": settings.warehouse})
    proc = kstage(cfg, "--drain")
    assert await proc.wait(timeout=300) == 0, proc.output()
    assert await committed(broker, group, topic, 1) == {0: len(RECORDS)}
    check_dead(tmp_path / "spark" / "dead.jsonl", ("lake", "pg"))

    # (2) pyiceberg appends (no JVM)
    group = unique("g-nested-pyi")
    cfg = config(tmp_path / "pyi", broker, group, topic, [
        {"type": "spark", "name": "lake_pyi", "table": pyice}],
        {"warehouse": settings.warehouse, "appends": "pyiceberg"})
    proc = kstage(cfg, "--drain")
    assert await proc.wait(timeout=300) == 0, proc.output()
    assert await committed(broker, group, topic, 1) == {0: len(RECORDS)}
    check_dead(tmp_path / "pyi" / "dead.jsonl", ("lake_pyi",))

    # each table gained the nested columns, last (a new column goes last in Iceberg)
    pyiceberg_nulls.install()  # this process's pyiceberg reader keeps NULL lists of structs
    reader = IcebergReader({"warehouse": settings.warehouse})
    for table in (staged, pyice):
        names = [f.name for f in reader._table(table).schema().fields]
        assert names[-2:] == ["order", "tags"], names
        # read with Spark, and with pyiceberg: the same values, whichever wrote them
        check_spark(*await jdbc_spark.call(spark_rows(settings, table)))
        check_pyiceberg(reader.rows(table))
    schema = reader._table(pyice).schema()
    assert str(schema.find_field("n").field_type) == "timestamp"
    assert str(schema.find_field("f").field_type) == "float"

    # PostgreSQL: REAL, DATE, TIMESTAMP, nested values as their exact JSON in jsonb
    types = pg_types(pg, appended)
    assert {k: types[k] for k in ("f", "d", "n", "order", "tags", "xs")} == {
        "f": "real", "d": "date", "n": "timestamp without time zone", "order": "jsonb",
        "tags": "jsonb", "xs": "jsonb"}
    got = pg.psql('SELECT id, coalesce(f::text, \'\'), coalesce(d::text, \'\'), '  # noqa: S608
                  'coalesce(n::text, \'\'), coalesce("order"::text, \'null\'), '
                  f'coalesce(tags::text, \'null\'), coalesce(xs::text, \'null\') FROM "{appended}" '
                  "ORDER BY _offset")

    def js(text: str) -> Any:
        return json.loads(text, parse_float=Decimal)

    assert [(i, f, d, n, js(o), js(t), js(x)) for i, f, d, n, o, t, x in got] == [
        ("a", "0.1", "2024-02-29", "2024-02-29 23:59:58.123456",
         {**ORDER_A, "placed": "2024-03-01"},
         {"x": [{"at": "2024-01-01T00:00:00.000001", "raw": "/wA=",
                 "when": "2024-01-01T00:00:00+00:00"}, None], "y": []},
         [1, None, -(2**63)]),
        ("b", "1.6777216e+07", "", "", None, None, None),
        ("i", "", "", "", ORDER_I, None, [])]


async def test_a_write_without_a_position_lands_nested_values_in_postgresql(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    """:meth:`JdbcSink.write` (no Kafka position: not the exactly-once flush) goes through
    Spark's JDBC writer, which has no jsonb: the rows of a table with nested columns go
    through the driver as their JSON instead, in one transaction."""
    pg, table = running, unique("pg_nw").replace("-", "_")
    sink = JdbcSink(jdbc_settings(pg, table), jdbc_spark)
    sink.bind(SinkContext(columns=NESTED_COLUMNS, processor="test_nested"))
    row = {"id": "a", "f": 0.5, "d": dt.date(2024, 2, 29), "n": NTZ,
           "order": {"id": 1, "lines": [{"qty": 2}], "unit price": Decimal("0.10")},
           "tags": {"k": None}, "xs": [1], "_topic": "t", "_partition": 0, "_offset": 0,
           "_timestamp": 0}
    async with asyncio.timeout(90):
        await sink.open()
        await sink.write([row])
        await sink.close()
    got = pg.psql('SELECT f::text, d::text, n::text, "order"::text, '  # noqa: S608
                  f'tags::text, xs::text FROM "{table}"')
    assert [(f, d, n, json.loads(o, parse_float=Decimal), json.loads(t), json.loads(x))
            for f, d, n, o, t, x in got] == [
        ("0.5", "2024-02-29", "2024-02-29 23:59:58.123456",
         {"id": 1, "lines": [{"sku": None, "qty": 2}], "placed": None,
          "unit price": Decimal("0.10")}, {"k": None}, [1])]
