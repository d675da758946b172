"""``mode: upsert`` of the JDBC sink against a real PostgreSQL server through a real local
SparkSession: one row per natural key, the newest Kafka record wins, replays never roll a
row back, refused rows are dead-lettered once, outages are retried, and ``kstage run
--drain`` end to end on the real broker.

The rows are the Gobblin compaction processor's (natural key: dataset, cluster,
log_event_time), made by hand so that several records share a key.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from actors.errors import FatalError, SinkError
from actors.sinks import SinkContext
from actors.sinks.jdbc import JdbcSink, create_table_sql, execute_statement
from actors.sinks.jdbc_upsert import newer, newer_sql, newest_per_key
from actors.sinks.spark.actor import SparkActor
from processors.base import Column, Row
from tests.gobblin_events import event
from tests.integration.test_jdbc_sink import (
    CLUSTERS,
    PASSWORD,
    PROCESSOR,
    TOPIC,
    refusals,
    settings,
)
from tests.kafkautil import committed, create_topic, produce, unique, write_config
from tests.postgres import JAR, USER, Postgres

pytestmark = pytest.mark.slow


async def upserting(jdbc_spark: SparkActor, pg: Postgres, table: str, **extra: Any) -> JdbcSink:
    sink = JdbcSink(settings(pg, table, mode="upsert", **extra), jdbc_spark)
    sink.bind(SinkContext(columns=PROCESSOR.columns, table=PROCESSOR.table,
                          processor=PROCESSOR.name, key=PROCESSOR.key))
    async with asyncio.timeout(90):
        await sink.open()
    return sink


def row(dataset: str, partition: int, offset: int, timestamp: int | None = 0,
        **values: Any) -> Row:
    """A compaction row of key (dataset, 'holdem', 1) at the given coordinates; its
    record_count is its offset, to see which record a table row came from."""
    out: Row = {c.name: None for c in PROCESSOR.columns}
    out.update(cluster="holdem", dataset=dataset, log_event_time=1, record_count=offset,
               _topic=TOPIC, _partition=partition, _offset=offset, _timestamp=timestamp)
    out.update(values)
    return out


def table_rows(pg: Postgres, table: str) -> list[tuple[str, int, int, int]]:
    """(dataset, _partition, _offset, record_count) of every row, by dataset."""
    return [(d, int(p), int(o), int(n)) for d, p, o, n in pg.psql(
        f'SELECT dataset, _partition, _offset, record_count FROM "{table}" '  # noqa: S608
        "ORDER BY dataset")]


async def write(sink: JdbcSink, rows: list[Row]) -> None:
    async with asyncio.timeout(90):
        await sink.write(rows)


async def test_the_newest_record_per_key_lands_and_a_replay_never_rolls_it_back(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    pg, table = running, "stg_upsert_latest"
    sink = await upserting(jdbc_spark, pg, table)
    constraint = pg.psql("SELECT pg_get_constraintdef(oid) FROM pg_constraint "  # noqa: S608
                         f"WHERE conrelid = '\"{table}\"'::regclass AND contype = 'p'")
    assert constraint == [["PRIMARY KEY (dataset, cluster, log_event_time)"]]
    await write(sink, [row("a", 0, 10, 100), row("b", 0, 11, 100), row("c", 1, 3, 100)])
    assert table_rows(pg, table) == [("a", 0, 10, 10), ("b", 0, 11, 11), ("c", 1, 3, 3)]
    # a replay of older offsets of the same partition: nothing rolls back, even with a
    # later record timestamp (offsets order a partition; clocks may disagree)
    await write(sink, [row("a", 0, 5, 500), row("b", 0, 11, 100, dedupe_status="again")])
    assert table_rows(pg, table) == [("a", 0, 10, 10), ("b", 0, 11, 11), ("c", 1, 3, 3)]
    assert pg.psql(f'SELECT count(*) FROM "{table}" WHERE dedupe_status IS NULL') == [["3"]]  # noqa: S608
    # newer offsets update the row, every column (key kept)
    await write(sink, [row("a", 0, 12, 50, dedupe_status="DEDUPED")])
    assert table_rows(pg, table)[0] == ("a", 0, 12, 12)
    assert pg.psql(f"SELECT dedupe_status FROM \"{table}\" WHERE dataset = 'a'") == [  # noqa: S608
        ["DEDUPED"]]
    # another partition: offsets are not comparable, the later timestamp wins
    await write(sink, [row("c", 0, 1, 99), row("b", 1, 1, 101)])
    assert table_rows(pg, table) == [("a", 0, 12, 12), ("b", 1, 1, 1), ("c", 1, 3, 3)]
    # the table holds one row per key
    assert pg.psql(f'SELECT count(*) FROM "{table}"') == [["3"]]  # noqa: S608


# Coordinates (topic, partition, offset, timestamp, source position) that exercise every
# branch of "newer": same partition (offsets, whatever the positions and timestamps say),
# other partitions and topics (source positions, NULLs, then timestamps, NULLs, equal
# timestamps broken by topic in byte order, then partition: 2 < 10).
COORDINATES = [("a", 0, 5, 100, 7), ("a", 0, 10, 50, 3), ("a", 0, 11, None, None),
               ("a", 1, 2, 100, 5), ("a", 1, 3, None, 5), ("a", 1, 4, 40, 8),
               ("a-b", 0, 1, 100, None), ("a.b", 0, 1, 100, None), ("B", 0, 9, 100, None),
               ("a_b", 0, 1, 100, None), ("a", 10, 0, 100, None), ("a", 2, 0, 100, None)]


def test_the_sql_rule_of_newer_is_the_python_one(running: Postgres) -> None:
    """:func:`newer_sql` (in the statement) and :func:`newer` (the dedupe of a batch)
    agree on every pair (topics compare in byte order, COLLATE "C")."""
    def literal(c: tuple[str, int, int, int | None, int | None]) -> str:
        # the topic in a collation that is not byte order, as a server's default may be
        timestamp = "NULL::bigint" if c[3] is None else c[3]
        position = "NULL::bigint" if c[4] is None else c[4]
        return (f"('{c[0]}' COLLATE \"und-x-icu\", {c[1]}, {c[2]}, {timestamp}, "
                f"{position})")

    names = '("_topic", "_partition", "_offset", "_timestamp", "_source_lsn")'
    values = ", ".join(literal(c) for c in COORDINATES)
    rule = newer_sql("excluded", "cur", "_source_lsn")
    query = ("SELECT cur._topic, cur._partition, cur._offset, excluded._topic, "  # noqa: S608
             f"excluded._partition, excluded._offset, coalesce({rule}, false) "
             f"FROM (VALUES {values}) AS cur {names} CROSS JOIN (VALUES {values}) "
             f"AS excluded {names}")
    got = running.psql(query)
    assert len(got) == len(COORDINATES) ** 2
    by_id = {c[:3]: c for c in COORDINATES}
    for t1, p1, o1, t2, p2, o2, answer in got:
        existing, incoming = by_id[t1, int(p1), int(o1)], by_id[t2, int(p2), int(o2)]
        assert (answer == "t") == newer(incoming, existing), (incoming, existing)
    # never both ways (no flip-flop between two rows on replays)
    assert not any(newer(a, b) and newer(b, a) for a in COORDINATES for b in COORDINATES)


def test_newest_per_key_folds_a_batch_in_order() -> None:
    rows = [("k1", "a", 0, 1, 0), ("k2", "a", 0, 2, 0), ("k1", "a", 0, 3, 0),
            ("k1", "a", 0, 2, 0), ("k1", "a", 1, 9, None), ("k3", "a", 0, 4, 0)]
    assert newest_per_key(rows, [0], [1, 2, 3, 4]) == [(1, []), (2, [0, 3, 4]), (5, [])]
    # within a partition the offset decides, whatever the timestamps and positions say;
    # the partitions' newest rows then meet by source position, then timestamp
    rows = [("k", "a", 0, 1, 50, 9), ("k", "a", 0, 2, 10, 1), ("k", "a", 1, 1, 20, 0),
            ("j", "a", 0, 1, 10, None), ("j", "a", 1, 1, 20, None)]
    assert newest_per_key(rows, [0], [1, 2, 3, 4, 5]) == [(1, [0, 2]), (4, [3])]
    assert newest_per_key(rows, [0], [1, 2, 3, 4]) == [(2, [0, 1]), (4, [3])]


async def test_duplicate_keys_in_one_batch_keep_the_newest(jdbc_spark: SparkActor,
                                                           running: Postgres) -> None:
    """PostgreSQL refuses to update a row twice in one statement (SQLSTATE 21000): the
    batch is deduped first, keeping the newest row of each key, in one flush (of two
    statements of batch_size rows, in one transaction)."""
    pg, table = running, "stg_upsert_dups"
    sink = await upserting(jdbc_spark, pg, table, batch_size=2)
    await write(sink, [row("a", 0, 1), row("b", 0, 2), row("a", 0, 3), row("a", 0, 2),
                       row("b", 1, 9, -5), row("c", 0, 4)])
    assert table_rows(pg, table) == [("a", 0, 3, 3), ("b", 0, 2, 2), ("c", 0, 4, 4)]
    assert sink._writer is not None and sink._writer.flushes == 1


async def test_refused_rows_are_dead_lettered_once_and_a_superseded_row_lands_instead(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    """A row PostgreSQL refuses (a CHECK constraint, SQLSTATE 23514) is dead-lettered
    once with its coordinates; the other rows land; the older row of its key in the
    same batch lands in its place (as row-by-row writes would have left it)."""
    pg, table = running, "stg_upsert_refused"
    pg.psql(create_table_sql(table, PROCESSOR.columns, PROCESSOR.key))
    pg.psql(f'ALTER TABLE "{table}" OWNER TO {USER}')
    pg.psql(f"ALTER TABLE \"{table}\" ADD CHECK (dedupe_status IS DISTINCT FROM 'bad')")
    sink = await upserting(jdbc_spark, pg, table, batch_size=3)
    refused = refusals(sink)
    await write(sink, [row("a", 0, 1), row("b", 0, 2), row("a", 0, 3, dedupe_status="bad"),
                       row("c", 0, 4, dedupe_status="bad"), row("d", 0, 5)])
    assert [(p, o) for p, o, _ in refused] == [(0, 3), (0, 4)]
    assert "SQLSTATE 23514 (check_violation)" in refused[0][2]
    assert refused[0][2].startswith(f"jdbc sink {table}: row at topic '{TOPIC}' partition 0 "
                                    "offset 3: refused by PostgreSQL"), refused[0][2]
    assert table_rows(pg, table) == [("a", 0, 1, 1), ("b", 0, 2, 2), ("d", 0, 5, 5)]


async def test_an_existing_table_without_the_key_constraint_is_named(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    pg, table = running, "stg_upsert_nokey"
    pg.psql(create_table_sql(table, PROCESSOR.columns))  # as mode: append created it
    pg.psql(f'ALTER TABLE "{table}" OWNER TO {USER}')
    with pytest.raises(FatalError) as caught:
        await upserting(jdbc_spark, pg, table)
    assert (f"jdbc sink {table} at {pg.url}: mode: upsert needs a unique index on exactly "
            "the natural key (dataset, cluster, log_event_time) for ON CONFLICT, and table "
            f'{table} has none; add one (ALTER TABLE {table} ADD PRIMARY KEY ("dataset", '
            '"cluster", "log_event_time"))') in str(caught.value)
    pg.psql(f'CREATE UNIQUE INDEX ON "{table}" (log_event_time, cluster, dataset)')
    sink = await upserting(jdbc_spark, pg, table)  # any order of the key's columns
    await write(sink, [row("a", 0, 1), row("a", 0, 2)])
    assert table_rows(pg, table) == [("a", 0, 2, 2)]


async def test_an_outage_mid_upsert_is_retried_and_nothing_is_lost(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    pg, table = running, "stg_upsert_outage"
    sink = await upserting(jdbc_spark, pg, table)
    await write(sink, [row("a", 0, 1), row("b", 0, 2)])
    refused: list[int] = []
    sink.bind(replace(sink.context,
                      refuse=lambda rows, status, reason: refused.append(rows[0]["_offset"])))
    batch = [row("a", 0, 3), row("c", 0, 4), row("d", 0, 5, record_count="many")]
    pg.stop()
    for _ in range(2):
        with pytest.raises(SinkError) as caught:
            await write(sink, batch)
    message = str(caught.value)
    assert message.startswith(f"jdbc sink {table} at {pg.url}: upsert of 2 row(s) failed: "
                              "org.postgresql.util.PSQLException: Connection to "), message
    assert PASSWORD not in message
    pg.start()
    await write(sink, batch)  # the worker's retry of the same batch
    assert refused == [5]  # the row that does not fit: dead-lettered once, not per retry
    assert table_rows(pg, table) == [("a", 0, 3, 3), ("b", 0, 2, 2), ("c", 0, 4, 4)]


def stop_postgres_at_statement(pg: Postgres, n: int,
                               monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Stop ``pg`` just before the JDBC sink runs its ``n``-th statement; the list
    returned gets the row count of each statement run or tried."""
    statements: list[int] = []

    def stop_at_n(statement: Any, payload: str, rows: int) -> None:
        statements.append(rows)
        if len(statements) == n:
            pg.stop()
        execute_statement(statement, payload, rows)

    monkeypatch.setattr("actors.sinks.jdbc_writer.execute_statement", stop_at_n)
    return statements


