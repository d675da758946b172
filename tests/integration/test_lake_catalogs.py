"""The Iceberg catalog of several processes, and the catalog down, with real processes:

* PostgreSQL as the catalog of two ``kstage run`` processes in one consumer group that
  append to one staging table in a shared (S3) warehouse: every event once, the offsets
  in the table's commits those committed to Kafka, both processes' commits in its
  history; pyiceberg reads through PostgreSQL exactly the rows Spark reads;
* the PostgreSQL catalog stopped during appends, then started: the appends fail and are
  retried, ``/readyz`` says so, nothing is committed to Kafka past the table, and every
  event lands once (a SQLite catalog locked by another process: test_lake_s3.py).

The module has one PostgreSQL server (tests/postgres.py), one moto S3 server and one
Spark session of its own, which reads what the tests wrote and compares it with pyiceberg.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.sinks.spark import iceberg
from actors.sinks.spark.actor import SparkActor
from tests.kafkautil import (
    KstageProcess,
    committed,
    create_topic,
    last_assignment,
    unique,
    wait_until,
)
from tests.lake import (
    IcebergReader,
    as_set,
    assert_once,
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

RESOLVING = {"io-impl": "org.apache.iceberg.io.ResolvingFileIO"}


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with S3Server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


def pg_catalog(pg: Postgres, warehouse: str, s3: S3Server) -> dict[str, Any]:
    return {"uri": pg.url, "user": USER, "password": "secret", "warehouse": warehouse,
            "s3": s3.catalog_s3()}


@pytest.fixture(scope="module")
def pg_reader(pg: Postgres, s3: S3Server,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkActor]:
    """The Spark session of the test process (a process has one), its catalog the
    PostgreSQL one; it reads tables on S3 and on local disk alike (Iceberg's
    ResolvingFileIO picks the FileIO by scheme)."""
    warehouse = str(tmp_path_factory.mktemp("reader-warehouse"))
    catalog = {**pg_catalog(pg, warehouse, s3), "properties": RESOLVING}
    actor = SparkActor(spark_settings(spark_section(catalog)))
    yield actor
    actor.stop()




async def same_rows_for_spark_and_pyiceberg(reader: SparkActor, pyiceberg: IcebergReader,
                                            table: str, count: int) -> None:
    """Spark and pyiceberg read the same ``count`` rows of ``table``, every column."""
    by_spark = await reader.call(lambda spark: spark_rows(spark, table))
    by_pyiceberg = pyiceberg.rows(table)
    assert len(by_spark) == len(by_pyiceberg) == count
    assert as_set(by_spark) == as_set(by_pyiceberg)


@pytest.mark.timeout(600)  # two kstage JVMs and the module's own
async def test_two_processes_append_one_table_through_a_postgres_catalog(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], running: Postgres,
        s3: S3Server, pg_reader: SparkActor) -> None:
    events, partitions, table = 400, 4, "stg_pg_two"
    topic, group = unique("lake-pg-two"), unique("g-lake-pg-two")
    catalog = pg_catalog(running, f"s3://{s3.new_bucket()}/warehouse", s3)
    spark = spark_section(catalog, flush_max_rows=40, flush_min_rows=20)
    await create_topic(broker, topic, partitions=partitions)
    cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark)
    a, b = kstage(cfg), kstage(cfg)
    await wait_until(lambda: bool(last_assignment(a)) and bool(last_assignment(b))
                     and not last_assignment(a) & last_assignment(b)
                     and last_assignment(a) | last_assignment(b) == set(range(partitions)),
                     timeout=120, what="the partitions split between both processes")
    await a.wait_for_log("registered", timeout=120)
    await b.wait_for_log("registered", timeout=120)
    await produce_events(broker, topic, 0, events, partitions)
    await wait_committed(broker, group, topic, partitions, events, [a, b])
    for proc in (a, b):
        proc.signal(signal.SIGTERM)
    assert await a.wait(timeout=60) == 0, a.output()
    assert await b.wait(timeout=60) == 0, b.output()

    pyiceberg = IcebergReader(spark)
    assert_once(pyiceberg, table, topic, events, partitions)
    assert pyiceberg.offsets(table) == {
        (group, topic, p): o for p, o in
        (await committed(broker, group, topic, partitions)).items()}

    def writers(spark: Any) -> set[str]:
        rows = spark.table(f"kstage.kstage.{table}.snapshots").selectExpr(
            f"summary['{iceberg.WRITER_ID}'] AS writer").collect()
        return {r["writer"] for r in rows if r["writer"]}

    assert len(await pg_reader.call(writers)) == 2  # both processes committed appends
    await same_rows_for_spark_and_pyiceberg(pg_reader, pyiceberg, table, events)
    # The catalog is PostgreSQL's: one row for the table, Iceberg's JDBC layout (V1).
    rows = running.psql("SELECT table_namespace, table_name, iceberg_type FROM iceberg_tables")
    assert ["kstage", table, "TABLE"] in rows, rows


@pytest.mark.timeout(400)
async def test_postgres_catalog_down_during_appends_is_retried_and_loses_nothing(
        broker: str, broker_kind: str, tmp_path: Path, kstage: type[KstageProcess],
        running: Postgres, s3: S3Server, pg_reader: SparkActor) -> None:
    table = f"stg_pg_down_{broker_kind}"  # the module's catalog: one table per broker
    topic, group = unique("lake-pg-down"), unique("g-lake-pg-down")
    spark = spark_section(pg_catalog(running, str(tmp_path / "warehouse"), s3))
    spark["catalog"].pop("s3")  # a local warehouse
    await create_topic(broker, topic, partitions=2)
    cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark,
                      supervisor={"sink_unready_after_s": 1, "max_backoff_s": 2})
    # The reader's session holds catalog connections from before the restart: they are
    # reconnected (57P01 is retried), not failed, when it reads afterwards.
    await pg_reader.call(lambda session: session.sql("SHOW NAMESPACES").collect())
    await through_outage(broker, kstage(cfg), topic, group, begin=running.stop,
                         end=running.start, unready_within_s=120)

    pyiceberg = IcebergReader(spark)
    assert_once(pyiceberg, table, topic, 80, 2)
    assert pyiceberg.offsets(table) == {(group, topic, 0): 40, (group, topic, 1): 40}
    await same_rows_for_spark_and_pyiceberg(pg_reader, pyiceberg, table, 80)
