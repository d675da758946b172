"""The Spark sink against a real local SparkSession: micro-batches, durability, restarts.

One SparkActor (``local[1]``) is shared by the module; each test writes its own table.
The restart test stops it and must stay last.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from actors.errors import FatalError, SinkError
from actors.sinks import SinkContext, build_sink
from actors.sinks.spark.sink import (
    SparkActor,
    SparkSink,
    SparkSinkSettings,
    SparkTableWriter,
    struct_type,
)
from processors.base import Column, Message, Row
from processors.gobblin import GobblinCompactionProcessor
from settings import SparkSettings
from settings.models import SinkSettings

pytestmark = pytest.mark.slow

PROCESSOR = GobblinCompactionProcessor
TOPIC = "GobblinTrackingEvent_compaction"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="module")
def spark_actor(warehouse: Path) -> Iterator[SparkActor]:
    actor = SparkActor(SparkSettings(master="local[1]", warehouse=str(warehouse),
                                     flush_max_interval_s=0.2))
    yield actor
    actor.stop()


def event(offset: int) -> dict[str, Any]:
    """A real Gobblin compaction event (value): CompactionCompleted at odd offsets,
    CompactionRecordCounts at even ones."""
    ts = 1468368000000 + offset * 1000
    if offset % 2:
        metadata = {"clusterIdentifier": "ltx1-holdem", "datasetUrn": "/data/tracking/PageView",
                    "partition": "2016/07/13/00", "recordCount": str(1000 + offset),
                    "dedupeStatus": "DEDUPED", "azkabanProjectName": "compaction",
                    "azkabanFlowId": "hourly", "azkabanJobId": "compact_pv",
                    "azkabanExecId": str(4242 + offset)}
        name = "CompactionCompleted"
    else:
        metadata = {"clusterIdentifier": "ltx1-holdem",
                    "DatasetOutputPath": "/data/tracking/AdClick/daily/2016/07/13",
                    "RegularRecordCount": str(50 * offset), "LateRecordCount": "3"}
        name = "CompactionRecordCounts"
    return {"timestamp": ts, "namespace": "compaction.tracking.events", "name": name,
            "metadata": metadata}


def events(partition: int, start: int, count: int) -> list[Row]:
    """Rows of real compaction events, through the processor's own transform."""
    processor = PROCESSOR({"clusters": [{"code": "ltx1-holdem", "short_name": "holdem"}]})
    rows: list[Row] = []
    for offset in range(start, start + count):
        value = event(offset)
        message = Message(TOPIC, partition, offset, value["timestamp"] + 5, None, value, (),
                          None)
        rows.extend(processor.transform(message))
    return rows


async def opened(actor: SparkActor, table: str) -> SparkSink:
    sink = SparkSink(SparkSinkSettings(table=table), actor)
    sink.bind(SinkContext(columns=PROCESSOR.columns, table=PROCESSOR.table,
                          processor=PROCESSOR.name))
    await sink.open()
    return sink


def keys(rows: list[Any]) -> set[tuple[Any, ...]]:
    names = [c.name for c in PROCESSOR.columns] + ["_topic", "_partition", "_offset", "_timestamp"]
    return {tuple(r[n] for n in names) for r in rows}


async def test_two_sinks_share_a_micro_batch_and_write_is_durable(
        spark_actor: SparkActor) -> None:
    table = "stg_concurrent"
    one, two = await opened(spark_actor, table), await opened(spark_actor, table)
    writer = spark_actor.writer(table, PROCESSOR.columns)
    a, b = events(0, 0, 40), events(1, 0, 25)
    expected = keys(a + b)
    async with asyncio.timeout(60):
        await asyncio.gather(one.write(a), two.write(b))
    assert writer.flushes == 1  # one append held the rows of both workers
    assert a == [] and b == []  # the sink took the rows (dicts freed before the flush)

    def read(spark: Any) -> tuple[Any, list[Any], list[Any], Any, Any]:
        by_path = spark.read.parquet(str(writer.path))
        by_table = spark.table(table)
        return (by_path.schema, by_path.collect(), by_table.collect(), by_table.schema,
                by_table.select("writer_id").distinct().collect())

    schema, path_rows, table_rows, table_schema, writers = await spark_actor.call(read)
    assert keys(path_rows) == keys(table_rows) == expected
    assert len(table_rows) == 65
    from pyspark.testing import assertSchemaEqual

    assertSchemaEqual(schema, struct_type(PROCESSOR.columns))  # types and order
    assertSchemaEqual(table_schema, struct_type(PROCESSOR.columns))
    assert [w.writer_id for w in writers] == [spark_actor.writer_id]
    assert path_rows[0]["_ingested_at"] is not None
    await one.close()
    await two.close()


