"""Which snapshots of a table maintenance may expire: pure functions, no Spark.

Iceberg's ``expire_snapshots`` keeps, of a table's current history (newest first), the
newest snapshots while they are younger than ``older_than`` or fewer than
``retain_last``, and stops at the first one that is neither: everything older goes (see
Iceberg's ``RemoveSnapshots``). A kept history is therefore always its newest part, and
it must be: the offsets a staging table holds are read from the summaries of its
*current ancestors* (:func:`actors.sinks.spark.offset_history.table_offsets`), and expiring a
snapshot in the middle would cut the parent chain (and Iceberg's history log) there, so
the older snapshots would no longer count.

So maintenance names the snapshots it must keep (:class:`Keep`, each with why) and
expires only what is older than the oldest of them (:func:`bound`):

* a staging snapshot holding a partition's offset that is ahead of the consumer group's
  committed Kafka offset (or the group has none): a worker assigned the partition
  resumes there, and a process that died between its table commit and its Kafka commit
  left exactly that (:func:`offset_keeps`). A partition whose committed offset caught up
  needs no snapshot: the worker resumes from the committed offset;
* the staging snapshot the final table last merged through (and, by the rule above, its
  descendants): the next merge reads the appends after it;
* on a final table, its newest commit recording that staging snapshot.

Every staging append records the offsets of the snapshot it follows with its own, so the
current snapshot holds every partition's offset (a catalog may serve nothing older).
Compaction and a manifest rewrite commit snapshots that record none: maintenance then
commits the offsets the table holds again, in a snapshot of no data, before it expires
anything (:func:`missing`); the current snapshot holds them all again, and expiry can
never take the last record of a partition.

Commit times come from each writer's clock; the bound is the oldest commit time of the
kept part of the history, so a snapshot committed by a host whose clock lags is kept too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from actors.sinks.spark.ledger import Stream
from actors.tables.snapshots import Snapshot, offsets


@dataclass(frozen=True, slots=True)
class Keep:
    """A snapshot maintenance must not expire, and why (one line for the operator)."""

    snapshot: int
    why: str


def offset_keeps(history: Sequence[Snapshot],
                 committed: Mapping[Stream, int | None]) -> list[Keep]:
    """The snapshots of a staging table's ``history`` (newest first) whose offsets are
    ahead of Kafka's ``committed`` ones: per partition, the newest snapshot recording
    the table's offset, when that offset is past the group's committed offset (or the
    group has none)."""
    keeps: list[Keep] = []
    for stream, held in sorted(offsets(history).items()):
        done = committed.get(stream)
        if done is not None and done >= held:
            continue
        holder = next(s for s in history if s.offsets.get(stream) == held)
        group, topic, partition = stream
        keeps.append(Keep(holder.id, f"holds {topic}[{partition}] up to offset {held}, "
                                     f"group {group}'s committed offset is "
                                     f"{'none' if done is None else done}"))
    return keeps


@dataclass(frozen=True, slots=True)
class Bound:
    """Where expiry stops: ``older_than_ms`` (snapshots committed before it may go, the
    newest ``retain_last`` stay) and how many of the history that expires."""

    older_than_ms: int
    retain_last: int
    expires: int
    kept: tuple[Keep, ...]


def bound(history: Sequence[Snapshot], keeps: Iterable[Keep], now_ms: int,
          max_age_s: float, min_keep: int) -> Bound:
    """The expiry bound of a table's current ``history`` (newest first): older than
    ``max_age_s`` and older than every snapshot from the newest down to the oldest of
    ``keeps`` (those not in the history are ignored), keeping at least ``min_keep``."""
    older_than = now_ms - int(max_age_s * 1000)
    ids = [s.id for s in history]
    kept = tuple(k for k in keeps if k.snapshot in ids)
    if kept:
        oldest = max(ids.index(k.snapshot) for k in kept)
        older_than = min(older_than, *(s.committed_ms for s in history[:oldest + 1]))
    retained = 0
    for snapshot in history:  # Iceberg's walk (RemoveSnapshots): stop at the first to go
        if retained < min_keep or snapshot.committed_ms >= older_than:
            retained += 1
        else:
            break
    return Bound(older_than, min_keep, len(history) - retained, kept)


def missing(history: Sequence[Snapshot]) -> dict[Stream, int]:
    """What the table holds per partition (all of it) when its current snapshot (the
    head of ``history``) does not record it all, else nothing: a compaction's or a
    manifest rewrite's snapshot records no offsets."""
    if not history:
        return {}
    held = offsets(history)
    current = history[0].offsets
    return held if any(current.get(s, -1) < o for s, o in held.items()) else {}


__all__ = ["Bound", "Keep", "bound", "missing", "offset_keeps"]
