"""Iceberg final tables on the Spark thread: create, check the schema, read and write the
merge's record in the table's own commits.

The final table of a staging table is ``<catalog>.<namespace>.<final>`` (see
:func:`actors.tables.merge.final_name`): the processor's columns, then ``_topic,
_kafka_partition, _offset, _timestamp, _ingested_at`` as in staging, then the processor's
``final_partition`` column when it declares one (a real column computed from the key
columns, the table partitioned by its value). Table properties: copy-on-write row-level
writes (a reader needs no delete files), the staging table it is the final table of
(``kstage.staging-table``) and the final partition it was created with
(``kstage.final-partition``), checked at every merge.

Every merge commit of the final table records, in its snapshot summary, how far it merged
(:data:`MERGED_SNAPSHOT`: the staging snapshot merged through; :data:`MERGED_FROM`: the
staging table) and what it counted (:data:`RECORD_COUNTS`). The last such commit in the
table's current history is :func:`last_record`. pyspark is imported only inside functions.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from actors.sinks.spark import iceberg
from actors.sinks.spark.catalog import dotted, namespace, qualified
from actors.sinks.spark.nested_evolution import nested_evolution, spark_path, spark_tree
from actors.sinks.table.columns import COORDINATES, INGESTED_AT, column_kind
from processors.base import Column
from processors.column_types import is_nested, parse_type
from settings.models import SparkSettings

logger = logging.getLogger(__name__)

MERGED_SNAPSHOT = "kstage.merged-snapshot-id"
MERGED_FROM = "kstage.merged-from"
STAGING_ROWS = "kstage.staging-rows"
NEW_ROWS = "kstage.new-rows"
REPLAYS_DROPPED = "kstage.replays-dropped"
SUPERSEDED_DROPPED = "kstage.superseded-dropped"
RECORD_COUNTS = (STAGING_ROWS, NEW_ROWS, REPLAYS_DROPPED, SUPERSEDED_DROPPED)

STAGING_TABLE = "kstage.staging-table"
FINAL_PARTITION = "kstage.final-partition"

FINAL_PROPERTIES = {
    "format-version": "2",
    # MERGE rewrites the data files holding changed rows: every engine reads the table
    # without delete files, and a row count is the snapshot's total-records.
    "write.merge.mode": "copy-on-write",
    "write.update.mode": "copy-on-write",
    "write.delete.mode": "copy-on-write",
    "write.merge.isolation-level": "serializable",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
    # A commit that lost a race with one that does not conflict (another table's, a
    # compaction of untouched files) is applied again; a conflicting one fails and the
    # whole merge runs again (see actors.tables.merge).
    "commit.retry.num-retries": "10",
}
"""Table properties of a final table kstage creates (besides the two ``kstage.*``)."""

WALK_LIMIT = 1000
"""How many snapshots of a final table's history are looked at, newest first, for the
last merge commit (maintenance commits carry no record; merges commit one each)."""


class FinalTableError(Exception):
    """The final table does not fit the processor (schema, final partition, owner)."""


@dataclass(frozen=True, slots=True)
class MergeRecord:
    """What one merge commit of a final table recorded.

    Attributes:
        final_table, staging_table: the tables (``catalog.namespace.table``).
        merged_snapshot_id: the staging snapshot the final table is merged through.
        snapshot_id, committed_at: the final table's commit that recorded it.
        staging_rows, new_rows, replays_dropped, superseded_dropped: that merge's counts.
        final_rows: rows of the final table at that commit.
        commit_id: the merge attempt's id (``kstage.commit-id``).
    """

    final_table: str
    staging_table: str
    merged_snapshot_id: int
    snapshot_id: int
    committed_at: dt.datetime
    staging_rows: int
    new_rows: int
    replays_dropped: int
    superseded_dropped: int
    final_rows: int
    commit_id: str = ""


def final_columns(columns: Sequence[Column]) -> tuple[Column, ...]:
    """The final table's columns but the partition one: the processor's ``columns``,
    the coordinates (Iceberg names) and ``_ingested_at``."""
    return (*iceberg.table_columns((*columns, *COORDINATES)), INGESTED_AT)


def ddl(columns: Sequence[Column]) -> str:
    return ", ".join(f"`{c.name}` {column_kind(c.type).spark_sql}"
                     f"{'' if c.nullable else ' NOT NULL'}" for c in columns)


def load(spark: Any, settings: SparkSettings, table: str) -> Any:
    """The Iceberg ``Table`` (Java, over py4j) as the catalog holds it now."""
    util = spark._jvm.org.apache.iceberg.spark.Spark3Util
    return util.loadIcebergTable(spark._jsparkSession, dotted(settings, table))


def partition_spec(partition: tuple[str, str, str] | None) -> str:
    """``kstage.final-partition``'s value: ``name = expression`` (empty without one)."""
    return "" if partition is None else f"{partition[0]} = {partition[1]}"


