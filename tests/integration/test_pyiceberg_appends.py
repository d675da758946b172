"""``spark.appends: pyiceberg``: the staging appends written and committed by pyiceberg
from the kstage process, into the table Spark created, with real processes:

* ``kstage run --drain`` lands every event once, the offsets in the snapshot summaries are
  those committed to Kafka, no append went through Spark (no ``spark.app.id`` in any
  summary), Spark and pyiceberg read the same rows, and the merge at the end of the drain
  (through Spark) fills the final table with every event once; the same to an ``s3://``
  warehouse (moto on loopback);
* SIGKILL after the table commits and before the Kafka commit, then ``--drain``: the
  worker resumes where the table holds each partition, nothing twice; SIGKILLed again and
  again while it appends: every event once;
* another writer commits between the load of the table and the commit (a real conflict
  on the real catalog): pyiceberg commits again on the reloaded table, each row once, one
  data file per append; two processes of one group append to one table at once: every
  event once, both writers in its commits;
* the SQLite catalog locked by another process, and the PostgreSQL catalog stopped: the
  appends fail, are retried, /readyz says so, nothing past the table is committed to
  Kafka, every event lands once;
* a commit whose answer was lost while the catalog cannot be asked: the retry of the same
  batch finds its commit id in the table and writes nothing again.

The module has one SQLite catalog with a local warehouse, one table per test and broker,
and one Spark session of its own (local[1], 512m) that reads what the tests wrote.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import TopicPartition

from actors.errors import SinkError
from actors.offsets import Entry
from actors.sinks import SinkContext
from actors.sinks.spark import iceberg
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.pyiceberg_appends import Lake, PyIcebergAppends
from actors.sinks.spark.sink import SparkSink, SparkSinkSettings
from actors.sinks.spark.staging import StagingWriter
from actors.sinks.table.columns import COORDINATES
from actors.sinks.table.rows import record_batch
from processors.base import Column
from tests.gobblin_events import PROCESSOR, TOPIC, events
from tests.kafkautil import (
    KstageProcess,
    committed,
    create_topic,
    split_between,
    unique,
    wait_until,
)
from tests.lake import (
    IcebergReader,
    LockHolder,
    as_set,
    assert_once,
    drain_resumes_once,
    lake_config,
    produce_events,
    spark_rows,
    spark_section,
    spark_settings,
    through_outage,
    wait_committed,
)
from tests.postgres import USER, Postgres
from tests.s3_server import S3Server

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The module's ``spark.catalog``: a SQLite file and a local warehouse."""
    place = tmp_path_factory.mktemp("pyiceberg-lake")
    return {"uri": f"jdbc:sqlite:{place / 'catalog.db'}", "warehouse": str(place / "wh")}


@pytest.fixture(scope="module")
def reader(catalog: dict[str, Any]) -> Iterator[SparkActor]:
    """The Spark session of the test process, on the module's catalog (its staging writers
    append through pyiceberg)."""
    actor = SparkActor(spark_settings(pyiceberg_section(catalog)))
    yield actor
    actor.stop()


def pyiceberg_section(catalog: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return spark_section(catalog, appends="pyiceberg", **extra)


def config(tmp_path: Path, broker: str, group: str, topic: str, table: str,
           spark: dict[str, Any], *, merge: bool = False, **group_keys: Any) -> Path:
    cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark,
                      **group_keys)
    if merge:
        data = yaml.safe_load(cfg.read_text())
        data["merge"] = {"interval_s": 3600}  # once, after the drain
        cfg.write_text(yaml.safe_dump(data))
    return cfg


def spark_appends(reader: IcebergReader, table: str) -> int:
    """How many snapshots of ``table`` Spark committed (Iceberg's Spark writer records
    its application id in the summary; pyiceberg does not)."""
    return sum("spark.app.id" in s for s in reader.summaries(table))