async def test_flush_at_max_rows_without_waiting_for_the_interval(
        spark_actor: SparkActor) -> None:
    sink = await opened(spark_actor, "stg_max_rows")
    writer = spark_actor.writer("stg_max_rows", PROCESSOR.columns)
    writer.max_rows, writer.max_interval_s = 10, 3600
    async with asyncio.timeout(30):  # would hang for an hour without the row limit
        await asyncio.gather(sink.write(events(0, 0, 4)), sink.write(events(1, 0, 6)))
        await sink.write(events(2, 0, 12))  # more than max_rows: flushed at once
    assert writer.flushes == 2
    count = await spark_actor.call(lambda spark: spark.table("stg_max_rows").count())
    assert count == 22


async def test_a_read_through_the_actor_sees_appends_made_after_an_earlier_read(
        spark_actor: SparkActor) -> None:
    """Appends do not refresh the table each; the next call that reads does: the file
    listing the first read cached must not hide the second append."""
    table = "stg_reread"
    sink = await opened(spark_actor, table)
    async with asyncio.timeout(60):
        await sink.write(events(0, 0, 4))
        assert await spark_actor.call(lambda spark: spark.table(table).count()) == 4
        await sink.write(events(0, 4, 3))
        await sink.write(events(0, 7, 2))
        rows = await spark_actor.call(lambda spark: spark.table(table).collect())
    assert sorted(r["_offset"] for r in rows) == list(range(9))
    await sink.close()


async def test_flush_after_the_interval(spark_actor: SparkActor) -> None:
    sink = await opened(spark_actor, "stg_interval")
    writer = spark_actor.writer("stg_interval", PROCESSOR.columns)
    writer.max_rows, writer.max_interval_s = 1000, 0.5
    started = time.monotonic()
    async with asyncio.timeout(30):
        first = asyncio.create_task(sink.write(events(0, 0, 3)))
        await asyncio.sleep(0.2)
        await sink.write(events(0, 3, 2))  # joins the pending batch: same flush
        await first
    assert time.monotonic() - started >= 0.5
    assert writer.flushes == 1
    assert await spark_actor.call(lambda spark: spark.table("stg_interval").count()) == 5


async def test_flush_soon_flushes_now_or_right_after_the_running_flush(
        spark_actor: SparkActor) -> None:
    """A worker at its max_in_flight cannot add rows: its sink flushes without waiting
    for flush_max_rows or the interval (here 1000 rows / 60 s)."""
    sink = await opened(spark_actor, "stg_soon")
    writer = spark_actor.writer("stg_soon", PROCESSOR.columns)
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
    assert await spark_actor.call(lambda spark: spark.table("stg_soon").count()) == 5


async def test_bad_rows_and_failed_appends_raise_sink_error(
        spark_actor: SparkActor, tmp_path: Path) -> None:
    sink = await opened(spark_actor, "stg_errors")
    wrong = events(0, 0, 2)
    wrong[1]["record_count"] = "1001"  # a string in a long column
    with pytest.raises(SinkError, match="'record_count'.*not a long"):
        await sink.write(wrong)
    missing = events(0, 0, 1)
    missing[0]["cluster"] = None
    with pytest.raises(SinkError, match="'cluster'.*NOT NULL"):
        await sink.write(missing)
    # an append that Spark cannot do fails every write of the micro-batch
    writer = spark_actor.writer("stg_errors", PROCESSOR.columns)
    good_path, writer.path = writer.path, tmp_path / "a-file"
    writer.path.write_text("not a directory")
    other = await opened(spark_actor, "stg_errors")
    results = await asyncio.gather(sink.write(events(0, 0, 2)), other.write(events(1, 0, 2)),
                                   return_exceptions=True)
    assert all(isinstance(r, SinkError) for r in results), results
    writer.path = good_path
    await sink.write(events(0, 0, 2))  # the retry succeeds
    assert await spark_actor.call(lambda spark: spark.table("stg_errors").count()) == 2


