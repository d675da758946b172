"""``spark.appends: pyiceberg``: staging tables created, checked and read through pyiceberg,
with no JVM, exactly as Spark makes and checks them:

* a table created by Spark's DDL and one created by pyiceberg, loaded by pyiceberg, compared
  field by field (schema: ids, names, types, required; partition spec; sort order;
  properties; format version; location under the warehouse), before and after a new
  nullable column is added each way; the catalog's own tables (a fresh catalog made by the
  JVM, another by pyiceberg) have the same columns, and the rows of the table and the
  namespace the same values; Spark reads and appends to the table pyiceberg created;
  with a configured ``partition_by`` (every transform kind) and ``table_properties`` too,
  the spec also read back by Spark's ``DESCRIBE``;
* the column check of a table Spark created, through pyiceberg: the same FatalError text as
  Spark's, naming the table and the column, for a changed type, a removed column and a new
  NOT NULL column;
* the offsets read at assignment through pyiceberg: the highest over the current history;
  PostgreSQL (the catalog) stopped at assignment: a retriable SinkError naming the table,
  the write refused before anything is written, and after the restart everything once;
* the SQLite catalog locked by another process: a new table's registration fails (retried)
  and creates nothing, the offsets read goes on (WAL);
* a reset of a partition's offsets (``kstage tables reset-offsets``), committed through
  pyiceberg or through Spark's session: both readers read the reset offsets, then the
  appends' after it.

One SQLite catalog for the module, with the test process's Spark session (local[1], 512m).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from actors.errors import FatalError, SinkError
from actors.offsets import Entry
from actors.sinks import SinkContext
from actors.sinks.spark import iceberg, offset_history, partitioning, pyiceberg_tables
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.partitioning import Layout
from actors.sinks.spark.pyiceberg_appends import Lake, PyIcebergAppends
from actors.sinks.spark.sink import SparkSink, SparkSinkSettings
from actors.sinks.table.columns import COORDINATES
from actors.sinks.table.rows import record_batch
from processors.base import Column
from tests.gobblin_events import PROCESSOR, TOPIC, events
from tests.lake import IcebergReader, LockHolder, spark_rows, spark_section, spark_settings
from tests.postgres import USER, Postgres

pytestmark = [pytest.mark.slow]

COLUMNS = (Column("s", "string", True), Column("i", "int", False), Column("l", "long", True),
           Column("d", "double", True), Column("b", "boolean", True),
           Column("bin", "binary", True), Column("ts", "timestamp", False),
           Column("dec", "decimal(10,2)", True))
NEW = Column("added", "long", True)


def place(root: Path) -> dict[str, Any]:
    return {"uri": f"jdbc:sqlite:{root / 'catalog.db'}", "warehouse": str(root / "wh")}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The module's ``spark.catalog`` (made by the JVM: Spark's session opens it first)."""
    return place(tmp_path_factory.mktemp("pyice-tables-spark"))


@pytest.fixture(scope="module")
def reader(catalog: dict[str, Any]) -> Iterator[SparkActor]:
    actor = SparkActor(spark_settings(spark_section(catalog, appends="pyiceberg")))
    yield actor
    actor.stop()


def layout(loaded: Any, warehouse: str) -> dict[str, Any]:
    """What a table is, as pyiceberg loads it, its location relative to the warehouse."""
    metadata = loaded.metadata
    return {
        "format_version": metadata.format_version,
        "schema": [(f.field_id, f.name, str(f.field_type), f.required)
                   for f in loaded.schema().fields],
        "schemas": len(metadata.schemas),
        "identifier_fields": list(loaded.schema().identifier_field_ids),
        "last_column_id": metadata.last_column_id,
        "spec": [(f.source_id, f.field_id, str(f.transform), f.name)
                 for f in loaded.spec().fields],
        "spec_id": loaded.spec().spec_id,
        "last_partition_id": metadata.last_partition_id,
        "sort_order": (loaded.sort_order().order_id, list(loaded.sort_order().fields)),
        "properties": dict(loaded.properties),
        "location": loaded.location().removeprefix(warehouse),
        "snapshots": len(loaded.snapshots()),
    }


