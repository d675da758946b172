"""Helpers of the lakehouse tests: ``kstage run`` configurations whose spark sink writes
Iceberg tables (a local or ``s3://`` warehouse, a SQLite or PostgreSQL catalog), the
events they consume, and two readers of the tables they write:

* :class:`IcebergReader`: pyiceberg (``SqlCatalog``), an engine that is not Spark, through
  the same catalog and warehouse as kstage (no JVM: cheap enough to poll);
* :func:`spark_rows`: a Spark session of the test process (Iceberg's Spark runtime).

Rows of both are compared as sets of full rows (``_ingested_at`` as microseconds since
the epoch, so neither reader's time zone handling matters).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from actors.sinks import SinkContext
from actors.sinks.spark import iceberg
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import catalog_uri, sqlite_file, warehouse_location
from actors.sinks.spark.pyiceberg_catalog import sqlalchemy_uri
from actors.sinks.spark.sink import SparkSink, SparkSinkSettings
from actors.sinks.spark.staging import StagingWriter
from service.broker import free_port
from settings.models import Settings, SparkSettings
from tests.gobblin_events import PROCESSOR as GOBBLIN
from tests.gobblin_events import TOPIC, compaction
from tests.kafkautil import (
    KstageProcess,
    committed,
    create_topic,
    produce,
    status_port,
    wait_readyz,
    wait_until,
    write_config,
)

PROCESSOR = "gobblin_compaction"
Coordinate = tuple[str, int, int]  # topic, Kafka partition, offset


async def produce_events(broker: str, topic: str, start: int, count: int,
                         partitions: int) -> None:
    """Events ``start .. start+count-1``, event ``i`` to partition ``i % partitions``."""
    await produce(broker, topic, [compaction(i) for i in range(start, start + count)],
                  partition_of=lambda i: (start + i) % partitions)


def expected(topic: str, count: int, partitions: int) -> list[Coordinate]:
    """The coordinates of events ``0 .. count-1`` produced by :func:`produce_events`
    in one go or in several calls (one producer per call, in order)."""
    return sorted((topic, i % partitions, i // partitions) for i in range(count))


KEPT_SNAPSHOTS_S = 3600.0
"""``maintenance.snapshot_max_age_s`` of the tests' pyiceberg appends unless they set it:
their process's expiry runs every 60 s (:mod:`actors.tables.pyiceberg_expiry`), and with
its default age (60 s) a slow run could expire, under a test that counts a table's
snapshots or reads its summaries, the ones it reads. ``test_pyiceberg_expiry`` sets its
own."""


def arrow_frame(spark: Any, rows: list[tuple[Any, ...]], schema: Any) -> Any:
    """Spark thread: ``rows`` (tuples in the order of ``schema``, a ``StructType``) as a
    DataFrame made through Arrow, as kstage's staging writer makes its own: a list of
    tuples would be parallelized and read by pyspark's Python workers (a daemon
    process per JVM, forked per task)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(schema)
    table = pa.Table.from_pylist([dict(zip(arrow.names, r, strict=True)) for r in rows],
                                 schema=arrow)
    return spark.createDataFrame(table, schema)


def spark_section(catalog: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A ``spark:`` section for tests: local[1], small driver, quick flushes; with
    ``appends: pyiceberg``, snapshots kept :data:`KEPT_SNAPSHOTS_S` unless set."""
    section = {"master": "local[1]", "catalog": catalog, "flush_max_interval_s": 0.5,
               "flush_idle_s": 0.3, "conf": {"spark.driver.memory": "512m"}, **extra}
    return kept_snapshots(section)


def kept_snapshots(spark: dict[str, Any]) -> dict[str, Any]:
    """``spark`` with ``maintenance.snapshot_max_age_s`` :data:`KEPT_SNAPSHOTS_S` when its
    appends are pyiceberg's and it sets no age."""
    if spark.get("appends") != "pyiceberg":
        return spark
    maintenance = spark.get("maintenance") or {}
    return {**spark, "maintenance": {"snapshot_max_age_s": KEPT_SNAPSHOTS_S, **maintenance}}


def lake_config(path: Path, broker: str, group: str, topic: str, table: str,
                spark: dict[str, Any], **group_keys: Any) -> Path:
    """A ``kstage run`` configuration: ``topic`` (JSON Gobblin compaction events) into
    the Iceberg staging table ``table``; status server on a free port."""
    cfg = write_config(path, broker, group, [{
        "topic": topic, "processor": PROCESSOR, "format": "json",
        "sink": {"type": "spark", "table": table}}],
        service={"http_port": free_port()}, **group_keys)
    data = yaml.safe_load(cfg.read_text())
    data["spark"] = spark
    cfg.write_text(yaml.safe_dump(data))
    return cfg


HOURLY_KAFKA_COMMITS = {"mode": "batch", "max_messages": 10**9, "max_interval_s": 3600}
"""A group's ``commit:`` that commits to Kafka only every hour: every table commit is
ahead of Kafka's (a SIGKILL then leaves the table holding what Kafka does not)."""


async def run_ahead_of_kafka(kstage: type[KstageProcess], broker: str, tmp_path: Path,
                             topic: str, group: str, table: str, spark: dict[str, Any],
                             partitions: int = 2,
                             ) -> tuple[KstageProcess, Path, IcebergReader]:
    """``kstage run`` of ``topic`` (made here, ``partitions``) into ``table`` with the
    ``spark:`` section ``spark``, committing to Kafka only every hour
    (:data:`HOURLY_KAFKA_COMMITS`), once its partitions are assigned; its configuration
    and a reader of its catalog."""
    await create_topic(broker, topic, partitions=partitions)
    cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark,
                      commit=HOURLY_KAFKA_COMMITS)
    run = kstage(cfg)
    await run.wait_for_log(f"assigned partitions {list(range(partitions))}", timeout=120)
    return run, cfg, IcebergReader(spark)


