"""Snapshot expiry of a staging table pyiceberg appends to, without a JVM
(:mod:`actors.tables.pyiceberg_expiry`), on a table a real ``kstage run`` wrote:

* ``kstage run`` with ``appends: pyiceberg`` and no ``maintenance.every_s`` starts the
  expiry (its log line) and no JVM;
* the rule: the snapshots older than the staging snapshot a final table merged through go,
  the newest ``snapshot_min_keep`` and the merged one with everything after it stay; the
  table still holds every row and every partition's offset;
* the catalog locked by another process: a round fails, is logged with the table and
  counted, and the next round after the lock is released expires all but the newest
  ``snapshot_min_keep`` (no final table then);
* a ``--drain`` run after the expiry (the process before it SIGKILLed with the table
  ahead of Kafka) resumes each partition where the table holds it: every event once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import pytest

from actors.metrics import Metrics
from actors.preflight import resolve_processors
from actors.sinks.spark.pyiceberg_appends import Lake
from actors.tables.final_table import MERGED_SNAPSHOT
from actors.tables.pyiceberg_expiry import expire, expire_periodically, history, staging_tables
from settings.loader import load_settings
from tests.kafkautil import KstageProcess, committed, unique, wait_until
from tests.lake import (
    LockHolder,
    drain_resumes_once,
    fill_in_steps,
    run_ahead_of_kafka,
    spark_section,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2
STEP = 20  # events produced at a time: each step its own appends (caught up)
STEPS = 6
STARTED = ("maintenance: every 60s, the snapshots of the staging tables pyiceberg appends "
           "to older than 300s expire")


@pytest.mark.timeout(600)
async def test_expiry_without_a_jvm_keeps_what_the_merge_and_the_offsets_need(
        broker: str, tmp_path: Path, kstage: type[KstageProcess],
        caplog: pytest.LogCaptureFixture) -> None:
    table = "stg_pyice_expiry"
    topic, group = unique("pyice-expiry"), unique("g-pyice-expiry")
    database = tmp_path / "lake" / "catalog.db"
    catalog = {"uri": f"jdbc:sqlite:{database}?busy_timeout=300",
               "warehouse": str(tmp_path / "lake" / "wh")}
    # 300 s kept: the live rounds (every 60 s) expire nothing before the history is read
    spark = spark_section(catalog, appends="pyiceberg", flush_max_rows=10,
                          maintenance={"snapshot_min_keep": 2, "snapshot_max_age_s": 300})
    run, cfg, reader = await run_ahead_of_kafka(kstage, broker, tmp_path, topic, group,
                                                table, spark, PARTITIONS)
    await fill_in_steps(run, broker, topic, reader, table, STEP * STEPS, STEP, PARTITIONS)
    await run.wait_for_log(STARTED, timeout=60)
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait()
    assert "spark: session started" not in run.output()  # no JVM
    assert sum(max(v, 0) for v in (await committed(
        broker, group, topic, PARTITIONS)).values()) == 0
    offsets = reader.offsets(table)
    assert sorted(offsets) == [(group, topic, p) for p in range(PARTITIONS)]

    settings = load_settings(cfg)
    assert settings.spark.pyiceberg_expiry() == (60, 300)
    [item] = staging_tables(settings, resolve_processors(settings))
    assert (item.table, item.final_table, item.topics) == (
        table, "final_pyice_expiry", (topic,))
    lake = Lake(settings.spark)
    try:
        found = await lake.call(lambda: history(lake.table(table)))
        assert len(found) >= STEPS, found  # an append or more per step
        merged = found[3]  # the final table merged through the fourth newest

        def final_table() -> None:
            import pyarrow as pa

            made = lake.catalog().create_table(
                (settings.spark.catalog.namespace, item.final_table),
                schema=pa.schema([("x", pa.int64())]))
            made.append(pa.table({"x": [1]}),
                        snapshot_properties={MERGED_SNAPSHOT: str(merged.id)})

        await lake.call(final_table)
        far = merged.committed_ms + 10 * 86_400_000  # every snapshot past its age
        done = await lake.call(lambda: expire(lake, settings.spark, item, 300, now_ms=far))
        after = await lake.call(lambda: history(lake.table(table)))
        assert [s.id for s in after] == [s.id for s in found[:4]], (found, after)
        assert done.expired == len(found) - 4 and done.not_expired == "", done
        assert reader.offsets(table) == offsets  # the current snapshot holds them all
        assert sum(reader.coordinates(table).values()) == STEP * STEPS

        # without the final table, all but the newest two may go: the rounds try, in a
        # catalog locked by another process they fail, are counted, and once it is
        # released the next one succeeds
        await lake.call(lambda: lake.catalog().drop_table(
            (settings.spark.catalog.namespace, item.final_table)))
        metrics = Metrics()
        holder = LockHolder(database)
        holder.hold()
        caplog.set_level(logging.INFO, logger="actors.tables.pyiceberg_expiry")
        loop = asyncio.create_task(expire_periodically(
            settings, resolve_processors(settings), lake, 0.05, 0.001, metrics=metrics))
        try:
            await wait_until(lambda: _failures(metrics, table) >= 1, timeout=60,
                             what="a failed round counted")
            holder.release()
            await wait_until(lambda: _succeeded(metrics, table), timeout=60,
                             what="a round after the lock")
        finally:
            holder.release()
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
        failed = [r.getMessage() for r in caplog.records if "FAILED" in r.getMessage()]
        assert failed and failed[0].startswith(
            f"maintenance: expiry of {table} FAILED (tried again in 0.05s): "), failed
        assert len(await lake.call(lambda: history(lake.table(table)))) == 2
        assert reader.offsets(table) == offsets
    finally:
        lake.stop()

    await drain_resumes_once(kstage, cfg, broker, reader, group, table, topic,
                             STEP * STEPS, PARTITIONS)


def _failures(metrics: Metrics, table: str) -> float:
    return metrics.registry.get_sample_value("kstage_maintenance_failures_total",
                                             {"table": table}) or 0.0


def _succeeded(metrics: Metrics, table: str) -> bool:
    return metrics.registry.get_sample_value(
        "kstage_maintenance_last_success_timestamp_seconds", {"table": table}) is not None