def catalog_tables(database: Path) -> dict[str, Any]:
    """The catalog's own tables in a SQLite file: columns (name, type, not null, primary
    key position) and the rows of namespace ``kstage`` (without locations)."""
    with sqlite3.connect(database) as db:
        columns = {name: db.execute(f"PRAGMA table_info({name})").fetchall()
                   for name in ("iceberg_tables", "iceberg_namespace_properties")}
        tables = db.execute("SELECT catalog_name, table_namespace, table_name, iceberg_type "
                            "FROM iceberg_tables ORDER BY table_name").fetchall()
        namespaces = db.execute("SELECT * FROM iceberg_namespace_properties ORDER BY "
                                "property_key").fetchall()
        mode = db.execute("PRAGMA journal_mode").fetchone()
    db.close()
    return {"columns": columns, "tables": tables, "namespaces": namespaces, "mode": mode}


async def created_by_pyiceberg(settings: Any, table: str,
                               columns: tuple[Column, ...]) -> list[str]:
    lake = Lake(settings)
    try:
        return await lake.call(lambda: pyiceberg_tables.create_staging(
            lake.catalog(), settings, table, columns))
    finally:
        lake.stop()


@pytest.mark.timeout(300)
async def test_pyiceberg_creates_the_table_spark_ddl_creates(
        tmp_path: Path, catalog: dict[str, Any], reader: SparkActor) -> None:
    table = "stg_ddl_same"
    by_spark = reader.settings
    await reader.call(lambda spark: iceberg.create_staging(spark, by_spark, table, COLUMNS))
    by_pyiceberg = spark_settings(spark_section(place(tmp_path), appends="pyiceberg"))
    assert not (tmp_path / "catalog.db").exists()  # pyiceberg makes the catalog too
    assert await created_by_pyiceberg(by_pyiceberg, table, COLUMNS) == []

    spark_side, pyiceberg_side = IcebergReader(by_spark), IcebergReader(by_pyiceberg)
    made = layout(spark_side._table(table), catalog["warehouse"])
    assert made == layout(pyiceberg_side._table(table), str(tmp_path / "wh"))
    assert made["location"] == f"/kstage/{table}"  # the JDBC catalog's default
    assert made["properties"]["write.distribution-mode"] == "none"  # a spot check
    assert "format-version" not in made["properties"] and made["format_version"] == 2
    assert catalog_tables(Path(catalog["uri"].removeprefix("jdbc:sqlite:"))) == \
        catalog_tables(tmp_path / "catalog.db")

    # A new nullable column, each way (Spark's ALTER TABLE, pyiceberg's update_schema).
    wider = (*COLUMNS, NEW)
    assert await reader.call(lambda spark: iceberg.create_staging(
        spark, by_spark, table, wider)) == ["added"]
    assert await created_by_pyiceberg(by_pyiceberg, table, wider) == ["added"]
    made = layout(spark_side._table(table), catalog["warehouse"])
    assert made == layout(pyiceberg_side._table(table), str(tmp_path / "wh"))
    assert made["schema"][-1] == (14, "added", "long", False)

    # Spark appends to and reads a table pyiceberg created in its catalog.
    assert await created_by_pyiceberg(by_spark, "stg_ddl_by_pyiceberg", wider) == []
    await reader.call(lambda spark: spark.sql(
        "INSERT INTO kstage.kstage.stg_ddl_by_pyiceberg (s, i, ts, _topic, "
        "_kafka_partition, _offset, _ingested_at) VALUES ('x', 1, current_timestamp(), 't', "
        "0, 0, current_timestamp())"))
    rows = await reader.call(lambda spark: spark_rows(spark, "stg_ddl_by_pyiceberg"))
    assert [(r["s"], r["i"], r["added"]) for r in rows] == [("x", 1, None)]