async def fill_in_steps(proc: KstageProcess, broker: str, topic: str, reader: IcebergReader,
                        table: str, total: int, step: int, partitions: int) -> None:
    """Produce events ``0 .. total-1`` ``step`` at a time, each step awaited in ``table``:
    caught up, each step lands in appends of its own (a backlog would make a few big
    ones)."""
    for start in range(0, total, step):
        await produce_events(broker, topic, start, step, partitions)
        await wait_landed(proc, reader, table, start + step,
                          f"the first {start + step} events in the table", timeout=120)


def one_table(tmp_path: Path) -> Settings:
    """One topic into the staging table ``stg_t`` of a SQLite catalog under ``tmp_path``,
    pyiceberg's appends, a fold at 4 more data files of at least 2."""
    return Settings.model_validate({
        "name": "g",
        "spark": {"appends": "pyiceberg",
                  "catalog": {"uri": f"jdbc:sqlite:{tmp_path / 'catalog.db'}",
                              "warehouse": str(tmp_path / "wh")},
                  "maintenance": {"fold_files": 4, "min_input_files": 2}},
        "groups": [{"topics": [{"topic": "t", "processor": "test_unkeyed",
                                "sink": {"type": "spark", "table": "stg_t"}}]}]})


def spark_settings(spark: dict[str, Any]) -> SparkSettings:
    return SparkSettings.model_validate(spark)


async def opened_sink(actor: SparkActor, table: str, group: str = "g") -> SparkSink:
    """A spark sink of the Gobblin compaction processor's rows (:mod:`tests.gobblin_events`)
    on ``table``, bound to ``group`` and opened on ``actor``."""
    sink = SparkSink(SparkSinkSettings(table=table), actor)
    sink.bind(SinkContext(group=group, topic=TOPIC, columns=GOBBLIN.columns,
                          table=GOBBLIN.table, processor=GOBBLIN.name))
    await sink.open()
    return sink


def staging_writer(actor: SparkActor, table: str) -> StagingWriter:
    """The process's writer of the staging table ``table``."""
    writer = actor.tracked(table)
    assert isinstance(writer, StagingWriter)
    return writer


