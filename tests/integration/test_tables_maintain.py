"""``kstage tables maintain`` against real Iceberg tables (PySpark, SQLite catalog) and
the real broker's committed offsets: many small appends end as few files with every row
once; the snapshots offset recovery and the merge need are kept; Kafka unreadable expires
nothing; orphan files only past their age.

Staging appends are written as the staging writer writes them (one commit each, with the
``kstage.offsets`` it covers and those of the snapshot it follows). One SparkActor
(``local[1]``) is shared by the module; each test has its own tables, topic and group.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.preflight import resolve_processors
from actors.sinks.spark import iceberg, offset_history
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import dotted, qualified
from actors.tables import final_table, maintenance, snapshots
from actors.tables.maintenance import Maintained, maintain
from actors.tables.merge import final_name
from processors.base import Column
from service.cli import main
from service.ops.tables import kafka_committed, render, render_json, show
from settings.models import Settings, SparkSettings
from tests.kafkautil import create_topic, unique
from tests.lake import arrow_frame

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

COLUMNS = (Column("id"),)  # the test_unkeyed processor's
MAINTENANCE = {"snapshot_max_age_s": 0.001, "snapshot_min_keep": 1, "min_input_files": 2}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="module")
def actor(warehouse: Path) -> Iterator[SparkActor]:
    spark = SparkActor(SparkSettings(master="local[1]", warehouse=str(warehouse),
                                     maintenance=MAINTENANCE))
    yield spark
    spark.stop()


def config(actor: SparkActor, broker: str, table: str, topic: str, group: str) -> Settings:
    return Settings(kafka={"bootstrap": broker}, spark=actor.settings, groups=[{
        "group_id": group, "topics": [{"topic": topic, "processor": "test_unkeyed",
                                       "sink": {"type": "spark", "table": table}}]}])


def id_rows(spark: Any, *values: str) -> Any:
    """Spark thread: a final table's rows (``id STRING``)."""
    from pyspark.sql.types import StringType, StructField, StructType

    return arrow_frame(spark, [(v,) for v in values],
                       StructType([StructField("id", StringType())]))


def append(spark: Any, settings: SparkSettings, table: str, group: str, topic: str,
           partition: int, start: int, count: int) -> None:
    """Spark thread: one staging append of offsets ``start..start+count-1`` of a partition,
    recording the partition done up to ``start + count`` and, as the staging writer does,
    the current snapshot's offsets carried forward."""
    now = dt.datetime.now(dt.UTC)
    rows = [(f"{topic}/{partition}/{o}", topic, partition, o, 0, now)
            for o in range(start, start + count)]
    offsets = iceberg.carried(iceberg.current_offsets(spark, settings, table),
                              {(group, topic, partition): start + count})
    (arrow_frame(spark, rows, iceberg.struct_type(COLUMNS)).writeTo(dotted(settings, table))
     .option(f"snapshot-property.{iceberg.OFFSETS}", iceberg.format_offsets(offsets))
     .append())


async def stage(actor: SparkActor, table: str, group: str, topic: str,
                appends: list[tuple[int, int, int]]) -> None:
    """Create the staging table and make one commit per (partition, start, count)."""
    settings = actor.settings

    def run(spark: Any) -> None:
        iceberg.create_staging(spark, settings, table, COLUMNS)
        for partition, start, count in appends:
            append(spark, settings, table, group, topic, partition, start, count)

    await actor.call(run)