async def created_with(settings: Any, table: str, columns: tuple[Column, ...],
                       made: Layout) -> list[str]:
    lake = Lake(settings)
    try:
        return await lake.call(lambda: pyiceberg_tables.create_staging(
            lake.catalog(), settings, table, columns, made))
    finally:
        lake.stop()


@pytest.mark.timeout(300)
async def test_a_configured_spec_and_properties_are_made_the_same_both_ways(
        tmp_path: Path, catalog: dict[str, Any], reader: SparkActor) -> None:
    """``sink.partition_by`` (every transform kind) and ``sink.table_properties``: the
    table Spark's DDL makes and the one pyiceberg makes are the same, field by field (the
    spec's field ids, names, transforms, sources), and Spark's ``DESCRIBE`` shows the
    spec."""
    table = "stg_ddl_layout"
    made = Layout(partitioning.parse_all(["i", "day(ts)", "bucket(16, s)",
                                          "truncate(4, dec)", "bucket(3, _offset)"]),
                  (("kstage.team", "it's \\ quoted"), ("write.target-file-size-bytes", "4096")))
    by_spark = reader.settings
    await reader.call(lambda spark: iceberg.create_staging(spark, by_spark, table, COLUMNS,
                                                           made))
    by_pyiceberg = spark_settings(spark_section(place(tmp_path), appends="pyiceberg"))
    assert await created_with(by_pyiceberg, table, COLUMNS, made) == []
    spark_made = layout(IcebergReader(by_spark)._table(table), catalog["warehouse"])
    assert spark_made == layout(IcebergReader(by_pyiceberg)._table(table),
                                str(tmp_path / "wh"))
    assert [(name, transform) for _, _, transform, name in spark_made["spec"]] == [
        ("i", "identity"), ("ts_day", "day"), ("s_bucket", "bucket[16]"),
        ("dec_trunc", "truncate[4]"), ("_offset_bucket", "bucket[3]")]
    assert spark_made["properties"]["kstage.team"] == "it's \\ quoted"
    assert spark_made["properties"]["write.target-file-size-bytes"] == "4096"
    described = await reader.call(lambda spark: [
        (r["col_name"], r["data_type"]) for r in spark.sql(
            f"DESCRIBE TABLE kstage.kstage.{table}").collect()])
    at = described.index(("# Partitioning", ""))
    assert described[at + 1:] == [
        ("Part 0", "i"), ("Part 1", "days(ts)"), ("Part 2", "bucket(16, s)"),
        ("Part 3", "truncate(4, dec)"), ("Part 4", "bucket(3, _offset)")]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("columns, named", [
    ((Column("s", "long", True), *COLUMNS[1:]), "column 's' was string, is now declared "
                                                 "bigint"),
    (COLUMNS[1:], "column 's' (string) is no longer declared"),
    ((*COLUMNS, Column("needed", "int", False)), "new column 'needed' is NOT NULL"),
])
async def test_the_column_check_through_pyiceberg_says_what_spark_says(
        catalog: dict[str, Any], reader: SparkActor, columns: tuple[Column, ...],
        named: str) -> None:
    table = "stg_ddl_check"
    settings = reader.settings
    await reader.call(lambda spark: iceberg.create_staging(spark, settings, table, COLUMNS))
    with pytest.raises(FatalError) as by_spark:
        await reader.call(lambda spark: iceberg.create_staging(spark, settings, table,
                                                               columns))
    with pytest.raises(FatalError) as by_pyiceberg:
        await created_by_pyiceberg(settings, table, columns)
    assert str(by_pyiceberg.value) == str(by_spark.value)
    assert f"table kstage.kstage.{table}: the processor's columns do not fit" in str(
        by_pyiceberg.value)
    assert named in str(by_pyiceberg.value)
    assert len(IcebergReader(settings)._table(table).schema().fields) == len(COLUMNS) + 5


def batch(topic: str, partition: int, offsets: range) -> Any:
    rows = [{"note": "n", "_topic": topic, "_partition": partition, "_offset": o,
             "_timestamp": o} for o in offsets]
    made, refused = record_batch(rows, (Column("note", "string", True), *COORDINATES), "t")
    assert not refused
    return made


