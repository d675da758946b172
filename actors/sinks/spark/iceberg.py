"""Iceberg staging tables on the Spark thread: create, check the schema, read commits.

A staging table is ``<catalog>.<namespace>.<table>`` in the Iceberg catalog of
``spark.catalog`` (:mod:`actors.sinks.spark.catalog`): the processor's columns, then
``_topic, _kafka_partition, _offset, _timestamp, _ingested_at`` (UTC), partitioned by
``days(_ingested_at)`` (hidden partitioning: filter on ``_ingested_at``). The Kafka
partition is ``_kafka_partition`` in Iceberg tables (a row's ``_partition`` elsewhere):
Iceberg reserves ``_partition`` (and :data:`RESERVED`) for its metadata columns and
refuses to read a table that has a column of that name. Every append is one Iceberg
commit (a snapshot) whose summary carries:

* ``kstage.commit-id``: unique per append attempt: after a failure whose outcome is not
  known (a dead JVM, a lost catalog connection) the writer looks it up before writing the
  rows again;
* ``kstage.writer-id``: the process that committed (``host-pid-uuid8``);
* ``kstage.offsets``: JSON ``{group: {topic: {partition: offset}}}``: per Kafka partition,
  the offset up to which that partition is done in the table (see
  :mod:`actors.sinks.spark.ledger`): the append's own partitions, and those the current
  snapshot recorded, carried forward (:func:`carried`). A partition's offset in the table
  is the highest any snapshot of its current history records, from its newest reset on
  (:mod:`actors.sinks.spark.offset_history`);
* ``kstage.expect``: the same JSON, per partition the append covers, the position this
  writer continues from (the table's offset it read when the partition was assigned, or
  the end of its own previous append of the partition): the fence (:func:`fence_violations`).

The fence makes an append of a writer that fell behind (frozen past its session, revoked
while its append was queued) refuse to commit: checked at commit against the exact
metadata the commit is applied on (the catalog's compare-and-swap base, on every
optimistic retry), every partition of ``kstage.expect`` must still be where the table
records it (the highest value over ``kstage.offsets`` of the base's current ancestry, 0
when none); otherwise the commit is refused with an error starting with
:data:`FENCE_PREFIX` naming the table, the partition, the expected and the found offsets
(:func:`fence_message`). pyiceberg's catalog enforces it
(:mod:`actors.sinks.spark.pyiceberg_catalog`), the JVM's catalog wrapper for Spark's
appends the same.

Schema changes: at registration the table's columns are compared with the processor's. A
new nullable column is added with ``ALTER TABLE ... ADD COLUMN`` (Iceberg keeps the data
files: older rows read it as NULL); a removed column, a changed type or a new NOT NULL
column stop the service at start (exit 1) with the table, the column and the change named,
before anything is written.

Functions taking ``spark`` run on the Spark thread. pyspark is imported only inside them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from actors.errors import FatalError
from actors.sinks.spark.catalog import dotted, namespace, qualified
from actors.sinks.spark.nested_evolution import (
    names,
    nested_evolution,
    spark_path,
    spark_tree,
    split,
)
from actors.sinks.spark.partitioning import Layout, property_text, spark_clause
from actors.sinks.table.columns import (
    COORDINATES,
    INGESTED_AT,
    column_kind,
    spark_ddl,
    spark_schema,
)
from processors.base import Column, decimal_parts
from settings.models import SparkSettings

logger = logging.getLogger(__name__)

COMMIT_ID = "kstage.commit-id"
WRITER_ID = "kstage.writer-id"
OFFSETS = "kstage.offsets"
EXPECT = "kstage.expect"
FENCE_PREFIX = "kstage fence:"
"""How every refusal of the commit-time fence starts (both append paths)."""

RESERVED = frozenset({
    "_change_ordinal", "_change_type", "_commit_snapshot_id", "_deleted", "_file",
    "_last_updated_sequence_number", "_partition", "_pos", "_row_id", "_spec_id"})
"""Iceberg's metadata column names (``MetadataColumns``): no table column may have one."""

