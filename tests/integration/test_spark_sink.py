"""The Spark sink against a real local SparkSession with the Iceberg runtime: micro-batches
as Iceberg commits, the Kafka offsets they hold, and what happens when an append fails.

One SparkActor (``local[1]``) is shared by the module; each test writes its own table. Its
SQLite catalog waits at most 300 ms for a lock: a test that holds the catalog database
locked (a real lock, from another connection) makes Iceberg's commits fail at once. The
restart test stops the actor and must stay last.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from actors.errors import FatalError, SinkError
from actors.offsets import Entry
from actors.sinks import SinkContext, build_sink
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.iceberg import struct_type
from actors.sinks.spark.sink import SparkSink, SparkSinkSettings
from actors.sinks.spark.staging import StagingWriter
from processors.base import Column, Row
from settings import SparkSettings
from settings.models import SinkSettings
from tests.gobblin_events import PROCESSOR, TOPIC, events
from tests.lake import opened_sink, staging_writer

pytestmark = pytest.mark.slow

GROUP = "g"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="module")
def spark_actor(warehouse: Path) -> Iterator[SparkActor]:
    uri = f"jdbc:sqlite:{warehouse}/catalog.db?journal_mode=WAL&busy_timeout=300"
    # flush_min_rows 1000: the writes of a test gather within the interval (see
    # tests/integration/conftest.py's jdbc_spark)
    actor = SparkActor(SparkSettings(master="local[1]", warehouse=str(warehouse),
                                     flush_max_interval_s=0.2, flush_min_rows=1000,
                                     catalog={"uri": uri}))
    yield actor
    actor.stop()


def keys(rows: list[Any]) -> set[tuple[Any, ...]]:
    names = [c.name for c in PROCESSOR.columns] + ["_topic", "_offset", "_timestamp"]
    return {(*(r[n] for n in names), r["_kafka_partition"] if "_kafka_partition" in r
             else r["_partition"]) for r in rows}


def at(partition: int, next_offset: int, count: int = 1) -> Entry:
    """A worker's batch of ``partition`` ending before ``next_offset``."""
    return Entry(TopicPartition(TOPIC, partition), next_offset, count)


async def table_rows(actor: SparkActor, table: str) -> list[Any]:
    return await actor.call(lambda spark: spark.table(table).collect())


async def snapshots(actor: SparkActor, table: str) -> list[dict[str, str]]:
    """The table's snapshot summaries, oldest first."""
    rows = await actor.call(lambda spark: spark.sql(
        f"SELECT summary FROM kstage.kstage.{table}.snapshots "  # noqa: S608 - a test's table
        "ORDER BY committed_at").collect())
    return [dict(r["summary"]) for r in rows]


@contextlib.contextmanager
def catalog_locked(warehouse: Path) -> Iterator[None]:
    """Hold the SQLite catalog's write lock from another connection (a real lock: commits
    of the session fail after its 300 ms busy timeout; reads go on, WAL)."""
    con = sqlite3.connect(warehouse / "catalog.db", isolation_level=None, timeout=30)
    try:
        con.execute("BEGIN IMMEDIATE")
        yield
    finally:
        con.execute("ROLLBACK")
        con.close()


async def test_two_sinks_share_a_micro_batch_and_write_is_durable(
        spark_actor: SparkActor) -> None:
    table = "stg_concurrent"
    one, two = await opened_sink(spark_actor, table), await opened_sink(spark_actor, table)
    writer = staging_writer(spark_actor, table)
    a, b = events(0, 0, 40), events(1, 0, 25)
    expected = keys(a + b)
    async with asyncio.timeout(60):
        await asyncio.gather(one.write(a), two.write(b))
    assert writer.flushes == 1  # one append held the rows of both workers
    assert a == [] and b == []  # the sink took the rows (dicts freed before the flush)
    rows = await table_rows(spark_actor, table)
    schema = await spark_actor.call(lambda spark: spark.table(table).schema)
    assert keys(rows) == expected and len(rows) == 65
    from pyspark.testing import assertSchemaEqual

    assertSchemaEqual(schema, struct_type(PROCESSOR.columns))  # types and order
    assert "_kafka_partition" in schema.names and "_partition" not in schema.names
    assert rows[0]["_ingested_at"] is not None
    (summary,) = await snapshots(spark_actor, table)
    assert summary["kstage.writer-id"] == spark_actor.writer_id
    assert "kstage.offsets" not in summary  # plain writes: no positions, no offsets
    await one.close()
    await two.close()


