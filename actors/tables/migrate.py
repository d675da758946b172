"""``kstage tables migrate``: import the Parquet warehouse of an earlier kstage version
(:mod:`actors.tables.legacy`) into the Iceberg tables, without losing a row.

For every spark staging table of the configuration (its columns come from its processor)
whose old directory is in the warehouse, on the Spark thread:

1. an interrupted old merge swap is repaired first (:func:`legacy.repair`);
2. the old staging files are read and appended to the Iceberg staging table (created if
   needed, its columns checked as at start: a column the processor no longer declares
   or whose type changed stops the migration, naming it), ``_partition`` renamed
   ``_kafka_partition``, the directory columns ``ingest_date``/``writer_id`` dropped,
   ``_ingested_at`` kept (so the rows keep their day partition): first the files the old
   merge had folded into the final table (``_merge_state``'s ``merged_files``), then the
   others, each one commit. Their Kafka offsets are not recorded: Kafka's committed
   offsets cover them (the old version committed after its appends);
3. the old final table (if any) is appended to the Iceberg final table (created, or
   checked, by the merge's :func:`~actors.tables.final_table.ensure`: the same
   columns, its final partition column too, partitioned by it). When
   the merged staging files are the staging table's first commit, the final commit
   records that snapshot (:data:`~actors.tables.final_table.MERGED_SNAPSHOT`), so
   the next merge folds only the rows after it; otherwise the next merge folds the whole
   staging table again, which changes nothing it had merged (exact replays are dropped);
4. the old directories are moved into ``<warehouse>/_pre_iceberg/`` (the final table
   last, the ``_merge_state``/``_merge_work`` directories after every table).

Idempotent: every import commit carries :data:`MIGRATED_FROM` (the old directory and the
part); a part found in the table's snapshots is not imported again, so a migration that
stopped half way is finished by running it again, and a second run finds nothing to do.
An old directory no spark sink of the configuration writes stops the migration (its
columns are unknown). pyspark is imported only inside functions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.sinks.spark import iceberg
from actors.sinks.spark.actor import SparkActor, short
from actors.sinks.spark.catalog import dotted
from actors.sinks.table.columns import COORDINATES, INGESTED_AT, spark_type
from actors.tables import final_table, legacy, snapshots
from actors.tables.merge import TablePlan, final_name, plan
from processors.base import Column, Processor
from settings.models import Settings, SparkSettings

logger = logging.getLogger(__name__)

MIGRATED_FROM = "kstage.migrated-from"
"""Summary key of an import commit: ``<old directory name>#<part>`` (merged, unmerged,
final)."""
OLD_DIRECTORY_COLUMNS = ("ingest_date", "writer_id")


class MigrationError(Exception):
    """The old warehouse cannot be migrated as it is; ``str()`` says what to do."""


@dataclass(frozen=True, slots=True)
class Migrated:
    """One part of an old directory: where it went and how many rows (0 when an earlier
    run had imported it: ``earlier``)."""

    directory: str
    table: str
    part: str
    rows: int
    earlier: bool = False

    def summary(self) -> str:
        if self.earlier:
            return f"{self.directory} ({self.part}) -> {self.table}: imported by an earlier run"
        return f"{self.directory} ({self.part}) -> {self.table}: {self.rows} rows"


def _declared(columns: Sequence[Column]) -> list[Column]:
    """A staging table's columns with their Iceberg names, ``_ingested_at`` last."""
    return [*iceberg.table_columns((*columns, *COORDINATES)), INGESTED_AT]