@pytest.mark.timeout(300)
async def test_offsets_at_assignment_are_the_highest_of_the_current_history(
        catalog: dict[str, Any], reader: SparkActor) -> None:
    """Read through pyiceberg on the lake thread: per partition the highest any snapshot
    records (an older snapshot ahead of the newest one for a partition still counts), the
    same as Spark's read."""
    table = "stg_ddl_offsets"
    settings = reader.settings
    columns = (Column("note", "string", True),)
    await created_by_pyiceberg(settings, table, columns)
    lake = Lake(settings)
    try:
        appends = PyIcebergAppends(lake, table, "w")
        await lake.call(lambda: appends.write([batch("a", 0, range(5))],
                                              {("g", "a", 0): 5, ("g", "a", 1): 9}, "c1"))
        # A writer that recorded partition 1 lower (not carried: written by hand).
        loaded = await lake.call(lambda: lake.table(table))
        await lake.call(lambda: loaded.append(loaded.scan(limit=0).to_arrow(),
                                              snapshot_properties={
                                                  iceberg.OFFSETS: iceberg.format_offsets(
                                                      {("g", "a", 0): 7, ("g", "a", 1): 3}),
                                              }))
        found = await lake.call(lambda: pyiceberg_tables.table_offsets(lake.table(table)))
    finally:
        lake.stop()
    assert found == {("g", "a", 0): 7, ("g", "a", 1): 9}
    assert found == await reader.call(lambda spark: offset_history.table_offsets(
        spark, settings, table))


@pytest.mark.timeout(120)
async def test_catalog_down_at_assignment_fails_the_read_and_the_write_then_lands_once(
        tmp_path: Path, running: Postgres) -> None:
    """PostgreSQL (the catalog) stopped after the table was registered: the offsets read at
    assignment fails with a retriable SinkError naming the table, the first write of the
    partition reads them again and fails before writing anything; once PostgreSQL is back,
    the write lands once, the offsets read is the table's, and no JVM was started."""
    table = "stg_pyice_pg_assign"
    settings = spark_settings(spark_section(
        {"uri": running.url, "user": USER, "password": "secret",
         "warehouse": str(tmp_path / "warehouse")}, appends="pyiceberg"))
    actor = SparkActor(settings)
    sink = SparkSink(SparkSinkSettings(table=table), actor)
    sink.bind(SinkContext(group="g", topic=TOPIC, columns=PROCESSOR.columns,
                          table=PROCESSOR.table, processor=PROCESSOR.name))
    try:
        await sink.open()
        assert await sink.assigned([(TOPIC, 0)]) == {}  # a new table holds nothing
        await sink.write_at(list(events(0, 0, 4)), Entry(TopicPartition(TOPIC, 0), 4, 4))
        await sink.revoked([(TOPIC, 0)], 5)
        running.stop()
        try:
            with pytest.raises(SinkError, match=f"kstage.kstage.{table}: cannot read the "
                                                "Kafka offsets"):
                await sink.assigned([(TOPIC, 0)])
            with pytest.raises(SinkError, match=table):
                await sink.write_at(list(events(0, 4, 4)),
                                    Entry(TopicPartition(TOPIC, 0), 8, 4))
        finally:
            running.start()
        # A new assignment: the refused batch (up to 8) is of the earlier one and is never
        # written, so the batch read from the new position (up to 9, a replay of the
        # first one included) must not wait for it (it did: the write hung).
        assert await sink.assigned([(TOPIC, 0)]) == {(TOPIC, 0): 4}
        await asyncio.wait_for(
            sink.write_at(list(events(0, 0, 9)), Entry(TopicPartition(TOPIC, 0), 9, 9)), 60)
        assert actor.jvm_pid is None and "running" not in repr(actor)
    finally:
        await sink.close()
        await actor.astop()
    pyiceberg = IcebergReader(settings)
    assert sorted(pyiceberg.coordinates(table).elements()) == [
        (TOPIC, 0, o) for o in range(9)]
    assert pyiceberg.offsets(table) == {("g", TOPIC, 0): 9}