RENAMED = {"_partition": "_kafka_partition"}
"""A row's coordinate -> its column in an Iceberg table."""


def column_name(name: str) -> str:
    """A row's column ``name`` as an Iceberg table names it."""
    return RENAMED.get(name, name)


def table_columns(columns: Sequence[Column]) -> tuple[Column, ...]:
    """``columns`` (the processor's, then the coordinates) with their Iceberg names."""
    return tuple(Column(column_name(c.name), c.type, c.nullable) for c in columns)


STAGING_PROPERTIES = {
    "format-version": "2",
    # Each commit writes a new metadata file: keep the last 100, delete older ones.
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
    # Several processes append to one table: a commit that lost the race is applied
    # again on the new snapshot (appends never conflict), more often than Iceberg's 4.
    "commit.retry.num-retries": "30",
    "commit.retry.min-wait-ms": "20",
    "commit.retry.max-wait-ms": "2000",
    # An append is one task's Arrow batch: no shuffle to distribute it.
    "write.distribution-mode": "none",
}
"""Table properties of a staging table kstage creates."""


def struct_type(columns: Sequence[Column]) -> Any:
    """The Spark schema of a staging table with the processor's ``columns`` (Iceberg's
    column names)."""
    return spark_schema(table_columns((*columns, *COORDINATES)))


def schema_change(existing: dict[str, str], declared: Sequence[Column],
                  ) -> tuple[list[Column], list[str]]:
    """Compare a table's columns (name -> Spark simple type string) with the ``declared``
    ones (coordinates included): the new nullable columns, and one message per change that
    is not allowed (a column removed, a type changed, a new NOT NULL column)."""
    declared_types = {c.name: column_kind(c.type).spark_simple
                      for c in (*declared, INGESTED_AT)}
    errors = [f"column {name!r} ({kind}) is no longer declared" for name, kind in
              existing.items() if name not in declared_types]
    errors += [f"column {name!r} was {existing[name]}, is now declared {kind}"
               for name, kind in declared_types.items()
               if name in existing and existing[name] != kind]
    added = []
    for column in declared:
        if column.name in existing:
            continue
        if column.nullable:
            added.append(column)
        else:
            errors.append(f"new column {column.name!r} is NOT NULL but the rows already "
                          "written have no value for it")
    return added, errors


SPARK_WIDENS = {("int", "bigint"), ("float", "double")}
"""(table's type, declared type): the promotions Iceberg applies to a column in place."""


def widens(was: str, now: str) -> bool | None:
    """Whether a column of Spark type ``was`` takes values of ``now`` once widened to it
    (True), as it is (False: the same or a narrower type), or not at all (None)."""
    if was == now or (now, was) in SPARK_WIDENS:
        return False
    if (was, now) in SPARK_WIDENS:
        return True
    old, new = decimal_parts(was), decimal_parts(now)
    if old is not None and new is not None and old[1] == new[1]:
        return new[0] > old[0]
    return None


def evolution(existing: dict[str, str], declared: Sequence[Column],
              ) -> tuple[list[Column], list[Column], list[str]]:
    """Compare a table's columns with the ``declared`` ones of a processor whose columns
    come from writer schemas (:attr:`~processors.base.Processor.columns_from_schema`):
    the new columns (added nullable), the columns to widen (``int`` -> ``bigint``,
    ``float`` -> ``double``, a decimal's precision) and one message per change that
    cannot be made. A column of the table no longer declared stays (NULL in new rows); a
    declared type narrower than the table's is written as it is."""
    added, widened, errors = [], [], []
    for column in declared:
        if column.name not in existing:
            added.append(Column(column.name, column.type, True))
            continue
        was, now = existing[column.name], column_kind(column.type).spark_sql.lower()
        verdict = widens(was, now)
        if verdict is None:
            errors.append(f"column {column.name!r} is {was}, cannot become {now}")
        elif verdict:
            widened.append(column)
    return added, widened, errors


