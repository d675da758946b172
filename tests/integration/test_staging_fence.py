"""Exactly once against zombies (issue 32), with real pyiceberg appends to a real SQLite
catalog (``spark.appends: pyiceberg``; no JVM):

* a revoke during a failed append: batch 1's append fails (the catalog locked by another
  connection) and waits in the worker's backoff, batch 2 is held behind it; the revoke
  cancels both, and a flush in between appends neither; the next owner writes them all;
* the ``_doubt`` of a batch (an append whose outcome is unknown) never passes to a later
  batch that reuses its ``id``;
* the commit-time fence: two writers of one table (two actors, their own writer ids and
  catalog connections), the stale one appending offsets the other appended already: its
  append is refused by the catalog (nothing written), counted and logged, and the worker's
  retry drops what the table holds (its rows all held: done without an append, and the
  next batch continues from the table's offset); the check runs again on pyiceberg's
  optimistic retry against the refreshed metadata (a race lost to a writer of the same partition is
  refused, one lost to a writer of other partitions commits);
* a lost membership (the revoke waits 0 s): an append inside its commit (stalled there, as
  a frozen process) lands after the new owner's and is refused; one queued behind other
  work on the lake thread refuses to write when its turn comes.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from actors.column_rows import ColumnRows
from actors.errors import SinkError
from actors.metrics import Metrics
from actors.offsets import Entry
from actors.sinks.runner import END, SinkBatch, run_sink
from actors.sinks.spark import iceberg
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.sink import SparkSink
from actors.sinks.table.rows import COORDINATES, arrow_type, column_batch
from processors.base import Row
from tests.gobblin_events import TOPIC, events
from tests.lake import IcebergReader, opened_sink, spark_settings, staging_writer

pytestmark = pytest.mark.slow

GROUP = "g"
P0 = (GROUP, TOPIC, 0)


@pytest.fixture
def catalog(tmp_path: Path) -> dict[str, Any]:
    """A SQLite catalog whose commits wait at most 300 ms for a lock, local warehouse."""
    return {"uri": f"jdbc:sqlite:{tmp_path / 'catalog.db'}?journal_mode=WAL"
                   "&busy_timeout=300",
            "warehouse": str(tmp_path / "wh")}


def section(catalog: dict[str, Any]) -> dict[str, Any]:
    return {"catalog": catalog, "appends": "pyiceberg", "flush_max_interval_s": 0.2,
            "flush_idle_s": 0.1}


@pytest.fixture
def actors(catalog: dict[str, Any]) -> Iterator[list[SparkActor]]:
    """Two processes' actors on the catalog (no JVM: pyiceberg appends), each with its
    writer id, its catalog connection and its metrics."""
    made = []
    for _ in range(2):
        actor = SparkActor(spark_settings(section(catalog)))
        actor.metrics = Metrics()
        made.append(actor)
    yield made
    for actor in made:
        actor.stop()


def at(partition: int, next_offset: int, count: int) -> Entry:
    """A worker's batch of ``partition`` ending before ``next_offset``."""
    return Entry(TopicPartition(TOPIC, partition), next_offset, count)


def offsets_of(reader: IcebergReader, table: str) -> list[int]:
    return sorted(o for _, _, o in reader.coordinates(table))


def fenced_count(actor: SparkActor, table: str) -> float:
    assert actor.metrics is not None
    value = actor.metrics.registry.get_sample_value(
        "kstage_fenced_appends_total", {"table": f"kstage.kstage.{table}"})
    return value or 0.0


