"""Per-partition tracking of which offsets are safe to commit.

Work for a partition is registered in offset order as *entries* (one per batch handed
to the sink). The sink acknowledges entries when their rows are durable, possibly out of
order (several requests in flight). The committable offset of a partition is the
``next_offset`` of the longest prefix of acknowledged entries: only contiguous finished
work is ever committed, always as next-offset (last processed + 1).

In savepoint mode only entries flagged ``savepoint`` move the committable offset.
The tracker is owned by one worker and touched only from its event loop.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from aiokafka import TopicPartition


@dataclass(slots=True, eq=False)
class Entry:
    """A unit of work of one partition: messages up to ``next_offset - 1``."""

    tp: TopicPartition
    next_offset: int
    count: int
    savepoint: bool = False
    done: bool = False


@dataclass(slots=True)
class _PartitionState:
    pending: deque[Entry] = field(default_factory=deque)
    committable: int | None = None
    committed: int | None = None


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
        entry.done = True
        state = self._parts.get(entry.tp)
        if state is None:  # partition was revoked meanwhile: nothing to advance
            return
        pending = state.pending
        while pending and pending[0].done:
            head = pending.popleft()
            if head.savepoint or not self._savepoint_only:
                state.committable = head.next_offset

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

    def forget(self, tps: set[TopicPartition] | frozenset[TopicPartition]) -> None:
        """Drop the state of revoked partitions; late acks for them are ignored."""
        for tp in tps:
            self._parts.pop(tp, None)