class IcebergReader:
    """pyiceberg's ``SqlCatalog`` on the catalog and warehouse of a ``spark:`` section
    (its ``catalog`` block: SQLite or PostgreSQL, local or S3)."""

    def __init__(self, spark: dict[str, Any] | SparkSettings) -> None:
        from pyiceberg.catalog.sql import SqlCatalog  # dev dependency

        from actors.sinks.spark import pyiceberg_nulls

        pyiceberg_nulls.install()  # reads too lose a NULL list of structs without it
        settings = spark if isinstance(spark, SparkSettings) else spark_settings(spark)
        self.settings = settings
        catalog = settings.catalog
        props: dict[str, str] = {"uri": sqlalchemy_url(settings),
                                 "warehouse": warehouse_location(settings)}
        s3 = catalog.s3
        if s3 is not None:
            props |= {"s3.region": s3.region,
                      "s3.force-virtual-addressing": str(not s3.path_style_access).lower()}
            if s3.endpoint:
                props["s3.endpoint"] = s3.endpoint
            if s3.access_key_id is not None and s3.secret_access_key is not None:
                props["s3.access-key-id"] = s3.access_key_id.get_secret_value()
                props["s3.secret-access-key"] = s3.secret_access_key.get_secret_value()
        # pyiceberg never creates the catalog's tables: kstage's Spark catalog does (a
        # reader polling while kstage starts would race it).
        self.catalog = SqlCatalog(catalog.name, **props, init_catalog_tables="false")

    def _table(self, table: str) -> Any:
        return self.catalog.load_table((self.settings.catalog.namespace, table))

    def exists(self, table: str) -> bool:
        """Whether the table exists (False while the catalog itself does not yet)."""
        from sqlalchemy.exc import OperationalError, ProgrammingError

        sqlite = sqlite_file(self.settings)
        if sqlite is not None and not sqlite.exists():
            return False
        try:
            return bool(self.catalog.table_exists((self.settings.catalog.namespace, table)))
        except (OperationalError, ProgrammingError):  # the catalog's tables not created yet
            return False

    def summaries(self, table: str) -> list[dict[str, str]]:
        """The summaries of the table's snapshots, oldest first."""
        if not self.exists(table):
            return []
        found = sorted(self._table(table).snapshots(), key=lambda s: s.timestamp_ms)
        return [dict(s.summary.additional_properties) if s.summary else {} for s in found]

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of the table's current snapshot (``_ingested_at`` in µs)."""
        if not self.exists(table):
            return []
        rows = self._table(table).scan().to_arrow().to_pylist()
        return [normalized(row) for row in rows]

    def coordinates(self, table: str) -> Counter[Coordinate]:
        """How often each Kafka coordinate is in the table."""
        return Counter((r["_topic"], r["_kafka_partition"], r["_offset"])
                       for r in self.rows(table))

    def offsets(self, table: str) -> dict[tuple[str, str, int], int]:
        """The Kafka offsets the table holds (the highest ``kstage.offsets`` per
        partition over the snapshots of its current history)."""
        if not self.exists(table):
            return {}
        found: dict[tuple[str, str, int], int] = {}
        loaded = self._table(table)
        current = loaded.current_snapshot()
        ancestors = []
        while current is not None:
            ancestors.append(current)
            parent = current.parent_snapshot_id
            current = loaded.snapshot_by_id(parent) if parent is not None else None
        for snapshot in ancestors:
            value = snapshot.summary.additional_properties.get(iceberg.OFFSETS) \
                if snapshot.summary else None
            for stream, offset in iceberg.parse_offsets(value or "{}").items():
                found[stream] = max(found.get(stream, offset), offset)
        return found

    def snapshots(self, table: str) -> int:
        return len(self._table(table).snapshots()) if self.exists(table) else 0


def sqlalchemy_url(settings: SparkSettings) -> str:
    """The catalog's JDBC URI as SQLAlchemy's (``sqlite:///PATH``; for PostgreSQL kstage's
    own, :func:`~actors.sinks.spark.pyiceberg_catalog.sqlalchemy_uri`: the login and TLS
    of the URI's query and the ``jdbc.*`` properties)."""
    sqlite = sqlite_file(settings)
    if sqlite is not None:
        return f"sqlite:///{sqlite}"
    uri = catalog_uri(settings)
    if not uri.startswith("jdbc:postgresql:"):
        raise ValueError(f"no SQLAlchemy URL for {uri}")
    return sqlalchemy_uri(settings)


