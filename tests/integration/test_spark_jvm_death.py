"""The Spark JVM of a running ``kstage run`` is SIGKILLed while it appends a flush and
events keep arriving (real broker, real PySpark with the Iceberg runtime):

* the process sees the JVM die, starts a new session (new JVM), registers its table
  again, looks the interrupted append up by its commit id and writes it again only if the
  dead JVM had not committed it: every event lands in staging exactly once, no offset is
  ever committed ahead of the table's rows, and SIGTERM ends with exit 0 and no traceback;
* with ``spark.max_session_restarts: 0`` the first death gives up: the process exits 1
  with a CRITICAL line naming the dead JVM, and nothing unwritten is committed;
* in process: a killed JVM is replaced and the table is registered again in the new
  session; when the replacement cannot start (JAVA_HOME points nowhere) the writes fail
  retriably until ``max_session_restarts`` attempts are used, then with FatalError.

Staging is read with pyiceberg through the same catalog (tests/iceberg_tables.py), so the
tests start no Spark JVM of their own.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer
from fastavro import parse_schema
from pyspark import SparkContext

from actors.codecs.avro import encode
from actors.errors import FatalError, SinkError
from actors.sinks.spark.actor import SparkActor, SparkJvmDiedError
from actors.sinks.spark.session import discard_session
from settings import SparkSettings
from tests import iceberg_tables
from tests.fake_registry import FakeRegistry
from tests.gobblin_events import events
from tests.integration.test_spark_exactly_once import (
    SCHEMA,
    TABLE,
    alive,
    children,
    compaction,
    config,
    expected,
)
from tests.kafkautil import KstageProcess, committed, create_topic, unique, wait_until
from tests.lake import opened_sink

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2
FLUSH_ROWS = 250


class Feed:
    """Produces Gobblin events ``i`` to partition ``i % PARTITIONS``, in order."""

    def __init__(self, broker: str, registry: FakeRegistry, topic: str) -> None:
        self.sid = registry.register(f"{topic}-value", SCHEMA)
        self.parsed = parse_schema(json.loads(SCHEMA))
        self.producer = AIOKafkaProducer(bootstrap_servers=broker)
        self.topic = topic
        self.sent = 0

    async def send(self, count: int) -> None:
        for i in range(self.sent, self.sent + count):
            await self.producer.send(self.topic, encode(self.parsed, self.sid, compaction(i)),
                                     partition=i % PARTITIONS)
        await self.producer.flush()
        self.sent += count

    async def trickle(self, chunks: int, size: int, pause_s: float) -> None:
        for _ in range(chunks):
            await self.send(size)
            await asyncio.sleep(pause_s)


def staged(warehouse: Path) -> Counter[tuple[int, int]]:
    """(partition, offset) of every row in the staging table (its committed snapshot)."""
    return iceberg_tables.coordinates(warehouse, TABLE)


def data_files(warehouse: Path) -> int:
    """The data files under the staging table's directory, committed or not."""
    return sum(1 for _ in (warehouse / "kstage" / TABLE).rglob("*.parquet"))


def jvm_of(proc: KstageProcess) -> int:
    jvms = [pid for pid in children(proc.proc.pid)
            if (Path("/proc") / str(pid) / "comm").read_text().strip() == "java"]
    assert len(jvms) == 1, (jvms, proc.output())
    return jvms[0]


async def kill_jvm_mid_flush(proc: KstageProcess, warehouse: Path) -> int:
    """SIGKILL the process's Spark JVM as soon as an append wrote its data file (before,
    during or just after its commit); its pid."""
    files = data_files(warehouse)

    def flushing() -> bool:
        return data_files(warehouse) > files

    jvm = jvm_of(proc)
    deadline = time.monotonic() + 60
    while not flushing():
        assert proc.proc.poll() is None, proc.output()
        assert time.monotonic() < deadline, "no flush in progress within 60s"
        time.sleep(0.002)  # a tight poll, nothing else to run
    os.kill(jvm, signal.SIGKILL)
    await wait_until(lambda: not alive(jvm), timeout=30, what="the Spark JVM to exit")
    return jvm


async def assert_commits_behind_staging(broker: str, group: str, topic: str,
                                        warehouse: Path) -> dict[int, int]:
    """Every committed offset's row (and all before it) is visible in staging."""
    done = await committed(broker, group, topic, PARTITIONS)
    rows = staged(warehouse)
    for partition, next_offset in done.items():
        missing = [o for o in range(max(next_offset, 0)) if (partition, o) not in rows]
        assert not missing, (f"partition {partition}: committed up to {next_offset} but "
                             f"{len(missing)} row(s) not in staging, first {missing[:5]}")
    return done