@pytest.mark.timeout(400)
async def test_drain_lands_every_event_once_and_merges(
        broker: str, broker_kind: str, tmp_path: Path, kstage: type[KstageProcess],
        catalog: dict[str, Any], reader: SparkActor) -> None:
    # The module's catalog: one table per broker.
    table, final = f"stg_pyice_drain_{broker_kind}", f"final_pyice_drain_{broker_kind}"
    events = 300
    topic, group = unique("pyice-drain"), unique("g-pyice-drain")
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_events(broker, topic, 0, events, PARTITIONS)
    spark = pyiceberg_section(catalog, flush_max_rows=40)
    proc = kstage(config(tmp_path, broker, group, topic, table, spark, merge=True,
                         max_poll_records=30), "--drain")
    assert await proc.wait(timeout=300) == 0, proc.output()

    half = events // PARTITIONS
    assert await committed(broker, group, topic, PARTITIONS) == {0: half, 1: half}
    pyiceberg = IcebergReader(spark)
    assert_once(pyiceberg, table, topic, events, PARTITIONS)
    assert pyiceberg.offsets(table) == {(group, topic, 0): half, (group, topic, 1): half}
    summaries = pyiceberg.summaries(table)
    assert len(summaries) >= 4  # several appends, one commit each
    assert spark_appends(pyiceberg, table) == 0  # every one by pyiceberg
    assert all(s.get(iceberg.COMMIT_ID) and s.get(iceberg.WRITER_ID) for s in summaries)
    # The newest snapshot carries every partition's offset.
    assert iceberg.parse_offsets(summaries[-1][iceberg.OFFSETS]) == pyiceberg.offsets(table)

    by_spark = await reader.call(lambda s: spark_rows(s, table))
    assert len(by_spark) == events
    assert as_set(by_spark) == as_set(pyiceberg.rows(table))
    # The merge (Spark, at the end of the drain) read the staging appends pyiceberg made.
    final_by_spark = await reader.call(lambda s: spark_rows(s, final))
    assert len(final_by_spark) == events
    assert as_set(final_by_spark) == as_set(pyiceberg.rows(final))
    assert "registered" in proc.output()


