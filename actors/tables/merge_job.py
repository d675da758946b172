"""One table's merge on the Spark thread: :class:`MergeJob` (and what it plans and
returns: :class:`TablePlan`, :class:`MergeResult`).

:meth:`MergeJob.run` (one attempt; see :mod:`actors.tables.merge` for the retries):

1. the final table is created, or checked (:func:`actors.tables.final_table.ensure`);
   its last merge commit gives the *start*, the staging snapshot merged through
   (:func:`~actors.tables.final_table.last_record`);
2. then the staging table's current snapshot is the *end* of this merge (appends
   committed after it wait for the next merge); its ``total-records`` are the staging
   rows. Start = end: nothing new, nothing is committed;
3. the staging rows committed after the start are read by Iceberg's incremental append
   scan (``start-snapshot-id`` exclusive, ``end-snapshot-id`` inclusive: only append
   snapshots, so a compaction's rewrite is not read again). Without a start (first
   merge), or when it is no longer an ancestor of the end (its snapshots expired, the
   table replaced), the whole staging table at the end snapshot is read;
4. those rows are folded with the final rows of their groups, read at the final table's
   snapshot of step 1 (:mod:`actors.tables.merge_fold`);
5. the rows the final table must take are merged by one ``MERGE INTO`` (matched and later
   in the fold's order: update, or delete when the row is a deletion, ``_is_deleted``; not
   matched: insert, unless a deletion), whose commit carries the end
   snapshot and the counts in its summary (``spark.sql.iceberg.snapshot-property.*``,
   set around the statement on this thread). When no row changes, a commit of no file
   records the end anyway, so the next merge starts there.

A final table whose processor has a key and emits deletions keeps a deletions table
(:mod:`actors.tables.final_deletions`): step 4 first drops the staging rows their
key's recorded deletion comes after, and step 5 records the winning deletions, then
commits the MERGE on top of the final snapshot of step 1 only (a racing commit: the
merge runs again).

Idempotent: the record and the rows are one commit, so a merge that died before its
commit left nothing, one that died after it is seen merged, and a merge that reads rows
the final table already holds (a retry, a full read) changes nothing (the fold's order
is total and the MERGE checks it against the row it finds). A concurrent commit of the
final table makes Iceberg refuse the MERGE (serializable isolation: ValidationException)
or the commit (CommitFailedException): :class:`MergeConflict`, and the caller runs the
job again. pyspark is imported only inside functions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from actors.sinks.spark import iceberg
from actors.sinks.spark.catalog import dotted, qualified
from actors.sinks.spark.iceberg import column_name
from actors.sinks.spark.nested_evolution import spark_tree
from actors.sinks.table.columns import COORDINATES, INGESTED_AT
from actors.tables import final_deletions, final_table
from actors.tables.merge_fold import fold, group_columns, later, null_safe
from processors.base import DELETED, Column
from processors.column_types import type_string

logger = logging.getLogger(__name__)

PROPERTY_PREFIX = final_deletions.PROPERTY_PREFIX

CONFLICTS = ("org.apache.iceberg.exceptions.ValidationException",
             "org.apache.iceberg.exceptions.CommitFailedException",
             "org.apache.iceberg.exceptions.CommitStateUnknownException")
"""Iceberg's refusals of a commit that raced another: the merge runs again."""


class MergeConflict(Exception):  # a signal to run the merge again
    """The final table's commit raced another one (the merge runs again)."""


class MergeTableError(Exception):
    """The merge cannot run against the tables as they are (the message says why)."""


