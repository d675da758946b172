"""The JDBC sink against a real PostgreSQL server (started by the module) through a real
local SparkSession: columns and types, refused rows, outages, and `kstage run` end to end.

One SparkActor (``local[1]``) is shared by the module and stopped at its teardown (one
SparkContext per JVM); the end-to-end test runs kstage in a child process (its own JVM).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from actors.errors import FatalError, SinkError
from actors.sinks import SinkContext, build_sink
from actors.sinks.jdbc import JdbcSink, JdbcSinkSettings, create_table_sql, safe_url
from actors.sinks.spark.actor import SparkActor
from processors.base import Column, Row
from processors.gobblin import GobblinCompactionProcessor
from settings.models import SinkSettings
from tests.gobblin_events import event, events
from tests.kafkautil import committed, create_topic, produce, read_jsonl, unique, write_config
from tests.postgres import JAR, USER, Postgres

pytestmark = pytest.mark.slow

PROCESSOR = GobblinCompactionProcessor
TOPIC = "GobblinTrackingEvent_compaction"
CLUSTERS = [{"code": "ltx1-holdem", "short_name": "holdem"}]
PASSWORD = "secret"  # noqa: S105 - the throwaway server trusts loopback anyway
PG_TYPES = {"string": "text", "int": "integer", "long": "bigint", "double": "double precision",
            "boolean": "boolean", "binary": "bytea"}
COORDINATES = [("_topic", "text", "NO"), ("_partition", "integer", "NO"),
               ("_offset", "bigint", "NO"), ("_timestamp", "bigint", "YES"),
               ("_ingested_at", "timestamp with time zone", "NO")]


def settings(pg: Postgres, table: str, **extra: Any) -> JdbcSinkSettings:
    return JdbcSinkSettings(table=table, url=pg.url, user=USER,
                            password=PASSWORD, **extra)  # type: ignore[arg-type]


async def opened(jdbc_spark: SparkActor, pg: Postgres, table: str, **extra: Any) -> JdbcSink:
    sink = JdbcSink(settings(pg, table, **extra), jdbc_spark)
    sink.bind(SinkContext(columns=PROCESSOR.columns, table=PROCESSOR.table,
                          processor=PROCESSOR.name))
    async with asyncio.timeout(90):
        await sink.open()
    return sink


def columns_of(pg: Postgres, table: str) -> list[tuple[str, str, str]]:
    sql = ("SELECT column_name, data_type, is_nullable FROM information_schema.columns "  # noqa: S608
           f"WHERE table_name = '{table}' ORDER BY ordinal_position")
    return [(r[0], r[1], r[2]) for r in pg.psql(sql)]


def offsets_in(pg: Postgres, table: str) -> list[tuple[int, int]]:
    return [(int(p), int(o)) for p, o in pg.psql(
        f'SELECT _partition, _offset FROM "{table}" ORDER BY 1, 2')]  # noqa: S608


async def test_rows_land_with_the_right_columns_and_types(jdbc_spark: SparkActor,
                                                          running: Postgres) -> None:
    pg = running
    one, two = await opened(jdbc_spark, pg, "stg_jdbc"), await opened(jdbc_spark, pg, "stg_jdbc")
    assert columns_of(pg, "stg_jdbc") == [  # created at open, from the processor's columns
        (c.name, PG_TYPES[c.type], "YES" if c.nullable else "NO") for c in PROCESSOR.columns
    ] + COORDINATES
    a, b = events(0, 0, 40), events(1, 0, 25)
    names = [c.name for c in PROCESSOR.columns] + ["_topic", "_partition", "_offset",
                                                   "_timestamp"]
    expected = {tuple("" if r[n] is None else str(r[n]) for n in names) for r in a + b}
    async with asyncio.timeout(90):
        await asyncio.gather(one.write(a), two.write(b))
    assert one._writer is two._writer and one._writer is not None
    assert one._writer.flushes == 1  # one append held the rows of both workers
    assert a == [] and b == []  # the sink took the rows (dicts freed before the flush)
    assert offsets_in(pg, "stg_jdbc") == sorted(
        [(0, o) for o in range(40)] + [(1, o) for o in range(25)])
    got = pg.psql("SELECT " + ", ".join(f'"{n}"' for n in names) + ' FROM "stg_jdbc"')  # noqa: S608
    assert {tuple(r) for r in got} == expected
    ingested = pg.psql('SELECT count(*), min(_ingested_at) > now() - interval \'5 minutes\' '
                       'FROM "stg_jdbc" WHERE _ingested_at IS NOT NULL')
    assert ingested == [["65", "t"]]
    # an existing table that fits is only checked
    await opened(jdbc_spark, pg, "stg_jdbc")
    assert len(offsets_in(pg, "stg_jdbc")) == 65


async def test_every_column_type_round_trips(jdbc_spark: SparkActor, running: Postgres) -> None:
    columns = (Column("name", "string", False), Column("small", "int"), Column("big", "long"),
               Column("ratio", "double"), Column("flag", "boolean"), Column("blob", "binary"))
    sink = JdbcSink(settings(running, "stg_jdbc_types"), jdbc_spark)
    sink.bind(SinkContext(columns=columns, processor="typed"))
    async with asyncio.timeout(60):
        await sink.open()
        await sink.write([
            {"name": "a", "small": -(2**31), "big": 2**63 - 1, "ratio": 0.25, "flag": True,
             "blob": b"\x00\xff", "_topic": "t", "_partition": 0, "_offset": 7,
             "_timestamp": None},
            {"name": "b", "small": None, "big": None, "ratio": 3, "flag": False,
             "blob": None, "_topic": "t", "_partition": 0, "_offset": 8, "_timestamp": 1},
        ])
    assert columns_of(running, "stg_jdbc_types")[:6] == [
        ("name", "text", "NO"), ("small", "integer", "YES"), ("big", "bigint", "YES"),
        ("ratio", "double precision", "YES"), ("flag", "boolean", "YES"),
        ("blob", "bytea", "YES")]
    assert running.psql("SELECT name, small, big, ratio, flag, encode(blob, 'hex'), "
                        '_timestamp FROM "stg_jdbc_types" ORDER BY _offset') == [
        ["a", "-2147483648", "9223372036854775807", "0.25", "t", "00ff", ""],
        ["b", "", "", "3", "f", "", "1"]]


async def test_rows_that_do_not_fit_go_to_the_permanent_failure_handler(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    """The worker dead-letters them; the rest of the batch is written (no stall)."""
    sink = await opened(jdbc_spark, running, "stg_jdbc_refused")
    refused: list[tuple[list[Row], int, str]] = []

    async def handler(rows: list[Row], status: int, reason: str) -> None:
        refused.append((rows, status, reason))

    sink.bind(replace(sink.context, refuse=handler))
    rows = events(3, 0, 4)
    rows[1]["record_count"] = "many"  # a string in a BIGINT column
    rows[2]["cluster"] = "hol\x00dem"  # PostgreSQL text cannot hold NUL
    async with asyncio.timeout(60):
        await sink.write(rows)
    assert [(r[0][0]["_offset"], r[1]) for r in refused] == [(1, 0), (2, 0)]
    first, second = refused[0][2], refused[1][2]
    assert first.startswith("jdbc sink stg_jdbc_refused: row at topic "
                            f"'{TOPIC}' partition 3 offset 1: column 'record_count'")
    assert "not a long" in first
    assert "offset 2: column 'cluster'" in second and "NUL" in second
    assert offsets_in(running, "stg_jdbc_refused") == [(3, 0), (3, 3)]


async def test_a_table_that_does_not_fit_stops_the_sink_at_open(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    running.psql('CREATE TABLE "stg_jdbc_narrow" ("cluster" TEXT, "_topic" TEXT, '
                 '"_partition" BIGINT, "record_count" TEXT, "extra" TEXT NOT NULL, '
                 '"partition_type" TEXT NOT NULL)')
    with pytest.raises(FatalError) as caught:
        await opened(jdbc_spark, running, "stg_jdbc_narrow")
    message = str(caught.value)
    assert message.startswith(f"jdbc sink stg_jdbc_narrow at {running.url}: ")
    assert "table stg_jdbc_narrow has no column(s) dataset, partition_name, " in message
    assert ("log_event_time, _offset, _timestamp, _ingested_at (ALTER TABLE stg_jdbc_narrow "
            'ADD COLUMN "partition_name" TEXT, ' in message)  # nullable ones: NOT NULL need values
    assert "column '_partition' is bigint, the processor declares int" not in message
    assert "column 'record_count' is text, the processor declares long (BIGINT)" in message
    assert ("column 'partition_type' is NOT NULL but the processor declares it nullable"
            in message)
    assert "NOT NULL column(s) without a default the sink does not write: extra" in message
    assert PASSWORD not in message


async def test_bad_settings_are_named() -> None:
    with pytest.raises(ValidationError, match="must start with 'jdbc:'"):
        JdbcSinkSettings(url="postgresql://h/db")
    with pytest.raises(ValidationError,
                       match="'a.b.c' is not a SQL identifier: write `name` or `schema.name`"):
        JdbcSinkSettings(url="jdbc:postgresql://h/db", table="a.b.c")
    with pytest.raises(ValidationError, match="extra"):
        build_sink(SinkSettings.model_validate({"type": "jdbc", "url": "jdbc:x:y", "tabel": "t"}))
    sink = build_sink(SinkSettings.model_validate(
        {"type": "jdbc", "url": "jdbc:postgresql://h/db", "table": "s.t", "user": "u",
         "password": "hunter2"}))
    assert isinstance(sink, JdbcSink) and sink.table == "s.t"
    assert "hunter2" not in repr(sink.settings) and "hunter2" not in str(sink.settings)
    assert safe_url("jdbc:postgresql://u:pw@h:5432/db?password=pw") == "jdbc:postgresql://h:5432/db"
    assert create_table_sql("s.t", PROCESSOR.columns[:1]).startswith(
        'CREATE TABLE IF NOT EXISTS "s"."t" ("cluster" TEXT NOT NULL, "_topic" TEXT NOT NULL')
    reserved = JdbcSink(JdbcSinkSettings(url="jdbc:postgresql://h/db"))
    reserved.bind(SinkContext(columns=(*PROCESSOR.columns[:1], Column("_offset", "long")),
                              table="t", processor="p"))
    with pytest.raises(FatalError, match=r"jdbc sink t: bad or reserved column names"):
        await reserved.open()


async def test_a_missing_driver_jar_is_named(jdbc_spark: SparkActor, pg: Postgres) -> None:
    sink = JdbcSink(settings(pg, "stg_jdbc_nojar", driver="org.example.NoSuchDriver",
                             jar="/nonexistent/driver.jar"), jdbc_spark)
    sink.bind(SinkContext(columns=PROCESSOR.columns, processor=PROCESSOR.name))
    with pytest.raises(FatalError, match="driver org.example.NoSuchDriver is not on Spark's "
                                         "classpath and the jar /nonexistent/driver.jar"):
        await sink.open()


async def test_an_outage_raises_sink_error_and_the_retry_succeeds(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    pg = running
    sink = await opened(jdbc_spark, pg, "stg_jdbc_outage")
    async with asyncio.timeout(60):
        await sink.write(events(0, 0, 5))
    refused: list[int] = []
    sink.bind(replace(sink.context,
                      refuse=lambda rows, status, reason: refused.append(rows[0]["_offset"])))
    batch = events(0, 5, 6)
    batch[5]["record_count"] = "many"  # dead-lettered once, not at every retry
    pg.stop()
    for _ in range(2):
        with pytest.raises(SinkError) as caught:
            async with asyncio.timeout(60):
                await sink.write(batch)
    message = str(caught.value)
    assert message.startswith(f"jdbc sink stg_jdbc_outage at {pg.url}: append of 5 row(s) "
                              "failed: org.postgresql.util.PSQLException: Connection to "), message
    assert PASSWORD not in message
    # a sink opened while the database is away checks the table at its first write
    late = JdbcSink(settings(pg, "stg_jdbc_late"), jdbc_spark)
    late.bind(SinkContext(columns=PROCESSOR.columns, processor=PROCESSOR.name))
    await late.open()
    with pytest.raises(SinkError, match="jdbc sink stg_jdbc_late at .*cannot create or check"):
        async with asyncio.timeout(60):
            await late.write(events(0, 0, 2))
    pg.start()
    async with asyncio.timeout(60):
        await sink.write(batch)  # the worker's retry of the same batch
        await late.write(events(0, 0, 2))
    assert refused == [10]
    assert offsets_in(pg, "stg_jdbc_outage") == [(0, o) for o in range(10)]
    assert offsets_in(pg, "stg_jdbc_late") == [(0, 0), (0, 1)]


async def wait_committed(broker: str, group: str, topic: str, want: dict[int, int],
                         proc: Any, timeout: float = 90) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while (got := await committed(broker, group, topic, 2)) != want:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"committed {got}, want {want}:\n{proc.output()}")
        assert proc.proc.poll() is None, proc.output()
        await asyncio.sleep(0.3)


@pytest.mark.kafka
async def test_kstage_run_backs_off_during_outages_and_lands_everything(
        broker: str, running: Postgres, tmp_path: Path, kstage: Any) -> None:
    """`kstage run` with a jdbc sink while PostgreSQL is down at start, then again
    mid-run: the worker retries, commits nothing it did not write, dead-letters nothing;
    once the server is back every event lands in the table (once) and is committed."""
    pg = running
    group, topic = unique("g-jdbc"), unique("jdbc-compaction")
    table = unique("stg_jdbc_run").replace("-", "_")  # the test runs once per broker
    await create_topic(broker, topic, partitions=2)
    await produce(broker, topic, [event(i) for i in range(40)], partition_of=lambda i: i % 2)
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
        "topic": topic, "processor": PROCESSOR.name, "format": "json",
        "options": {"clusters": CLUSTERS},
        "sink": {"type": "jdbc", "table": table, "url": pg.url, "user": USER,
                 "password": PASSWORD, "jar": JAR}}])
    data = yaml.safe_load(cfg.read_text())
    data["spark"] = {"master": "local[1]", "warehouse": str(tmp_path / "warehouse"),
                     "flush_max_interval_s": 0.3}
    cfg.write_text(yaml.safe_dump(data))
    failed = "sink write failed"

    pg.stop()  # 1. down before the start
    proc = kstage(cfg)
    await proc.wait_for_log(failed, timeout=120, count=3)
    assert await committed(broker, group, topic, 2) == {0: -1, 1: -1}  # nothing
    assert read_jsonl(tmp_path / "dead.jsonl") == []
    pg.start()
    await wait_committed(broker, group, topic, {0: 20, 1: 20}, proc)
    assert len(offsets_in(pg, table)) == 40

    pg.stop()  # 2. down mid-run
    before = proc.output().count(failed)
    await produce(broker, topic, [event(i) for i in range(40, 60)],
                  partition_of=lambda i: i % 2)
    await proc.wait_for_log(failed, timeout=60, count=before + 2)
    assert await committed(broker, group, topic, 2) == {0: 20, 1: 20}
    pg.start()
    await wait_committed(broker, group, topic, {0: 30, 1: 30}, proc)

    proc.signal(signal.SIGTERM)
    assert await proc.wait(timeout=60) == 0, proc.output()
    output = proc.output()
    assert "cannot create or check the table" in output and PASSWORD not in output
    assert "append of" in output  # the mid-run failures were appends
    assert read_jsonl(tmp_path / "dead.jsonl") == []
    rows = pg.psql(f'SELECT _topic, _partition, _offset FROM "{table}"')  # noqa: S608
    assert sorted((int(p), int(o)) for _, p, o in rows) == sorted(
        (i % 2, i // 2) for i in range(60))  # each event once
    assert {r[0] for r in rows} == {topic}


def narrow_table(pg: Postgres, table: str) -> None:
    """``table`` made beforehand: ``dedupe_status`` is ``varchar(7)`` ('DEDUPED' fits) and
    the Kafka coordinates are its primary key."""
    pg.psql(create_table_sql(table, PROCESSOR.columns))
    pg.psql(f'ALTER TABLE "{table}" OWNER TO {USER}')
    pg.psql(f'ALTER TABLE "{table}" ALTER COLUMN dedupe_status TYPE varchar(7)')
    pg.psql(f'ALTER TABLE "{table}" ADD PRIMARY KEY (_topic, _partition, _offset)')


def counting_appends(sink: JdbcSink, monkeypatch: pytest.MonkeyPatch,
                     before: Any = None) -> list[int]:
    """The sizes of the JDBC appends the sink's writer makes; ``before(n)`` runs on the
    Spark thread before the n-th one (1-based)."""
    writer = sink._writer
    assert writer is not None
    sizes: list[int] = []
    append = writer._append

    def counted(spark: Any, rows: list[tuple[Any, ...]]) -> None:
        sizes.append(len(rows))
        if before is not None:
            before(len(sizes))
        append(spark, rows)

    monkeypatch.setattr(writer, "_append", counted)
    return sizes


def refusals(sink: JdbcSink) -> list[tuple[int, int, str]]:
    """Collect (partition, offset, reason) of the rows the sink dead-letters."""
    got: list[tuple[int, int, str]] = []

    def handler(rows: list[Row], status: int, reason: str) -> None:
        assert status == 0 and len(rows) == 1
        got.append((rows[0]["_partition"], rows[0]["_offset"], reason))

    sink.bind(replace(sink.context, refuse=handler))
    return got


async def test_rows_postgresql_refuses_are_dead_lettered_and_the_rest_written_once(
        jdbc_spark: SparkActor, running: Postgres, monkeypatch: pytest.MonkeyPatch) -> None:
    """A value too long for its varchar(n) and a duplicate key are facts about rows: the
    flush is split until they are alone, they are dead-lettered with the SQLSTATE, the
    server's message and their coordinates, every other row is written once, and the
    writes return (the worker commits) instead of failing for ever."""
    pg, table = running, "stg_jdbc_split"
    narrow_table(pg, table)
    one, two = await opened(jdbc_spark, pg, table), await opened(jdbc_spark, pg, table)
    pg.psql(f"INSERT INTO \"{table}\" (cluster, dataset, log_event_time, _topic, _partition, "  # noqa: S608
            f"_offset, _ingested_at) VALUES ('c', 'd', 0, '{TOPIC}', 5, 17, now())")
    sizes = counting_appends(one, monkeypatch)
    refused_one, refused_two = refusals(one), refusals(two)
    a, b = events(5, 0, 32), events(6, 0, 32)
    a[3]["dedupe_status"] = "NOT_DEDUPED"  # too long for varchar(7)
    b[30]["dedupe_status"] = "UNKNOWN!"
    async with asyncio.timeout(240):
        await asyncio.gather(one.write(a), two.write(b))  # one flush of 64 rows
    assert [(p, o) for p, o, _ in refused_one] == [(5, 3), (5, 17)]
    assert [(p, o) for p, o, _ in refused_two] == [(6, 30)]
    too_long, duplicate = refused_one[0][2], refused_one[1][2]
    assert too_long == (
        f"jdbc sink {table}: row at topic '{TOPIC}' partition 5 offset 3: refused by "
        "PostgreSQL with SQLSTATE 22001 (string_data_right_truncation): "
        "org.postgresql.util.PSQLException: ERROR: value too long for type character "
        "varying(7)")
    assert duplicate.startswith(
        f"jdbc sink {table}: row at topic '{TOPIC}' partition 5 offset 17: refused by "
        "PostgreSQL with SQLSTATE 23505 (unique_violation): org.postgresql.util."
        f"PSQLException: ERROR: duplicate key value violates unique constraint "
        f'"{table}_pkey" Detail: Key (_topic, _partition, _offset)=({TOPIC}, 5, 17) '
        "already exists."), duplicate
    assert "SQLSTATE 22001" in refused_two[0][2] and "offset 30" in refused_two[0][2]
    assert offsets_in(pg, table) == sorted(  # each row once, the old (5, 17) kept
        [(5, o) for o in range(32) if o != 3] + [(6, o) for o in range(32) if o != 30])
    kept = f'SELECT cluster FROM "{table}" WHERE _offset = 17 AND _partition = 5'  # noqa: S608
    assert pg.psql(kept) == [["c"]]
    # one failed append, then halves: 3 bad rows in 64 cost O(k log n) appends, not 64
    assert sizes[0] == 64 and len(sizes) <= 1 + 2 * 3 * 6, sizes
    assert one._writer is not None and one._writer.flushes == 1


async def test_postgresql_restarted_while_a_batch_is_split(
        jdbc_spark: SparkActor, running: Postgres, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL is restarted in the middle of a split flush, with a write blocked in it
    (a restart of the server, then an outage): the write fails with SinkError, nothing is
    dead-lettered for it; the rows already written or refused are not written or
    dead-lettered again by the retry, which writes the rest once the server is back."""
    pg, table = running, "stg_jdbc_split_restart"
    narrow_table(pg, table)
    sink = await opened(jdbc_spark, pg, table)
    refused = refusals(sink)
    locker: list[subprocess.Popen[str]] = []
    stopper: list[threading.Thread] = []

    def restart_during(n: int) -> None:
        if n != 11:  # 1: all 32 rows; 2, 3, 5, 6, 8: refused halves; 4, 7, 9, 10: written
            return
        # The 11th append (rows 16..31) blocks on a lock until the server goes down.
        locker.append(pg.hold_lock(table))
        stopper.append(pg.stop_when_waiting_on_lock())

    sizes = counting_appends(sink, monkeypatch, restart_during)
    batch = events(0, 0, 32)
    for bad in (5, 20):
        batch[bad]["dedupe_status"] = "NOT_DEDUPED"
    with pytest.raises(SinkError) as caught:
        async with asyncio.timeout(240):
            await sink.write(batch)
    message = str(caught.value)
    assert message.startswith(f"jdbc sink {table} at {pg.url}: append of 16 row(s) failed: "
                              "org.postgresql.util.PSQLException: "), message
    assert "(SQLSTATE 57P01)" in message or "(SQLSTATE 08" in message, message
    assert [(p, o) for p, o, _ in refused] == [(0, 5)]  # found before the restart
    assert sizes[:11] == [32, 16, 8, 4, 4, 2, 1, 1, 2, 8, 16]
    for thread in stopper:
        thread.join(timeout=60)
    assert not pg.running
    for proc in locker:
        proc.wait(timeout=30)
    with pytest.raises(SinkError, match=r"\(SQLSTATE 08001\)"):
        async with asyncio.timeout(120):
            await sink.write(batch)  # the worker's retry while the server is down
    assert len(refused) == 1
    pg.start()
    async with asyncio.timeout(240):
        await sink.write(batch)  # the retry after the restart
    assert [(p, o) for p, o, _ in refused] == [(0, 5), (0, 20)]
    assert offsets_in(pg, table) == [(0, o) for o in range(32) if o not in (5, 20)]


