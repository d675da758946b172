"""The JDBC sink's ``mode: append`` is exactly once: each flush moves the Kafka offsets of
its partitions in the offsets table in the same transaction as its rows, with a
compare-and-set (actors.sinks.jdbc_offsets), on a real PostgreSQL through real PySpark."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import TopicPartition

from actors.errors import SinkError
from actors.offsets import Entry
from actors.sinks import SinkContext, jdbc_append
from actors.sinks.jdbc import JdbcSink, JdbcTableWriter
from actors.sinks.spark.actor import SparkActor
from tests.gobblin_events import event, events
from tests.integration.test_jdbc_sink import (
    CLUSTERS,
    PASSWORD,
    PROCESSOR,
    TOPIC,
    offsets_in,
    settings,
)
from tests.kafkautil import committed, create_topic, produce, unique, write_config
from tests.postgres import JAR, USER, Postgres

pytestmark = pytest.mark.slow

GROUP = "g-jdbc-eo"


async def fresh(actor: SparkActor, pg: Postgres, table: str) -> JdbcSink:
    """A sink with a writer of its own, as another process's would be."""
    jdbc_append._WRITERS.pop(actor, None)
    sink = JdbcSink(settings(pg, table), actor)
    sink.bind(SinkContext(columns=PROCESSOR.columns, table=PROCESSOR.table,
                          processor=PROCESSOR.name, group=GROUP))
    async with asyncio.timeout(90):
        await sink.open()
    return sink


def writer(sink: JdbcSink) -> JdbcTableWriter:
    assert isinstance(sink._writer, JdbcTableWriter)
    return sink._writer


def at(partition: int, next_offset: int) -> Entry:
    return Entry(TopicPartition(TOPIC, partition), next_offset, 1)


def recorded(pg: Postgres, table: str) -> list[tuple[str, int, int]]:
    return [(g, int(p), int(o)) for g, _, p, o in pg.psql(
        f'SELECT group_id, topic, partition, next_offset FROM "{table}_kafka_offsets" '  # noqa: S608
        "ORDER BY 1, 2, 3")]