async def until(condition: Any, what: str, timeout: float = 30) -> None:
    """Wait for ``condition()`` (state the writer sets), bounded."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


class Locked:
    """The SQLite catalog's write lock held from another connection (commits fail after
    the 300 ms busy timeout; reads go on: WAL)."""

    def __init__(self, catalog: dict[str, Any]) -> None:
        path = catalog["uri"].removeprefix("jdbc:sqlite:").partition("?")[0]
        self.con = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.con.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self.con.execute("ROLLBACK")
        self.con.close()


async def test_a_revoke_during_a_failed_append_appends_neither_batch(
        actors: list[SparkActor], catalog: dict[str, Any]) -> None:
    """Issue 32, finding 1: B1 (offsets 0-4) fails its append and waits in the backoff,
    B2 (5-8) is held behind it; the revoke marks both cancelled; a flush in between (the
    held-back timer) must append neither: B2 alone would record offset 9 and the next
    owner would resume past rows 0-4 the table lacks."""
    table = "stg_revoke_overtake"
    mine, theirs = actors
    sink = await opened_sink(mine, table)
    writer = staging_writer(mine, table)
    assert await sink.assigned([(TOPIC, 0)]) == {}
    one, two = at(0, 5, 5), at(0, 9, 4)
    lock = Locked(catalog)
    try:
        with pytest.raises(SinkError, match=table):
            await sink.write_at(events(0, 0, 5), one)
        second = asyncio.create_task(sink.write_at(events(0, 5, 4), two))
        await until(lambda: any(p.batch is two for p in writer._pending), "B2 pending")
    finally:
        lock.release()
    one.cancelled = two.cancelled = True  # the revoke (tracker.cancel), before the fence
    flushes = writer.flushes
    writer.flush_soon()  # a flush in between: the held-back timer, another worker's write
    async with asyncio.timeout(30):
        with pytest.raises(SinkError, match="revoked"):
            await second
    assert writer.flushes == flushes
    reader = IcebergReader(spark_settings(section(catalog)))
    assert reader.summaries(table) == []  # nothing appended, no offsets recorded
    await sink.revoked([(TOPIC, 0)], 1.0)

    # The next owner resumes where the table holds the partition (nowhere): all rows once.
    other = await opened_sink(theirs, table)
    assert await other.assigned([(TOPIC, 0)]) == {}
    async with asyncio.timeout(60):
        await other.write_at(events(0, 0, 9), at(0, 9, 9))
    assert offsets_of(reader, table) == list(range(9))
    assert reader.offsets(table) == {P0: 9}


class AnswerLost:
    """A loaded table whose commit lands, then fails as if the catalog's answer was lost."""

    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loaded, name)

    def _do_commit(self, *args: Any, **kwargs: Any) -> None:
        self.loaded._do_commit(*args, **kwargs)
        raise ConnectionError("server closed the connection unexpectedly")


async def test_a_later_batch_reusing_an_id_never_inherits_a_doubt(
        actors: list[SparkActor], catalog: dict[str, Any]) -> None:
    """Issue 32, finding 1: B1's append landed but its answer was lost and the catalog
    could not be asked (its commit id in doubt); then the partition was revoked. A batch
    of the next ownership that gets B1's ``id`` (CPython reuses the memory of a freed
    object) must be written, not skipped as "in the table already"."""
    table = "stg_doubt_reuse"
    mine = actors[0]
    sink = await opened_sink(mine, table)
    writer = staging_writer(mine, table)
    assert await sink.assigned([(TOPIC, 0)]) == {}
    lake = mine.lake()
    load = lake.table
    calls: list[str] = []

    def broken(name: str) -> Any:
        calls.append(name)
        if len(calls) == 1:
            return AnswerLost(load(name))  # the append: committed, answer lost
        raise ConnectionError("could not connect to the catalog")  # the lookup

    one, two = at(0, 5, 5), at(0, 9, 4)
    old_id = id(one)
    lake.table = broken  # type: ignore[method-assign]
    try:
        try:
            await sink.write_at(events(0, 0, 5), one)
        except SinkError:
            pass
        else:
            raise AssertionError("the append whose answer was lost did not fail")
    finally:
        lake.table = load  # type: ignore[method-assign]
    second = asyncio.create_task(sink.write_at(events(0, 5, 4), two))
    await until(lambda: any(p.batch is two for p in writer._pending), "B2 pending")
    one.cancelled = two.cancelled = True  # revoked
    writer.flush_soon()
    await asyncio.wait([second])
    second.exception()  # retrieved (a revoke failure here; it is fenced by the worker)
    await sink.revoked([(TOPIC, 0)], 1.0)
    del one, second
    gc.collect()
    kept: list[Entry] = []
    again = None
    for _ in range(100_000):  # bounded: CPython hands the freed memory out again
        candidate = at(0, 13, 8)
        if id(candidate) == old_id:
            again = candidate
            break
        kept.append(candidate)
    assert again is not None, "no batch got the freed batch's id"
    del kept

    # The next ownership resumes where the table holds the partition and writes 5-12.
    await sink.assigned([(TOPIC, 0)])
    async with asyncio.timeout(60):
        await sink.write_at(events(0, 5, 8), again)
    reader = IcebergReader(spark_settings(section(catalog)))
    assert offsets_of(reader, table) == list(range(13))  # written, not skipped
    assert reader.offsets(table) == {P0: 13}