@pytest.mark.timeout(400)
async def test_drain_to_an_s3_warehouse(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    """The warehouse on S3 (moto on loopback), the catalog SQLite: pyiceberg writes the
    data files and metadata with ``spark.catalog.s3``'s endpoint and credentials."""
    events, table = 100, "stg_pyice_s3"
    topic, group = unique("pyice-s3"), unique("g-pyice-s3")
    with S3Server(tmp_path / "moto.log") as s3:
        bucket = s3.new_bucket()
        spark = pyiceberg_section({"uri": f"jdbc:sqlite:{tmp_path / 'catalog.db'}",
                                   "warehouse": f"s3://{bucket}/warehouse",
                                   "s3": s3.catalog_s3()}, flush_max_rows=25)
        await create_topic(broker, topic, partitions=PARTITIONS)
        await produce_events(broker, topic, 0, events, PARTITIONS)
        proc = kstage(config(tmp_path, broker, group, topic, table, spark,
                             max_poll_records=25), "--drain")
        assert await proc.wait(timeout=300) == 0, proc.output()
        pyiceberg = IcebergReader(spark)
        assert_once(pyiceberg, table, topic, events, PARTITIONS)
        assert spark_appends(pyiceberg, table) == 0
        keys = [k for k in s3.objects(bucket) if k.startswith(f"warehouse/kstage/{table}/")]
    assert sum(k.endswith(".parquet") and "/data/" in k for k in keys) >= 2, keys
    assert not list(tmp_path.rglob("*.parquet"))
    assert S3Server.SECRET_ACCESS_KEY not in proc.output()


@pytest.mark.timeout(500)
async def test_sigkill_after_the_table_commit_resumes_from_the_table(
        broker: str, broker_kind: str, tmp_path: Path, kstage: type[KstageProcess],
        catalog: dict[str, Any]) -> None:
    events, table = 600, f"stg_pyice_gap_{broker_kind}"
    topic, group = unique("pyice-gap"), unique("g-pyice-gap")
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_events(broker, topic, 0, events, PARTITIONS)
    spark = pyiceberg_section(catalog, flush_max_rows=100)
    # Kafka commits only every hour: every table commit is ahead of Kafka's.
    cfg = config(tmp_path, broker, group, topic, table, spark,
                 commit={"mode": "batch", "max_messages": 10**9, "max_interval_s": 3600})
    pyiceberg = IcebergReader(spark)
    first = kstage(cfg)
    await wait_until(lambda: first.proc.poll() is not None
                     or sum(pyiceberg.coordinates(table).values()) >= events, timeout=180,
                     what="every event in the staging table")
    assert first.proc.poll() is None, first.output()
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    assert sum(max(v, 0) for v in (await committed(
        broker, group, topic, PARTITIONS)).values()) == 0

    await drain_resumes_once(kstage, cfg, broker, pyiceberg, group, table, topic,
                             events, PARTITIONS)


@pytest.mark.timeout(600)
async def test_repeated_sigkill_while_appending_leaves_every_event_once(
        broker: str, broker_kind: str, tmp_path: Path, kstage: type[KstageProcess],
        catalog: dict[str, Any]) -> None:
    events, kills, table = 8000, 3, f"stg_pyice_kill_{broker_kind}"
    topic, group = unique("pyice-kill"), unique("g-pyice-kill")
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_events(broker, topic, 0, events, PARTITIONS)
    # Small appends (pyiceberg commits one in ~0.1 s): many of them, killed among them.
    spark = pyiceberg_section(catalog, flush_max_rows=50, flush_min_rows=50)
    cfg = config(tmp_path, broker, group, topic, table, spark, max_poll_records=50,
                 commit={"mode": "batch", "max_messages": 75})
    pyiceberg = IcebergReader(spark)

    def landed() -> int:
        return sum(pyiceberg.coordinates(table).values())

    for round_ in range(kills):
        proc = kstage(cfg)
        floor = landed()
        await wait_until(lambda p=proc, f=floor: p.proc.poll() is not None  # type: ignore[misc]
                         or landed() > f, timeout=180, what=f"an append in round {round_}")
        await asyncio.sleep(0.15 * round_)  # somewhere else in the append cycle
        assert proc.proc.poll() is None, proc.output()
        proc.proc.send_signal(signal.SIGKILL)
        proc.proc.wait()
    assert landed() < events, "killed too late: add events"
    last = kstage(cfg, "--drain")
    assert await last.wait(timeout=240) == 0, last.output()
    half = events // PARTITIONS
    assert await committed(broker, group, topic, PARTITIONS) == {0: half, 1: half}
    assert_once(pyiceberg, table, topic, events, PARTITIONS)


@pytest.mark.timeout(600)
async def test_two_processes_append_to_one_table_exactly_once(
        broker: str, broker_kind: str, tmp_path: Path, kstage: type[KstageProcess],
        catalog: dict[str, Any]) -> None:
    """Two ``kstage run`` processes of one group append to one table through pyiceberg at
    once, on the module's SQLite catalog: commits that lose the race are applied again,
    every event once, both writers in the table's commits."""
    events, partitions = 4000, 4
    table = f"stg_pyice_two_{broker_kind}"
    topic, group = unique("pyice-two"), unique("g-pyice-two")
    await create_topic(broker, topic, partitions=partitions)
    spark = pyiceberg_section(catalog, flush_max_rows=100, flush_min_rows=50)
    cfg = config(tmp_path, broker, group, topic, table, spark, max_poll_records=50)
    a, b = kstage(cfg), kstage(cfg)
    await wait_until(lambda: split_between(a, b, partitions), timeout=120,
                     what="the partitions split between both processes")
    await a.wait_for_log("registered", timeout=120)
    await b.wait_for_log("registered", timeout=120)
    await produce_events(broker, topic, 0, events, partitions)
    await wait_committed(broker, group, topic, partitions, events, [a, b])
    for proc in (a, b):
        proc.signal(signal.SIGTERM)
    assert await a.wait(timeout=90) == 0, a.output()
    assert await b.wait(timeout=90) == 0, b.output()
    pyiceberg = IcebergReader(spark)
    assert_once(pyiceberg, table, topic, events, partitions)
    assert pyiceberg.offsets(table) == {
        (group, topic, p): o for p, o in
        (await committed(broker, group, topic, partitions)).items()}
    summaries = pyiceberg.summaries(table)
    assert len({s[iceberg.WRITER_ID] for s in summaries}) == 2
    assert spark_appends(pyiceberg, table) == 0
    # Every append was fenced on where it continued from (and none refused wrongly:
    # each event once above).
    assert all(iceberg.EXPECT in s for s in summaries)




@pytest.mark.timeout(300)
async def test_a_commit_that_lost_the_race_is_applied_on_the_reloaded_table(
        tmp_path: Path, catalog: dict[str, Any], reader: SparkActor,
        caplog: pytest.LogCaptureFixture) -> None:
    """Another writer commits between this writer's load of the table and its commit:
    pyiceberg's compare-and-swap fails, it reloads the table and commits the same data
    file again on top; both appends are in the table once, with their offsets."""
    table = "stg_pyice_race"
    settings = spark_settings(pyiceberg_section(catalog))
    columns = (Column("note", "string", True),)
    await reader.call(lambda spark: iceberg.create_staging(
        spark, settings, table, columns))
    lake = Lake(settings)
    other = Lake(settings)  # another process's catalog connection
    mine = PyIcebergAppends(lake, table, "mine")
    theirs = PyIcebergAppends(other, table, "theirs")

    def batch(topic: str, offsets: range) -> Any:
        rows = [{"_topic": topic, "_partition": 0, "_offset": o, "_timestamp": o}
                for o in offsets]
        made, refused = record_batch(rows, (*columns, *COORDINATES), "test")
        assert not refused
        return made

    load = lake.table
    raced = []

    def stale(name: str) -> Any:
        loaded = load(name)  # this writer's view; the other commits after it
        if not raced:
            raced.append(theirs.write([batch("b", range(5))], {("g", "b", 0): 5}, "c-theirs",
                                       {("g", "b", 0): 0}))
        return loaded

    lake.table = stale  # type: ignore[method-assign]
    try:
        assert await lake.call(lambda: mine.write(
            [batch("a", range(7))], {("g", "a", 0): 7}, "c-mine", {("g", "a", 0): 0})) == 7
        lake.table = load  # type: ignore[method-assign]
        assert await lake.call(lambda: mine.committed_ids({"c-mine", "c-theirs", "x"})) == {
            "c-mine", "c-theirs"}
    finally:
        lake.stop()
        other.stop()
    assert "Commit failed due to a concurrent update, retrying" in caplog.text  # the race
    pyiceberg = IcebergReader(settings)
    coordinates = pyiceberg.coordinates(table)
    assert sorted(coordinates) == [("a", 0, o) for o in range(7)] + [
        ("b", 0, o) for o in range(5)]
    assert max(coordinates.values()) == 1
    assert pyiceberg.offsets(table) == {("g", "a", 0): 7, ("g", "b", 0): 5}
    summaries = pyiceberg.summaries(table)
    assert [s[iceberg.COMMIT_ID] for s in summaries] == ["c-theirs", "c-mine"]
    assert [s["added-data-files"] for s in summaries] == ["1", "1"]  # not written twice
    # computed before the other writer's commit, carried forward from it on the retry
    assert iceberg.parse_offsets(summaries[-1][iceberg.OFFSETS]) == {
        ("g", "a", 0): 7, ("g", "b", 0): 5}
    assert len(await reader.call(lambda s: spark_rows(s, table))) == 12


@pytest.mark.timeout(300)
async def test_the_kept_table_is_loaded_again_when_another_writer_moved_it(
        catalog: dict[str, Any], reader: SparkActor,
        caplog: pytest.LogCaptureFixture) -> None:
    """A writer keeps the table its last append left and loads it again only when the
    catalog points elsewhere: another writer's commit in between is seen (its offsets
    carried into the next snapshot); another writer committing between that check and
    the commit is a real conflict, committed again on the reloaded table. Every row
    once, one data file per append, the current snapshot holds both writers' offsets."""
    table = "stg_pyice_kept"
    settings = spark_settings(pyiceberg_section(catalog))
    columns = (Column("note", "string", True),)
    await reader.call(lambda spark: iceberg.create_staging(
        spark, settings, table, columns))
    lake, other = Lake(settings), Lake(settings)
    mine = PyIcebergAppends(lake, table, "mine")
    theirs = PyIcebergAppends(other, table, "theirs")

    def batch(topic: str, offsets: range) -> Any:
        rows = [{"_topic": topic, "_partition": 0, "_offset": o, "_timestamp": o}
                for o in offsets]
        made, refused = record_batch(rows, (*columns, *COORDINATES), "test")
        assert not refused
        return made

    load, locate = lake.table, lake.location
    loads: list[str] = []

    def counted(name: str) -> Any:
        loads.append(name)
        return load(name)

    def mine_at(start: int, end: int, commit_id: str) -> int:
        return mine.write([batch("a", range(start, end))], {("g", "a", 0): end}, commit_id,
                          {("g", "a", 0): start})  # its expectation, as the writer's

    lake.table = counted  # type: ignore[method-assign]
    try:
        assert await lake.call(lambda: mine_at(0, 3, "c1")) == 3
        assert await lake.call(lambda: mine_at(3, 6, "c2")) == 3
        assert len(loads) == 1  # kept: the catalog still points at its metadata
        await other.call(lambda: theirs.write([batch("b", range(5))], {("g", "b", 0): 5},
                                              "c3", {("g", "b", 0): 0}))
        assert await lake.call(lambda: mine_at(6, 9, "c4")) == 3
        assert len(loads) == 2  # moved by the other writer: loaded again
        assert "retrying" not in caplog.text

        def raced(name: str) -> str | None:
            found = locate(name)  # this writer's check; the other commits after it
            theirs.write([batch("b", range(5, 8))], {("g", "b", 0): 8}, "c6",
                         {("g", "b", 0): 5})
            return found

        lake.location = raced  # type: ignore[method-assign]
        assert await lake.call(lambda: mine_at(9, 12, "c5")) == 3
    finally:
        lake.stop()
        other.stop()
    assert "Commit failed due to a concurrent update, retrying" in caplog.text
    pyiceberg = IcebergReader(settings)
    coordinates = pyiceberg.coordinates(table)
    assert sorted(coordinates) == [("a", 0, o) for o in range(12)] + [
        ("b", 0, o) for o in range(8)]
    assert max(coordinates.values()) == 1
    summaries = pyiceberg.summaries(table)
    assert [s[iceberg.COMMIT_ID] for s in summaries] == ["c1", "c2", "c3", "c4", "c6", "c5"]
    assert {s["added-data-files"] for s in summaries} == {"1"}  # not written twice
    assert iceberg.parse_offsets(summaries[3][iceberg.OFFSETS]) == {
        ("g", "a", 0): 9, ("g", "b", 0): 5}  # c4 carried c3's
    # c5, computed on c4 and applied again on c6 after the conflict, carries c6's
    # offsets, not c4's: the current snapshot alone holds every partition's
    assert iceberg.parse_offsets(summaries[-1][iceberg.OFFSETS]) == {
        ("g", "a", 0): 12, ("g", "b", 0): 8}
    assert pyiceberg.offsets(table) == {("g", "a", 0): 12, ("g", "b", 0): 8}


@pytest.mark.timeout(400)
async def test_sqlite_catalog_locked_is_retried_and_loses_nothing(
        broker: str, broker_kind: str, tmp_path: Path, kstage: type[KstageProcess],
        catalog: dict[str, Any]) -> None:
    table = f"stg_pyice_locked_{broker_kind}"
    topic, group = unique("pyice-lock"), unique("g-pyice-lock")
    database = Path(catalog["uri"].removeprefix("jdbc:sqlite:"))
    # A commit waits up to 1 s for another writer of the database (default 30 s).
    spark = pyiceberg_section({**catalog, "uri": f"jdbc:sqlite:{database}?journal_mode=WAL"
                                                 "&busy_timeout=1000"})
    await create_topic(broker, topic, partitions=PARTITIONS)
    cfg = config(tmp_path, broker, group, topic, table, spark,
                 supervisor={"sink_unready_after_s": 1, "max_backoff_s": 2})
    lock = LockHolder(database)
    try:
        await through_outage(broker, kstage(cfg), topic, group, begin=lock.hold,
                             end=lock.release, unready_within_s=120)
    finally:
        lock.release()
    pyiceberg = IcebergReader(spark)
    assert_once(pyiceberg, table, topic, 80, PARTITIONS)
    assert pyiceberg.offsets(table) == {(group, topic, 0): 40, (group, topic, 1): 40}
    assert spark_appends(pyiceberg, table) == 0


@pytest.mark.timeout(400)
async def test_postgres_catalog_down_is_retried_and_loses_nothing(
        broker: str, broker_kind: str, tmp_path: Path, kstage: type[KstageProcess],
        running: Postgres) -> None:
    """PostgreSQL, the catalog, stopped during the appends: pyiceberg cannot load the table
    nor ask whether its commit landed; the appends are retried, /readyz says so, nothing
    past the table is committed to Kafka, and every event lands once."""
    table = f"stg_pyice_pg_down_{broker_kind}"  # the module's server: one table per broker
    topic, group = unique("pyice-pg-down"), unique("g-pyice-pg-down")
    spark = pyiceberg_section({"uri": running.url, "user": USER, "password": "secret",
                               "warehouse": str(tmp_path / "warehouse")})
    await create_topic(broker, topic, partitions=PARTITIONS)
    cfg = config(tmp_path, broker, group, topic, table, spark,
                 supervisor={"sink_unready_after_s": 1, "max_backoff_s": 2})
    await through_outage(broker, kstage(cfg), topic, group, begin=running.stop,
                         end=running.start, unready_within_s=120)
    pyiceberg = IcebergReader(spark)
    assert_once(pyiceberg, table, topic, 80, PARTITIONS)
    assert pyiceberg.offsets(table) == {(group, topic, 0): 40, (group, topic, 1): 40}
    assert spark_appends(pyiceberg, table) == 0


class AnswerLost:
    """A loaded table whose commit to the catalog lands, then fails as if the catalog's
    answer was lost (the connection broke after the commit): at the table's commit,
    whichever transaction calls it."""

    def __init__(self, loaded: Any) -> None:
        self.loaded = loaded

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loaded, name)

    def _do_commit(self, *args: Any, **kwargs: Any) -> None:
        self.loaded._do_commit(*args, **kwargs)
        raise ConnectionError("server closed the connection unexpectedly")


