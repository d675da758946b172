"""Per-partition tracking of which offsets are safe to commit.

Work for a partition is registered in offset order as *entries* (one per batch handed
to the sink). The sink acknowledges entries when their rows are durable, possibly out of
order (several requests in flight). The committable offset of a partition is the
``next_offset`` of the longest prefix of acknowledged entries: only contiguous finished
work is ever committed, always as next-offset (last processed + 1).

In savepoint mode only entries flagged ``savepoint`` move the committable offset.
When a partition has no pending work and the consumer position is past its last entry
(a transaction's commit marker follows the last record), :meth:`OffsetTracker.advance`
moves the committable offset to the position. It never moves backwards.

On revoke, :meth:`OffsetTracker.cancel` cancels the partition's pending entries (the
sink drops them, see :class:`actors.sinks.Fence`) and forgets the partition.
The tracker is owned by one worker and touched only from its event loop.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # aiokafka is not loaded by the modules that only name it
    from aiokafka import TopicPartition


class OffsetView(Protocol):
    """What the worker's other parts may read of the offsets (never change)."""

    def pending_count(self, tp: TopicPartition | None = None) -> int: ...
    def committed(self, tp: TopicPartition) -> int | None: ...
    def committable(self, tp: TopicPartition) -> int | None: ...
    def lag_base(self, tp: TopicPartition) -> int | None: ...
    def to_commit(self) -> dict[TopicPartition, int]: ...


@dataclass(slots=True, eq=False)
class Entry:
    """A unit of work of one partition: messages up to ``next_offset - 1``."""

    tp: TopicPartition
    next_offset: int
    count: int
    savepoint: bool = False
    done: bool = False
    cancelled: bool = False  # its partition was revoked: never written, never acked
    behind: bool = False  # more of its partition waited in Kafka when it was shipped
    lag: int = 0  # how many offsets of its partition were past it then (its high-water mark)


@dataclass(slots=True)
class _PartitionState:
    pending: deque[Entry] = field(default_factory=deque)
    committable: int | None = None
    committed: int | None = None
    acked: int | None = None  # next_offset of the last acked entry (savepoint or not)
    # The lowest offset the worker was seen to read from (a fetched record, a consumer
    # position) while the partition had no committable and no committed offset: the
    # lag's base then (:meth:`OffsetTracker.lag_base`). Never committed.
    started: int | None = None


class OffsetTracker:
    """Tracks pending and finished work per partition; answers what may be committed."""

    def __init__(self, *, savepoint_only: bool = False) -> None:
        self._parts: dict[TopicPartition, _PartitionState] = {}
        self._savepoint_only = savepoint_only

    def add(self, tp: TopicPartition, next_offset: int, count: int, *, savepoint: bool = False
            ) -> Entry:
        """Register work for ``tp`` ending just before ``next_offset`` (in offset order)."""
        entry = Entry(tp, next_offset, count, savepoint)
        self._parts.setdefault(tp, _PartitionState()).pending.append(entry)
        return entry

    def ack(self, entry: Entry) -> None:
        """Mark ``entry`` durable and advance the partition's committable offset."""
        if entry.cancelled:  # its partition was revoked: its offsets are not ours
            return
        entry.done = True
        state = self._parts.get(entry.tp)
        if state is None:  # partition was revoked meanwhile: nothing to advance
            return
        pending = state.pending
        while pending and pending[0].done:
            head = pending.popleft()
            state.acked = head.next_offset
            if head.savepoint or not self._savepoint_only:
                state.committable = max(head.next_offset, state.committable or 0)

    def seed(self, tp: TopicPartition, committed: int) -> None:
        """The group's committed offset of a just assigned partition (known before any
        work of it is done): the lag's base until the partition's own work moves it."""
        state = self._parts.setdefault(tp, _PartitionState())
        if state.committed is None:
            state.committed = committed
        if state.committable is None:
            state.committable = committed

    def start_at(self, tp: TopicPartition, offset: int, committed: int | None) -> None:
        """``tp`` was sought to ``offset`` before any of its work (``start_from``): the
        offset is committable (backwards too); ``committed`` is the group's until then."""
        self._parts[tp] = _PartitionState(committable=offset, committed=committed)

    def note_start(self, tp: TopicPartition, offset: int) -> None:
        """The worker reads ``tp`` from ``offset`` (a record it fetched, or its consumer
        position): the lag's base while the partition has no committable and no
        committed offset (a fresh group), so that work stuck from the first batch on
        has lag. The lowest offset noted wins (a position read after a fetch is past
        the records fetched). Not committable: nothing is committed for it."""
        state = self._parts.setdefault(tp, _PartitionState())
        if state.started is None or offset < state.started:
            state.started = offset

    def lag_base(self, tp: TopicPartition) -> int | None:
        """The offset ``tp``'s lag counts from: the committable one (everything before
        it done), else the group's committed one, else where the worker started reading
        (:meth:`note_start`); None when none is known."""
        state = self._parts.get(tp)
        if state is None:
            return None
        for base in (state.committable, state.committed, state.started):
            if base is not None:
                return base
        return None

    def advance(self, tp: TopicPartition, position: int) -> bool:
        """Everything of ``tp`` before the consumer ``position`` is done: the position
        becomes committable (past a transaction marker). Only when nothing is pending,
        the partition has a known offset, and (savepoint mode) the last acked work was
        a savepoint. True when the committable offset moved."""
        state = self._parts.get(tp)
        if state is None or state.pending or state.committable is None:
            return False
        if self._savepoint_only and state.acked is not None and state.acked != state.committable:
            return False
        if position <= state.committable:
            return False
        state.committable = position
        return True

    def pending_count(self, tp: TopicPartition | None = None) -> int:
        """Unacknowledged entries of ``tp`` (or of every partition)."""
        if tp is not None:
            state = self._parts.get(tp)
            return len(state.pending) if state else 0
        return sum(len(s.pending) for s in self._parts.values())

    def to_commit(self) -> dict[TopicPartition, int]:
        """Offsets that advanced since the last :meth:`mark_committed`."""
        return {
            tp: s.committable
            for tp, s in self._parts.items()
            if s.committable is not None and s.committable != s.committed
        }

    def mark_committed(self, offsets: dict[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            state = self._parts.get(tp)
            if state is not None:
                state.committed = offset

    def committed(self, tp: TopicPartition) -> int | None:
        state = self._parts.get(tp)
        return state.committed if state else None

    def committable(self, tp: TopicPartition) -> int | None:
        state = self._parts.get(tp)
        return state.committable if state else None

    def cancel(self, tps: set[TopicPartition]) -> int:
        """Cancel the pending entries of revoked partitions and forget them; returns the
        number of messages cancelled (they are neither written nor committed here)."""
        count = 0
        for tp in tps:
            state = self._parts.pop(tp, None)
            if state is None:
                continue
            for entry in state.pending:
                if not entry.done:
                    entry.cancelled = True
                    count += entry.count
        return count

    def forget(self, tps: set[TopicPartition] | frozenset[TopicPartition]) -> None:
        """Drop the state of revoked partitions; late acks for them are ignored."""
        for tp in tps:
            self._parts.pop(tp, None)
