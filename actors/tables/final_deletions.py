"""The deletions table of a final table, and the guarded commit of a merge that deletes.

A final table holds live rows only: the merge deletes a key's row when a deletion
(``_is_deleted``) wins its group. So that a deleted key is not forgotten, kstage keeps
beside a final table whose processor has a key and emits deletions its *deletions
table*, ``<final>_deletions`` (:func:`deletions_name`) in the same catalog and namespace:
the key's columns and ``_topic, _kafka_partition, _offset, _timestamp, _ingested_at``,
one row per key, its newest deletion in the merge's order
(:func:`actors.tables.merge_fold.order`, its coordinate terms: a delete is a
version). A merge of such a table (:mod:`actors.tables.merge_job`):

1. reads the final table at its current snapshot (*base*), then the deletions table;
2. drops the staging rows its key's recorded deletion comes after (:func:`guard`: an
   older upsert staged again, through ``kstage dlq replay`` or a re-read, never brings a
   deleted row back; a newer one lands, the older deletion stays recorded) and folds
   the rest as before;
3. records the deletions that won their group (:func:`record`: ``MERGE INTO`` the
   deletions table, the newer of two deletions of a key wins, so recording twice
   changes nothing), **then**
4. commits the final table's ``MERGE`` *on top of base only* (:func:`commit_on`: the
   MERGE writes to a branch made at base, and ``main`` is fast-forwarded to it, which
   Iceberg refuses when ``main`` moved since: :class:`FinalMoved`, the merge runs
   again and re-reads both tables).

Crash between 3 and 4: the deletions are recorded, the final table is as before and
records the same merged-through staging snapshot, so the next merge reads the same
staging rows, the deletion among them (not older than itself: kept) and deletes the row.
Racing merges: the final table's commits are serialized on what each read (step 4), and
each merge records its deletions before its final commit, so the merge that commits
second read the deletions of the first.

A final table made before (no deletions table): the next merge creates the table and
fills it from the staging table's deletions (:func:`ensure`; those not expired yet),
newest per key, in one commit; a deletions table without a snapshot is filled again.
pyspark is imported only inside functions.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from actors.sinks.spark.actor import COMMIT_PROPERTIES
from actors.sinks.spark.catalog import dotted, qualified
from actors.tables import final_table
from actors.tables.merge_fold import later, null_safe, rank
from processors.base import DELETED, Column
from settings.models import SparkSettings

logger = logging.getLogger(__name__)

SUFFIX = "_deletions"
DELETIONS_OF = "kstage.deletions-of"
"""Table property: the final table whose deletions the table holds."""
FILLED = "kstage.deletions-filled-from"
"""Snapshot property of the commit that filled a new deletions table from staging."""
PROPERTY_PREFIX = "spark.sql.iceberg.snapshot-property."
BRANCH_PREFIX = "kstage_merge_"
STALE_BRANCH_S = 3600
"""A merge's branch older than this (a merge killed before removing it) is removed."""
ROW_COLUMNS = ("_topic", "_kafka_partition", "_offset", "_timestamp", "_ingested_at")

DELETIONS_PROPERTIES = dict(final_table.FINAL_PROPERTIES)
"""A deletions table is written like its final table (copy-on-write MERGE, serializable,
metadata cleanup, commit retries): the same properties."""

_PRESENT = "_kstage_deleted_at"


class FinalMoved(Exception):  # a signal to merge again, like MergeConflict
    """The final table was committed since the merge read it (the merge runs again)."""


def deletions_name(final: str) -> str:
    """``final_x`` -> ``final_x_deletions``."""
    return final + SUFFIX


def applies(names: Sequence[str], key: Sequence[str]) -> bool:
    """Whether a final table of these columns keeps a deletions table: a key, and the
    deletion marker among the columns."""
    return bool(key) and DELETED in names


def _columns(key: Sequence[str], source: str | None) -> list[str]:
    """The columns of a deletions table: the key, the coordinates, the source position
    column if the processor declares one."""
    return [*key, *ROW_COLUMNS, *([source] if source else [])]


def _later(key: Sequence[str], source: str | None, s: str = "s", t: str = "t") -> str:
    """The merge's order on what a deletion row holds (its coordinates, its source
    position): ``s`` replaces ``t``."""
    return later((), key, source, s, t)