async def test_flush_at_max_rows_without_waiting_for_the_interval(
        spark_actor: SparkActor) -> None:
    sink = await opened_sink(spark_actor, "stg_max_rows")
    writer = staging_writer(spark_actor, "stg_max_rows")
    writer.max_rows, writer.max_interval_s = 10, 3600
    async with asyncio.timeout(30):  # would hang for an hour without the row limit
        await asyncio.gather(sink.write(events(0, 0, 4)), sink.write(events(1, 0, 6)))
        await sink.write(events(2, 0, 12))  # more than max_rows: flushed at once
    assert writer.flushes == 2
    assert len(await table_rows(spark_actor, "stg_max_rows")) == 22


async def test_flush_after_the_interval(spark_actor: SparkActor) -> None:
    sink = await opened_sink(spark_actor, "stg_interval")
    writer = staging_writer(spark_actor, "stg_interval")
    writer.max_rows, writer.max_interval_s = 1000, 0.5
    started = time.monotonic()
    async with asyncio.timeout(30):
        first = asyncio.create_task(sink.write(events(0, 0, 3)))
        await asyncio.sleep(0.2)
        await sink.write(events(0, 3, 2))  # joins the pending batch: same flush
        await first
    assert time.monotonic() - started >= 0.5
    assert writer.flushes == 1
    assert len(await table_rows(spark_actor, "stg_interval")) == 5


async def test_flush_soon_flushes_now_or_right_after_the_running_flush(
        spark_actor: SparkActor) -> None:
    """A worker at its max_in_flight cannot add rows: its sink flushes without waiting
    for flush_max_rows or the interval (here 1000 rows / 60 s)."""
    sink = await opened_sink(spark_actor, "stg_soon")
    writer = staging_writer(spark_actor, "stg_soon")
    writer.max_rows, writer.max_interval_s = 1000, 60
    async with asyncio.timeout(30):
        first = asyncio.create_task(sink.write(events(0, 0, 3)))
        await asyncio.sleep(0.05)
        sink.flush_soon()  # nothing running: flushes now
        await asyncio.sleep(0)
        second = asyncio.create_task(sink.write(events(0, 3, 2)))
        await asyncio.sleep(0.05)
        sink.flush_soon()  # the first flush still runs: the second follows it
        await asyncio.gather(first, second)
    assert writer.flushes == 2
    assert len(await table_rows(spark_actor, "stg_soon")) == 5


async def test_each_append_commits_the_offsets_it_covers_and_assignment_reads_them(
        spark_actor: SparkActor) -> None:
    table = "stg_offsets"
    sink = await opened_sink(spark_actor, table)
    assert await sink.assigned([(TOPIC, 0), (TOPIC, 1)]) == {}  # as a worker does first
    async with asyncio.timeout(60):
        await asyncio.gather(sink.write_at(events(0, 0, 10), at(0, 10, 10)),
                             sink.write_at(events(1, 0, 4), at(1, 4, 4)))
        await sink.write_at(events(0, 10, 5), at(0, 15, 5))
        # A batch whose messages made no rows (filtered) is done without an append.
        await sink.write_at([], at(1, 9, 5))
    summaries = await snapshots(spark_actor, table)
    # Each commit records its own partitions and carries the current snapshot's forward.
    assert [json.loads(s["kstage.offsets"]) for s in summaries] == [
        {GROUP: {TOPIC: {"0": 10, "1": 4}}}, {GROUP: {TOPIC: {"0": 15, "1": 4}}}]
    assert all(len(s["kstage.commit-id"]) == 32 for s in summaries)
    other = await opened_sink(spark_actor, table, group="other-group")  # its own offsets
    assert await other.assigned([(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)]) == {}
    assert await sink.assigned([(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)]) == {
        (TOPIC, 0): 15, (TOPIC, 1): 4}


async def test_rows_of_messages_the_table_holds_are_dropped(spark_actor: SparkActor) -> None:
    """A partition read again from before the table's offset (a replay for another sink
    of a fan-out, a rewind): the rows it holds are not written twice, the rest are."""
    table = "stg_replayed"
    first = await opened_sink(spark_actor, table)
    async with asyncio.timeout(60):
        await first.write_at(events(0, 0, 20), at(0, 20, 20))
        await first.close()
        again = await opened_sink(spark_actor, table)  # a new owner of partition 0
        assert await again.assigned([(TOPIC, 0)]) == {(TOPIC, 0): 20}
        await again.write_at(events(0, 0, 10), at(0, 10, 10))  # all held: no append
        await again.write_at(events(0, 10, 15), at(0, 25, 15))  # 5 of 15 new
    rows = await table_rows(spark_actor, table)
    assert sorted(r["_offset"] for r in rows) == list(range(25))
    assert len(await snapshots(spark_actor, table)) == 2
    assert await again.assigned([(TOPIC, 0)]) == {(TOPIC, 0): 25}


