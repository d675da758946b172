"""Exactly once per Kafka partition for a table writer that stores its offsets with its
rows: what the Iceberg staging writer (:mod:`actors.sinks.spark.staging`) and the JDBC
append writer (:mod:`actors.sinks.jdbc_append`) share.

:class:`ExactlyOnceWriter` keeps, per *stream* (group, topic, partition) it owns (from
:meth:`~ExactlyOnceWriter.load_floors` to :meth:`~ExactlyOnceWriter.forget`), an
ownership token and three positions: the *floor* (the table's offset read at assignment:
rows before it are dropped by the sink), *landed* (the end of its last append known in
the table, the floor at first: rows of a part before it are cut when the part is taken)
and *next* (where its next append continues from, the compare-and-set's expectation:
advanced when an append is handed over, back to *landed* when one fails). Its batches are
ordered by the ledger (:mod:`actors.sinks.spark.ledger`); its running appends are
:class:`Flight` s.

What each writer supplies (the abstract methods): how it reads the table's offsets
(:meth:`~ExactlyOnceWriter._table_offsets`), how it cuts a part to an offset
(:meth:`~ExactlyOnceWriter._cut`), and the error a write it will not append fails with
(:meth:`~ExactlyOnceWriter._not_written`).

No pyspark here.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from actors.errors import SinkError
from actors.sinks.spark.ledger import OffsetLedger, Stream
from actors.sinks.table.batching import Pending, TableWriter


@dataclass(slots=True, eq=False)
class Flight:
    """One append handed over to the writer's thread: its batches and streams, the running
    appends of the same streams it follows, the offsets it records per stream, where it
    continues each from (``expected``), under which ownership of each (``owners``);
    ``failed`` once it did (a later append of its streams then fails without writing)."""

    batches: list[Any]
    streams: set[Stream]
    after: list[Any]  # the Flights before it
    offsets: dict[Stream, int] = field(default_factory=dict)
    expected: dict[Stream, int] = field(default_factory=dict)
    owners: dict[Stream, object] = field(default_factory=dict)
    failed: bool = False


class ExactlyOnceWriter(TableWriter, abc.ABC):
    """A :class:`TableWriter` whose appends record the Kafka offsets they cover (see the
    module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ledger = OffsetLedger()
        self._floors: dict[Stream, int] = {}
        self._landed: dict[Stream, int] = {}
        self._next: dict[Stream, int] = {}
        self._owner: dict[Stream, object] = {}  # a token per ownership of the stream
        self._appends: list[Any] = []  # running Flights, in the writer thread's order

    # -- what each writer supplies ---------------------------------------------------

    @abc.abstractmethod
    async def _table_offsets(self, streams: set[Stream]) -> dict[Stream, int]:
        """The offsets the table holds for ``streams`` (those it holds none for left
        out); SinkError when it cannot be read."""

    @abc.abstractmethod
    def _cut(self, item: Pending, landed: int) -> None:
        """Keep only the rows of ``item``'s part at or after Kafka offset ``landed``
        (setting ``item.part`` and ``item.rows``)."""

    @abc.abstractmethod
    def _not_written(self, why: str) -> SinkError:
        """The error of a write this writer will not append, and why."""

    # -- positions ---------------------------------------------------------------------

    async def load_floors(self, streams: Iterable[Stream]) -> dict[Stream, int]:
        """Read the table's offsets of ``streams`` (assigned to a worker of this
        process): rows of messages before them are dropped from now on, and this
        writer's appends of a stream not yet owned continue from there (a stream owned
        already keeps its positions: its appends may be under way). SinkError when the
        table cannot be read (the caller retries)."""
        wanted = set(streams)
        found = await self._table_offsets(wanted)
        floors = {stream: offset for stream, offset in found.items() if stream in wanted}
        for stream in wanted:
            if stream not in self._owner:
                offset = floors.get(stream, 0)
                self._floors[stream] = self._landed[stream] = self._next[stream] = offset
                self._owner[stream] = object()
        return floors

    def floor(self, stream: Stream) -> int | None:
        """The offset before which ``stream``'s messages are in the table (None: not
        read since the partition was assigned)."""
        return self._floors.get(stream)

    def _disown(self, stream: Stream) -> None:
        for positions in (self._floors, self._landed, self._next, self._owner):
            positions.pop(stream, None)

    def forget(self, streams: Iterable[Stream]) -> None:
        """The streams were revoked from this process's worker: their positions and
        batches are dropped, and an append of them not yet written refuses to write."""
        streams = list(streams)
        for stream in streams:
            self._disown(stream)
        self.ledger.forget(streams)
        self.forget_behind(streams)

    async def wait_appends(self, streams: Iterable[Stream], within_s: float) -> bool:
        """Wait (up to ``within_s``) until no running append holds a batch of
        ``streams``; False when one still runs (the revoke then lets it finish alone)."""
        wanted = set(streams)
        deadline = time.monotonic() + within_s
        while any(a.streams & wanted for a in self._appends):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def running(self, streams: Iterable[Stream]) -> int:
        """How many running appends hold a batch of ``streams``."""
        wanted = set(streams)
        return sum(bool(a.streams & wanted) for a in self._appends)

    def register_batch(self, stream: Stream, batch: Any) -> None:
        """A write of the worker's ``batch`` of ``stream`` started (in offset order)."""
        self.ledger.register(stream, batch)

    def finished(self, batch: Any) -> None:
        """``batch`` has no row for the table: done."""
        self.ledger.finished(batch)

    # -- taking and handing over -------------------------------------------------------

    def _take_owned(self) -> list[Pending]:
        """The pending parts whose partitions' earlier batches are in the table, in a
        running append (that has not failed), or taken with them; the others wait.

        A part of a cancelled batch (its partition revoked) or of a stream this writer
        no longer owns (forgotten, or its positions unknown after a refusal) is never
        appended: its write fails (retriable; a revoked one is not retried). A part is
        cut to the rows at or after its stream's *landed* position: wholly before it
        (the table holds its messages: another writer's appends read after a refusal),
        its batch is done without an append."""
        ids = {id(b) for a in self._appends if not a.failed for b in a.batches}
        taken: list[Pending] = []
        dropped: list[tuple[Pending, str]] = []
        done: list[Pending] = []
        order = sorted(self._pending, key=lambda p: (
            p.batch is None, p.stream or ("", "", 0), getattr(p.batch, "next_offset", 0)))
        for item in order:
            batch = item.batch
            if batch is None:
                taken.append(item)
                continue
            if batch.cancelled:
                dropped.append((item, "its partition was revoked"))
                continue
            stream = self.ledger.stream_of(batch)
            if stream is None or stream not in self._owner:
                dropped.append((item, "its partition is no longer this writer's, or "
                                      "where the table holds it is not known"))
                continue
            if not self.ledger.eligible(batch, ids):
                continue
            ids.add(id(batch))
            landed = self._landed[stream]
            self._cut(item, landed)
            if batch.next_offset <= landed or not item.rows:
                done.append(item)  # its rows are in the table (its other messages had none)
                continue
            taken.append(item)
        chosen = {id(item) for item in (*taken, *done)} | {id(i) for i, _ in dropped}
        self._pending = [p for p in self._pending if id(p) not in chosen]
        for item in done:  # in the table already: done without an append
            self.finished(item.batch)
            if not item.future.done():
                item.future.set_result(None)
        for item, why in dropped:
            if not item.future.done():
                item.future.set_exception(self._not_written(why))
        return taken

    def _owned(self, batch: list[Pending]) -> list[Pending]:
        """The parts of ``batch`` (taken by :meth:`_take_owned`) whose batches are still
        not cancelled and whose streams this writer still owns (a revoke may have run
        between the take and the flush's start); the writes of the others fail."""
        kept = []
        for item in batch:
            b = item.batch
            if b is None or (not b.cancelled and self.ledger.stream_of(b) is not None
                             and item.stream in self._owner):
                kept.append(item)
            elif not item.future.done():
                item.future.set_exception(self._not_written("its partition was revoked"))
        return kept

    def _hand_over(self, flight: Flight) -> None:
        """``flight`` goes to the writer's thread: its streams' next append continues
        after it."""
        for stream, end in flight.offsets.items():
            self._next[stream] = max(self._next[stream], end)
        self._appends.append(flight)

    def _mine(self, flight: Flight) -> list[Stream]:
        """The streams of ``flight`` still owned as they were when it was handed over."""
        return [s for s in flight.offsets if self._owner.get(s) is flight.owners[s]]

    def _landed_with(self, flight: Flight) -> None:
        """``flight`` is in the table: its streams still owned landed at its ends."""
        for stream in self._mine(flight):
            self._landed[stream] = max(self._landed[stream], flight.offsets[stream])

    async def _read_again(self, streams: list[Stream]) -> dict[Stream, int] | Exception:
        """An append of ``streams`` was refused (another writer moved them): forget
        their positions and read the table's offsets again (the retries drop the rows
        the table holds); the offsets read, or the exception (read at the retries)."""
        for stream in streams:
            self._disown(stream)
        try:
            return await self.load_floors(streams) if streams else {}
        except Exception as exc:  # noqa: BLE001 - read again at the retry's write
            return exc


def held(floors: dict[Stream, int], streams: list[Stream]) -> str:
    """``topic[partition]@offset`` of each of ``streams`` (for the logs)."""
    return ", ".join(f"{t}[{p}]@{floors.get((g, t, p), 0)}" for g, t, p in streams)