async def test_the_server_going_down_inside_a_flush_rolls_it_back_and_the_retry_lands_it(
        jdbc_spark: SparkActor, running: Postgres, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server goes down between two statements of one flush (batch_size 1): the
    transaction is rolled back (the first statement's row is not there), the write fails
    with SinkError, and its retry lands every row."""
    pg, table = running, "stg_upsert_inside"
    sink = await upserting(jdbc_spark, pg, table, batch_size=1)
    await write(sink, [row("a", 0, 1)])
    statements = stop_postgres_at_statement(pg, 2, monkeypatch)
    batch = [row("a", 0, 6), row("e", 0, 7), row("f", 0, 8)]
    with pytest.raises(SinkError, match=f"jdbc sink {table} at .*: upsert of 3 row"):
        await write(sink, batch)
    assert statements == [1, 1]
    pg.start()
    assert table_rows(pg, table) == [("a", 0, 1, 1)]  # the first statement rolled back
    monkeypatch.setattr("actors.sinks.jdbc_writer.execute_statement", execute_statement)
    await write(sink, batch)  # the worker's retry of the same batch
    assert table_rows(pg, table) == [("a", 0, 6, 6), ("e", 0, 7, 7), ("f", 0, 8, 8)]


@pytest.mark.kafka
@pytest.mark.timeout(400)  # kstage starts a JVM; its waits inside add up past 180 s
async def test_kstage_run_drain_upserts_the_newest_record_per_key(
        broker: str, running: Postgres, tmp_path: Path, kstage: Any) -> None:
    """`kstage run --drain` with mode upsert: events of two partitions, several per key,
    one table row per key, each from the key's newest record; every offset committed."""
    pg, table = running, "stg_upsert_run"
    group, topic = unique("g-jdbc-upsert"), unique("jdbc-upsert")
    await create_topic(broker, topic, partitions=2)
    values = []
    for i in range(24):  # 4 keys (timestamps), each written 6 times, in both partitions
        value = event(1)  # CompactionCompleted: dataset /data/tracking/PageView
        value["timestamp"] = 1468368000000 + (i % 4) * 1000
        value["metadata"]["recordCount"] = str(i)
        values.append(value)
    await produce(broker, topic, values, partition_of=lambda i: (i % 4) % 2)
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
        "topic": topic, "processor": PROCESSOR.name, "format": "json",
        "options": {"clusters": CLUSTERS},
        "sink": {"type": "jdbc", "table": table, "url": pg.url, "user": USER,
                 "password": PASSWORD, "jar": JAR, "mode": "upsert"}}])
    data = yaml.safe_load(cfg.read_text())
    data["spark"] = {"master": "local[1]", "warehouse": str(tmp_path / "warehouse"),
                     "flush_max_interval_s": 0.3}
    cfg.write_text(yaml.safe_dump(data))
    proc = kstage(cfg, "--drain")
    assert await proc.wait(timeout=180) == 0, proc.output()
    got = pg.psql(f'SELECT log_event_time, record_count, _partition FROM "{table}" '  # noqa: S608
                  "ORDER BY 1")
    assert [(int(t), int(n), int(p)) for t, n, p in got] == [
        (1468368000000 + k * 1000, 20 + k, k % 2) for k in range(4)]
    assert await committed(broker, group, topic, 2) == {0: 12, 1: 12}
    assert not (tmp_path / "dead.jsonl").exists()