def ensure(spark: Any, settings: SparkSettings, final: str, columns: Sequence[Column],
           key: Sequence[str], staging: str, end: int | None,
           source: str | None = None) -> None:
    """Create the deletions table of ``final`` if needed (or check it is that table's);
    a deletions table without a snapshot is filled from ``staging``'s deletions at
    snapshot ``end``; one made before the processor's source position column
    ``source`` gets it (NULL in its rows). FinalTableError when the table is another's."""
    name = deletions_name(final)
    wanted = set(_columns(key, source))
    declared = [c for c in final_table.final_columns(columns) if c.name in wanted]
    owner = dotted(settings, final)
    if not spark.catalog.tableExists(dotted(settings, name)):
        props = {**DELETIONS_PROPERTIES, DELETIONS_OF: owner}
        text = ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
        try:
            spark.sql(f"CREATE TABLE IF NOT EXISTS {qualified(settings, name)} "
                      f"({final_table.ddl(declared)}) USING iceberg TBLPROPERTIES ({text})")
        except Exception:
            if not spark.catalog.tableExists(dotted(settings, name)):
                raise
    table = final_table.load(spark, settings, name)
    recorded = dict(table.properties()).get(DELETIONS_OF)
    if recorded != owner:
        raise final_table.FinalTableError(
            f"deletions table {dotted(settings, name)} exists but is not the deletions "
            f"table of {owner} (its table property {DELETIONS_OF} is {recorded!r}); drop "
            "or rename it")
    have = {f.name for f in spark.table(qualified(settings, name)).schema}
    if source is not None and source not in have:
        [added] = [c for c in declared if c.name == source]
        spark.sql(f"ALTER TABLE {qualified(settings, name)} ADD COLUMNS "
                  f"({final_table.ddl([added])})")
        have.add(source)
    missing = sorted(wanted - have)
    if missing:
        raise final_table.FinalTableError(
            f"deletions table {dotted(settings, name)} has no column(s) {missing}; drop it "
            "(the next merge fills it again from the staging table)")
    if table.currentSnapshot() is None and end is not None:
        _fill(spark, settings, final, key, staging, end, source)


def _fill(spark: Any, settings: SparkSettings, final: str, key: Sequence[str],
          staging: str, end: int, source: str | None = None) -> None:
    """Fill a new deletions table with the newest deletion per key of ``staging`` at
    ``end`` (one commit, even of no row)."""
    from pyspark.sql import functions as f  # pyspark only if used

    rows = spark.read.format("iceberg").option("versionAsOf", str(end)).load(
        dotted(settings, staging))
    names = list(rows.columns)
    if DELETED not in names:
        deletions = None
    else:
        if source is not None and source not in names:
            rows = rows.withColumn(source, f.lit(None).cast("bigint"))
        columns = _columns(key, source)
        deletions = (rank(rows.filter(f.coalesce(f.col(DELETED), f.lit(False)))
                          .select(*columns), columns, key, source, "_n")
                     .filter("_n = 1").select(*columns))
    properties = {FILLED: f"{dotted(settings, staging)}@{end}"}
    count = 0 if deletions is None else deletions.persist().count()
    if deletions is not None and count:
        record(spark, settings, final, deletions, key, properties, source)
        deletions.unpersist()
    else:
        update = final_table.load(spark, settings, deletions_name(final)).newAppend()
        for k, v in properties.items():
            update = update.set(k, v)
        update.commit()
    logger.info("merge: deletions table %s of %s filled with the newest deletion of %d "
                "key(s) in %s (those not expired)", dotted(settings, deletions_name(final)),
                dotted(settings, final), count, dotted(settings, staging))


def read(spark: Any, settings: SparkSettings, final: str) -> Any:
    """The deletions table of ``final`` at its current snapshot (None: no row yet)."""
    name = deletions_name(final)
    snapshot = final_table.load(spark, settings, name).currentSnapshot()
    if snapshot is None:
        return None
    return spark.read.option("versionAsOf", str(snapshot.snapshotId())).table(
        dotted(settings, name))


def guard(rows: Any, deletions: Any, key: Sequence[str], source: str | None = None) -> Any:
    """``rows`` but those their key's recorded deletion (in ``deletions``) comes after
    in the merge's order (a deletion is kept against itself: equal coordinates)."""
    from pyspark.sql import functions as f  # pyspark only if used

    if deletions is None:
        return rows
    if source is not None and source not in deletions.columns:
        # read at a snapshot from before the column was added: its schema has none
        deletions = deletions.withColumn(source, f.lit(None).cast("bigint"))
    recorded = deletions.select(*_columns(key, source)).withColumn(_PRESENT, f.lit(True))
    on = [f.col(f"s.`{k}`").eqNullSafe(f.col(f"d.`{k}`")) for k in key]
    newer = _later(key, source, "d", "s")
    joined = rows.alias("s").join(recorded.alias("d"), on, "left")
    return joined.where(f.expr(f"NOT (d.`{_PRESENT}` IS NOT NULL AND ({newer}))")).select(
        "s.*")