async def test_a_partition_first_written_without_assignment_reads_its_offset_first(
        spark_actor: SparkActor) -> None:
    """No `assigned` call (the catalog was down then): the first write of the partition
    reads the table's offset before it writes anything."""
    table = "stg_lazy_floor"
    first = await opened_sink(spark_actor, table)
    await first.write_at(events(3, 0, 8), at(3, 8, 8))
    later = await opened_sink(spark_actor, table)
    staging_writer(spark_actor, table).forget([(GROUP, TOPIC, 3)])
    await later.write_at(events(3, 0, 12), at(3, 12, 12))
    rows = await table_rows(spark_actor, table)
    assert sorted(r["_offset"] for r in rows) == list(range(12))


async def test_a_failed_append_fails_its_writes_and_a_later_batch_never_overtakes_it(
        spark_actor: SparkActor, warehouse: Path) -> None:
    """The catalog refuses the commit of batch 1 of partition 0 (its database locked by
    another process): batch 1's write fails (retried by the worker), batch 2, handed over
    meanwhile, waits instead of being committed ahead of it. Once batch 1 is written
    again, both are in the table and the offsets never claimed batch 2 alone."""
    table = "stg_in_order"
    sink = await opened_sink(spark_actor, table)
    one, two = at(0, 5, 5), at(0, 9, 4)
    rows_one, rows_two = events(0, 0, 5), events(0, 5, 4)
    async with asyncio.timeout(90):
        with catalog_locked(warehouse):
            with pytest.raises(SinkError, match="stg_in_order"):
                await sink.write_at(rows_one, one)
            second = asyncio.create_task(sink.write_at(rows_two, two))
            await asyncio.sleep(1.0)  # well past the interval: it would have flushed
            assert not second.done()
        assert await table_rows(spark_actor, table) == []
        await sink.write_at(rows_one, one)  # the worker's retry of the same batch
        await second
    rows = await table_rows(spark_actor, table)
    assert sorted(r["_offset"] for r in rows) == list(range(9))
    recorded = [json.loads(s["kstage.offsets"])[GROUP][TOPIC]["0"]
                for s in await snapshots(spark_actor, table)]
    assert recorded[-1] == 9 and all(o in (5, 9) for o in recorded)
    assert recorded == sorted(recorded)


async def test_a_stale_writer_is_fenced_in_the_jvm(spark_actor: SparkActor) -> None:
    """Issue 32 with ``appends: spark``: two writers of one table (a second StagingWriter
    stands for another process), the stale one appending offsets the other appended
    already. Its append carries ``kstage.expect`` (0) and the session's Iceberg catalog
    wrapper refuses the commit (the table holds 10): nothing written twice, counted; the
    worker's retry of the batch, wholly in the table, is done without an append. The
    refusal needs the JVM's catalog wrapper (branch ``jfence``) on the session."""
    table = "stg_fenced_jvm"
    owner = await opened_sink(spark_actor, table)
    stale = await opened_sink(spark_actor, table)
    theirs = StagingWriter(spark_actor, table, stale.columns)  # another process's writer
    await theirs.register()
    stale._writer = theirs
    assert await stale.assigned([(TOPIC, 0)]) == {}  # read before it froze
    assert await owner.assigned([(TOPIC, 0)]) == {}
    async with asyncio.timeout(90):
        await owner.write_at(events(0, 0, 10), at(0, 10, 10))
        [summary] = await snapshots(spark_actor, table)
        assert json.loads(summary["kstage.expect"]) == {GROUP: {TOPIC: {"0": 0}}}
        late, rows = at(0, 10, 10), events(0, 0, 10)
        with pytest.raises(SinkError, match="kstage fence:"):
            await stale.write_at(rows, late)
        assert sorted(r["_offset"] for r in await table_rows(spark_actor, table)) == list(
            range(10))
        assert theirs.fenced == 1
        await stale.write_at(rows, late)  # the worker's retry: held by the table, done
    assert len(await snapshots(spark_actor, table)) == 1
    assert sorted(r["_offset"] for r in await table_rows(spark_actor, table)) == list(
        range(10))


async def test_bad_rows_raise_sink_error_without_a_handler(spark_actor: SparkActor) -> None:
    sink = await opened_sink(spark_actor, "stg_errors")
    wrong = events(0, 0, 2)
    wrong[1]["record_count"] = "1001"  # a string in a long column
    with pytest.raises(SinkError, match="'record_count'.*not a long"):
        await sink.write(wrong)
    missing = events(0, 0, 1)
    missing[0]["cluster"] = None
    with pytest.raises(SinkError, match="'cluster'.*NOT NULL"):
        await sink.write(missing)


