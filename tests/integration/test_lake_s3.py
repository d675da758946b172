"""Iceberg staging tables in an ``s3://`` warehouse: a real S3-compatible server (moto's, on
loopback) through Iceberg's S3FileIO, a SQLite catalog on local disk.

* ``kstage run --drain`` lands every event once, with the Kafka offsets in the table's
  commits; pyiceberg (an engine that is not Spark) reads exactly the rows Spark reads;
* a data file above the multipart size goes up in parts (moto's multipart upload);
* the S3 server down during appends (a proxy in front of it refuses connections): the
  appends fail (Iceberg's retries of the metadata read bounded by
  ``kstage.metadata-read-retries``) and are retried, ``/readyz`` says so, no Kafka offset
  is committed past the table, and once it is back every event is in the table once;
  that setting with a FileIO the fence cannot stand in for is refused;
* the S3 server slow (the proxy delays every chunk): appends slow down, the worker's
  in-flight messages stay bounded (partitions paused), every event lands once;
* the SQLite catalog locked by another process beyond its busy timeout (that table in a
  local warehouse): the appends fail and are retried, ``/readyz`` says so, every event
  lands once.

The module shares one moto server, one bucket and one SQLite catalog; each test writes
its own table. Readers go to moto directly, kstage through the proxy when a test has one;
the module's Spark session reads local and S3 tables alike (Iceberg's ResolvingFileIO).
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import sqlite_file
from tests.kafkautil import (
    KstageProcess,
    committed,
    create_topic,
    status_port,
    unique,
)
from tests.lake import (
    IcebergReader,
    LockHolder,
    as_set,
    assert_once,
    lake_config,
    produce_events,
    spark_rows,
    spark_section,
    spark_settings,
    through_outage,
)
from tests.s3_server import S3Server
from tests.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with S3Server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


@pytest.fixture(scope="module")
def catalog(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The module's ``spark.catalog``: SQLite on local disk, the warehouse on S3."""
    bucket = s3.new_bucket()
    catalog_db = tmp_path_factory.mktemp("catalog") / "catalog.db"
    return {"uri": f"jdbc:sqlite:{catalog_db}", "warehouse": f"s3://{bucket}/warehouse",
            "s3": s3.catalog_s3()}


@pytest.fixture(scope="module")
def reader(catalog: dict[str, Any]) -> Iterator[SparkActor]:
    """The Spark session of the test process on the module's catalog (moto directly; local
    tables too).
    Data files above 5 MiB go up in 5 MiB parts (S3's smallest part but the last)."""
    multipart = {"s3.multipart.part-size-bytes": str(5 << 20), "s3.multipart.threshold": "1.0",
                 "io-impl": "org.apache.iceberg.io.ResolvingFileIO"}
    actor = SparkActor(spark_settings(spark_section(
        {**catalog, "properties": multipart})))
    yield actor
    actor.stop()


def bucket_of(catalog: dict[str, Any]) -> str:
    return str(catalog["warehouse"]).removeprefix("s3://").split("/", 1)[0]


@pytest.mark.timeout(400)
async def test_run_drain_lands_every_event_once_on_s3(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], s3: S3Server,
        catalog: dict[str, Any], reader: SparkActor) -> None:
    events, table = 60, "stg_s3_drain"
    topic, group = unique("lake-s3"), unique("g-lake-s3")
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_events(broker, topic, 0, events, PARTITIONS)
    spark = spark_section(catalog, flush_max_rows=25)
    cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark)
    data = yaml.safe_load(cfg.read_text())
    data["merge"] = {"interval_s": 3600}  # once, after the drain: the final table too
    cfg.write_text(yaml.safe_dump(data))
    proc = kstage(cfg, "--drain")
    assert await proc.wait(timeout=240) == 0, proc.output()

    assert await committed(broker, group, topic, PARTITIONS) == {0: 30, 1: 30}
    assert S3Server.SECRET_ACCESS_KEY not in proc.output()  # never printed
    pyiceberg = IcebergReader(spark)
    assert_once(pyiceberg, table, topic, events, PARTITIONS)
    assert pyiceberg.offsets(table) == {(group, topic, 0): 30, (group, topic, 1): 30}
    assert pyiceberg.snapshots(table) >= 2  # several appends, one commit each

    # The same rows for Spark and pyiceberg, every column.
    by_spark = await reader.call(lambda s: spark_rows(s, table))
    by_pyiceberg = pyiceberg.rows(table)
    assert len(by_spark) == len(by_pyiceberg) == events
    assert as_set(by_spark) == as_set(by_pyiceberg)
    assert {r["record_count"] for r in by_spark} == {1000 + i for i in range(events)}
    # And the final table the merge wrote: the same rows for both engines.
    final = "final_s3_drain"
    final_by_spark = await reader.call(lambda s: spark_rows(s, final))
    final_by_pyiceberg = pyiceberg.rows(final)
    assert len(final_by_spark) == len(final_by_pyiceberg) == events
    assert as_set(final_by_spark) == as_set(final_by_pyiceberg)

    # Every file of the table is in the bucket; nothing of it on local disk.
    keys = s3.objects(bucket_of(catalog))
    mine = [k for k in keys if k.startswith(f"warehouse/kstage/{table}/")]
    assert any(k.endswith(".parquet") and "/data/" in k for k in mine), keys
    assert any(k.endswith(".metadata.json") for k in mine), keys
    assert not list(tmp_path.rglob("*.parquet")), list(tmp_path.rglob("*.parquet"))