def unfit(table: str, errors: Sequence[str]) -> FatalError:
    """The error of a processor whose columns do not fit the staging table ``table``
    (``catalog.namespace.table``): ``errors`` from :func:`schema_change`."""
    return FatalError(f"spark sink: table {table}: the processor's columns do not fit the "
                      "table: " + "; ".join(errors) + " (only new nullable columns can be "
                      "added; write to a new table with sink.table, or drop the table)")


def _ddl_columns(columns: Iterable[Column]) -> str:
    return ", ".join(f"`{c.name}` {column_kind(c.type).spark_sql}"
                     f"{'' if c.nullable else ' NOT NULL'}" for c in columns)


def create_staging(spark: Any, settings: SparkSettings, table: str,
                   columns: Sequence[Column], layout: Layout | None = None) -> list[str]:
    """Create the staging table (and its namespace) if needed, with ``layout``'s
    partition spec and properties, or check the existing one's columns and add the new
    nullable ones (and warn when its spec is not ``layout``'s: it is not changed);
    returns the names of the columns added. FatalError when the processor's columns do
    not fit the table, or ``layout`` does not fit the columns (nothing created)."""
    name = qualified(settings, table)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace(settings)}")
    declared = table_columns((*columns, *COORDINATES))
    if not spark.catalog.tableExists(dotted(settings, table)):
        layout = layout or Layout()
        layout.check(dotted(settings, table), (*declared, INGESTED_AT))
        props = property_text({**dict(layout.properties), **STAGING_PROPERTIES})
        spark.sql(f"CREATE TABLE IF NOT EXISTS {name} ({_ddl_columns(declared)}, "
                  "`_ingested_at` TIMESTAMP NOT NULL) USING iceberg "
                  f"{spark_clause(layout.transforms)} TBLPROPERTIES ({props})")
        return []
    if layout is not None:
        _warn_spec(spark, settings, table, layout)
    existing = {f.name: f.dataType.simpleString() for f in spark.table(name).schema}
    added, errors = schema_change(existing, declared)
    if errors:
        raise unfit(dotted(settings, table), errors)
    if added:
        spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({_ddl_columns(added)})")
    return [c.name for c in added]


def _warn_spec(spark: Any, settings: SparkSettings, table: str, layout: Layout) -> None:
    """Warn when the existing table's current partition spec is not ``layout``'s."""
    metadata = table_metadata(spark, settings, table)
    specs = {s["spec-id"]: s for s in metadata.get("partition-specs", ())}
    current = specs.get(metadata.get("default-spec-id"), {"fields": []})
    warning = layout.differs(dotted(settings, table), [
        (f["name"], f["transform"]) for f in current["fields"]])
    if warning is not None:
        logger.warning("%s", warning)


def evolve_staging(spark: Any, settings: SparkSettings, table: str,
                   columns: Sequence[Column], layout: Layout | None = None) -> list[str]:
    """Create the staging table of a processor whose columns come from writer schemas,
    or evolve it to ``columns`` (:func:`evolution`: new nullable columns, widened types,
    each an Iceberg schema commit); the changes made, as text. FatalError when a column
    cannot take the declared type. ``layout``: the table is created with it, or an
    existing one's spec compared with it (None: not compared)."""
    name = qualified(settings, table)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace(settings)}")
    if not spark.catalog.tableExists(dotted(settings, table)):
        create_staging(spark, settings, table, columns, layout)
        return []
    spark.sql(f"REFRESH TABLE {name}")
    if layout is not None:
        _warn_spec(spark, settings, table, layout)
    schema = spark.table(name).schema
    existing = {f.name: f.dataType.simpleString() for f in schema}
    inside, declared = split(existing, table_columns(columns))
    added, widened, errors = evolution(existing, declared)
    nested = nested_evolution({f.name: spark_tree(f.dataType) for f in schema
                               if f.name in names(inside)}, inside)
    if errors or nested.errors:
        raise unfit(dotted(settings, table), [*errors, *nested.errors])
    if added:
        spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({_ddl_columns(added)})")
    for column in widened:
        spark.sql(f"ALTER TABLE {name} ALTER COLUMN `{column.name}` TYPE "
                  f"{column_kind(column.type).spark_sql}")
    for path in nested.loosened:
        spark.sql(f"ALTER TABLE {name} ALTER COLUMN {spark_path(path)} DROP NOT NULL")
    for change in nested.changes:
        action = "ADD COLUMN" if change.kind == "add" else "ALTER COLUMN"
        spark.sql(f"ALTER TABLE {name} {action} {spark_path(change.path)}"
                  f"{'' if change.kind == 'add' else ' TYPE'} {spark_ddl(change.type)}")
    return ([f"added {c.name}" for c in added]
            + [f"widened {c.name} to {c.type}" for c in widened] + nested.described())