async def run_worker_sink(sink: SparkSink, batches: list[tuple[Sequence[Row], Entry]],
                          ) -> list[Entry]:
    """The worker's sink loop (its retries with backoff) over ``batches``; the entries
    acked (their offsets would be committed to Kafka)."""
    mailbox: asyncio.Queue[Any] = asyncio.Queue()
    for rows, entry in batches:
        await mailbox.put(SinkBatch(rows, entry))
    await mailbox.put(END)
    acked: list[Entry] = []
    async with asyncio.timeout(60):
        await run_sink(sink, mailbox, lambda b: acked.append(b.entry), label="test",
                       retry_backoff_s=(0.05, 0.2))
    return acked


def as_columns(rows: list[Row], actor: SparkActor, table: str) -> ColumnRows:
    """``rows`` as a batch decoded and mapped as columns (actors/worker/columns.py) hands
    them to the sink: one Arrow table of the staging table's column types."""
    import pyarrow as pa

    writer = staging_writer(actor, table)
    schema = pa.schema([(c.name, arrow_type(c.type))
                        for c in (*writer.columns, *COORDINATES)])
    columns = ColumnRows(pa.Table.from_pylist(rows, schema=schema))
    # converted as they are, as the worker's are (no fallback to the rows one by one)
    assert column_batch(columns.table, (*writer.columns, *COORDINATES)) is not None
    return columns


@pytest.mark.parametrize("shape", ["dicts", "columns"])
async def test_a_stale_writer_is_fenced_and_its_retry_commits_nothing_twice(
        actors: list[SparkActor], catalog: dict[str, Any],
        caplog: pytest.LogCaptureFixture, shape: str) -> None:
    """Two writers of one table: the stale one (a member frozen past its session) read
    the partition's offset (0) before the new owner appended 0-9; its append of 0-9 is
    refused by the catalog's fence: nothing of it written, counted, logged with the
    table, the partition, the expected and the found offsets. The worker's retry drops
    the rows the table holds: the batch is done without an append (acked: committed),
    and the next batch continues from the table's offset. The same with the rows of
    each batch as columns (``columns``: a batch decoded and mapped as Arrow columns),
    whose retry drops the held rows from its table."""
    table = "stg_fenced"
    stale_actor, owner_actor = actors
    stale = await opened_sink(stale_actor, table)
    owner = await opened_sink(owner_actor, table)

    def shaped(rows: list[Row]) -> Sequence[Row]:
        return rows if shape == "dicts" else as_columns(rows, stale_actor, table)

    assert await stale.assigned([(TOPIC, 0)]) == {}  # before it froze
    assert await owner.assigned([(TOPIC, 0)]) == {}  # the new owner, after the session
    async with asyncio.timeout(60):
        await owner.write_at(shaped(events(0, 0, 10)), at(0, 10, 10))
    reader = IcebergReader(spark_settings(section(catalog)))
    assert offsets_of(reader, table) == list(range(10))

    caplog.set_level(logging.WARNING)
    # Its batch: messages 0-11, rows of 0-9 (10 and 11 made none: filtered).
    late, rows = at(0, 12, 12), shaped(events(0, 0, 10))
    with pytest.raises(SinkError, match="kstage fence:"):
        async with asyncio.timeout(60):
            await stale.write_at(rows, late)
    assert offsets_of(reader, table) == list(range(10))  # 0 duplicates
    assert len(reader.summaries(table)) == 1
    assert staging_writer(stale_actor, table).fenced == 1
    assert fenced_count(stale_actor, table) == 1
    refused = [r.getMessage() for r in caplog.records if "refused by the fence" in
               r.getMessage()]
    assert len(refused) == 1, caplog.text
    assert (f"kstage fence: table kstage.kstage.{table}: group {GROUP} topic {TOPIC} "
            "partition 0: expected offset 0, found 10") in refused[0]

    # The worker's retry (its sink loop): the same batch, its rows all in the table now,
    # is done without an append and acked (committed to Kafka); the next batch continues
    # from the table's offset (10: messages 10 and 11 had no rows).
    acked = await run_worker_sink(stale, [(rows, late)])
    assert [e.next_offset for e in acked] == [12]
    assert len(reader.summaries(table)) == 1
    assert len(rows) == 0  # the retry dropped the held rows, in place
    acked = await run_worker_sink(stale, [(shaped(events(0, 12, 3)), at(0, 15, 3))])
    assert [e.next_offset for e in acked] == [15]
    assert offsets_of(reader, table) == [*range(10), 12, 13, 14]  # every row once
    summaries = reader.summaries(table)
    assert len(summaries) == 2
    assert iceberg.parse_offsets(summaries[-1][iceberg.EXPECT]) == {P0: 10}
    assert reader.offsets(table) == {P0: 15}
    assert fenced_count(stale_actor, table) == 1
    assert fenced_count(owner_actor, table) == 0