async def test_a_data_file_above_the_multipart_size_goes_up_in_parts(
        s3: S3Server, reader: SparkActor) -> None:
    table, rows = "stg_s3_multipart", 300_000

    def write(spark: Any) -> tuple[int, int]:
        spark.sql(f"CREATE TABLE {table} (id BIGINT, a STRING, b STRING) USING iceberg "
                  "TBLPROPERTIES ('write.parquet.compression-codec' = 'uncompressed')")
        # Random text does not compress: one data file of ~20 MB, in 5 MiB parts.
        spark.sql(f"INSERT INTO {table} SELECT /*+ COALESCE(1) */ id, uuid(), uuid() "  # noqa: S608
                  f"FROM range({rows})")
        files = spark.table(f"kstage.kstage.{table}.files").select("file_size_in_bytes").collect()
        return spark.table(table).count(), max(f[0] for f in files)

    count, largest = await reader.call(write)
    assert count == rows
    assert largest > 10 << 20, largest  # more than two parts
    log = s3.log_path.read_text(errors="replace")
    assert re.search(rf"POST /[^ ]+/{table}/data/[^ ]+\.parquet\?uploads", log), \
        "no multipart upload was started"
    assert re.search(rf"PUT /[^ ]+/{table}/data/[^ ]+\.parquet\?[^ ]*partNumber=3", log)


async def metrics(base: str) -> dict[str, float]:
    """Each sample name of ``/metrics`` with its values summed over their labels."""
    async with httpx.AsyncClient(timeout=5) as client:
        text = (await client.get(f"{base}/metrics")).text
    totals: dict[str, float] = {}
    for name, value in re.findall(r"^(\w+)(?:{[^}]*})? (\S+)$", text, re.M):
        totals[name] = totals.get(name, 0.0) + float(value)
    return totals


@pytest.mark.timeout(600)
async def test_s3_down_during_appends_is_retried_and_loses_nothing(
        broker: str, broker_kind: str, tmp_path: Path, kstage: type[KstageProcess],
        s3: S3Server, catalog: dict[str, Any]) -> None:
    table = f"stg_s3_down_{broker_kind}"  # the module's catalog: one table per broker
    topic, group = unique("lake-s3-down"), unique("g-lake-s3-down")
    await create_topic(broker, topic, partitions=PARTITIONS)
    direct = IcebergReader(spark_section(catalog))  # moto itself, not the proxy
    with TcpProxy(("127.0.0.1", s3.port)) as proxy:
        # One request per S3 call (Iceberg's s3.retry.num-retries, 5 by default), and one
        # retry of a table metadata read (kstage.metadata-read-retries, Iceberg's own 20
        # by default: ~90 s of backoff per read): the outage outlasts Iceberg's retries
        # within seconds instead of minutes.
        spark = spark_section({**catalog, "s3": s3.catalog_s3(proxy.url),
                               "properties": {"s3.retry.num-retries": "0",
                                              "kstage.metadata-read-retries": "1"}})
        cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark,
                          supervisor={"sink_unready_after_s": 1, "max_backoff_s": 2})

        def down() -> None:
            assert len(direct.coordinates(table)) == 40
            proxy.down()

        # An append fails once Iceberg gave up reading the table's metadata, and the
        # lookup of its commit fails too (its outcome unknown): retried until S3 is back.
        proc = kstage(cfg)
        await through_outage(broker, proc, topic, group, begin=down, end=proxy.up,
                             unready_within_s=60)
        assert proxy.connections > 0
        # It was the bound that ended Iceberg's retries of the metadata read.
        assert "unreadable after 2 attempts (kstage.metadata-read-retries=1)" in \
            proc.output(), proc.output()[-3000:]

    assert_once(direct, table, topic, 80, PARTITIONS)
    assert direct.offsets(table) == {(group, topic, 0): 40, (group, topic, 1): 40}