def _read_old(spark: Any, directory: Path, files: Sequence[str], columns: Sequence[Column],
              skip: Sequence[str] = ()) -> Any:
    """Old Parquet ``files`` (relative to ``directory``) as a DataFrame of the Iceberg
    table's ``columns`` (processor + coordinates + ``_ingested_at``): ``_partition``
    renamed, directory columns (and ``skip``) dropped, columns the files lack NULL.
    MigrationError when the files hold a column that is not declared or of another type."""
    from pyspark.sql import functions as f  # pyspark only if used

    frame = spark.read.option("mergeSchema", "true").parquet(
        *(str(directory / name) for name in files))
    for old, new in iceberg.RENAMED.items():
        if old in frame.columns:
            frame = frame.withColumnRenamed(old, new)
    frame = frame.drop(*OLD_DIRECTORY_COLUMNS, *skip)
    existing = {field.name: field.dataType.simpleString() for field in frame.schema}
    declared = _declared(columns)
    _, errors = iceberg.schema_change(existing, declared[:-1])
    if errors:
        raise MigrationError(f"{directory}: the old files do not fit the processor's "
                             "columns: " + "; ".join(errors) + " (configure the processor "
                             "that wrote them, or move the directory out of the warehouse)")
    return frame.select(*(f.col(c.name) if c.name in existing
                           else f.lit(None).cast(spark_type(c.type)).alias(c.name)
                           for c in declared))


def _imported(spark: Any, settings: SparkSettings, table: str) -> dict[str, int]:
    """The import commits of a table: ``directory#part`` -> snapshot id."""
    metadata = iceberg.table_metadata(spark, settings, table)
    return {str(s["summary"][MIGRATED_FROM]): int(s["snapshot-id"])
            for s in metadata.get("snapshots", ()) if MIGRATED_FROM in s.get("summary", {})}


def _append(spark: Any, settings: SparkSettings, table: str, frame: Any, marker: str,
            properties: dict[str, str] | None = None) -> int:
    """Spark thread: append ``frame`` as one commit marked ``marker``; its row count
    (checked against the rows the commit added)."""
    rows = int(frame.count())
    writer = frame.writeTo(dotted(settings, table)).option(
        f"snapshot-property.{MIGRATED_FROM}", marker)
    for key, value in (properties or {}).items():
        writer = writer.option(f"snapshot-property.{key}", value)
    writer.append()
    metadata = iceberg.table_metadata(spark, settings, table)
    added = next((s["summary"].get("added-records") for s in metadata.get("snapshots", ())
                  if s.get("summary", {}).get(MIGRATED_FROM) == marker), None)
    if int(added or 0) != rows:
        raise MigrationError(f"{dotted(settings, table)}: the import of {marker} read {rows} "
                             f"rows but its commit added {added}")
    return rows


def _partition(spark: Any, item: TablePlan) -> tuple[str, str, str] | None:
    """The final partition of ``item`` as :func:`final_table.ensure` takes it: (name,
    expression, the Spark type of the expression over the key columns)."""
    if item.partition is None:
        return None
    from pyspark.sql.types import StructType  # pyspark only if used

    name, expression = item.partition
    schema = iceberg.struct_type(item.columns)
    keys = spark.createDataFrame([], StructType([schema[k] for k in item.key]))
    kind = keys.selectExpr(f"{expression} AS `{name}`").schema[name].dataType
    return name, expression, kind.simpleString()