@contextmanager
def snapshot_properties(spark: Any, properties: dict[str, str]) -> Iterator[None]:
    """The next commits on this thread's session carry ``properties`` (the session's
    configuration: no job beside the appends commits meanwhile, see
    :data:`~actors.sinks.spark.actor.COMMIT_PROPERTIES`)."""
    with COMMIT_PROPERTIES.shared():
        try:
            for k, v in properties.items():
                spark.conf.set(PROPERTY_PREFIX + k, v)
            yield
        finally:
            for k in properties:
                try:
                    spark.conf.unset(PROPERTY_PREFIX + k)
                except Exception as exc:  # noqa: BLE001 - a dead JVM forgets them anyway
                    logger.debug("merge: cannot unset %s: %s", k, exc)


def record(spark: Any, settings: SparkSettings, final: str, deletions: Any,
           key: Sequence[str], properties: dict[str, str] | None = None,
           source: str | None = None) -> None:
    """Record ``deletions`` (one per key: key, :data:`ROW_COLUMNS` and the source
    position ``source``) in the deletions table of ``final``: a key's newer deletion
    replaces its older one."""
    view = f"kstage_deletions_{uuid.uuid4().hex}"
    newer = _later(key, source)
    columns = _columns(key, source)
    sets = ", ".join(f"t.`{c}` = s.`{c}`" for c in columns)
    listed = ", ".join(f"`{c}`" for c in columns)
    values = ", ".join(f"s.`{c}`" for c in columns)
    statement = (f"MERGE INTO {qualified(settings, deletions_name(final))} t "  # noqa: S608
                 f"USING {view} s ON {null_safe(key)} "
                 f"WHEN MATCHED AND ({newer}) THEN UPDATE SET {sets} "
                 f"WHEN NOT MATCHED THEN INSERT ({listed}) VALUES ({values})")
    deletions.select(*columns).localCheckpoint(eager=True).createOrReplaceTempView(view)
    try:
        with snapshot_properties(spark, properties or {}):
            spark.sql(statement)
    finally:
        try:
            spark.catalog.dropTempView(view)
        except Exception as exc:  # noqa: BLE001 - as above
            logger.debug("merge: cannot drop the view %s: %s", view, exc)


def ensure_snapshot(spark: Any, settings: SparkSettings, final: str) -> None:
    """Give a final table without a snapshot an empty one (a branch needs one)."""
    table = final_table.load(spark, settings, final)
    if table.currentSnapshot() is None:
        table.newAppend().commit()


def commit_on(spark: Any, settings: SparkSettings, final: str, base: int,
              write: Callable[[str], None]) -> None:
    """Run ``write(target)`` (a statement writing ``target``, the final table's name) on
    a branch of ``final`` made at snapshot ``base``, then fast-forward ``main`` to it:
    FinalMoved when ``main`` is no longer ``base`` (another commit came first)."""
    table = final_table.load(spark, settings, final)
    _remove_stale(table)
    branch = f"{BRANCH_PREFIX}{int(time.time())}_{uuid.uuid4().hex[:12]}"
    table.manageSnapshots().createBranch(branch, base).commit()
    try:
        write(f"{qualified(settings, final)}.`branch_{branch}`")
        try:
            final_table.load(spark, settings, final).manageSnapshots().fastForwardBranch(
                "main", branch).commit()
        except Exception as exc:
            if "Cannot fast-forward" in str(exc):
                raise FinalMoved(f"final table {dotted(settings, final)} was committed "
                                 "since the merge read it") from exc
            raise
    finally:
        try:
            final_table.load(spark, settings, final).manageSnapshots().removeBranch(
                branch).commit()
        except Exception as exc:  # noqa: BLE001 - a later merge removes it when stale
            logger.debug("merge: cannot remove the branch %s of %s: %s", branch, final, exc)


def _remove_stale(table: Any) -> None:
    """Remove the branches of merges killed more than :data:`STALE_BRANCH_S` ago."""
    now = time.time()
    for name in list(table.refs().keySet()):
        if not str(name).startswith(BRANCH_PREFIX):
            continue
        try:
            made = int(str(name)[len(BRANCH_PREFIX):].split("_", 1)[0])
        except ValueError:
            continue
        if now - made > STALE_BRANCH_S:
            try:
                table.manageSnapshots().removeBranch(name).commit()
                logger.info("merge: removed the stale branch %s of %s", name, table.name())
            except Exception as exc:  # noqa: BLE001 - another merge removed it
                logger.debug("merge: cannot remove the branch %s: %s", name, exc)


__all__ = ["DELETIONS_OF", "FILLED", "SUFFIX", "FinalMoved", "applies", "commit_on",
           "deletions_name", "ensure", "ensure_snapshot", "guard", "read", "record",
           "snapshot_properties"]