@pytest.mark.timeout(600)
async def test_s3_slow_slows_appends_with_backpressure_and_loses_nothing(
        broker: str, broker_kind: str, tmp_path: Path, kstage: type[KstageProcess],
        s3: S3Server, catalog: dict[str, Any]) -> None:
    table, events, max_in_flight = f"stg_s3_slow_{broker_kind}", 300, 100
    topic, group = unique("lake-s3-slow"), unique("g-lake-s3-slow")
    await create_topic(broker, topic, partitions=PARTITIONS)
    with TcpProxy(("127.0.0.1", s3.port), delay_s=0.05) as proxy:
        spark = spark_section({**catalog, "s3": s3.catalog_s3(proxy.url)},
                              flush_max_rows=50, flush_min_rows=50)
        cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark,
                          commit={"max_in_flight": max_in_flight}, max_poll_records=50)
        proc = kstage(cfg)
        base = f"http://127.0.0.1:{await status_port(proc, timeout=120)}"
        await proc.wait_for_log("registered", timeout=120)
        await produce_events(broker, topic, 0, events, PARTITIONS)
        peak_in_flight = 0.0

        async def all_committed() -> bool:
            nonlocal peak_in_flight, seen
            seen = await metrics(base)
            peak_in_flight = max(peak_in_flight, seen["kstage_in_flight_messages"])
            return sum((await committed(broker, group, topic, PARTITIONS)).values()) == events

        seen: dict[str, float] = {}
        deadline = time.monotonic() + 240
        slowed = False
        while not await all_committed():
            assert time.monotonic() < deadline and proc.proc.poll() is None, proc.output()
            if not slowed and seen.get("kstage_committed_offset", 0) > 0:
                # Once the first append landed (the JVM is warm), every request waits 2 s:
                # an append (5+ round trips) outlasts the pipeline's pause_after (5 s at
                # the default max_poll_interval_ms), so the partitions are surely paused
                # while it runs, whatever the machine's speed. Undelayed after the pause:
                # the rest is only the drain.
                slowed, proxy.delay_s = True, 2.0
            elif slowed and seen.get("kstage_pauses_total", 0) > 0:
                proxy.delay_s = 0.0
            await asyncio.sleep(0.1)
        # The appends waited on the delayed requests: the pause came while one was held
        # for 5 s (pause_after), by requests delayed 2 s each.
        assert seen["kstage_sink_write_seconds_sum"] >= 4.0, seen
        proc.signal(signal.SIGTERM)
        assert await proc.wait(timeout=60) == 0, proc.output()
        assert proxy.bytes_up > 0

    # Bounded: never more than max_in_flight per worker; the partitions were paused (the
    # counter: the paused gauge, sampled every 0.1 s, missed a short pause once in CI).
    assert 0 < peak_in_flight <= max_in_flight, peak_in_flight
    assert seen["kstage_pauses_total"] > 0, seen
    output = proc.output()
    assert "sink write failed" not in output  # slow, never failing
    assert_once(IcebergReader(spark_section(catalog)), table, topic, events, PARTITIONS)


@pytest.mark.timeout(400)
async def test_sqlite_catalog_locked_beyond_the_busy_timeout_is_retried(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], catalog: dict[str, Any],
        reader: SparkActor) -> None:
    table = "stg_sqlite_locked"
    topic, group = unique("lake-sqlite-lock"), unique("g-lake-sqlite-lock")
    database = sqlite_file(spark_settings(spark_section(catalog)))
    assert database is not None
    # The module's catalog, with a local warehouse; a commit waits up to 1 s for another
    # writer of the database (default 30 s).
    spark = spark_section({"uri": f"jdbc:sqlite:{database}?journal_mode=WAL&busy_timeout=1000",
                           "warehouse": str(tmp_path / "warehouse")})
    await create_topic(broker, topic, partitions=2)
    cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark,
                      supervisor={"sink_unready_after_s": 1, "max_backoff_s": 2})
    lock = LockHolder(database)
    try:
        await through_outage(broker, kstage(cfg), topic, group, begin=lock.hold,
                             end=lock.release, unready_within_s=120)
    finally:
        lock.release()

    pyiceberg = IcebergReader(spark)
    assert_once(pyiceberg, table, topic, 80, 2)
    assert pyiceberg.offsets(table) == {(group, topic, 0): 40, (group, topic, 1): 40}
    by_spark = await reader.call(lambda session: spark_rows(session, table))
    assert as_set(by_spark) == as_set(pyiceberg.rows(table)) and len(by_spark) == 80


async def test_metadata_read_retries_with_another_file_io_is_refused_naming_both(
        catalog: dict[str, Any], reader: SparkActor) -> None:
    """``kstage.metadata-read-retries`` below 20 puts the fence's FileIO in the catalog's
    place: a catalog whose ``io-impl`` is another class is refused when it is first used,
    naming the setting and the class (a catalog registered in the module's session)."""
    prefix = "spark.sql.catalog.bounded_other_io"

    def use(spark: Any) -> str:
        for key, value in {
                "": "org.apache.iceberg.spark.SparkCatalog",
                ".catalog-impl": "io.kstage.iceberg.FencingCatalog",
                ".kstage.delegate-type": "jdbc", ".uri": catalog["uri"],
                ".warehouse": catalog["warehouse"],
                ".io-impl": "com.example.OtherFileIO",
                ".kstage.metadata-read-retries": "1"}.items():
            spark.conf.set(prefix + key, value)
        try:
            spark.sql("SHOW NAMESPACES IN bounded_other_io").collect()
        except Exception as exc:  # noqa: BLE001 - the refusal is what is checked
            return str(exc)
        return "no error"

    refusal = await reader.call(use)
    assert ("kstage fence: catalog bounded_other_io: kstage.metadata-read-retries needs "
            "Iceberg's S3FileIO, HadoopFileIO or ResolvingFileIO as io-impl, not "
            "com.example.OtherFileIO") in refusal, refusal
