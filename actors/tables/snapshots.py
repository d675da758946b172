"""What an Iceberg table of kstage holds, read from its metadata.

For ``kstage tables show`` and ``kstage tables maintain``: a table's current history
(:func:`history`: its snapshots from the current one back through its parents, each with
its commit time and the kstage summary keys it carries) and its current content
(:func:`content`: data files, rows, bytes, from the current snapshot's summary totals).
Both come from the table's metadata as the catalog holds it now, loaded through Iceberg's
Java API (:func:`actors.sinks.spark.iceberg.table_metadata`: the same for every catalog,
a REST catalog too, and no Spark job), on the Spark thread.

A final table's merge commits record the staging snapshot they merged through
(:data:`~actors.tables.final_table.MERGED_SNAPSHOT`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.sinks.spark import iceberg, offset_history
from actors.sinks.spark.catalog import dotted
from actors.sinks.spark.ledger import Stream
from actors.tables.final_table import MERGED_SNAPSHOT
from settings.models import SparkSettings


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One snapshot of a table's current history.

    Attributes:
        id, parent: the snapshot's id and its parent's (None for the first).
        committed_ms: its commit time (Unix milliseconds, the writer's clock).
        operation: append, replace (a compaction), overwrite, delete.
        offsets: ``kstage.offsets`` of a staging append (empty otherwise).
        merged: ``kstage.merged-snapshot-id`` of a final table's merge commit.
        resets: ``kstage.offsets-reset`` of a reset of partitions' offsets
            (:mod:`actors.sinks.spark.offset_history`; empty otherwise).
    """

    id: int
    parent: int | None
    committed_ms: int
    operation: str
    offsets: dict[Stream, int] = field(default_factory=dict)
    merged: int | None = None
    resets: dict[Stream, int] = field(default_factory=dict)


def history(spark: Any, settings: SparkSettings, table: str) -> list[Snapshot]:
    """Spark thread: the table's current history, newest first (the current snapshot,
    its parent, ...); empty for a table without snapshots."""
    return from_metadata(iceberg.table_metadata(spark, settings, table))


def from_metadata(metadata: dict[str, Any]) -> list[Snapshot]:
    """The current history of a table's metadata (``metadata.json``), newest first."""
    found = []
    for s in reversed(iceberg.current_history(metadata)):
        summary = s.get("summary", {})
        offsets = summary.get(iceberg.OFFSETS)
        resets = summary.get(offset_history.RESET)
        found.append(Snapshot(int(s["snapshot-id"]), s.get("parent-snapshot-id"),
                              int(s["timestamp-ms"]), str(summary.get("operation", "")),
                              iceberg.parse_offsets(offsets) if offsets is not None else {},
                              _merged_id(summary.get(MERGED_SNAPSHOT)),
                              iceberg.parse_offsets(resets) if resets is not None else {}))
    return found


def _merged_id(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None  # not kstage's


def offsets(snapshots: Sequence[Snapshot]) -> dict[Stream, int]:
    """Per (group, topic, partition), the offset the history (newest first) holds it up
    to: the highest any of ``snapshots`` records from the partition's newest reset on (the
    rule of :mod:`actors.sinks.spark.offset_history`, as :func:`offset_history.table_offsets`)."""
    return offset_history.fold_parsed((s.resets, s.offsets) for s in reversed(snapshots))


def merged_through(snapshots: Sequence[Snapshot]) -> Snapshot | None:
    """The newest of ``snapshots`` (newest first) that records a merge's staging snapshot."""
    return next((s for s in snapshots if s.merged is not None), None)


@dataclass(frozen=True, slots=True)
class Content:
    """A table's current data and snapshots: data files, rows (deleted rows not counted),
    bytes, delete files, and how many snapshots the table keeps."""

    data_files: int
    rows: int
    bytes: int
    delete_files: int = 0
    snapshots: int = 0


def _total(summary: dict[str, str], key: str) -> int:
    try:
        return int(summary.get(key, 0))
    except ValueError:
        return 0


def content(spark: Any, settings: SparkSettings, table: str) -> Content:
    """Spark thread: the current snapshot's totals (its summary's ``total-*``); rows are
    counted by a query only when delete files exist."""
    metadata = iceberg.table_metadata(spark, settings, table)
    current = iceberg.current_history(metadata)[-1:]
    summary = current[0].get("summary", {}) if current else {}
    deletes = _total(summary, "total-delete-files")
    rows = _total(summary, "total-records")
    if deletes:
        rows = int(spark.table(dotted(settings, table)).count())
    return Content(_total(summary, "total-data-files"), rows,
                   _total(summary, "total-files-size"), deletes,
                   len(metadata.get("snapshots", ())))


def exists(spark: Any, settings: SparkSettings, table: str) -> bool:
    """Spark thread: whether the catalog has the table."""
    return bool(spark.catalog.tableExists(dotted(settings, table)))


__all__ = ["Content", "Snapshot", "content", "exists", "from_metadata", "history",
           "merged_through", "offsets"]