async def first_commit(proc: KstageProcess, broker: str, group: str, topic: str) -> None:
    deadline = time.monotonic() + 120
    while sum(max(v, 0) for v in (await committed(broker, group, topic, PARTITIONS)).values()) \
            < FLUSH_ROWS:
        assert proc.proc.poll() is None, proc.output()
        assert time.monotonic() < deadline, "nothing committed within 120s:\n" + proc.output()
        await asyncio.sleep(0.1)


async def test_killed_spark_jvm_is_replaced_and_nothing_is_lost(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    topic, group = unique("jvm-kill"), unique("g-jvm-kill")
    warehouse = tmp_path / "warehouse"
    with FakeRegistry() as registry:
        await create_topic(broker, topic, partitions=PARTITIONS)
        cfg = config(tmp_path, broker, group, topic, registry, warehouse,
                     flush_rows=FLUSH_ROWS, merge_s=None)
        feed = Feed(broker, registry, topic)
        await feed.producer.start()
        try:
            await feed.send(1000)
            proc = kstage(cfg)
            await first_commit(proc, broker, group, topic)
            trickle = asyncio.create_task(feed.trickle(40, 50, 0.25))  # events keep coming
            jvm = await kill_jvm_mid_flush(proc, warehouse)
            # The JVM is dead: whatever is committed already is on disk.
            await assert_commits_behind_staging(broker, group, topic, warehouse)
            await proc.wait_for_log(f"Spark JVM (pid {jvm}) died", timeout=60)
            await proc.wait_for_log("new session running", timeout=120)
            await trickle
        finally:
            await feed.producer.stop()
        events = feed.sent
        deadline = time.monotonic() + 180
        while sum((await committed(broker, group, topic, PARTITIONS)).values()) < events:
            assert proc.proc.poll() is None, proc.output()
            assert time.monotonic() < deadline, "not all committed:\n" + proc.output()
            await asyncio.sleep(0.25)
        await assert_commits_behind_staging(broker, group, topic, warehouse)
        assert jvm_of(proc) != jvm  # a new JVM runs the new session
        proc.signal(signal.SIGTERM)
        assert await proc.wait(timeout=90) == 0, proc.output()

    output = proc.output()
    assert "Traceback" not in output, output
    assert "Connection refused" not in output, output
    assert f"{TABLE}" in output.split("new session running", 1)[1].splitlines()[0]
    rows = staged(warehouse)
    assert sorted(rows) == expected(events, PARTITIONS)  # nothing lost
    assert max(rows.values()) == 1  # nothing twice


async def test_jvm_death_beyond_max_session_restarts_exits_1(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    topic, group = unique("jvm-give-up"), unique("g-jvm-give-up")
    warehouse = tmp_path / "warehouse"
    with FakeRegistry() as registry:
        await create_topic(broker, topic, partitions=PARTITIONS)
        cfg = config(tmp_path, broker, group, topic, registry, warehouse,
                     flush_rows=FLUSH_ROWS, merge_s=None)
        data = yaml.safe_load(cfg.read_text())
        data["spark"]["max_session_restarts"] = 0
        cfg.write_text(yaml.safe_dump(data))
        feed = Feed(broker, registry, topic)
        await feed.producer.start()
        try:
            await feed.send(1000)
            proc = kstage(cfg)
            await first_commit(proc, broker, group, topic)
            trickle = asyncio.create_task(feed.trickle(8, 50, 0.25))
            jvm = await kill_jvm_mid_flush(proc, warehouse)
            assert await proc.wait(timeout=90) == 1, proc.output()
            await trickle
        finally:
            await feed.producer.stop()
        done = await assert_commits_behind_staging(broker, group, topic, warehouse)
    assert sum(done.values()) < feed.sent
    output = proc.output()
    critical = [line for line in output.splitlines() if "CRITICAL" in line]
    assert any(f"Spark JVM (pid {jvm}) died; giving up" in line and "max_session_restarts" in line
               for line in critical), output
    assert "Traceback" not in output, output


async def test_replacement_session_and_giving_up_when_no_jvm_can_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    actor = SparkActor(SparkSettings(master="local[1]", warehouse=str(tmp_path / "wh"),
                                     flush_max_interval_s=0.2, max_session_restarts=2))
    table = "stg_jvm_gone"
    try:
        sink = await opened_sink(actor, table)
        await sink.write(events(0, 0, 4))
        first = actor.jvm_pid
        assert first is not None
        # local mode ships no jar to its executor (the driver's JVM has them on its class
        # path): nothing copied at start into the session's files, nothing of that left
        # behind by a killed JVM
        assert await actor.call(lambda spark: spark._jsc.sc().listJars().size()) == 0
        files = Path(await actor.call(
            lambda spark: spark._jvm.org.apache.spark.SparkFiles.getRootDirectory()))
        os.kill(first, signal.SIGKILL)
        await wait_until(lambda: not alive(first), timeout=30, what="the JVM to exit")
        assert files.is_dir() and not list(files.iterdir()), list(files.iterdir())
        await sink.write(events(0, 4, 4))  # restart 1 of 2: a new JVM, table registered
        second = actor.jvm_pid
        assert second not in (None, first)
        assert await actor.call(lambda spark: spark.table(table).count()) == 8
        # The appends' rows are in the table once each.

        assert second is not None
        os.kill(second, signal.SIGKILL)
        await wait_until(lambda: not alive(second), timeout=30, what="the JVM to exit")
        monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
        with pytest.raises(SinkError, match="JAVA_GATEWAY_EXITED") as failed:
            await sink.write(events(0, 8, 2))  # restart 2 of 2: the JVM cannot start
        # pyspark leaves the stdin pipe of a JVM that failed to start open in its launch
        # frame: release it here rather than as an unraisable warning at session end.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            error: BaseException | None = failed.value
            while error is not None:
                traceback.clear_frames(error.__traceback__)
                error = error.__cause__ or error.__context__
            del failed, error
            gc.collect()
        with pytest.raises(FatalError, match=rf"Spark JVM \(pid {second}\) died; giving up"
                           r": 2 new session\(s\) .*max_session_restarts: 2"):
            await sink.write(events(0, 8, 2))
        with pytest.raises(FatalError):  # every later call fails at once
            await actor.call(lambda spark: None)
    finally:
        await actor.astop()


async def test_a_session_that_fails_to_stop_is_forgotten_and_the_next_one_is_new(
        tmp_path: Path) -> None:
    """``stop()`` of a session that raises (a JVM half gone) kills the JVM and clears
    pyspark's class-level session, context and gateway: the next session of the process
    starts a new JVM and writes (before, it reused the stale context and failed with
    refused connections). While the first runs, a second actor's session is refused
    (before, the two shared one JVM: a CI run's in-process replacement test got another
    module's leftover session, and each actor replaced the killed JVM under the other:
    "SparkSession does not exist in the JVM", rows in the wrong session)."""
    def stopping_fails(spark: object) -> int | None:
        def boom() -> None:
            raise RuntimeError("injected: the session did not stop")
        spark.stop = boom  # type: ignore[attr-defined]
        return None

    actor = SparkActor(SparkSettings(master="local[1]", warehouse=str(tmp_path / "wh"),
                                     flush_max_interval_s=0.2))
    sink = await opened_sink(actor, "stg_stop_fails")
    await sink.write(events(0, 0, 4))
    first = actor.jvm_pid
    assert first is not None
    again = SparkActor(SparkSettings(master="local[1]", warehouse=str(tmp_path / "wh"),
                                     flush_max_interval_s=0.2))
    # While one actor's session runs, another's is refused (pyspark would hand it the
    # running one, catalog and jars ignored, and both would replace its JVM on a death).
    with pytest.raises(FatalError, match=rf"a Spark session already runs in this process "
                       rf"\(app 'kstage-{actor.writer_id}', master 'local\[1\]', JVM pid "
                       rf"{first}\) and is not this actor's \({again.writer_id}"):
        await opened_sink(again, "stg_stop_fails")
    # Forgetting a session that is not pyspark's current one leaves the current one be.
    await actor.call(lambda spark: discard_session(
        SimpleNamespace(sparkContext=SimpleNamespace(), _jvm=object()), None))
    assert await actor.call(lambda spark: spark.table("stg_stop_fails").count()) == 4
    await actor.call(stopping_fails)
    await actor.astop()
    assert not alive(first)
    assert SparkContext._active_spark_context is None and SparkContext._gateway is None

    try:
        sink = await opened_sink(again, "stg_stop_fails")
        await sink.write(events(0, 4, 4))
        assert again.jvm_pid not in (None, first)
        assert await again.call(lambda spark: spark.table("stg_stop_fails").count()) == 8
    finally:
        await again.astop()


async def test_a_jvm_out_of_heap_exits_and_is_replaced(tmp_path: Path) -> None:
    """A JVM that runs out of heap exits (``-XX:+ExitOnOutOfMemoryError``) rather than
    failing every later call: the call that ran out fails retriably and the next write
    runs in a new JVM, every row once."""
    actor = SparkActor(SparkSettings(master="local[1]", warehouse=str(tmp_path / "wh"),
                                     flush_max_interval_s=0.2))

    def out_of_heap(spark: Any) -> None:
        jvm = spark._jvm  # 8 GB of longs in a 512 MB heap
        jvm.java.lang.reflect.Array.newInstance(jvm.java.lang.Long.TYPE, 2**30)

    try:
        sink = await opened_sink(actor, "stg_out_of_heap")
        await sink.write(events(0, 0, 4))
        first = actor.jvm_pid
        assert first is not None
        with pytest.raises(SparkJvmDiedError):
            await actor.call(out_of_heap)
        assert not alive(first)
        await sink.write(events(0, 4, 4))
        assert actor.jvm_pid not in (None, first)
        assert await actor.call(lambda spark: spark.table("stg_out_of_heap").count()) == 8
    finally:
        await actor.astop()
