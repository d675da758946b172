"""Helpers of the merge's tests: staging rows written through the real SparkSink (one
Iceberg append per batch), settings naming the tables, and readers of the final table and
its commits.

Rows come from real processors' ``transform``: Gobblin compaction events
(``gobblin_compaction``: key ``dataset, cluster, log_event_time``, final partition
``log_date``) and the test plugin ``test_versions`` (key ``k1, k2``, both nullable).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kstage_test_plugins import VersionsProcessor

from actors.sinks import SinkContext
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import dotted
from actors.sinks.spark.sink import SparkSink, SparkSinkSettings
from actors.tables import final_table
from actors.tables.merge import final_name
from processors.base import Message, Processor, Row
from processors.gobblin import GobblinCompactionProcessor
from settings.models import Settings, SparkSettings

GOBBLIN = GobblinCompactionProcessor
GOBBLIN_TOPIC = "GobblinTrackingEvent_compaction"
VERSIONS = VersionsProcessor
VERSIONS_TOPIC = "versions"
COORDINATES = ["_topic", "_kafka_partition", "_offset", "_timestamp", "_ingested_at"]


def spark_settings(warehouse: Path) -> SparkSettings:
    """One small local session; flushes right after a write (one append per batch)."""
    return SparkSettings(master="local[1]", warehouse=str(warehouse),
                         flush_max_interval_s=0.2, flush_idle_s=0.02,
                         conf={"spark.driver.memory": "512m"})


def module_actor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkActor]:
    """A module's SparkActor on a warehouse of its own (stopped after the module)."""
    spark = SparkActor(spark_settings(tmp_path_factory.mktemp("warehouse")))
    yield spark
    spark.stop()


def settings(warehouse: Path, *tables: str, processor: type[Processor] = GOBBLIN,
             ) -> Settings:
    """A configuration whose topics feed ``tables`` (one topic each) with ``processor``."""
    topics = [{"topic": f"{processor.name}_{i}", "processor": processor.name,
               "sink": {"type": "spark", "table": table}} for i, table in enumerate(tables)]
    return Settings(groups=[{"topics": topics}], spark=spark_settings(warehouse))


def write_config(path: Path, warehouse: Path, table: str,
                 processor: type[Processor] = GOBBLIN) -> Path:
    """The same configuration as a file, for ``kstage merge -c``."""
    path.write_text(
        f"name: merge-test\nspark: {{master: 'local[1]', warehouse: '{warehouse}', "
        "conf: {spark.driver.memory: 512m}}\n"
        "groups:\n  - topics:\n"
        f"      - {{topic: {processor.name}, processor: {processor.name}, format: json,\n"
        f"         sink: {{type: spark, table: {table}}}}}\n", encoding="utf-8")
    return path


def gobblin_event(offset: int, dataset: str = "/data/tracking/PageView",
                  record_count: int | None = None, day: int = 0) -> dict[str, Any]:
    """A real Gobblin CompactionCompleted event (value); ``day`` moves its event time
    (and so its final partition) by whole days."""
    ts = 1468368000000 + day * 86_400_000 + offset * 1000
    return {"timestamp": ts, "namespace": "compaction.tracking.events",
            "name": "CompactionCompleted",
            "metadata": {"clusterIdentifier": "ltx1-holdem", "datasetUrn": dataset,
                         "partition": "2016/07/13/00",
                         "recordCount": str(1000 + offset if record_count is None
                                            else record_count),
                         "azkabanProjectName": "compaction", "azkabanExecId": str(offset)}}


def gobblin_rows(start: int, count: int, partition: int = 0, days: int = 1,
                 ) -> list[Row]:
    """Rows of ``count`` events at offsets ``start...`` (distinct keys), spread over
    ``days`` final partitions."""
    processor = GOBBLIN({"clusters": [{"code": "ltx1-holdem", "short_name": "holdem"}]})
    rows: list[Row] = []
    for offset in range(start, start + count):
        value = gobblin_event(offset, day=offset % days)
        message = Message(GOBBLIN_TOPIC, partition, offset, value["timestamp"] + 5, None,
                          value, (), None)
        rows.extend(processor.transform(message))
    return rows


def gobblin_version(offset: int, record_count: int, timestamp: int | None = None,
                    ) -> list[Row]:
    """A CompactionCompleted event of one fixed key (dataset X, same event time)."""
    processor = GOBBLIN({"clusters": [{"code": "ltx1-holdem", "short_name": "holdem"}]})
    value = gobblin_event(0, dataset="/data/tracking/X", record_count=record_count)
    value["timestamp"] = 1500000000000
    message = Message(GOBBLIN_TOPIC, 0, offset,
                      1500000000000 + offset if timestamp is None else timestamp,
                      None, value, (), None)
    return list(processor.transform(message))