def normalized(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with ``_ingested_at`` as microseconds since the epoch (UTC)."""
    ingested = row.get("_ingested_at")
    if isinstance(ingested, dt.datetime):
        if ingested.tzinfo is None:  # Spark hands UTC wall times (session time zone)
            ingested = ingested.replace(tzinfo=dt.UTC)
        row = {**row, "_ingested_at": round(ingested.timestamp() * 1_000_000)}
    return row


def spark_rows(spark: Any, table: str) -> list[dict[str, Any]]:
    """Spark thread: every row of ``table`` (in the session's catalog), as
    :meth:`IcebergReader.rows` gives them."""
    frame = spark.table(table)
    micros = frame.selectExpr(*[f"`{c}`" for c in frame.columns if c != "_ingested_at"],
                              "unix_micros(`_ingested_at`) AS `_ingested_at`")
    return [normalized(r.asDict()) for r in micros.collect()]


def as_set(rows: list[dict[str, Any]]) -> set[tuple[tuple[str, Any], ...]]:
    """Rows as a set of hashable full rows (every column, by name)."""
    return {tuple(sorted(row.items())) for row in rows}


def assert_once(reader: IcebergReader, table: str, topic: str, count: int,
                partitions: int) -> None:
    """Events ``0 .. count-1`` of ``topic`` are each in ``table`` exactly once."""
    coordinates = reader.coordinates(table)
    assert sorted(coordinates) == expected(topic, count, partitions)  # none lost
    assert max(coordinates.values()) == 1, coordinates.most_common(3)  # none twice


async def assert_resumed_once(broker: str, reader: IcebergReader, proc: KstageProcess,
                              group: str, table: str, topic: str, count: int,
                              partitions: int) -> None:
    """After ``proc`` (a ``--drain`` run following a SIGKILL that left the table ahead of
    Kafka): every partition committed at its end, each event once in ``table``, and each
    partition resumed where the table held it (``count`` events, all landed before)."""
    each = count // partitions
    assert await committed(broker, group, topic, partitions) == dict.fromkeys(
        range(partitions), each)
    assert_once(reader, table, topic, count, partitions)
    for p in range(partitions):
        assert (f"partition {p} resumes at offset {each}, where the table holds it"
                in proc.output())


async def drain_resumes_once(kstage: type[KstageProcess], cfg: Path, broker: str,
                             reader: IcebergReader, group: str, table: str, topic: str,
                             count: int, partitions: int) -> None:
    """A ``kstage run --drain`` of ``cfg`` after a SIGKILL that left ``table`` holding
    ``count`` events ahead of Kafka: it exits 0 and :func:`assert_resumed_once` holds."""
    second = kstage(cfg, "--drain")
    assert await second.wait(timeout=300) == 0, second.output()
    await assert_resumed_once(broker, reader, second, group, table, topic, count,
                              partitions)


async def wait_landed(proc: KstageProcess, reader: IcebergReader, table: str, count: int,
                      what: str = "every event in the staging table",
                      timeout: float = 180) -> None:
    """Until ``table`` holds ``count`` rows of Kafka coordinates, ``proc`` alive all the
    while (its output in the failure)."""
    await wait_until(lambda: proc.proc.poll() is not None
                     or sum(reader.coordinates(table).values()) >= count,
                     timeout=timeout, what=what)
    assert proc.proc.poll() is None, proc.output()


async def wait_committed(broker: str, group: str, topic: str, partitions: int, total: int,
                         procs: list[KstageProcess], timeout: float = 180) -> None:
    """Until ``group`` committed ``total`` offsets of ``topic`` (the processes alive)."""
    deadline = time.monotonic() + timeout
    while sum((await committed(broker, group, topic, partitions)).values()) < total:
        for proc in procs:
            assert proc.proc.poll() is None, proc.output()
        assert time.monotonic() < deadline, "\n".join(p.output()[-3000:] for p in procs)
        await asyncio.sleep(0.2)


FAILED_WRITE = "sink write failed"  # actors/sinks/runner.py's WARNING on each retry


async def through_outage(broker: str, proc: KstageProcess, topic: str, group: str, *,
                         begin: Callable[[], Any], end: Callable[[], Any],
                         unready_within_s: float, events: int = 40,
                         partitions: int = 2) -> None:
    """Drive ``proc`` (``kstage run``, 1 s ``sink_unready_after_s``) through an outage of
    what its table needs: ``events`` events land and are committed; ``begin()`` the
    outage; as many more are produced: ``/readyz`` turns 503 naming the spark sink within
    ``unready_within_s`` and nothing more is committed to Kafka; ``end()`` it: everything
    is committed, ``/readyz`` is 200 again, and ``proc`` stops cleanly (SIGTERM, exit 0)
    having logged its retries. The caller checks the table."""
    base = f"http://127.0.0.1:{await status_port(proc, timeout=120)}"
    await produce_events(broker, topic, 0, events, partitions)
    # Deadlines, not timings: the first commit waits for the JVM's start (65 s and 87 s
    # of table registration seen at load 10), the last for the retries under way.
    await wait_committed(broker, group, topic, partitions, events, [proc], timeout=360)
    before = await committed(broker, group, topic, partitions)

    begin()
    await produce_events(broker, topic, events, events, partitions)
    body = await wait_readyz(base, proc, 503, "sink failing", timeout=unready_within_s)
    assert "spark sink" in json.dumps(body), body
    # the appends keep failing, nothing reaches Kafka: a retry after the 503 failed too
    # (its log line, not a settle time), and the committed offsets are still the same
    await proc.wait_for_log(FAILED_WRITE, timeout=120,
                            count=proc.output().count(FAILED_WRITE) + 1)
    assert await committed(broker, group, topic, partitions) == before

    end()
    await wait_committed(broker, group, topic, partitions, 2 * events, [proc], timeout=360)
    await wait_readyz(base, proc, 200, timeout=60)
    proc.signal(signal.SIGTERM)
    assert await proc.wait(timeout=60) == 0, proc.output()
    assert FAILED_WRITE in proc.output()


LOCK_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")  # the write lock: other writers wait, then fail (busy)
print("locked", flush=True)
sys.stdin.read()  # until the test kills this process
"""


class LockHolder:
    """Another process holding the write lock of a SQLite database until :meth:`release`."""

    def __init__(self, database: Path) -> None:
        self.database = database
        self.proc: subprocess.Popen[str] | None = None

    def hold(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(self.database)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "locked\n"

    def release(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
