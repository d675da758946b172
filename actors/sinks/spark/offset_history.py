"""The Kafka offsets a staging table holds, read from its snapshot summaries, resets
included: the one rule every reader follows (the worker's resume through Spark or
pyiceberg, ``kstage tables show``, maintenance's expiry).

Each append records ``kstage.offsets`` (:data:`~actors.sinks.spark.iceberg.OFFSETS`):
per (group, topic, partition), the offset before which that partition is in the table.
Offsets only grow while a topic lives, so a partition's offset is the **highest** any
snapshot of the table's current history (the current snapshot and its ancestors)
records.

A topic deleted and re-created, or a group moved to a mirrored cluster, starts its
offsets again from a lower number: the old highest value would then make every new
message look like one the table already holds. ``kstage tables reset-offsets`` commits a
snapshot of no data whose summary carries :data:`RESET` (``kstage.offsets-reset``, the
same JSON as ``kstage.offsets``: ``{group: {topic: {partition: offset}}}``) and a
``kstage.offsets`` in which the reset partitions hold their new offset (so later appends,
which carry the current snapshot's offsets forward, carry the new one). The rule, per
partition: walking the current history from the oldest snapshot, a snapshot's reset of the
partition *replaces* what the older snapshots held, and the highest ``kstage.offsets``
value of that snapshot and its descendants counts from there. In other words: the
highest value over the snapshots from the partition's newest reset on (that reset's
value included); over the whole history when it was never reset.

Expiry keeps a history's newest part, so it can take a reset snapshot only together with
everything older: the snapshots left all descend from the reset and still give its value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from actors.sinks.spark import iceberg
from actors.sinks.spark.ledger import Stream
from settings.models import SparkSettings

RESET = "kstage.offsets-reset"
"""Snapshot summary key of a reset of partitions' offsets (``kstage tables reset-offsets``)."""


def fold(summaries: Iterable[Mapping[str, Any]]) -> dict[Stream, int]:
    """Per (group, topic, partition), the offset the table holds it up to, from the
    summaries of its current history **oldest first** (see the module docstring)."""
    found: dict[Stream, int] = {}
    for summary in summaries:
        reset = summary.get(RESET)
        if reset is not None:
            found.update(iceberg.parse_offsets(str(reset)))
        value = summary.get(iceberg.OFFSETS)
        if value is not None:
            for stream, offset in iceberg.parse_offsets(str(value)).items():
                found[stream] = max(found.get(stream, offset), offset)
    return found


def fold_parsed(history: Iterable[tuple[Mapping[Stream, int], Mapping[Stream, int]]],
                ) -> dict[Stream, int]:
    """:func:`fold` over already parsed ``(resets, offsets)`` pairs, oldest first."""
    found: dict[Stream, int] = {}
    for resets, offsets in history:
        found.update(resets)
        for stream, offset in offsets.items():
            found[stream] = max(found.get(stream, offset), offset)
    return found


def table_offsets(spark: Any, settings: SparkSettings, table: str) -> dict[Stream, int]:
    """Spark thread: per (group, topic, partition), the offset up to which ``table`` holds
    the partition (:func:`fold` over its current history, read through Spark)."""
    return fold(s.get("summary", {}) for s in
                iceberg.current_history(iceberg.table_metadata(spark, settings, table)))


def pyiceberg_summaries(loaded: Any) -> list[dict[str, str]]:
    """The summaries of a pyiceberg table's current history (``loaded``), oldest first."""
    by_id = {snapshot.snapshot_id: snapshot for snapshot in loaded.metadata.snapshots}
    chain: list[dict[str, str]] = []
    snapshot = loaded.current_snapshot()
    while snapshot is not None and len(chain) <= len(by_id):
        chain.append(dict(snapshot.summary.additional_properties) if snapshot.summary else {})
        parent = snapshot.parent_snapshot_id
        snapshot = by_id.get(parent) if parent is not None else None
    return chain[::-1]


def reset_summary(current: Mapping[Stream, int], resets: Mapping[Stream, int],
                  ) -> dict[str, str]:
    """The summary properties of a reset snapshot: :data:`RESET` with ``resets``, and
    ``kstage.offsets`` with the table's ``current`` offsets where the reset partitions
    hold their new offset (carried forward by the appends that follow)."""
    recorded = {**current, **resets}
    return {RESET: iceberg.format_offsets(dict(resets)),
            iceberg.OFFSETS: iceberg.format_offsets(recorded)}


__all__ = ["RESET", "fold", "fold_parsed", "pyiceberg_summaries", "reset_summary",
           "table_offsets"]