def table_metadata(spark: Any, settings: SparkSettings, table: str) -> dict[str, Any]:
    """The table's current Iceberg metadata (its ``metadata.json``: schemas, snapshots
    and their summaries, refs), loaded fresh from the catalog through Iceberg's Java API in
    one call: the same for every catalog (a REST catalog may not serve Spark's metadata
    tables such as ``<table>.snapshots``), and no Spark job."""
    jvm = spark._jvm
    loaded = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, dotted(settings, table))
    text = jvm.org.apache.iceberg.TableMetadataParser.toJson(loaded.operations().current())
    metadata: dict[str, Any] = json.loads(text)
    return metadata


def current_history(metadata: dict[str, Any]) -> list[dict[str, Any]]:
    """The snapshots of the table's current state (the current snapshot and its
    ancestors), oldest first, each as in ``metadata.json`` (``snapshot-id``,
    ``summary``, ``timestamp-ms`` ...)."""
    by_id = {s["snapshot-id"]: s for s in metadata.get("snapshots", ())}
    chain = []
    current = metadata.get("current-snapshot-id")
    while current is not None and current != -1 and current in by_id:
        snapshot = by_id[current]
        chain.append(snapshot)
        current = snapshot.get("parent-snapshot-id")
    return chain[::-1]


def _current_summaries(spark: Any, settings: SparkSettings, table: str, key: str,
                       ) -> list[tuple[int, str]]:
    """``(snapshot id, summary[key])`` of the snapshots in the table's current history
    that carry ``key``."""
    return [(int(s["snapshot-id"]), str(s["summary"][key]))
            for s in current_history(table_metadata(spark, settings, table))
            if key in s.get("summary", {})]


def current_offsets(spark: Any, settings: SparkSettings, table: str,
                    ) -> dict[tuple[str, str, int], int]:
    """The offsets the table's current snapshot records (every partition any writer had
    recorded when it was committed: each append carries the current snapshot's offsets
    forward, see :func:`carried`)."""
    loaded = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, dotted(settings, table))
    snapshot = loaded.currentSnapshot()
    if snapshot is None:
        return {}
    value = snapshot.summary().get(OFFSETS)
    return parse_offsets(str(value)) if value is not None else {}


def carried(current: dict[tuple[str, str, int], int], mine: dict[tuple[str, str, int], int],
            ) -> dict[tuple[str, str, int], int]:
    """The offsets an append records: the current snapshot's, with this append's own
    (the higher of each). So the newest snapshot holds every partition's offset, whatever
    the catalog keeps of the older ones (a REST catalog may serve the current snapshot only;
    maintenance expires old ones); reading takes the highest over the history there is.
    With Spark's appends the fence's catalog makes the value again on the metadata the
    commit is applied on (``CarriedOffsets`` in the fence jar, the same rule), so an
    optimistic retry after another writer's commit keeps that writer's offsets."""
    merged = dict(current)
    for stream, offset in mine.items():
        merged[stream] = max(merged.get(stream, offset), offset)
    return merged


_MALFORMED = (ValueError, AttributeError, TypeError)  # what a value not kstage's raises


def _offsets(value: str) -> dict[tuple[str, str, int], int]:
    data = json.loads(value)
    return {(group, topic, int(partition)): int(offset)
            for group, topics in data.items() for topic, partitions in topics.items()
            for partition, offset in partitions.items()}