async def test_a_nullable_key_column_gets_unique_nulls_not_distinct(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    """DataHub change logs may have no entity urn (nullable key column): NULL is one key,
    as in the Spark merge, through UNIQUE NULLS NOT DISTINCT (a PRIMARY KEY cannot hold a
    NULL); an existing index that treats NULLs as distinct is refused, naming it."""
    pg, table = running, "stg_upsert_nullable"
    columns = (Column("urn"), Column("aspect", nullable=False), Column("v", "long"))

    async def opened() -> JdbcSink:
        sink = JdbcSink(settings(pg, table, mode="upsert"), jdbc_spark)
        sink.bind(SinkContext(columns=columns, processor="p", key=("urn", "aspect")))
        async with asyncio.timeout(90):
            await sink.open()
        return sink

    # an existing table whose unique index treats NULLs as distinct is named
    pg.psql(create_table_sql(table, columns)[:-1] + ', UNIQUE ("urn", "aspect"))')
    with pytest.raises(FatalError, match=(
            f"mode: upsert: table {table} has a unique index on the natural key \\(urn, "
            "aspect\\) that treats NULLs as distinct, and urn may be NULL: ")):
        await opened()
    pg.psql(f'DROP TABLE "{table}"')
    sink = await opened()  # created with the right constraint

    def at(urn: str | None, offset: int) -> Row:
        return {"urn": urn, "aspect": "status", "v": offset, "_topic": TOPIC,
                "_partition": 0, "_offset": offset, "_timestamp": 0}

    await write(sink, [at(None, 1), at("u", 2), at(None, 3)])
    await write(sink, [at(None, 4), at(None, 0)])
    got = pg.psql(f'SELECT urn, v FROM "{table}" ORDER BY urn NULLS FIRST')  # noqa: S608
    assert got == [["", "4"], ["u", "2"]]
    constraint = pg.psql("SELECT pg_get_constraintdef(oid) FROM pg_constraint "  # noqa: S608
                         f"WHERE conrelid = '\"{table}\"'::regclass AND contype = 'u'")
    assert constraint == [["UNIQUE NULLS NOT DISTINCT (urn, aspect)"]]
