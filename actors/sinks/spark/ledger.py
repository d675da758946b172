"""Which Kafka offsets a staging table holds: the ledger of one table's writer.

Every append to an Iceberg staging table commits, in the same Iceberg commit, how far each
Kafka partition it covers is done (the snapshot property ``kstage.offsets``, see
:mod:`actors.sinks.spark.iceberg`). "Done up to W" means: every message of the partition
before offset W has its rows in the table, or has none (filtered, dead-lettered, or its
processor made no row). A worker assigned the partition later resumes there (the table
is ahead of Kafka's committed offset only when a process died between its table commit
and its Kafka commit), and the table's writer drops rows of messages before W that reach
it again (a replay for another sink of a fan-out, a rewind): nothing is written twice.

For that to hold, an append must never commit a batch of a partition while an earlier
batch of it is not in the table: after a failed append the batches it held come back
(their writes are retried), and a later batch must not overtake them. The ledger knows,
per *stream* (group, topic, partition), the batches handed to the writer, in offset order
(each batch is its worker's work entry, :class:`Batch`), and which are done:

* :meth:`OffsetLedger.register`: a write of the batch started (every write of a worker
  starts in its offset order; a retry registers nothing new);
* :meth:`OffsetLedger.finished`: the batch has no row for the table (done at once);
* :meth:`OffsetLedger.eligible`: may the batch be appended now? Only if it is not
  cancelled and every earlier batch of its stream is done or in the same append; a
  cancelled earlier batch (its partition revoked) is never done here: it holds every
  later batch of its stream back until the stream is forgotten (those batches are
  cancelled too, and the new owner writes them all);
* :meth:`OffsetLedger.committed`: the append holding these batches was committed;
* :meth:`OffsetLedger.watermarks`: what an append of these batches records;
* :meth:`OffsetLedger.forget`: the streams were revoked (their batches are cancelled).

Owned by one table writer; touched only from the event loop.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Protocol

Stream = tuple[str, str, int]
"""(group id, topic, partition)."""


class Batch(Protocol):
    """A worker's batch as a table sees it: its partition and the offset after its last
    message (:class:`actors.offsets.Entry` is one)."""

    @property
    def next_offset(self) -> int: ...

    @property
    def cancelled(self) -> bool: ...


class OffsetLedger:
    """The batches of each stream handed to one table writer, in offset order."""

    def __init__(self) -> None:
        # per stream: (next_offset, batch) of the batches not yet done, in offset order
        self._open: dict[Stream, list[tuple[int, int]]] = {}
        self._batches: dict[int, Batch] = {}
        self._stream_of: dict[int, Stream] = {}

    def register(self, stream: Stream, batch: Batch) -> None:
        """A write of ``batch`` of ``stream`` started (idempotent)."""
        key = id(batch)
        if key in self._batches:
            return
        self._batches[key] = batch
        self._stream_of[key] = stream
        bisect.insort(self._open.setdefault(stream, []), (batch.next_offset, key))

    def finished(self, batch: Batch) -> None:
        """``batch`` is done without an append (no row for the table)."""
        self._done(id(batch))

    def committed(self, batches: Iterable[Batch]) -> None:
        """The append holding ``batches`` was committed: they are done."""
        for batch in batches:
            self._done(id(batch))

    def _done(self, key: int) -> None:
        stream = self._stream_of.pop(key, None)
        batch = self._batches.pop(key, None)
        if stream is None or batch is None:
            return
        pending = self._open.get(stream)
        if pending is None:
            return
        index = bisect.bisect_left(pending, (batch.next_offset, key))
        if index < len(pending) and pending[index][1] == key:
            del pending[index]
        if not pending:
            del self._open[stream]

    def eligible(self, batch: Batch, taken: set[int]) -> bool:
        """Whether ``batch`` may be appended with the batches ``taken`` (ids): it is not
        cancelled, and every earlier batch of its stream is done, or taken. A cancelled
        earlier batch (its partition revoked) is not done: it was not written, and a
        later batch passing it would record offsets past rows the table lacks."""
        if batch.cancelled:
            return False
        key = id(batch)
        stream = self._stream_of.get(key)
        if stream is None:
            return True  # not registered (a writer used without offsets)
        for _, other in self._open.get(stream, ()):
            if other == key:
                return True
            earlier = self._batches.get(other)
            if earlier is None or earlier.cancelled or other not in taken:
                return False
        return True

    def stream_of(self, batch: Batch) -> Stream | None:
        """The stream ``batch`` is registered with (None: not registered, or its stream
        was forgotten since)."""
        key = id(batch)
        return self._stream_of.get(key) if self._batches.get(key) is batch else None

    def watermarks(self, batches: Iterable[Batch]) -> dict[Stream, int]:
        """Per stream, the offset up to which an append of ``batches`` (all eligible)
        leaves the stream done: the highest ``next_offset`` among them."""
        found: dict[Stream, int] = {}
        for batch in batches:
            stream = self._stream_of.get(id(batch))
            if stream is not None:
                found[stream] = max(found.get(stream, 0), batch.next_offset)
        return found

    def forget(self, streams: Iterable[Stream]) -> None:
        """The streams were revoked: their open batches are dropped."""
        for stream in streams:
            for _, key in self._open.pop(stream, ()):
                self._batches.pop(key, None)
                self._stream_of.pop(key, None)

    def open_batches(self, stream: Stream) -> list[Batch]:
        """The batches of ``stream`` registered and not done, in offset order."""
        return [self._batches[key] for _, key in self._open.get(stream, ())
                if key in self._batches]

    def open_count(self, stream: Stream) -> int:
        """Batches of ``stream`` registered and not done (for tests and repr)."""
        return len(self._open.get(stream, ()))


__all__ = ["Batch", "OffsetLedger", "Stream"]