async def test_rows_that_do_not_fit_go_to_the_permanent_failure_handler(
        spark_actor: SparkActor) -> None:
    """The worker dead-letters them; the rest of the batch is written (no stall)."""
    sink = await opened(spark_actor, "stg_refused")
    refused: list[tuple[list[Row], int, str]] = []

    async def handler(rows: list[Row], status: int, reason: str) -> None:
        refused.append((rows, status, reason))

    sink.bind(replace(sink.context, refuse=handler))
    rows = events(0, 0, 3)
    rows[1]["record_count"] = "many"
    await sink.write(rows)
    assert [(r[0][0]["_offset"], r[1]) for r in refused] == [(1, 0)]
    assert "'record_count'" in refused[0][2] and "not a long" in refused[0][2]
    written = await spark_actor.call(
        lambda spark: sorted(r["_offset"] for r in spark.table("stg_refused").collect()))
    assert written == [0, 2]

    # The append of a batch with a refused row fails; the worker's retry of the same
    # batch does not dead-letter that row a second time.
    batch = events(0, 3, 2)
    batch[0]["record_count"] = "many"
    writer = spark_actor.writer("stg_refused", PROCESSOR.columns)
    good_path, writer.path = writer.path, writer.path.parent / "stg_refused_blocked"
    writer.path.write_text("not a directory")
    try:
        with pytest.raises(SinkError):
            await sink.write(batch)
    finally:
        writer.path.unlink()
        writer.path = good_path
    await sink.write(batch)
    assert [r[0][0]["_offset"] for r in refused] == [1, 3]
    written = await spark_actor.call(
        lambda spark: sorted(r["_offset"] for r in spark.table("stg_refused").collect()))
    assert written == [0, 2, 4]


async def test_schema_change_adds_nullable_columns_and_refuses_the_rest(
        spark_actor: SparkActor) -> None:
    """A processor that gains a nullable column keeps writing the table (older rows read
    NULL); a changed type, a removed or a new NOT NULL column stop the sink at open."""
    sink = await opened(spark_actor, "stg_evolving")
    await sink.write(events(0, 0, 4))
    wider = (*PROCESSOR.columns, Column("comment", "string", True))
    writer = SparkTableWriter(spark_actor, "stg_evolving", wider)
    await writer.register()
    rows, _ = writer.convert([{**r, "comment": "new"} for r in events(0, 4, 2)])
    await writer.write(rows)
    comments = await spark_actor.call(lambda spark: sorted(
        (r["_offset"], r["comment"]) for r in spark.table("stg_evolving").collect()))
    assert comments == [(0, None), (1, None), (2, None), (3, None), (4, "new"), (5, "new")]

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
        with pytest.raises(FatalError, match="stg_evolving") as caught:
            await SparkTableWriter(spark_actor, "stg_evolving", tuple(columns)).register()
        assert message in str(caught.value)


async def test_build_sink_makes_a_spark_sink() -> None:
    sink = build_sink(SinkSettings.model_validate({"type": "spark", "table": "t"}))
    assert isinstance(sink, SparkSink) and sink.table == "t"
    with pytest.raises(ValueError, match="extra"):
        build_sink(SinkSettings.model_validate({"type": "spark", "tabel": "t"}))


async def test_restart_finds_the_table_by_location(spark_actor: SparkActor) -> None:
    """Last: stops the module's session. A fresh session registers the table again."""
    spark_actor.stop()
    fresh = SparkActor(spark_actor.settings)
    try:
        async with asyncio.timeout(60):
            sink = await opened(fresh, "stg_concurrent")
            assert await fresh.call(lambda spark: spark.table("stg_concurrent").count()) == 65
            await sink.write(events(3, 0, 5))
            names = await fresh.call(lambda spark: sorted(
                r.writer_id for r in
                spark.table("stg_concurrent").select("writer_id").distinct().collect()))
        assert names == sorted([spark_actor.writer_id, fresh.writer_id])
    finally:
        fresh.stop()