async def commit(broker: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    """Commit ``offsets`` for ``group`` (as a worker does after the table commit)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=broker, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit(offsets)
    finally:
        await consumer.stop()


def ids(spark: Any, settings: SparkSettings, table: str) -> list[str]:
    return sorted(r["id"] for r in spark.table(dotted(settings, table)).select("id").collect())


def data_files_on_disk(warehouse: Path, table: str) -> list[Path]:
    return sorted((warehouse / "kstage" / table / "data").rglob("*.parquet"))


def expected_ids(topic: str, appends: list[tuple[int, int, int]]) -> list[str]:
    return sorted(f"{topic}/{p}/{o}" for p, s, n in appends for o in range(s, s + n))


def by_role(results: list[Maintained]) -> dict[str, Maintained]:
    return {r.role.split()[0]: r for r in results}


async def test_small_appends_end_as_one_file_with_every_row_once(
        actor: SparkActor, broker: str, warehouse: Path) -> None:
    table, topic, group = "stg_small_files", unique("small"), unique("g-small")
    await create_topic(broker, topic, partitions=2)
    # 16 one-second flushes of 3 rows, the two partitions in turn
    appends = [(i % 2, 3 * (i // 2), 3) for i in range(16)]
    await stage(actor, table, group, topic, appends)
    await commit(broker, group, {TopicPartition(topic, 0): 24, TopicPartition(topic, 1): 24})
    assert len(data_files_on_disk(warehouse, table)) == 16
    # an orphan a dead JVM left two days ago, and one a running append is writing now
    data = warehouse / "kstage" / table / "data"
    old, fresh = data / "orphan-old.parquet", data / "orphan-fresh.parquet"
    for path in (old, fresh):
        path.write_bytes(b"PAR1 not committed")
    two_days_ago = time.time() - 2 * 86400
    os.utime(old, (two_days_ago, two_days_ago))
    settings = config(actor, broker, table, topic, group)

    staging = by_role(await maintain(settings, resolve_processors(settings),
                                     kafka_committed(settings), actor=actor))["staging"]

    assert not staging.error and not staging.not_expired, staging
    assert (staging.files_before, staging.compacted, staging.compacted_into) == (16, 16, 1)
    assert staging.files_after == 1 and staging.orphans == 1 and not staging.kept
    assert staging.expired >= 16 and staging.deleted_files == 16
    assert not old.exists() and fresh.exists()
    on_disk = data_files_on_disk(warehouse, table)
    assert [p.name for p in on_disk if not p.name.startswith("orphan")] != []
    assert len(on_disk) == 2  # the compacted file and the fresh orphan

    def check(spark: Any) -> tuple[list[str], dict[Any, int], int]:
        history = snapshots.history(spark, actor.settings, table)
        return (ids(spark, actor.settings, table),
                offset_history.table_offsets(spark, actor.settings, table), len(history))

    rows, held, kept = await actor.call(check)
    assert rows == expected_ids(topic, appends)  # every row, once
    # every append expired: the compaction's snapshot carries their offsets (the fence
    # gives a commit of no offsets the current ones), so nothing needs recording again
    # and the table still says how far it holds each partition
    assert staging.carried == 0 and kept <= 2
    assert held == {(group, topic, 0): 24, (group, topic, 1): 24}
    # a second run has nothing to compact and changes no row
    again = by_role(await maintain(settings, resolve_processors(settings),
                                   kafka_committed(settings), actor=actor))
    assert again["staging"].compacted == 0 and again["staging"].files_after == 1
    assert (await actor.call(check))[0] == rows


async def test_snapshots_offset_recovery_and_the_merge_need_are_kept(
        actor: SparkActor, broker: str) -> None:
    table, topic, group = "stg_keep", unique("keep"), unique("g-keep")
    final = final_name(table)
    await create_topic(broker, topic, partitions=2)
    appends = [(0, 0, 5), (1, 0, 5), (0, 5, 5), (1, 5, 5), (0, 10, 5), (1, 10, 5)]
    await stage(actor, table, group, topic, appends[:4])
    settings = actor.settings

    def merge_commit(spark: Any) -> int:
        """What a merge records in the final table: the staging snapshot merged through."""
        through = snapshots.history(spark, settings, table)[0].id
        spark.sql(f"CREATE TABLE {qualified(settings, final)} (id STRING) USING iceberg")
        (id_rows(spark, "merged").writeTo(dotted(settings, final))
         .option(f"snapshot-property.{final_table.MERGED_SNAPSHOT}", str(through)).append())
        id_rows(spark, "later").writeTo(dotted(settings, final)).append()
        return int(through)

    merged = await actor.call(merge_commit)
    await stage(actor, table, group, topic, appends[4:])
    # partition 0 is committed in Kafka; partition 1's last append (offset 15) is in the
    # table but the process died before its Kafka commit (10)
    await commit(broker, group, {TopicPartition(topic, 0): 15, TopicPartition(topic, 1): 10})
    cfg = config(actor, broker, table, topic, group)

    results = by_role(await maintain(cfg, resolve_processors(cfg),
                                     kafka_committed(cfg), actor=actor))

    staging = results["staging"]
    assert not staging.error and not staging.not_expired, staging
    whys = sorted(k.why for k in staging.kept)
    assert whys == [f"holds {topic}[1] up to offset 15, group {group}'s committed offset is 10",
                    f"the final table {final} merged through it"]
    assert next(k.snapshot for k in staging.kept if "merged" in k.why) == merged

    def check(spark: Any) -> tuple[list[int], dict[Any, int], list[str]]:
        return ([s.id for s in snapshots.history(spark, settings, table)],
                offset_history.table_offsets(spark, settings, table), ids(spark, settings, table))

    history, held, rows = await actor.call(check)
    assert merged in history and staging.expired == 3  # the three appends before the merge
    assert held[(group, topic, 1)] == 15  # a worker resuming partition 1 skips 10..14
    assert rows == expected_ids(topic, appends)
    final_result = results["final"]
    assert not final_result.error and [k.snapshot for k in final_result.kept] != []
    assert "the last merge folded through" in final_result.kept[0].why

    def merged_id(spark: Any) -> int | None:
        last = snapshots.merged_through(snapshots.history(spark, settings, final))
        return None if last is None else last.merged

    assert await actor.call(merged_id) == merged


async def test_an_empty_table_is_maintained_without_error(actor: SparkActor,
                                                           broker: str) -> None:
    table, topic, group = "stg_empty", unique("empty"), unique("g-empty")
    await stage(actor, table, group, topic, [])  # created, nothing appended yet
    cfg = config(actor, broker, table, topic, group)
    staging = by_role(await maintain(cfg, resolve_processors(cfg),
                                     kafka_committed(cfg), actor=actor))["staging"]
    assert staging.exists and not staging.error, staging
    assert (staging.files_after, staging.compacted, staging.expired) == (0, 0, 0)


async def test_an_unreadable_merge_record_expires_no_staging_snapshot(
        actor: SparkActor, broker: str, monkeypatch: pytest.MonkeyPatch) -> None:
    table, topic, group = "stg_no_record", unique("norecord"), unique("g-norecord")
    await stage(actor, table, group, topic, [(0, 0, 2), (0, 2, 2)])
    settings = actor.settings
    final = final_name(table)
    await actor.call(lambda spark: spark.sql(
        f"CREATE TABLE {qualified(settings, final)} (id STRING) USING iceberg").collect())

    def unreadable(*_args: Any) -> None:
        raise RuntimeError("the catalog answered 503")

    monkeypatch.setattr(maintenance, "_merged", unreadable)
    cfg = config(actor, broker, table, topic, group)
    results = by_role(await maintain(cfg, resolve_processors(cfg),
                                     kafka_committed(cfg), actor=actor))
    staging = results["staging"]
    assert not staging.error and staging.expired == 0 and staging.compacted == 2
    assert staging.not_expired == (f"the staging snapshot the final table {final} merged "
                                   "through cannot be read (RuntimeError: the catalog "
                                   "answered 503)")
    assert not results["final"].error  # the final table itself was maintained


async def test_kafka_unreadable_expires_nothing_and_says_why(
        actor: SparkActor, broker: str, broker_kind: str) -> None:
    # the module's warehouse: one table per broker
    table, topic, group = f"stg_no_kafka_{broker_kind}", unique("nokafka"), unique("g-nokafka")
    await stage(actor, table, group, topic, [(0, 0, 2), (0, 2, 2), (0, 4, 2)])
    cfg = config(actor, broker, table, topic, group)
    cfg = cfg.model_copy(update={"spark": cfg.spark.model_copy(update={
        "maintenance": cfg.spark.maintenance.model_copy(update={"kafka_timeout_s": 5})})})
    closed = "127.0.0.1:1"  # nothing listens there

    staging = by_role(await maintain(cfg, resolve_processors(cfg),
                                     kafka_committed(cfg, closed), actor=actor))["staging"]

    assert not staging.error and staging.expired == 0
    assert staging.not_expired.startswith("Kafka's committed offsets cannot be read (")
    assert "which snapshots offset recovery needs is unknown" in staging.not_expired
    assert staging.compacted == 3  # compaction needs no offsets
    count = await actor.call(lambda spark: len(snapshots.history(spark, actor.settings, table)))
    assert count >= 4  # the three appends and the compaction
    line = staging.summary(cfg.spark.maintenance)[0]
    assert "expired no snapshot: Kafka's committed offsets cannot be read" in line


async def test_show_lists_snapshots_files_rows_offsets_and_the_merge(
        actor: SparkActor, broker: str) -> None:
    table, topic, group = "stg_show", unique("show"), unique("g-show")
    final = final_name(table)
    await stage(actor, table, group, topic, [(0, 0, 4), (1, 0, 2), (0, 4, 3)])
    settings = actor.settings

    def merge_commit(spark: Any) -> int:
        through = snapshots.history(spark, settings, table)[0].id
        spark.sql(f"CREATE TABLE {qualified(settings, final)} (id STRING) USING iceberg")
        (id_rows(spark, "a", "b").writeTo(dotted(settings, final))
         .option(f"snapshot-property.{final_table.MERGED_SNAPSHOT}", str(through)).append())
        return int(through)

    merged = await actor.call(merge_commit)

    cfg = config(actor, broker, table, topic, group)
    text = render(await show(cfg, resolve_processors(cfg), table, actor=actor))
    assert f"kstage.kstage.{table} (staging)\n  snapshots   3, current {merged} committed " in text
    assert "  data files  3 (" in text and "), 9 rows" in text
    assert f"  offsets     group {group} {topic}[0] up to 7\n" in text
    assert f"              group {group} {topic}[1] up to 2\n" in text
    assert f"kstage.kstage.{final} (final of {table})" in text
    assert f"  merged through staging snapshot {merged}" in text

    [staging, final_view] = json.loads(render_json(await show(
        cfg, resolve_processors(cfg), actor=actor)))
    assert (staging["table"], staging["role"], staging["exists"]) == (
        f"kstage.kstage.{table}", "staging", True)
    assert (staging["snapshots"], staging["data_files"], staging["rows"]) == (3, 3, 9)
    assert staging["current_snapshot"] == merged and staging["bytes"] > 0
    assert staging["offsets"] == [
        {"group": group, "topic": topic, "partition": 0, "offset": 7},
        {"group": group, "topic": topic, "partition": 1, "offset": 2}]
    assert (final_view["table"], final_view["role"], final_view["staging"]) == (
        f"kstage.kstage.{final}", "final", table)
    assert (final_view["rows"], final_view["merged_snapshot"]) == (2, merged)


async def test_maintenance_while_another_session_appends_loses_nothing(
        actor: SparkActor, broker: str, broker_kind: str) -> None:
    """A second SparkSession of the JVM (its own Iceberg catalog instance, as another
    process has) appends on its own thread while maintenance compacts, rewrites
    manifests and expires: Iceberg's optimistic commits interleave; every row is there
    once and the table holds every partition's offset."""
    table, topic, group = f"stg_concurrent_{broker_kind}", unique("conc"), unique("g-conc")
    await create_topic(broker, topic, partitions=2)
    before = [(i % 2, 2 * (i // 2), 2) for i in range(8)]
    await stage(actor, table, group, topic, before)
    await commit(broker, group, {TopicPartition(topic, 0): 8, TopicPartition(topic, 1): 8})
    other = await actor.call(lambda spark: spark.newSession())
    started, maintained = threading.Event(), threading.Event()
    during: list[tuple[int, int, int]] = []

    def appends() -> None:
        """Append until maintenance is over, and once more after."""
        # the JVM thread of this Python thread works in the other session (catalog lookups
        # by name resolve against the thread's active session)
        other._jvm.org.apache.spark.sql.SparkSession.setActiveSession(other._jsparkSession)
        while len(during) < 200:
            partition, start = len(during) % 2, 8 + 2 * (len(during) // 2)
            last = maintained.is_set()
            append(other, actor.settings, table, group, topic, partition, start, 2)
            during.append((partition, start, 2))
            if len(during) == 2:
                started.set()
            if last:
                return

    writer = threading.Thread(target=appends)
    writer.start()
    try:
        await asyncio.to_thread(started.wait, 120)
        cfg = config(actor, broker, table, topic, group)
        staging = by_role(await maintain(cfg, resolve_processors(cfg),
                                         kafka_committed(cfg), actor=actor))["staging"]
    finally:
        maintained.set()
        await asyncio.to_thread(writer.join, 300)
    assert not writer.is_alive() and len(during) >= 3
    assert not staging.error, staging
    assert staging.compacted >= 2

    def check(spark: Any) -> tuple[list[str], dict[Any, int]]:
        return (ids(spark, actor.settings, table),
                offset_history.table_offsets(spark, actor.settings, table))

    rows, held = await actor.call(check)
    assert rows == expected_ids(topic, before + during)  # every row, once
    for partition in (0, 1):
        assert held[(group, topic, partition)] == max(
            s + n for p, s, n in before + during if p == partition)


def test_the_commands_maintain_and_show_json_and_refuse_an_unknown_table(
        actor: SparkActor, broker: str, warehouse: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Last: each command runs its own SparkActor (stopped when done), so the module's is
    stopped first: a process runs one Spark session at a time."""
    table, topic, group = "stg_show_cli", unique("showcli"), unique("g-showcli")
    asyncio.run(create_topic(broker, topic))
    asyncio.run(stage(actor, table, group, topic, [(0, 0, 2)]))
    actor.stop()
    cfg = tmp_config(warehouse.parent / "show.yml", broker, warehouse, table, topic, group)
    assert main(["tables", "maintain", "-c", str(cfg)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"kstage.kstage.{table} (staging): data files 1 -> 1; "
                               "expired 0 of 1 snapshots (older than 3600s, newest 10 kept)")
    assert lines[1] == f"  kept snapshot {lines[1].split()[2]} and newer: holds {topic}[0] up to " \
                       f"offset 2, group {group}'s committed offset is none"
    assert lines[2] == (f"kstage.kstage.final_show_cli (final of {table}): no such table yet "
                        "(nothing to maintain)")
    assert main(["tables", "show", "-c", str(cfg), "--json"]) == 0
    [staging, final] = json.loads(capsys.readouterr().out)
    assert (staging["rows"], staging["snapshots"], final["exists"]) == (2, 1, False)
    assert main(["tables", "show", "-c", str(cfg), "--table", "stg_nope"]) == 2
    assert "table 'stg_nope' is not fed by a spark sink" in capsys.readouterr().err


def tmp_config(path: Path, broker: str, warehouse: Path, table: str, topic: str,
               group: str) -> Path:
    path.write_text(yaml.safe_dump({
        "kafka": {"bootstrap": broker},
        "spark": {"master": "local[1]", "warehouse": str(warehouse)},
        "groups": [{"group_id": group, "topics": [
            {"topic": topic, "processor": "test_unkeyed",
             "sink": {"type": "spark", "table": table}}]}]}))
    return path