async def test_rows_that_do_not_fit_go_to_the_permanent_failure_handler(
        spark_actor: SparkActor, warehouse: Path) -> None:
    """The worker dead-letters them; the rest of the batch is written (no stall)."""
    sink = await opened_sink(spark_actor, "stg_refused")
    refused: list[tuple[list[Row], int, str]] = []

    async def handler(rows: list[Row], status: int, reason: str) -> None:
        refused.append((rows, status, reason))

    sink.bind(replace(sink.context, refuse=handler))
    rows = events(0, 0, 3)
    rows[1]["record_count"] = "many"
    await sink.write_at(rows, at(0, 3, 3))
    assert [(r[0][0]["_offset"], r[1]) for r in refused] == [(1, 0)]
    assert "'record_count'" in refused[0][2] and "not a long" in refused[0][2]
    written = sorted(r["_offset"] for r in await table_rows(spark_actor, "stg_refused"))
    assert written == [0, 2]

    # The append of a batch with a refused row fails; the worker's retry of the same
    # batch does not dead-letter that row a second time.
    batch, position = events(0, 3, 2), at(0, 5, 2)
    batch[0]["record_count"] = "many"
    with catalog_locked(warehouse), pytest.raises(SinkError):
        await sink.write_at(batch, position)
    await sink.write_at(batch, position)  # the same list and position, as the worker does
    assert [r[0][0]["_offset"] for r in refused] == [1, 3]
    written = sorted(r["_offset"] for r in await table_rows(spark_actor, "stg_refused"))
    assert written == [0, 2, 4]


def data_files(spark: Any) -> list[str]:
    return sorted(r["file_path"] for r in spark.sql(
        "SELECT file_path FROM kstage.kstage.stg_evolving.files").collect())


async def test_schema_change_adds_nullable_columns_and_refuses_the_rest(
        spark_actor: SparkActor) -> None:
    """A processor that gains a nullable column keeps writing the table (older rows read
    NULL, Iceberg rewrites nothing); a changed type, a removed or a new NOT NULL column
    stop the sink at open, naming the table and the change."""
    sink = await opened_sink(spark_actor, "stg_evolving")
    await sink.write(events(0, 0, 4))
    files_before = await spark_actor.call(data_files)
    wider = (*PROCESSOR.columns, Column("comment", "string", True))
    writer = StagingWriter(spark_actor, "stg_evolving", wider)
    await writer.register()
    rows, _ = writer.convert([{**r, "comment": "new"} for r in events(0, 4, 2)])
    await writer.write(rows)
    comments = await spark_actor.call(lambda spark: sorted(
        (r["_offset"], r["comment"]) for r in spark.table("stg_evolving").collect()))
    assert comments == [(0, None), (1, None), (2, None), (3, None), (4, "new"), (5, "new")]
    files_after = await spark_actor.call(data_files)
    assert set(files_before) <= set(files_after)  # no rewrite

    first = PROCESSOR.columns[0]
    changed = (Column(first.name, "long", first.nullable), *PROCESSOR.columns[1:])
    cases = {
        "changed": (changed, f"column '{first.name}' was string, is now declared bigint"),
        "removed": (PROCESSOR.columns[1:], f"column '{first.name}' (string) is no longer "
                                           "declared"),
        "not null": ((*wider, Column("owner", "string", False)),
                     "new column 'owner' is NOT NULL"),
    }
    for columns, message in cases.values():
        with pytest.raises(FatalError, match="kstage.kstage.stg_evolving") as caught:
            await StagingWriter(spark_actor, "stg_evolving", tuple(columns)).register()
        assert message in str(caught.value)


async def test_a_column_named_like_an_iceberg_metadata_column_is_refused() -> None:
    sink = SparkSink(SparkSinkSettings(table="stg_x"))
    sink.bind(SinkContext(columns=(Column("_file", "string"), *PROCESSOR.columns),
                          processor="p"))
    (problem,) = sink.check()
    assert problem[0] == ("processor",) and "'_file'" in problem[1]


async def test_build_sink_makes_a_spark_sink() -> None:
    sink = build_sink(SinkSettings.model_validate({"type": "spark", "table": "t"}))
    assert isinstance(sink, SparkSink) and sink.table == "t"
    assert sink.capabilities.stores_offsets
    with pytest.raises(ValueError, match="extra"):
        build_sink(SinkSettings.model_validate({"type": "spark", "tabel": "t"}))


async def test_restart_finds_the_table_in_the_catalog(spark_actor: SparkActor) -> None:
    """Last: stops the module's session. A fresh session (new JVM) finds the table in the
    catalog, and its appends name their writer."""
    spark_actor.stop()
    fresh = SparkActor(spark_actor.settings)
    try:
        async with asyncio.timeout(60):
            sink = await opened_sink(fresh, "stg_concurrent")
            assert len(await table_rows(fresh, "stg_concurrent")) == 65
            await sink.write(events(3, 0, 5))
            writers = [s["kstage.writer-id"] for s in await snapshots(fresh, "stg_concurrent")]
        assert writers == [spark_actor.writer_id, fresh.writer_id]
        assert len(await table_rows(fresh, "stg_concurrent")) == 70
    finally:
        fresh.stop()