def parse_offsets(value: str) -> dict[tuple[str, str, int], int]:
    """``kstage.offsets`` (JSON) as (group, topic, partition) -> offset; a malformed
    value (not written by kstage) is ignored with a warning."""
    try:
        return _offsets(value)
    except _MALFORMED as exc:
        logger.warning("spark: ignoring a snapshot's %s that is not kstage's: %s", OFFSETS,
                       exc)
        return {}


def strict_offsets(value: str) -> dict[tuple[str, str, int], int] | None:
    """``kstage.offsets`` (or ``kstage.expect``) as :func:`parse_offsets` reads it; None
    when malformed (said by no warning: the caller decides)."""
    try:
        return _offsets(value)
    except _MALFORMED:
        return None


def format_offsets(offsets: dict[tuple[str, str, int], int]) -> str:
    """The ``kstage.offsets`` value of an append covering ``offsets``."""
    data: dict[str, dict[str, dict[str, int]]] = {}
    for (group, topic, partition), offset in sorted(offsets.items()):
        data.setdefault(group, {}).setdefault(topic, {})[str(partition)] = offset
    return json.dumps(data, separators=(",", ":"))


Violation = tuple[tuple[str, str, int], int, int]
"""A fenced partition: (stream, expected offset, the offset the table records)."""


def fence_violations(expected: dict[tuple[str, str, int], int],
                     recorded: dict[tuple[str, str, int], int]) -> list[Violation]:
    """The fence rule: every stream of ``expected`` (an append's ``kstage.expect``) must
    be exactly where the table records it (``recorded``: the highest ``kstage.offsets``
    value of each stream over the snapshots of the commit base's current ancestry; a
    stream it lacks is at 0). Returns the streams that are not, in stream order (empty:
    the commit may go on)."""
    return [(stream, offset, recorded.get(stream, 0))
            for stream, offset in sorted(expected.items())
            if recorded.get(stream, 0) != offset]


def fence_message(table: str, violations: Sequence[Violation]) -> str:
    """The refusal of a commit to ``table`` that broke the fence (the same text as the
    JVM's catalog wrapper)."""
    wrong = "; ".join(f"group {group} topic {topic} partition {partition}: expected offset "
                      f"{offset}, found {held}"
                      for (group, topic, partition), offset, held in violations)
    return (f"{FENCE_PREFIX} table {table}: {wrong} (the table's offsets moved since this "
            "writer read them: another writer committed these partitions; this append is "
            "refused)")


def fence_refusal(exc: BaseException) -> str | None:
    """The fence's refusal text in ``exc`` or its chain (a Py4J or pyspark error of the
    JVM's catalog wrapper, pyiceberg's catalog): the first line that holds
    ``kstage fence: table``, from it on; None when the chain holds none (the JVM wrapper's
    errors of its own configuration, ``kstage fence: catalog ...``, are no refusal)."""
    marker = f"{FENCE_PREFIX} table "
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for line in str(current).splitlines():
            at = line.find(marker)
            if at >= 0:
                return line[at:].strip()
        current = current.__cause__ or current.__context__
    return None


def committed_ids(spark: Any, settings: SparkSettings, table: str, commit_ids: set[str],
                  ) -> set[str]:
    """Which of ``commit_ids`` (appends kstage made) are in the table's current
    history."""
    if not commit_ids:
        return set()
    return {value for _, value in _current_summaries(spark, settings, table, COMMIT_ID)
            if value in commit_ids}


__all__ = ["COMMIT_ID", "EXPECT", "FENCE_PREFIX", "OFFSETS", "Violation",
           "fence_message", "fence_refusal", "fence_violations",
           "RENAMED", "RESERVED", "STAGING_PROPERTIES", "WRITER_ID",
           "column_name", "table_columns", "committed_ids",
           "create_staging", "format_offsets", "parse_offsets", "schema_change", "strict_offsets",
           "carried", "current_history", "current_offsets", "struct_type",
           "table_metadata", "unfit"]