@dataclass(frozen=True, slots=True)
class TablePlan:
    """One staging table to merge: its columns, natural key and the topics feeding it;
    ``source_order``: the processor's source position column (``Processor.source_order``),
    which orders a key's rows across partitions."""

    table: str
    final_table: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    topics: tuple[str, ...]
    partition: tuple[str, str] | None = None
    source_order: str | None = None
    staged: bool = False
    """The columns are the staging table's, read at each merge (a processor whose columns
    come from writer schemas: ``columns`` then holds only what the configuration adds)."""


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What one table's merge did.

    Attributes:
        table, final_table: the staging table and the final table it was folded into.
        staging_rows: rows in the staging table (at the snapshot merged through).
        final_rows: rows in the final table after the merge.
        new_rows: staging rows this merge read (committed since the last merge; all of
            them when it read the whole table).
        replays_dropped: of those, exact replays of another new row or of a final row.
        superseded_dropped: distinct rows dropped because a later row has their key.
        merged_snapshot_id: the staging snapshot the final table is merged through.
        full_read: the merge read the whole staging table (first merge, or the last
            merged snapshot expired).
        attempts: how many times it ran (more than one: its commit raced another's).
        skipped: the table was not merged; ``note`` says why.
    """

    table: str
    final_table: str
    staging_rows: int = 0
    final_rows: int = 0
    replays_dropped: int = 0
    superseded_dropped: int = 0
    new_rows: int = 0
    merged_snapshot_id: int | None = None
    full_read: bool = False
    attempts: int = 1
    skipped: bool = False
    note: str = ""

    def summary(self) -> str:
        """One line for the operator."""
        head = f"{self.table} -> {self.final_table}"
        if self.skipped:
            return f"{head}: skipped ({self.note})"
        return (f"{head}: {self.staging_rows} staging rows, {self.final_rows} final rows "
                f"({self.replays_dropped} replays dropped, {self.superseded_dropped} "
                f"superseded; {self.new_rows} new since last merge)")


def conflict(exc: BaseException) -> bool:
    """Whether ``exc`` (or its Java cause) is Iceberg refusing a racing commit."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if any(name in str(seen) for name in CONFLICTS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """The merge's errors in its own words: the final table refusing the merge
    (FinalTableError) is a :class:`MergeTableError`; the final table moved under the
    merge (FinalMoved) or Iceberg refusing a commit that raced another
    (:func:`conflict`) is a :class:`MergeConflict`; anything else passes as it is."""
    try:
        yield
    except final_table.FinalTableError as exc:
        raise MergeTableError(str(exc)) from exc
    except final_deletions.FinalMoved as exc:
        raise MergeConflict(str(exc)) from exc
    except Exception as exc:
        if conflict(exc):
            raise MergeConflict(describe(exc)) from exc
        raise


def describe(exc: BaseException) -> str:
    """``exc`` as one short line: its type and first line, or for an error of the JVM
    (py4j's "An error occurred while calling o66.sql." first) the Java exception's."""
    lines = [line.strip() for line in str(exc).strip().splitlines()]
    if len(lines) > 1 and lines[0].startswith("An error occurred while calling"):
        return lines[1].removeprefix(":").strip()[:300]
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


class MergeJob:
    """One table's merge (see the module docstring); :meth:`run` runs on the Spark
    thread, any number of times."""

    def __init__(self, settings: Any, item: TablePlan, writer_id: str = "") -> None:
        self.settings = settings
        self.writer_id = writer_id
        self.staging = dotted(settings, item.table)
        self.final = dotted(settings, item.final_table)
        self._use(item)

    def _use(self, item: TablePlan) -> None:
        """Merge with ``item``'s columns."""
        self.item = item
        self.row_names = [c.name for c in iceberg.table_columns(item.columns)] + [
            "_topic", "_kafka_partition", "_offset", "_timestamp", "_ingested_at"]
        self.deletes = final_deletions.applies(self.row_names, item.key)

    def _staged(self, spark: Any) -> None:
        """A plan whose columns are the staging table's (:attr:`TablePlan.staged`): read
        them now (the table evolves between merges); MergeTableError when it lacks a key
        column."""
        spark.sql(f"REFRESH TABLE {qualified(self.settings, self.item.table)}")
        own = {column_name(c.name) for c in (*COORDINATES, INGESTED_AT)}
        columns = tuple(Column(f.name, type_string(spark_tree(f.dataType)), True)
                        for f in spark.table(self.staging).schema if f.name not in own)
        missing = [k for k in self.item.key if k not in {c.name for c in columns}]
        if missing:
            raise MergeTableError(f"the staging table {self.staging} has no key column(s) "
                                  f"{', '.join(missing)} (options.key) yet")
        order = self.item.source_order
        if order is not None and (order, "long") not in {(c.name, c.type) for c in columns}:
            raise MergeTableError(f"the staging table {self.staging} has no long column "
                                  f"{order!r} (the processor's source position)")
        self._use(dataclasses.replace(self.item, columns=columns, staged=False))

    def _partition(self, spark: Any) -> tuple[str, str, str] | None:
        """The final partition (name, expression, Spark type); MergeTableError when the
        expression is not one over the key columns alone."""
        if self.item.partition is None:
            return None
        from pyspark.sql.types import StructType  # pyspark only if used

        name, expression = self.item.partition
        schema = iceberg.struct_type(self.item.columns)
        keys = spark.createDataFrame([], StructType([schema[k] for k in self.item.key]))
        try:
            kind = keys.selectExpr(f"{expression} AS `{name}`").schema[name].dataType
        except Exception as exc:  # Spark's analysis error, reworded
            raise MergeTableError(
                f"final partition {name!r} = {expression!r} must be an expression over the "
                f"key columns {list(self.item.key)} only: {describe(exc)}") from exc
        return name, expression, kind.simpleString()

    def _result(self, **counts: Any) -> MergeResult:
        return MergeResult(self.item.table, self.item.final_table, **counts)

    def run(self, spark: Any) -> MergeResult:
        """One attempt of the merge; MergeConflict when its commit raced another."""
        if not spark.catalog.tableExists(self.staging):
            return self._result(skipped=True, note=f"no staging table {self.staging}")
        if self.item.staged:
            self._staged(spark)
        partition = self._partition(spark)
        with translated():
            final_table.ensure(spark, self.settings, self.item.final_table, self.item.table,
                               self.item.columns, partition)
            if self.deletes:  # the final commit goes on a branch made at base: one needed
                final_deletions.ensure_snapshot(spark, self.settings, self.item.final_table)
        # The final table first: the staging snapshot it records was current when that
        # merge read it, so it is an ancestor of the end read after (unless expired).
        target = final_table.load(spark, self.settings, self.item.final_table)
        base = target.currentSnapshot()
        record = final_table.last_record(spark, self.settings, self.item.final_table, target)
        start = record.merged_snapshot_id if record is not None else None
        staging = final_table.load(spark, self.settings, self.item.table)
        end = staging.currentSnapshot()
        staging_rows = final_table.snapshot_rows(spark, self.settings, self.item.table, end)
        if self.deletes:  # after base: it holds the deletions of the merges base holds
            self._ensure_deletions(spark, None if end is None else int(end.snapshotId()))
        if end is None or start == int(end.snapshotId()):
            return self._result(staging_rows=staging_rows, merged_snapshot_id=start,
                                final_rows=final_table.snapshot_rows(
                                    spark, self.settings, self.item.final_table, base))
        end_id = int(end.snapshotId())
        ancestors = spark._jvm.org.apache.iceberg.util.SnapshotUtil
        full = start is None or not ancestors.isAncestorOf(staging, end_id, start)
        if full and start is not None:
            logger.warning("merge: %s: the staging snapshot %d merged through last is no "
                           "longer in its history (expired?): reading the whole table; "
                           "rows already final are dropped as replays", self.staging, start)
        rows = self._read_staging(spark, None if full else start, end_id, partition)
        return self._merge(spark, rows, base, end_id, staging_rows, partition, full)

    def _ensure_deletions(self, spark: Any, end: int | None) -> None:
        with translated():
            final_deletions.ensure(spark, self.settings, self.item.final_table,
                                   self.item.columns, self.item.key, self.item.table, end,
                                   self.item.source_order)

    def _conform(self, frame: Any, partition: tuple[str, str, str] | None) -> Any:
        """``frame`` with the final columns in order: a processor column the table has
        not got yet (added since) reads as NULL."""
        from pyspark.sql import functions as f  # pyspark only if used

        schema = iceberg.struct_type(self.item.columns)
        have = set(frame.columns)
        missing = [n for n in self.row_names if n not in have]
        required = [n for n in missing if not schema[n].nullable]
        if required:
            raise MergeTableError(f"table {self.staging} has no column(s) {required}, which "
                                  "the processor declares NOT NULL")
        selected = [f.col(n) if n in have else f.lit(None).cast(schema[n].dataType).alias(n)
                    for n in self.row_names]
        if partition is not None:
            selected.append(f.col(partition[0]) if partition[0] in have
                            else f.expr(partition[1]).alias(partition[0]))
        return frame.select(*selected)

    def _read_staging(self, spark: Any, start: int | None, end: int,
                      partition: tuple[str, str, str] | None) -> Any:
        reader = spark.read.format("iceberg")
        if start is None:
            reader = reader.option("versionAsOf", str(end))
        else:
            reader = (reader.option("start-snapshot-id", str(start))
                      .option("end-snapshot-id", str(end)))
        return self._conform(reader.load(self.staging), partition)

    def _current(self, spark: Any, base: Any, rows: Any, partition: tuple[str, str, str] | None,
                 ) -> Any:
        """The final rows (at snapshot ``base``) of the groups ``rows`` hold."""
        from pyspark.sql import functions as f  # pyspark only if used

        if base is None:
            return self._conform(spark.createDataFrame([], rows.schema), partition)
        current = self._conform(spark.read.option("versionAsOf", str(base.snapshotId()))
                                .table(self.final), partition)
        if partition is not None:
            # The partition follows from the key: only the partitions of the new rows
            # hold their groups (Iceberg skips the others' files).
            name = partition[0]
            values = [r[0] for r in rows.select(name).distinct().collect()]
            known = [v for v in values if v is not None]
            wanted = f.col(name).isin(known) if known else f.lit(False)
            current = current.filter(wanted | f.col(name).isNull() if None in values
                                     else wanted)
        groups = group_columns(self.row_names, self.item.key)
        keys = rows.select(*(f.col(c).alias(f"_k{i}") for i, c in enumerate(groups)))
        return current.join(keys.distinct(), [current[c].eqNullSafe(keys[f"_k{i}"])
                                              for i, c in enumerate(groups)], "left_semi")

    def _merge(self, spark: Any, rows: Any, base: Any, end: int, staging_rows: int,
               partition: tuple[str, str, str] | None, full: bool) -> MergeResult:
        columns = [*self.row_names, *([partition[0]] if partition else [])]
        guarded = 0
        if self.deletes:  # rows older than their key's recorded deletion stay out
            read = rows.count()
            rows = final_deletions.guard(rows, final_deletions.read(
                spark, self.settings, self.item.final_table), self.item.key,
                self.item.source_order)
        rows = rows.persist()
        try:
            if self.deletes:
                guarded = read - rows.count()
            current = self._current(spark, base, rows, partition)
            folded = fold(rows, current, self.row_names, self.item.key, columns,
                          self.item.source_order)
        except BaseException:
            rows.unpersist()
            raise
        folded = dataclasses.replace(
            folded, new_rows=folded.new_rows + guarded,
            superseded_dropped=folded.superseded_dropped + guarded)
        commit_id = uuid.uuid4().hex
        properties = {
            final_table.MERGED_SNAPSHOT: str(end), final_table.MERGED_FROM: self.staging,
            final_table.STAGING_ROWS: str(staging_rows),
            final_table.NEW_ROWS: str(folded.new_rows),
            final_table.REPLAYS_DROPPED: str(folded.replays_dropped),
            final_table.SUPERSEDED_DROPPED: str(folded.superseded_dropped),
            iceberg.COMMIT_ID: commit_id, iceberg.WRITER_ID: self.writer_id}
        try:
            with translated():
                if folded.changed and self.deletes:
                    self._merge_deleting(spark, folded.changes, columns, partition,
                                         properties, int(base.snapshotId()))
                elif folded.changed:
                    self._merge_into(spark, folded.changes, columns, partition, properties)
                else:
                    final_table.record_only(spark, self.settings, self.item.final_table,
                                            properties)
        finally:
            folded.ranked.unpersist()
            rows.unpersist()
        target = final_table.load(spark, self.settings, self.item.final_table)
        mine = final_table.find_commit(target, commit_id)
        final_rows = final_table.snapshot_rows(spark, self.settings, self.item.final_table,
                                               mine if mine is not None
                                               else target.currentSnapshot())
        return self._result(staging_rows=staging_rows, final_rows=final_rows,
                            new_rows=folded.new_rows, replays_dropped=folded.replays_dropped,
                            superseded_dropped=folded.superseded_dropped,
                            merged_snapshot_id=end, full_read=full)

    def _merge_deleting(self, spark: Any, changes: Any, columns: list[str],
                        partition: tuple[str, str, str] | None, properties: dict[str, str],
                        base: int) -> None:
        """The deletions among ``changes`` recorded first, then the final table's MERGE
        committed on top of ``base`` only (see :mod:`actors.tables.final_deletions`)."""
        from pyspark.sql import functions as f  # pyspark only if used

        deletions = changes.filter(f.coalesce(f.col(DELETED), f.lit(False)))
        if not deletions.isEmpty():
            final_deletions.record(spark, self.settings, self.item.final_table, deletions,
                                   self.item.key, source=self.item.source_order)
        final_deletions.commit_on(
            spark, self.settings, self.item.final_table, base,
            lambda target: self._merge_into(spark, changes, columns, partition, properties,
                                            target))

    def _merge_into(self, spark: Any, changes: Any, columns: list[str],
                    partition: tuple[str, str, str] | None, properties: dict[str, str],
                    target: str | None = None) -> None:
        """``MERGE INTO`` the final table (or ``target``, a branch of it) the rows it
        must take, its commit carrying ``properties`` (session conf set around the
        statement, on this thread)."""
        view = f"kstage_merge_{uuid.uuid4().hex}"
        groups = group_columns(self.row_names, self.item.key)
        on = null_safe([*groups, *([partition[0]] if partition else [])])
        newer = later(self.row_names, self.item.key, self.item.source_order)
        sets = ", ".join(f"t.`{c}` = s.`{c}`" for c in columns)
        names = ", ".join(f"`{c}`" for c in columns)
        values = ", ".join(f"s.`{c}`" for c in columns)
        # A deletion that wins deletes the key's row; one of a row it does not hold
        # inserts nothing (the final table's _is_deleted stays false). NULL: a row staged
        # before the processor emitted deletions.
        deleted = f"coalesce(s.`{DELETED}`, false)" if DELETED in columns else ""
        matched = (f"WHEN MATCHED AND ({newer}) AND {deleted} THEN DELETE "
                   if deleted else "")
        insert = f"WHEN NOT MATCHED AND NOT {deleted}" if deleted else "WHEN NOT MATCHED"
        target = target or qualified(self.settings, self.item.final_table)
        statement = (f"MERGE INTO {target} t "  # noqa: S608
                     f"USING {view} s ON {on} {matched}"
                     f"WHEN MATCHED AND ({newer}) THEN UPDATE SET {sets} "
                     f"{insert} THEN INSERT ({names}) VALUES ({values})")
        # Materialized: the statement's plan then holds no reference to the tables read
        # (Spark 4.1 cannot plan a MERGE whose source view reads an Iceberg table at a
        # snapshot: "No plan for TableReference"), and the source cannot change under it.
        changes.localCheckpoint(eager=True).createOrReplaceTempView(view)
        try:
            with final_deletions.snapshot_properties(spark, properties):
                spark.sql(statement)
        finally:
            try:
                spark.catalog.dropTempView(view)
            except Exception as exc:  # noqa: BLE001 - as above
                logger.debug("merge: cannot drop the view %s: %s", view, exc)


__all__ = ["CONFLICTS", "PROPERTY_PREFIX", "MergeConflict", "MergeJob", "MergeResult",
           "MergeTableError", "TablePlan", "conflict", "describe", "translated"]