async def test_the_fence_is_checked_again_on_each_optimistic_retry(
        actors: list[SparkActor], catalog: dict[str, Any],
        caplog: pytest.LogCaptureFixture) -> None:
    """pyiceberg's commit loses the compare-and-swap to another writer and is retried on
    the reloaded metadata: when that writer appended other partitions, the fence passes
    there and the append commits (no spurious refusal); when it appended the same
    partition, the retry is refused."""
    table = "stg_fence_retry"
    mine_actor, other_actor = actors
    mine = await opened_sink(mine_actor, table)
    other = await opened_sink(other_actor, table)
    assert await mine.assigned([(TOPIC, 0)]) == {}
    assert await other.assigned([(TOPIC, 1), (TOPIC, 0)]) == {}
    catalog_ = mine_actor.lake().catalog()
    stage = catalog_._update_and_stage_table
    raced: list[Any] = []

    def racing(rows: list[Row], entry: Entry) -> Any:
        def staged(*args: Any, **kwargs: Any) -> Any:
            result = stage(*args, **kwargs)  # the fence passed on this base ...
            if not raced:  # ... then the other writer commits before the swap
                raced.append(asyncio.run_coroutine_threadsafe(
                    other.write_at(rows, entry), loop).result(60))
            return result
        return staged

    loop = asyncio.get_running_loop()
    caplog.set_level(logging.WARNING)
    # The other writer appends partition 1 between this one's check and its swap.
    catalog_._update_and_stage_table = racing(events(1, 0, 4), at(1, 4, 4))
    try:
        async with asyncio.timeout(60):
            await mine.write_at(events(0, 0, 5), at(0, 5, 5))
    finally:
        del catalog_._update_and_stage_table
    assert raced and "Commit failed due to a concurrent update, retrying" in caplog.text
    reader = IcebergReader(spark_settings(section(catalog)))
    assert reader.offsets(table) == {P0: 5, (GROUP, TOPIC, 1): 4}
    assert sorted(reader.coordinates(table)) == sorted(
        [(TOPIC, 0, o) for o in range(5)] + [(TOPIC, 1, o) for o in range(4)])
    assert fenced_count(mine_actor, table) == 0

    # Now the other writer (a new owner of partition 0 that read offset 5) appends 5-9
    # between this one's check and its swap: the retry on the new metadata is refused.
    raced.clear()
    other_writer = staging_writer(other_actor, table)
    other_writer.forget([P0])
    assert await other.assigned([(TOPIC, 0)]) == {(TOPIC, 0): 5}
    catalog_._update_and_stage_table = racing(events(0, 5, 5), at(0, 10, 5))
    try:
        with pytest.raises(SinkError, match="kstage fence:.*partition 0: expected offset "
                                            "5, found 10"):
            async with asyncio.timeout(60):
                await mine.write_at(events(0, 5, 5), at(0, 10, 5))
    finally:
        del catalog_._update_and_stage_table
    assert raced
    counts = reader.coordinates(table)
    assert sorted(o for t, p, o in counts if p == 0) == list(range(10))
    assert max(counts.values()) == 1
    assert staging_writer(mine_actor, table).fenced == 1


