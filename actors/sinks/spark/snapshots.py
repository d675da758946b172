"""What an Iceberg table of kstage holds, read from Iceberg's metadata tables.

For ``kstage tables show`` and ``kstage tables maintain``: a table's current history
(:func:`history`: its snapshots from the current one back through its parents, each with
its commit time and the kstage summary keys it carries) and its current content
(:func:`content`: data files, rows, bytes, from ``<table>.files``). Both read the
metadata tables ``<table>.snapshots``, ``<table>.history`` and ``<table>.files`` through
Spark, on the Spark thread; pyspark is imported only inside functions.

Summary keys kstage writes (besides the staging appends' keys of
:mod:`actors.sinks.spark.iceberg`): :data:`MERGED_SNAPSHOT_ID`, on a final table's merge
commit, the id of the staging snapshot the merge folded through.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.sinks.spark import iceberg
from actors.sinks.spark.catalog import dotted, qualified
from actors.sinks.spark.ledger import Stream
from settings.models import SparkSettings

MERGED_SNAPSHOT_ID = "kstage.merged-snapshot-id"
"""Summary key of a final table's merge commit: the staging snapshot merged through."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One snapshot of a table's current history.

    Attributes:
        id, parent: the snapshot's id and its parent's (None for the first).
        committed_ms: its commit time (Unix milliseconds, the writer's clock).
        operation: append, replace (a compaction), overwrite, delete.
        offsets: ``kstage.offsets`` of a staging append (empty otherwise).
        merged: ``kstage.merged-snapshot-id`` of a final table's merge commit.
    """

    id: int
    parent: int | None
    committed_ms: int
    operation: str
    offsets: dict[Stream, int] = field(default_factory=dict)
    merged: int | None = None


def history(spark: Any, settings: SparkSettings, table: str) -> list[Snapshot]:
    """Spark thread: the table's current history, newest first (the current snapshot,
    its parent, ...); empty for a table without snapshots."""
    name = qualified(settings, table)  # checked identifiers; the keys are ours
    rows = spark.sql(
        "SELECT s.snapshot_id AS id, s.parent_id AS parent, "  # noqa: S608
        "unix_millis(s.committed_at) AS ms, s.operation AS operation, "
        f"s.summary['{iceberg.OFFSETS}'] AS offsets, "
        f"s.summary['{MERGED_SNAPSHOT_ID}'] AS merged, h.made_current_at AS made "
        f"FROM {name}.snapshots s JOIN {name}.history h ON s.snapshot_id = h.snapshot_id "
        "WHERE h.is_current_ancestor").collect()
    return chain([
        Snapshot(int(r["id"]), None if r["parent"] is None else int(r["parent"]), int(r["ms"]),
                 str(r["operation"]),
                 iceberg.parse_offsets(r["offsets"]) if r["offsets"] is not None else {},
                 _merged_id(r["merged"]))
        for r in rows])


def _merged_id(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None  # not kstage's


def chain(snapshots: Sequence[Snapshot]) -> list[Snapshot]:
    """``snapshots`` (a table's current ancestors, in any order) ordered newest first by
    their parent links: the head is the one no other names as parent."""
    by_id = {s.id: s for s in snapshots}
    parents = {s.parent for s in snapshots}
    heads = [s for s in snapshots if s.id not in parents]
    if not heads:
        return []
    ordered: list[Snapshot] = []
    seen: set[int] = set()
    current: Snapshot | None = max(heads, key=lambda s: s.committed_ms)
    while current is not None and current.id not in seen:
        ordered.append(current)
        seen.add(current.id)
        current = by_id.get(current.parent) if current.parent is not None else None
    return ordered


def offsets(snapshots: Sequence[Snapshot]) -> dict[Stream, int]:
    """Per (group, topic, partition), the offset the history holds it up to (the highest
    any of ``snapshots`` records; the same as :func:`iceberg.table_offsets`)."""
    found: dict[Stream, int] = {}
    for snapshot in snapshots:
        for stream, offset in snapshot.offsets.items():
            found[stream] = max(found.get(stream, offset), offset)
    return found


def merged_through(snapshots: Sequence[Snapshot]) -> Snapshot | None:
    """The newest of ``snapshots`` (newest first) that records a merge's staging snapshot."""
    return next((s for s in snapshots if s.merged is not None), None)


@dataclass(frozen=True, slots=True)
class Content:
    """A table's current data: data files, rows (deleted rows not counted) and bytes."""

    data_files: int
    rows: int
    bytes: int
    delete_files: int = 0


def content(spark: Any, settings: SparkSettings, table: str) -> Content:
    """Spark thread: the current snapshot's files (``<table>.files``); rows are counted
    by a query only when delete files exist (otherwise the files' record counts)."""
    name = qualified(settings, table)
    row = spark.sql(
        "SELECT coalesce(sum(CASE WHEN content = 0 THEN 1 END), 0) AS data, "  # noqa: S608
        "coalesce(sum(CASE WHEN content = 0 THEN record_count END), 0) AS records, "
        "coalesce(sum(file_size_in_bytes), 0) AS bytes, "
        "coalesce(sum(CASE WHEN content <> 0 THEN 1 END), 0) AS deletes "
        f"FROM {name}.files").first()
    rows = int(row["records"])
    if int(row["deletes"]):
        rows = int(spark.table(dotted(settings, table)).count())
    return Content(int(row["data"]), rows, int(row["bytes"]), int(row["deletes"]))


def exists(spark: Any, settings: SparkSettings, table: str) -> bool:
    """Spark thread: whether the catalog has the table."""
    return bool(spark.catalog.tableExists(dotted(settings, table)))


__all__ = ["MERGED_SNAPSHOT_ID", "Content", "Snapshot", "chain", "content", "exists",
           "history", "merged_through", "offsets"]