@pytest.mark.timeout(300)
async def test_an_append_whose_answer_was_lost_is_found_and_not_written_again(
        catalog: dict[str, Any], reader: SparkActor) -> None:
    """The commit lands but its answer is lost, and the catalog cannot be asked whether it
    landed: the write fails (retriable). The worker's retry of the same batch looks the
    commit id up, finds it, and writes nothing again; its offsets are the table's."""
    table = "stg_pyice_unsure"
    sink = SparkSink(SparkSinkSettings(table=table), reader)
    sink.bind(SinkContext(group="g", topic=TOPIC, columns=PROCESSOR.columns,
                          table=PROCESSOR.table, processor=PROCESSOR.name))
    await sink.open()
    writer = reader.tracked(table)
    assert isinstance(writer, StagingWriter) and writer._lake is not None
    lake = writer._lake.lake
    load = lake.table
    calls: list[str] = []

    def broken(name: str) -> Any:
        calls.append(name)
        if len(calls) == 1:
            return AnswerLost(load(name))  # the append: committed, answer lost
        raise ConnectionError("could not connect to the catalog")  # the lookup

    position = Entry(TopicPartition(TOPIC, 0), 6, 6)
    rows = events(0, 0, 6)
    # The assignment's offsets read (through the lake too) before the catalog breaks.
    assert await sink.assigned([(TOPIC, 0)]) == {}
    lake.table = broken  # type: ignore[method-assign]
    try:
        with pytest.raises(SinkError, match="stg_pyice_unsure"):
            await sink.write_at(list(rows), position)
    finally:
        lake.table = load  # type: ignore[method-assign]
    assert len(calls) == 2
    pyiceberg = IcebergReader(reader.settings)
    assert sorted(o for _, _, o in pyiceberg.coordinates(table)) == list(range(6))
    await sink.write_at(list(rows), position)  # the worker's retry
    coordinates = pyiceberg.coordinates(table)
    assert sorted(o for _, _, o in coordinates) == list(range(6))  # not written twice
    assert len(pyiceberg.summaries(table)) == 1
    assert pyiceberg.offsets(table) == {("g", TOPIC, 0): 6}