class _Job:
    """One staging table's migration (and its final table's); Spark thread."""

    def __init__(self, settings: SparkSettings, found: legacy.Legacy, item: TablePlan) -> None:
        self.settings = settings
        self.item = item
        self.root = found.root
        staging = found.root / item.table
        final = found.root / item.final_table
        self.staging = staging if staging in found.staging else None
        self.final = final if final in found.finals else None
        state = found.states.get(item.final_table)
        self.merged = (state.merged_files if state is not None and self.final is not None
                       and state.staging == item.table else frozenset())
        self.done: list[Migrated] = []

    def run(self, spark: Any) -> list[Migrated]:
        first: int | None = None  # the merged staging files' commit, if the table's first
        if self.staging is not None:
            first = self._staging(spark, self.staging)
        if self.final is not None:
            self._final(spark, self.final, first)
        for directory in (self.staging, self.final):
            if directory is not None:
                moved = legacy.move_aside(self.root, directory)
                logger.info("tables: %s moved to %s", directory, moved)
        return self.done

    def _staging(self, spark: Any, directory: Path) -> int | None:
        settings, table = self.settings, self.item.table
        iceberg.create_staging(spark, settings, table, self.item.columns)
        files = legacy.parquet_files(directory)
        parts = [("merged", [f for f in files if f in self.merged]),
                 ("unmerged", [f for f in files if f not in self.merged])]
        for part, chosen in parts:
            marker = f"{directory.name}#{part}"
            if marker in _imported(spark, settings, table):
                self.done.append(Migrated(directory.name, dotted(settings, table), part, 0,
                                          earlier=True))
            elif chosen:
                frame = _read_old(spark, directory, chosen, self.item.columns)
                rows = _append(spark, settings, table, frame, marker)
                self.done.append(Migrated(directory.name, dotted(settings, table), part, rows))
        merged = _imported(spark, settings, table).get(f"{directory.name}#merged")
        history = snapshots.history(spark, settings, table)
        return merged if history and history[-1].id == merged else None

    def _final(self, spark: Any, directory: Path, merged: int | None) -> None:
        from pyspark.sql import functions as f  # pyspark only if used

        settings, item = self.settings, self.item
        marker = f"{directory.name}#final"
        name = dotted(settings, item.final_table)
        partition = _partition(spark, item)
        if snapshots.exists(spark, settings, item.final_table):
            if marker in _imported(spark, settings, item.final_table):
                self.done.append(Migrated(directory.name, name, "final", 0, earlier=True))
                return
            if snapshots.content(spark, settings, item.final_table).rows:
                raise MigrationError(
                    f"{name} already has rows (merged by this kstage version): importing "
                    f"the old final table {directory} too would hold some rows twice; move "
                    "that directory out of the warehouse (its rows are merged again from "
                    "staging) or drop the Iceberg final table and migrate again")
        final_table.ensure(spark, settings, item.final_table, item.table, item.columns,
                           partition)
        skip = [item.partition[0]] if item.partition is not None else []
        frame = _read_old(spark, directory, legacy.parquet_files(directory), item.columns,
                          skip)
        if partition is not None:
            frame = frame.withColumn(partition[0], f.expr(partition[1]))
        properties = {} if merged is None else {
            final_table.MERGED_SNAPSHOT: str(merged),
            final_table.MERGED_FROM: dotted(settings, item.table)}
        rows = _append(spark, settings, item.final_table, frame, marker, properties)
        self.done.append(Migrated(directory.name, name, "final", rows))


def _explained(job: _Job, item: TablePlan) -> Callable[[Any], list[Migrated]]:
    """``job.run`` failing with MigrationError naming the table and the JVM's root cause."""
    def run(spark: Any) -> list[Migrated]:
        try:
            return job.run(spark)
        except MigrationError:
            raise
        except Exception as exc:
            raise MigrationError(f"{item.table}: {short(exc)} (nothing of it was moved "
                                 "aside; run the migration again)") from exc
    return run


async def migrate(settings: Settings, processors: Mapping[str, type[Processor]], *,
                  actor: SparkActor) -> list[Migrated]:
    """Import the old directories of the warehouse of ``settings`` into their Iceberg
    tables on ``actor`` (the process's) and move them aside (see the module docstring;
    ``processors`` as for :func:`~actors.tables.merge.plan`); [] when there are none.
    MigrationError when one cannot be migrated (nothing of it is moved)."""
    found = legacy.find(settings.spark)
    if found is None:
        return []
    legacy.repair(found.root)
    found = legacy.find(settings.spark) or found
    items = plan(settings, processors)
    known = {i.table for i in items} | {i.final_table for i in items}
    unknown = [p.name for p in (*found.staging, *found.finals) if p.name not in known]
    if unknown:
        raise MigrationError(
            f"{found.root}: {', '.join(unknown)}: no spark sink of the configuration writes "
            "these tables, so their columns are unknown: add their topics (with their "
            "processors) to the configuration, or move the directories out of the warehouse")
    done: list[Migrated] = []
    for item in items:
        if (found.root / item.table) in found.staging or (
                found.root / final_name(item.table)) in found.finals:
            done += await actor.call(_explained(_Job(settings.spark, found, item), item))
    for extra in found.extra:
        if extra.exists():
            legacy.move_aside(found.root, extra)
    return done


__all__ = ["MIGRATED_FROM", "Migrated", "MigrationError", "migrate"]