@pytest.mark.kafka
async def test_kstage_run_dead_letters_rows_postgresql_refuses_and_commits(
        broker: str, running: Postgres, tmp_path: Path, kstage: Any) -> None:
    """`kstage run` into a table that refuses two rows (a value too long for its
    varchar(7), a duplicate key): both are dead-lettered once with their SQLSTATE, the
    other rows land once and every offset is committed (no endless retry)."""
    pg, table = running, unique("stg_jdbc_run_refused").replace("-", "_")
    narrow_table(pg, table)
    group, topic = unique("g-jdbc-refused"), unique("jdbc-refused")
    await create_topic(broker, topic, partitions=2)
    values = [event(i) for i in range(20)]
    values[7]["metadata"]["dedupeStatus"] = "NOT_DEDUPED"  # partition 1 offset 3
    pg.psql(f"INSERT INTO \"{table}\" (cluster, dataset, log_event_time, _topic, _partition, "  # noqa: S608
            f"_offset, _ingested_at) VALUES ('c', 'd', 0, '{topic}', 0, 4, now())")
    await produce(broker, topic, values, partition_of=lambda i: i % 2)
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
        "topic": topic, "processor": PROCESSOR.name, "format": "json",
        "options": {"clusters": CLUSTERS},
        "sink": {"type": "jdbc", "table": table, "url": pg.url, "user": USER,
                 "password": PASSWORD, "jar": JAR}}])
    data = yaml.safe_load(cfg.read_text())
    data["spark"] = {"master": "local[1]", "warehouse": str(tmp_path / "warehouse"),
                     "flush_max_interval_s": 0.3}
    cfg.write_text(yaml.safe_dump(data))
    proc = kstage(cfg)
    await wait_committed(broker, group, topic, {0: 10, 1: 10}, proc, timeout=120)
    proc.signal(signal.SIGTERM)
    assert await proc.wait(timeout=60) == 0, proc.output()
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert sorted((d["partition"], d["offset"]) for d in dead) == [(0, 4), (1, 3)]
    by_offset = {(d["partition"], d["offset"]): d for d in dead}
    assert "SQLSTATE 22001 (string_data_right_truncation)" in by_offset[1, 3]["error"]
    assert "SQLSTATE 23505 (unique_violation)" in by_offset[0, 4]["error"]
    assert "already exists" in by_offset[0, 4]["response_body"]
    assert {d["topic"] for d in dead} == {topic}
    assert "sink write failed" not in proc.output()  # refused rows are not retried
    assert offsets_in(pg, table) == sorted([(0, o) for o in range(10)] +
                                           [(1, o) for o in range(10) if o != 3])