def ensure(spark: Any, settings: SparkSettings, final: str, staging: str,
           columns: Sequence[Column], partition: tuple[str, str, str] | None) -> list[str]:
    """Create the final table if needed, or check the existing one, add the new
    nullable columns and make optional what ``columns`` now make optional
    (:func:`loosened`); returns the names of the columns added. ``partition``: the final
    partition's (name, expression, Spark type). FinalTableError when the table does not
    fit (another staging table's, columns removed or retyped, new NOT NULL columns, a
    final partition changed)."""
    name = qualified(settings, final)
    row_columns = iceberg.table_columns((*columns, *COORDINATES))
    declared = (*row_columns, INGESTED_AT)
    owner = dotted(settings, staging)
    spec = partition_spec(partition)
    if not spark.catalog.tableExists(dotted(settings, final)):
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace(settings)}")
        props = {**FINAL_PROPERTIES, STAGING_TABLE: owner, FINAL_PARTITION: spec}
        extra = f", `{partition[0]}` {partition[2].upper()}" if partition else ""
        by = f"PARTITIONED BY (`{partition[0]}`) " if partition else ""
        text = ", ".join(f"'{k}' = '{_quote(v)}'" for k, v in props.items())
        try:
            spark.sql(f"CREATE TABLE IF NOT EXISTS {name} ({ddl(declared)}{extra}) "
                      f"USING iceberg {by}TBLPROPERTIES ({text})")
        except Exception:
            # Another merge created it between the check and the statement: check it.
            if not spark.catalog.tableExists(dotted(settings, final)):
                raise
        else:
            return []
    table = load(spark, settings, final)
    props = dict(table.properties())
    where = f"final table {dotted(settings, final)}"
    if props.get(STAGING_TABLE) != owner:
        raise FinalTableError(
            f"{where} exists but is not the final table of {owner} (its table property "
            f"{STAGING_TABLE} is {props.get(STAGING_TABLE)!r}); rename the staging table "
            "with sink.table, or drop the other table")
    schema = spark.table(name).schema
    existing = {f.name: f.dataType.simpleString() for f in schema}
    errors = _partition_errors(existing, props.get(FINAL_PARTITION, ""), partition)
    if partition is not None:
        existing.pop(partition[0], None)
    added, more = iceberg.schema_change(existing, row_columns)
    errors += more
    if errors:
        raise FinalTableError(f"{where}: the processor does not fit the table: "
                              + "; ".join(errors) + " (only new nullable columns are added; "
                              "merge into a new table with sink.table, or drop the final "
                              "table to rebuild it from staging)")
    if added:
        spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({ddl(added)})")
        logger.warning("merge: %s: new nullable column(s) %s added (rows merged before read "
                       "them as NULL)", where, ", ".join(c.name for c in added))
    optional = loosened(schema, row_columns)
    for path in optional:
        spark.sql(f"ALTER TABLE {name} ALTER COLUMN {spark_path(path)} DROP NOT NULL")
    if optional:
        logger.warning("merge: %s: made %s optional (the staging table's rows may hold "
                       "NULL there now)", where, ", ".join(".".join(p) for p in optional))
    return [c.name for c in added]


def loosened(schema: Any, declared: Sequence[Column]) -> list[tuple[str, ...]]:
    """The paths of the final table's required columns, or required fields inside its
    nested columns, that ``declared`` (the staging table's columns at this merge, or the
    processor's) makes optional: a producer made a field optional and the staging table
    dropped its NOT NULL, so the final table must take its NULLs too (else every merge of
    such a row fails). ``schema``: the final table's Spark schema; only the columns whose
    types are the same but for nullability are compared (others were refused before)."""
    fields = {f.name: f for f in schema}
    found: list[tuple[str, ...]] = []
    for column in declared:
        field = fields.get(column.name)
        if field is None:
            continue
        if not field.nullable and column.nullable:
            found.append((column.name,))
        if is_nested(parse_type(column.type)):
            found += nested_evolution({column.name: spark_tree(field.dataType)},
                                      [column]).loosened
    return found