async def test_an_append_still_in_its_commit_after_a_lost_membership_is_fenced(
        actors: list[SparkActor], catalog: dict[str, Any],
        caplog: pytest.LogCaptureFixture) -> None:
    """The member's append of 0-9 is inside the catalog's commit (stalled there, as a
    process frozen mid-commit) when its membership is lost: the revoke waits 0 s for it,
    says so, and forgets the partition; the new owner reads offset 0 and appends 0-9.
    The stalled commit then goes on, on the new owner's metadata: refused, 0 duplicates."""
    table = "stg_fenced_late"
    member_actor, owner_actor = actors
    member = await opened_sink(member_actor, table)
    owner = await opened_sink(owner_actor, table)
    assert await member.assigned([(TOPIC, 0)]) == {}
    catalog_ = member_actor.lake().catalog()
    stage = catalog_._update_and_stage_table
    entered, go_on = threading.Event(), threading.Event()

    def stalled(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert go_on.wait(60), "never released"
        return stage(*args, **kwargs)

    catalog_._update_and_stage_table = stalled
    caplog.set_level(logging.WARNING)
    try:
        late = at(0, 10, 10)
        write = asyncio.create_task(member.write_at(events(0, 0, 10), late))
        await until(entered.is_set, "the member's append inside its commit")
        late.cancelled = True  # the lost membership fences the partition ...
        write.cancel()  # ... and its write (the worker's Fence)
        await asyncio.wait([write])
        await member.revoked([(TOPIC, 0)], 0)  # on a lost membership: no wait
        assert "still running after 0.0s" in caplog.text
        assert await owner.assigned([(TOPIC, 0)]) == {}  # the new owner reads 0
        async with asyncio.timeout(60):
            await owner.write_at(events(0, 0, 10), at(0, 10, 10))
        go_on.set()
        writer = staging_writer(member_actor, table)
        await until(lambda: writer.fenced == 1, "the late append refused", timeout=60)
    finally:
        go_on.set()
        del catalog_._update_and_stage_table
    reader = IcebergReader(spark_settings(section(catalog)))
    assert offsets_of(reader, table) == list(range(10))  # 0 duplicates
    assert reader.offsets(table) == {P0: 10}
    assert fenced_count(member_actor, table) == 1


async def test_an_append_queued_behind_others_when_its_partition_is_revoked_writes_nothing(
        actors: list[SparkActor], catalog: dict[str, Any]) -> None:
    """An append handed over to the lake thread but queued behind another table's work
    when the revoke (waiting 0 s: a lost membership) forgets its partition refuses to
    write once its turn comes, on the thread: nothing of it in the table."""
    table = "stg_queued_revoked"
    member_actor = actors[0]
    member = await opened_sink(member_actor, table)
    writer = staging_writer(member_actor, table)
    assert await member.assigned([(TOPIC, 0)]) == {}
    lake = member_actor.lake()
    busy, go_on = threading.Event(), threading.Event()

    def other_work() -> None:  # another table's append holding the lake thread
        busy.set()
        assert go_on.wait(60), "never released"

    other = asyncio.ensure_future(lake.call(other_work))
    try:
        await until(busy.is_set, "the lake thread busy")
        late = at(0, 10, 10)
        write = asyncio.create_task(member.write_at(events(0, 0, 10), late))
        await until(lambda: any(P0 in a.streams for a in writer._appends),
                    "the append handed over")
        late.cancelled = True
        write.cancel()
        await asyncio.wait([write])
        await member.revoked([(TOPIC, 0)], 0)
    finally:
        go_on.set()
        await other
    await until(lambda: not writer._appends, "the queued append ended")
    reader = IcebergReader(spark_settings(section(catalog)))
    assert reader.summaries(table) == []
    assert fenced_count(member_actor, table) == 0  # refused before writing, not fenced


async def test_a_pyiceberg_append_measures_the_cpu_it_cost_beside_its_duration(
        actors: list[SparkActor]) -> None:
    """The rest after pyiceberg's appends (``flush_rest_ratio``) counts the CPU seconds
    the lake thread spent on them, measured beside their duration (the rule:
    actors/sinks/table/batching.py): the wait on a catalog costs no rest."""
    table = "stg_cpu"
    actor = actors[0]
    sink = await opened_sink(actor, table)
    assert await sink.assigned([(TOPIC, 0)]) == {}
    async with asyncio.timeout(60):
        await sink.write_at(events(0, 0, 10), at(0, 10, 10))
    writer = staging_writer(actor, table)
    assert writer.latency is not None and writer.cpu is not None, (writer.latency,
                                                                    writer.cpu)
    assert 0 < writer.cpu <= writer.latency