def version(k1: str | None, k2: int | None, v: str | None, offset: int,
            timestamp: int | None = 1000, partition: int = 0, n: int | None = None,
            topic: str = VERSIONS_TOPIC) -> Row:
    """One ``test_versions`` row, through the processor's transform."""
    message = Message(topic, partition, offset, timestamp, None,
                      {"k1": k1, "k2": k2, "v": v, "n": n}, (), None)
    [row] = VERSIONS({}).transform(message)
    return row


async def opened(actor: SparkActor, table: str, processor: type[Processor]) -> SparkSink:
    sink = SparkSink(SparkSinkSettings(table=table), actor)
    sink.bind(SinkContext(columns=processor.columns, table=processor.table,
                          processor=processor.name, key=processor.key))
    await sink.open()
    return sink


async def stage(actor: SparkActor, table: str, *batches: list[Row],
                processor: type[Processor] = GOBBLIN) -> None:
    """Write each batch through the SparkSink: one Iceberg append each (a batch written
    twice is a replay, as after a crash)."""
    sink = await opened(actor, table, processor)
    for rows in batches:
        await sink.write(list(rows))
    await sink.close()


def names(processor: type[Processor]) -> list[str]:
    """The final table's columns (without the final partition)."""
    return [c.name for c in processor.columns] + COORDINATES


async def final_rows(actor: SparkActor, table: str, processor: type[Processor] = GOBBLIN,
                     ingest: bool = True, partition: bool = True) -> list[tuple[Any, ...]]:
    """The final table's rows, sorted (columns: :func:`names`, then the final partition;
    without ``_ingested_at`` and the partition: comparable with :func:`expected`)."""
    columns = names(processor) + ([processor.final_partition[0]]
                                  if processor.final_partition and partition else [])
    if not ingest:
        columns.remove("_ingested_at")
    final = dotted(actor.settings, final_name(table))
    found = await actor.call(lambda spark: spark.table(final).select(*columns).collect())
    return sorted((tuple(r) for r in found), key=repr)


async def snapshots(actor: SparkActor, table: str) -> list[tuple[int, str, dict[str, str]]]:
    """The table's snapshots in its current history, oldest first: (id, operation,
    summary)."""
    def read(spark: Any) -> list[tuple[int, str, dict[str, str]]]:
        loaded = final_table.load(spark, actor.settings, table)
        found = []
        snapshot = loaded.currentSnapshot()
        while snapshot is not None:
            found.append((int(snapshot.snapshotId()), str(snapshot.operation()),
                          dict(snapshot.summary())))
            parent = snapshot.parentId()
            snapshot = loaded.snapshot(parent) if parent is not None else None
        return found[::-1]

    return await actor.call(read)


def expected(rows: list[Row], processor: type[Processor]) -> list[tuple[Any, ...]]:
    """What the final table must hold after merging ``rows`` (an oracle written apart
    from the merge: exact replays once, then per key the first row by ``_timestamp``
    desc nulls last, ``_topic``, ``_partition``, ``_offset`` desc, then the other
    columns asc nulls first). Columns: :func:`names` but ``_ingested_at``."""
    columns = [c.name for c in processor.columns]
    coordinates = ["_topic", "_partition", "_offset", "_timestamp"]
    distinct = {tuple(row.get(n) for n in columns + coordinates) for row in rows}

    def first(row: tuple[Any, ...]) -> tuple[Any, ...]:
        value = dict(zip(columns + coordinates, row, strict=True))
        ts = value["_timestamp"]
        rest = [(value[n] is not None, value[n]) for n in columns if n not in processor.key]
        return (ts is None, -(ts or 0), value["_topic"], value["_partition"],
                -value["_offset"], *rest)

    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in distinct:
        key = tuple(row[columns.index(k)] for k in processor.key) or row
        groups.setdefault(key, []).append(row)
    return sorted((min(found, key=first) for found in groups.values()), key=repr)


async def sql(actor: SparkActor, statement: str) -> list[Any]:
    return await actor.call(lambda spark: spark.sql(statement).collect())


__all__ = ["COORDINATES", "GOBBLIN", "GOBBLIN_TOPIC", "VERSIONS",
           "VERSIONS_TOPIC", "expected", "final_rows", "gobblin_event", "gobblin_rows",
           "gobblin_version", "module_actor", "names", "opened", "settings", "snapshots",
           "spark_settings", "sql", "stage", "version", "write_config"]