def _partition_errors(existing: dict[str, str], recorded: str,
                      partition: tuple[str, str, str] | None) -> list[str]:
    """What changed in the final partition since the table was created."""
    spec = partition_spec(partition)
    if recorded == spec:
        if partition is not None and existing.get(partition[0]) != partition[2]:
            return [f"final partition column {partition[0]!r} is "
                    f"{existing.get(partition[0])}, its expression now gives {partition[2]}"]
        return []
    if partition is None:
        return [f"the processor declares no final partition any more (the table was "
                f"created with {recorded!r})"]
    if not recorded:
        return [f"final partition {spec!r} is declared but the table was created without "
                "one"]
    return [f"final partition was {recorded!r}, is now declared {spec!r}"]


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _ancestors(table: Any) -> Iterator[Any]:
    """The table's current snapshot and its ancestors, newest first (at most
    :data:`WALK_LIMIT`)."""
    snapshot = table.currentSnapshot()
    for _ in range(WALK_LIMIT):
        if snapshot is None:
            return
        yield snapshot
        parent = snapshot.parentId()
        snapshot = table.snapshot(parent) if parent is not None else None


def _int(summary: dict[str, str], key: str) -> int:
    try:
        return int(summary.get(key, 0))
    except ValueError:
        return 0


def snapshot_rows(spark: Any, settings: SparkSettings, table: str, snapshot: Any) -> int:
    """Rows of ``table`` at ``snapshot`` (its summary's total-records; counted when the
    table has delete files, which kstage's copy-on-write merges never write)."""
    if snapshot is None:
        return 0
    summary = dict(snapshot.summary())
    if _int(summary, "total-delete-files") == 0 and "total-records" in summary:
        return _int(summary, "total-records")
    return int(spark.read.option("versionAsOf", str(snapshot.snapshotId()))
               .table(dotted(settings, table)).count())


def last_record(spark: Any, settings: SparkSettings, final: str, table: Any = None,
                ) -> MergeRecord | None:
    """The last merge's record in the final table's current history (None: never
    merged). ``table``: the final table, when already loaded."""
    table = table if table is not None else load(spark, settings, final)
    for snapshot in _ancestors(table):
        # One call per snapshot passed over (py4j copies a whole map entry by entry).
        merged = snapshot.summary().get(MERGED_SNAPSHOT)
        if merged is None:
            continue
        summary = dict(snapshot.summary())
        millis = int(snapshot.timestampMillis())
        return MergeRecord(
            final_table=dotted(settings, final), staging_table=summary.get(MERGED_FROM, ""),
            merged_snapshot_id=int(merged), snapshot_id=int(snapshot.snapshotId()),
            committed_at=dt.datetime.fromtimestamp(millis / 1000, dt.UTC),
            staging_rows=_int(summary, STAGING_ROWS), new_rows=_int(summary, NEW_ROWS),
            replays_dropped=_int(summary, REPLAYS_DROPPED),
            superseded_dropped=_int(summary, SUPERSEDED_DROPPED),
            final_rows=snapshot_rows(spark, settings, final, snapshot),
            commit_id=summary.get(iceberg.COMMIT_ID, ""))
    return None


def find_commit(table: Any, commit_id: str) -> Any:
    """The snapshot of the final table's current history made by the merge attempt
    ``commit_id`` (None: not there)."""
    for snapshot in _ancestors(table):
        if snapshot.summary().get(iceberg.COMMIT_ID) == commit_id:
            return snapshot
    return None


def record_only(spark: Any, settings: SparkSettings, final: str,
                properties: dict[str, str]) -> None:
    """Commit ``properties`` to the final table without changing a row (an append of no
    file): a merge whose staging rows change nothing still records how far it merged."""
    update = load(spark, settings, final).newAppend()
    for key, value in properties.items():
        update = update.set(key, value)
    update.commit()


__all__ = ["FINAL_PARTITION", "FINAL_PROPERTIES", "MERGED_FROM", "MERGED_SNAPSHOT",
           "NEW_ROWS", "RECORD_COUNTS", "REPLAYS_DROPPED", "STAGING_ROWS", "STAGING_TABLE",
           "SUPERSEDED_DROPPED", "FinalTableError", "MergeRecord", "ensure", "final_columns",
           "ddl", "find_commit", "last_record", "load", "loosened", "partition_spec",
           "record_only", "snapshot_rows"]