async def test_a_replay_after_the_table_commit_resumes_at_the_table_offset(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    """A process that died between its table commit and its Kafka commit: the next
    owner is told the table's offset at assignment, and a replay writes nothing twice."""
    pg, table = running, "stg_eo_replay"
    first = await fresh(jdbc_spark, pg, table)
    assert first.capabilities.stores_offsets
    async with asyncio.timeout(90):
        assert await first.assigned([(TOPIC, 0)]) == {}
        await first.write_at(events(0, 0, 10), at(0, 12))  # offsets 10, 11 had no row
    assert recorded(pg, table) == [(GROUP, 0, 12)]
    second = await fresh(jdbc_spark, pg, table)  # the restarted process
    async with asyncio.timeout(90):
        assert await second.assigned([(TOPIC, 0), (TOPIC, 1)]) == {(TOPIC, 0): 12}
        replay = events(0, 0, 15)  # read again from Kafka's committed offset, 0
        await second.write_at(replay, at(0, 15))
    assert offsets_in(pg, table) == [(0, o) for o in (*range(10), 12, 13, 14)]
    assert recorded(pg, table) == [(GROUP, 0, 15)]


async def test_a_stale_writer_is_refused_and_writes_nothing_twice(
        jdbc_spark: SparkActor, running: Postgres, caplog: pytest.LogCaptureFixture) -> None:
    """Two writers own one partition (the stale one frozen past its session): the new
    owner's flush lands; the stale one's is rolled back (its INSERT of the partition new
    to the table, the other's row there first), counted and said; its retry reads the
    table's offset and writes only what lies past it."""
    pg, table = running, "stg_eo_stale"
    stale = await fresh(jdbc_spark, pg, table)
    owner = await fresh(jdbc_spark, pg, table)
    async with asyncio.timeout(90):
        assert await stale.assigned([(TOPIC, 0)]) == {}
        assert await owner.assigned([(TOPIC, 0)]) == {}
        await owner.write_at(events(0, 0, 10), at(0, 10))
        late, late_at = events(0, 0, 14), at(0, 14)  # a retry passes the same batch
        with caplog.at_level(logging.WARNING, "actors.sinks.jdbc_append"), \
                pytest.raises(SinkError, match="refused: kstage fence: table stg_eo_stale: "
                              f"group {GROUP} topic {TOPIC} partition 0: expected offset 0, "
                              "found 10"):
            await stale.write_at(late, late_at)
    assert writer(stale).fenced == 1
    assert "nothing of it written" in caplog.text and f"{TOPIC}[0]@10" in caplog.text
    assert offsets_in(pg, table) == [(0, o) for o in range(10)]
    async with asyncio.timeout(90):
        await stale.write_at(late, late_at)  # the worker's retry: rows 10..13 only
        # the owner, now behind, is refused in turn and continues from the table
        with pytest.raises(SinkError, match="expected offset 10, found 14"):
            await owner.write_at(events(0, 10, 6), at(0, 16))
    assert offsets_in(pg, table) == [(0, o) for o in range(14)]
    assert recorded(pg, table) == [(GROUP, 0, 14)]


async def test_a_commit_whose_answer_was_lost_is_not_written_again(
        jdbc_spark: SparkActor, running: Postgres, monkeypatch: pytest.MonkeyPatch) -> None:
    """The transaction committed but the writer saw a failure (the connection broke
    after the COMMIT): the retry's compare-and-set finds the offsets moved, and the
    retry after that drops the rows the table holds."""
    pg, table = running, "stg_eo_lost_answer"
    sink = await fresh(jdbc_spark, pg, table)
    w = writer(sink)
    real = w._append_fenced
    calls: list[int] = []

    def committed_then_lost(spark: Any, flight: Any, rows: list[tuple[Any, ...]]) -> Any:
        result = real(spark, flight, rows)
        calls.append(len(rows))
        if len(calls) == 1:
            flight.failed = True
            raise RuntimeError("An I/O error occurred while sending to the backend.")
        return result

    monkeypatch.setattr(w, "_append_fenced", committed_then_lost)
    batch, position = events(0, 0, 8), at(0, 8)  # a retry passes the same batch
    async with asyncio.timeout(90):
        await sink.assigned([(TOPIC, 0)])
        with pytest.raises(SinkError, match="I/O error"):
            await sink.write_at(batch, position)
        with pytest.raises(SinkError, match="expected offset 0, found 8"):
            await sink.write_at(batch, position)
        await sink.write_at(batch, position)  # the table holds it: done, nothing written
    assert calls == [8]
    assert offsets_in(pg, table) == [(0, o) for o in range(8)]
    assert recorded(pg, table) == [(GROUP, 0, 8)]


async def test_postgresql_stopped_during_a_flush_writes_nothing_twice(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    """The server stops while a flush waits inside its transaction: nothing of it lands,
    the write fails (retriable), and the retry after the restart writes each row once."""
    pg, table = running, "stg_eo_stopped"
    sink = await fresh(jdbc_spark, pg, table)
    async with asyncio.timeout(90):
        await sink.assigned([(TOPIC, 0)])
        await sink.write_at(events(0, 0, 5), at(0, 5))
    locker: subprocess.Popen[str] = pg.hold_lock(table)
    stopper: threading.Thread = pg.stop_when_waiting_on_lock()
    batch, position = events(0, 5, 5), at(0, 10)
    try:
        with pytest.raises(SinkError, match="append of 5 row"):
            async with asyncio.timeout(120):
                await sink.write_at(batch, position)
    finally:
        stopper.join(timeout=60)
        locker.wait(timeout=30)
    pg.start()
    async with asyncio.timeout(120):
        await sink.write_at(batch, position)
    assert offsets_in(pg, table) == [(0, o) for o in range(10)]
    assert recorded(pg, table) == [(GROUP, 0, 10)]


async def test_rows_postgresql_refuses_are_dead_lettered_before_the_offsets_move(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    """A row PostgreSQL refuses (class 22) is found inside the flush's transaction, which
    is rolled back: the row is dead-lettered while the table holds nothing of the flush,
    then the others are written with the offsets past them, once, and the write returns."""
    pg, table = running, "stg_eo_refused"
    sink = await fresh(jdbc_spark, pg, table)
    pg.psql(f'ALTER TABLE "{table}" ALTER COLUMN dedupe_status TYPE varchar(7)')
    seen: list[tuple[int, list[tuple[int, int]], list[tuple[str, int, int]]]] = []

    def dead_letter(rows: list[Any], status: int, reason: str) -> None:
        assert "SQLSTATE 22001" in reason
        seen.append((rows[0]["_offset"], offsets_in(pg, table), recorded(pg, table)))

    sink.bind(replace(sink.context, refuse=dead_letter))
    batch, position = events(0, 0, 16), at(0, 16)
    batch[6]["dedupe_status"] = "NOT_DEDUPED"
    async with asyncio.timeout(90):
        await sink.assigned([(TOPIC, 0)])
        await sink.write_at(batch, position)
    assert seen == [(6, [], [])]  # dead-lettered before anything of the flush landed
    assert offsets_in(pg, table) == [(0, o) for o in range(16) if o != 6]
    assert recorded(pg, table) == [(GROUP, 0, 16)]
    assert writer(sink).flushes == 1


async def test_a_batch_of_a_revoked_partition_is_never_written(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    """A batch cancelled by a revoke before its flush is not written (its write fails);
    the revoke forgets the partition, and the next assignment reads the table again."""
    pg, table = running, "stg_eo_revoked"
    sink = await fresh(jdbc_spark, pg, table)
    stream = (GROUP, TOPIC, 0)
    async with asyncio.timeout(90):
        await sink.assigned([(TOPIC, 0)])
        await sink.write_at(events(0, 0, 3), at(0, 3))
        position = at(0, 6)
        position.cancelled = True
        with pytest.raises(SinkError, match="not written: its partition was revoked"):
            await sink.write_at(events(0, 3, 3), position)
        await sink.revoked([(TOPIC, 0)], 5.0)
        assert writer(sink).floor(stream) is None
        assert await sink.assigned([(TOPIC, 0)]) == {(TOPIC, 0): 3}
    assert offsets_in(pg, table) == [(0, o) for o in range(3)]
    assert recorded(pg, table) == [(GROUP, 0, 3)]


@pytest.mark.kafka
@pytest.mark.timeout(500)
async def test_sigkill_after_the_table_commit_resumes_from_the_table(
        broker: str, broker_kind: str, running: Postgres, tmp_path: Path,
        kstage: Any) -> None:
    """`kstage run` SIGKILLed after its table commits and before any Kafka commit (Kafka
    commits only hourly here), then `--drain`: every event once in the table."""
    pg, events_count = running, 60
    group, topic = unique("g-jdbc-eo"), unique("jdbc-eo")
    table = f"stg_eo_kill_{broker_kind}"
    await create_topic(broker, topic, partitions=2)
    await produce(broker, topic, [event(i) for i in range(events_count)],
                  partition_of=lambda i: i % 2)
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
        "topic": topic, "processor": PROCESSOR.name, "format": "json",
        "options": {"clusters": CLUSTERS},
        "sink": {"type": "jdbc", "table": table, "url": pg.url, "user": USER,
                 "password": PASSWORD, "jar": JAR}}],
        commit={"mode": "batch", "max_messages": 10**9, "max_interval_s": 3600})
    data = yaml.safe_load(cfg.read_text())
    data["spark"] = {"master": "local[1]", "warehouse": str(tmp_path / "warehouse"),
                     "flush_max_interval_s": 0.3}
    cfg.write_text(yaml.safe_dump(data))

    def landed() -> int:  # 0 until the table exists
        exists = f"SELECT count(*) FROM pg_tables WHERE tablename = '{table}'"  # noqa: S608
        if pg.psql(exists) == [["0"]]:
            return 0
        return int(pg.psql(f'SELECT count(*) FROM "{table}"')[0][0])  # noqa: S608

    first = kstage(cfg)
    deadline = asyncio.get_running_loop().time() + 180
    while landed() < events_count:
        assert first.proc.poll() is None, first.output()
        assert asyncio.get_running_loop().time() < deadline, first.output()
        await asyncio.sleep(0.2)
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    assert await committed(broker, group, topic, 2) == {0: -1, 1: -1}

    second = kstage(cfg, "--drain")
    assert await second.wait(timeout=240) == 0, second.output()
    rows = pg.psql(f'SELECT _partition, _offset FROM "{table}"')  # noqa: S608
    assert sorted((int(p), int(o)) for p, o in rows) == sorted(
        (i % 2, i // 2) for i in range(events_count))  # each event once
    assert await committed(broker, group, topic, 2) == {0: 30, 1: 30}