@pytest.mark.timeout(300)
async def test_sqlite_catalog_locked_fails_registration_not_the_offsets_read(
        tmp_path: Path) -> None:
    """Another process holds the SQLite catalog's write lock (beyond the 1 s busy
    timeout): a new table's registration fails with a retriable SinkError naming it and
    creates nothing; the offsets read of a registered table goes on (WAL: readers do not
    wait for the writer); once the lock is released the registration succeeds."""
    database = tmp_path / "catalog.db"
    settings = spark_settings(spark_section(
        {"uri": f"jdbc:sqlite:{database}?journal_mode=WAL&busy_timeout=1000",
         "warehouse": str(tmp_path / "wh")}, appends="pyiceberg"))
    actor = SparkActor(settings)
    context = SinkContext(group="g", topic=TOPIC, columns=PROCESSOR.columns,
                          table=PROCESSOR.table, processor=PROCESSOR.name)
    first = SparkSink(SparkSinkSettings(table="stg_pyice_lock_a"), actor)
    first.bind(context)
    second = SparkSink(SparkSinkSettings(table="stg_pyice_lock_b"), actor)
    second.bind(context)
    lock = LockHolder(database)
    try:
        await first.open()
        await first.write_at(list(events(0, 0, 3)), Entry(TopicPartition(TOPIC, 0), 3, 3))
        lock.hold()
        try:
            with pytest.raises(SinkError, match="stg_pyice_lock_b: cannot register"):
                await second.open()
            assert await first.assigned([(TOPIC, 0)]) == {(TOPIC, 0): 3}
        finally:
            lock.release()
        await second.open()
        assert actor.jvm_pid is None
    finally:
        await actor.astop()
    reader = IcebergReader(settings)
    assert reader.exists("stg_pyice_lock_b") and reader.snapshots("stg_pyice_lock_b") == 0
    assert reader.offsets("stg_pyice_lock_a") == {("g", TOPIC, 0): 3}


@pytest.mark.timeout(300)
async def test_a_reset_committed_either_way_is_read_alike_by_both_readers(
        catalog: dict[str, Any], reader: SparkActor) -> None:
    """``kstage tables reset-offsets``' snapshot, committed through pyiceberg (a ``jdbc``
    catalog) or through Spark's session (a ``rest`` one): no rows added, and the offsets
    Spark's reader and pyiceberg's read are the reset ones, then the highest of the appends
    after it."""
    from actors.tables.offset_resets import PyIcebergOffsets, SparkOffsets

    table = "stg_ddl_resets"
    settings = reader.settings
    await created_by_pyiceberg(settings, table, (Column("note", "string", True),))
    p0, p1 = ("g", "a", 0), ("g", "a", 1)
    lake = PyIcebergOffsets(settings)
    spark = SparkOffsets(reader)
    try:
        appends = PyIcebergAppends(lake.lake, table, "w")
        await lake.lake.call(lambda: appends.write([batch("a", 0, range(500, 505))],
                                                   {p0: 505, p1: 9}, "c1"))
        assert await lake.offsets(table) == await spark.offsets(table) == {p0: 505, p1: 9}
        await lake.reset(table, {p0: 0})  # through pyiceberg
        assert await lake.offsets(table) == await spark.offsets(table) == {p0: 0, p1: 9}
        await spark.reset(table, {p1: 2})  # through the JVM
        assert await lake.offsets(table) == await spark.offsets(table) == {p0: 0, p1: 2}
        # Appends after the resets carry them forward with their own offsets.
        await lake.lake.call(lambda: appends.write([batch("a", 0, range(3))], {p0: 3}, "c2"))
        assert await lake.offsets(table) == await spark.offsets(table) == {p0: 3, p1: 2}
        rows = await lake.lake.call(lambda: lake.lake.table(table).scan().to_arrow())
    finally:
        lake.close()
    assert sorted(rows.column("_offset").to_pylist()) == [0, 1, 2, 500, 501, 502, 503, 504]
