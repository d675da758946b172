"""Micro-batching of one table's rows: :class:`TableWriter` gathers what every sink of the
process writes to the table and flushes it in batches.

A sink hands over a *part* (what :meth:`TableWriter.convert` made of its rows: an Arrow
record batch for Spark, a list of tuples for JDBC; anything with a ``len``) and waits on
:meth:`TableWriter.write` until the flush holding it is durable.

Backlog or caught up: each part's position says whether its partition was *behind* when
the worker shipped it (:attr:`actors.sinks.base.Position.behind`: the partition's
high-water mark was past the batch), and a writer used without positions is told by its
caller (:meth:`TableWriter.hold_flushes`: ``kstage dlq replay`` hands over every letter first).
While the partitions whose rows wait here are behind (the newest part of each decides) by
enough to fill an append with the pending rows (their lags, ``Position.lag``, counted a
row a message, and the pending rows make ``max_rows``, or at the
pending rows' average size ``max_bytes``: :meth:`TableWriter.behind`), the ``min_rows``
and ``idle_s`` flushes do not fire: rows gather into one append of the backlog size
(``max_rows`` rows or ``max_bytes`` bytes, :meth:`TableWriter.part_bytes`), cut by
``max_interval_s`` or a worker at its ``max_in_flight`` (:meth:`TableWriter.flush_soon`).
Behind by less (a process a second behind after a stall; a backlog's last append's
worth), or once every one is caught up, the rows are flushed as caught up (with
``min_rows`` 1, the default, as soon as no flush of the table runs): they could not fill
a backlog's append, and waiting for one would only make them older. A
partition's batch without rows for the table still says whether it caught up. Each flush
logs (DEBUG) what started it: ``size``, ``caught up``, ``interval``, ``idle``,
``rested`` or ``flush_soon``.

A flush starts when ``max_rows`` rows (or ``max_bytes`` bytes) are pending,
``max_interval_s`` passed since the first pending row, ``min_rows`` are pending while no
flush of the table runs and none is behind (a busy table keeps its writer busy and
flushes grow with the load), the oldest pending row waited ``idle_s`` while no
flush of the table runs (a quiet table is written within about ``idle_s`` rather than
the interval, and its writer is busy at most about one flush per ``idle_s``), or a worker
cannot send more rows (:meth:`TableWriter.flush_soon`, at its ``max_in_flight``).

The pace of the flushes of caught-up rows follows what they cost (the staging appends:
:mod:`actors.sinks.spark.staging`). The writer measures its latency *L*: an average
weighted toward the newest (:data:`LATENCY_WEIGHT`) of the durations of the flushes that
held no backlog's rows (:meth:`TableWriter.took`), and their spread *S*: the same
average of each one's distance from *L*. After such flushes end, a flush that
``min_rows`` starts rests first, :func:`rest` seconds:
``max(freshness_s - 2 (L + 2 S), rest_ratio * C, 0)``, *C* the CPU seconds a flush costs
the process when the writer measures it (the same average; else *L*). A row that arrives
right after a flush started waits for it, the rest and its own flush: at most
``freshness_s`` while flushes take no more than *L* + 2 *S* and that stays below half of
it (appends rest, fewer and larger, as long as the freshness allows; flushes whose
duration varies rest less); above,
flushes go back to back and a row's wait grows with the latency, about 2 *L*, never with
more flushes. ``rest_ratio`` keeps a rest of at least that many times *C* (a writer whose
every flush costs the process CPU keeps a share of it free; a flush that mostly waits on
a remote catalog costs little of it, and its wait calls for no rest). There is no rest after
flushes that held a backlog's rows (they took long for their size, and the first rows
caught up after them go at once), and none on a quiet table: a row that comes after
the rest is over goes at once. The oldest waiting row having waited ``idle_s`` ends a
rest (the rest never holds a row longer than that while no flush runs);
``max_rows``, ``max_interval_s`` and :meth:`TableWriter.flush_soon` do not wait for one.

``max_per_s`` caps the flushes that are not full: none started by caught-up rows, a rest's
end, ``idle_s`` or ``max_interval_s`` starts less than 1/``max_per_s`` seconds after the
previous flush started (it is put off until then). A full flush is not held (``max_rows``
or ``max_bytes`` reached, or :meth:`TableWriter.flush_soon`: a worker's window full):
it is as large as flushes get, so full ones come no faster than the rows do, and holding
one would let it grow past the bounds.
:attr:`TableWriter.interval` is the time between the starts of caught-up flushes the
writer aims at, *L* plus the rest, at least 1/``max_per_s``.

How a flush writes is the subclass's: :meth:`TableWriter._flush` resolves the future of
every part it was given (a result once the part is durable, the error otherwise). Which of
the pending parts a flush takes is the subclass's too (:meth:`TableWriter._take`; all of
them by default): the Spark writer holds back a part whose partition has an earlier batch
not yet written (:mod:`actors.sinks.spark.ledger`). Each part may carry what it belongs to
(:class:`Pending`: the worker's batch and its stream). The Spark writer is
:class:`actors.sinks.spark.staging.StagingWriter`, the JDBC one
:class:`actors.sinks.jdbc_append.JdbcTableWriter`.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.errors import SinkError
from actors.sinks.table.columns import COORDINATES
from processors.base import Column, Row

logger = logging.getLogger(__name__)

LATENCY_WEIGHT = 0.3
"""The weight of the newest flush in the measured latency (an exponentially weighted
moving average: a change of the catalog's latency shows within a few flushes, one slow
flush moves it by this share)."""

SPREAD_WEIGHT = 2.0
"""How many spreads (the flushes' mean deviation from the latency) above the latency the
rest makes room for: a row's worst wait stays within the target while the flushes around
it are no slower than that (TCP's retransmission timer makes room for 4 of its round
trips' deviations; two cover about 19 flushes in 20 of a normal spread, and a row's wait
spans two flushes)."""

_EARLY_S = 1e-3  # a timer may fire this much before its time (the loop's clock resolution)
_FULL = ("size", "flush_soon")  # flushes the cap (max_per_s) never holds


def _averaged(average: float | None, new: float) -> float:
    """``average`` moved toward ``new`` by :data:`LATENCY_WEIGHT` (``new`` when none yet)."""
    return new if average is None else LATENCY_WEIGHT * new + (1 - LATENCY_WEIGHT) * average


def rest(latency: float, freshness_s: float | None, rest_ratio: float = 0.0,
         cpu: float | None = None, spread: float = 0.0) -> float:
    """The rest between flushes of caught-up rows that take ``latency`` seconds, give or
    take ``spread`` (their mean deviation): what keeps a row's worst wait (the flush
    running when it came, the rest, its own flush) at or under ``freshness_s`` (None: no
    such aim) for flushes that take up to :data:`SPREAD_WEIGHT` spreads longer than the
    latency, at least ``rest_ratio`` times the CPU seconds a flush costs the process,
    ``cpu`` (None: not measured, the latency stands for it). A flush that mostly waits (a
    remote catalog's commit) rests for its CPU, not for its wait."""
    slow = latency + SPREAD_WEIGHT * spread
    aimed = 0.0 if freshness_s is None else freshness_s - 2 * slow
    return max(aimed, rest_ratio * (latency if cpu is None else cpu), 0.0)


def interval(latency: float, freshness_s: float | None, rest_ratio: float = 0.0,
             max_per_s: float | None = None, cpu: float | None = None,
             spread: float = 0.0) -> float:
    """The time between the starts of flushes of caught-up rows that take ``latency``
    seconds (give or take ``spread``; ``cpu`` of it the process's: :func:`rest`): the
    latency and the rest, at least 1/``max_per_s``."""
    paced = latency + rest(latency, freshness_s, rest_ratio, cpu, spread)
    return paced if max_per_s is None else max(paced, 1 / max_per_s)


class RowsRefused(SinkError):
    """A flush found rows the table refuses for good and wrote nothing (they were taken
    off their parts into :meth:`TableWriter.refused`): the sink dead-letters them, then
    writes the others at once (the JDBC append, whose offsets move with its rows)."""


@dataclass(slots=True, eq=False)
class Pending:
    """A part waiting for a flush: the rows (:meth:`TableWriter.convert`'s part), the
    future its writer waits on, and the worker's batch and stream it belongs to (None for a
    writer used without offsets)."""

    part: Any
    future: asyncio.Future[None]
    batch: Any = None
    stream: Any = None
    rows: int = field(init=False)
    size: int = 0  # bytes (TableWriter.part_bytes)
    behind: bool = False  # a backlog's: its partition was behind, or flushes were held

    def __post_init__(self) -> None:
        self.rows = len(self.part)


class TableWriter(abc.ABC):
    """Buffers the rows of one table from every sink of the process; flushes in batches.

    Args:
        table: the table's name.
        columns: the processor's declared columns (the Kafka coordinates follow them).
        max_rows: flush at this many pending rows.
        max_bytes: flush at this many pending bytes (:meth:`part_bytes`; None: no bound).
        min_rows: flush at this many pending rows when no flush of the table runs
            (capped at ``max_rows``).
        max_interval_s: longest wait of a pending row.
        idle_s: longest wait of a pending row while no flush of the table runs (None, or
            not below ``max_interval_s``: no such flush).
        rest_ratio: the least rest of a ``min_rows`` flush, in times the measured
            latency (0: none).
        freshness_s: the worst wait of a caught-up row the rests aim at (None: no rest
            but ``rest_ratio``'s).
        max_per_s: the most flushes started a second (None: no cap).
    """

    times_flushes = True
    """The writer measures each flush's duration itself; False: the subclass reports the
    duration of each flush that wrote something (:meth:`took`), and only those count."""

    def __init__(self, table: str, columns: tuple[Column, ...], *, max_rows: int,
                 min_rows: int, max_interval_s: float, idle_s: float | None = None,
                 rest_ratio: float = 0.0, max_bytes: int | None = None,
                 freshness_s: float | None = None, max_per_s: float | None = None) -> None:
        self.table = table
        self.columns = columns
        self.flushes = 0
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.min_rows = min(min_rows, max_rows)
        self.max_interval_s = max_interval_s
        self.idle_s = idle_s if idle_s is not None and idle_s < max_interval_s else None
        self._all = (*columns, *COORDINATES)
        self._running = 0  # flushes started and not finished
        self._soon = False  # flush what is pending as soon as the running flushes end
        self._pending: list[Pending] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        # The partitions (streams; None: parts without one) whose newest part came while
        # they were behind, each with its lag then, and how many callers hold the flushes
        # of parts without a position (hold()).
        self._behind: dict[Any, int] = {}
        self._holds = 0
        self._timer: asyncio.TimerHandle | None = None
        self._first_at = 0.0  # loop time at which the oldest pending part arrived
        self._idle: asyncio.TimerHandle | None = None  # idle_s after _first_at
        self._tasks: set[asyncio.Task[None]] = set()
        self.rest_ratio = rest_ratio
        self.freshness_s = freshness_s
        self.max_per_s = max_per_s
        self.latency: float | None = None  # the measured latency (None: no flush yet)
        self.cpu: float | None = None  # the CPU seconds of a flush, when measured (took)
        self.spread = 0.0  # the flushes' mean deviation from the latency (took)
        self._busy_backlog = False  # a running flush holds rows of a backlog (no rest after)
        self._rest_until = 0.0  # loop time before which min_rows/idle_s flushes wait
        self._rest: asyncio.TimerHandle | None = None  # at _rest_until
        self._started_at = -float("inf")  # loop time at which the last flush started
        self._capped: asyncio.TimerHandle | None = None  # a flush put off by max_per_s
        self._capped_reasons: set[str] = set()  # what asked for it
        self._flush_started: dict[asyncio.Task[None], tuple[float, bool]] = {}

    @property
    def interval(self) -> float | None:
        """The time between the starts of caught-up flushes the writer aims at (the
        measured latency and the rest; None before a flush of caught-up rows)."""
        if self.latency is None:
            return None
        return interval(self.latency, self.freshness_s, self.rest_ratio, self.max_per_s,
                        self.cpu, self.spread)

    def took(self, seconds: float, backlog: bool, cpu: float | None = None) -> None:
        """A flush took ``seconds``, ``cpu`` of them the process's CPU when the writer
        measures it; ``backlog``: it held a backlog's rows (not counted in the latency:
        it took long for its size)."""
        if backlog:
            return
        if self.latency is not None:
            self.spread = _averaged(self.spread, abs(seconds - self.latency))
        self.latency = _averaged(self.latency, seconds)
        if cpu is not None:
            self.cpu = _averaged(self.cpu, cpu)

    @abc.abstractmethod
    def convert(self, rows: Sequence[Row]) -> tuple[Any, list[tuple[Row, str]]]:
        """The rows that fit the declared columns as one part, and the rows that do not,
        each with the reason naming the row and the column."""

    def part_bytes(self, part: Any) -> int:
        """The bytes a part holds, for ``max_bytes``. Default: 0 (rows alone bound a
        flush)."""
        return 0

    @property
    def behind(self) -> bool:
        """The partitions whose rows wait here are behind by enough to fill a backlog-size
        append with what is pending (:meth:`_backlog`), or a caller holds the flushes: the
        rows gather into one."""
        return self._holds > 0 or (bool(self._behind) and self._backlog())

    def _backlog(self) -> bool:
        """What waits in Kafka behind the pending rows' partitions (their lags, a message
        a row, each as large as the pending rows on average) and the pending rows make
        an append of ``max_rows`` rows or ``max_bytes`` bytes."""
        waiting = sum(self._behind.values())
        if self._pending_rows + waiting >= self.max_rows:
            return True
        if self.max_bytes is None or not self._pending_rows:
            return False
        per_row = self._pending_bytes / self._pending_rows
        return self._pending_bytes + waiting * per_row >= self.max_bytes

    def hold_flushes(self) -> None:
        """The caller hands over more parts without positions right away (``kstage dlq
        replay``): flush as behind until :meth:`release_flushes`."""
        self._holds += 1

    def release_flushes(self) -> None:
        """The end of a :meth:`hold_flushes`: what waits is flushed now."""
        self._holds = max(0, self._holds - 1)
        if not self._holds:
            self.flush_soon()

    def forget_behind(self, streams: Any) -> None:
        """The streams left this writer (revoked): they no longer hold flushes back."""
        for stream in streams:
            self._behind.pop(stream, None)

    def _full(self) -> bool:
        return self._pending_rows >= self.max_rows or (
            self.max_bytes is not None and self._pending_bytes >= self.max_bytes)

    def refused(self, part: Any) -> list[tuple[Row, str]]:
        """The rows of ``part`` the table refused while they were written (each with the
        reason), not yet reported: the sink dead-letters them and takes them off this
        list. Default: none (the table takes every row :meth:`convert` let through)."""
        return []

    @abc.abstractmethod
    async def register(self) -> None:
        """Create or check the table (before the first write)."""

    @abc.abstractmethod
    async def _flush(self, batch: list[Pending]) -> None:
        """Write the parts of ``batch`` and resolve each part's future."""

    def _take(self) -> list[Pending]:
        """The pending parts the next flush writes (removed from the pending list):
        all of them, unless a subclass holds some back."""
        taken, self._pending = self._pending, []
        return taken

    async def write(self, part: Any, *, batch: Any = None, stream: Any = None) -> None:
        """Add a part (rows made by :meth:`convert`) to the next flush and wait until it
        was written; ``batch`` and ``stream``: the worker's batch it belongs to."""
        if batch is not None:
            # before the empty check: a partition whose last batch up to its high-water
            # mark has no rows for this table (filtered, dead-lettered) caught up too
            if batch.behind:
                self._behind[stream] = batch.lag
            else:
                self._behind.pop(stream, None)
        if not len(part):
            if self._pending and not self._running and not self.behind \
                    and self._pending_rows >= self.min_rows and not self._resting():
                self._flush_now("caught up")  # what waited for this partition goes
            return
        loop = asyncio.get_running_loop()
        item = Pending(part, loop.create_future(), batch, stream)
        item.size = self.part_bytes(part)
        item.behind = self.behind
        if not self._pending:
            self._first_at = loop.time()
        self._pending.append(item)
        self._pending_rows += item.rows
        self._pending_bytes += item.size
        if self._full():
            self._flush_now("size")
        elif (not self._running and not self.behind
                and self._pending_rows >= self.min_rows and not self._resting()):
            self._flush_now("caught up")
        else:
            if self._timer is None:
                self._timer = loop.call_later(self.max_interval_s, self._flush_now,
                                              "interval")
            self._idle_later()
        try:
            await item.future
        except asyncio.CancelledError:
            if item in self._pending:  # not taken by a flush yet: drop it
                self._pending.remove(item)
                self._pending_rows -= item.rows
                self._pending_bytes -= item.size
            raise

    def flush_soon(self) -> None:
        """A writer cannot send more rows until its pending ones are written (its
        ``max_in_flight`` is reached): flush now, or right after the running flush,
        instead of waiting for ``max_rows`` or ``max_interval_s``."""
        if not self._pending:
            return
        if self._running:
            self._soon = True
        else:
            self._flush_now("flush_soon")

    def _resting(self) -> bool:
        """The writer rests after its last flushes (``rest_ratio``): True, and the
        flush of what waits is due at the end of the rest, when ``min_rows`` rows wait."""
        loop = asyncio.get_running_loop()
        if loop.time() >= self._rest_until:
            return False
        if self._rest is None and self._pending_rows >= self.min_rows:
            self._rest = loop.call_at(self._rest_until, self._rested)
        return True

    def _rested(self) -> None:
        self._rest = None
        if not self._running and not self.behind and self._pending_rows >= self.min_rows:
            self._flush_now("rested")

    def _idle_later(self) -> None:
        """No flush runs and rows wait: flush them once the oldest waited ``idle_s`` (a
        rest does not delay it)."""
        if (self.idle_s is not None and not self._running and self._idle is None
                and not self.behind):
            self._idle = asyncio.get_running_loop().call_at(
                self._first_at + self.idle_s, self._flush_idle)

    def _flush_idle(self) -> None:
        self._idle = None
        if not self._running and not self.behind:
            self._flush_now("idle")

    def _put_off(self, reason: str) -> bool:
        """``max_per_s``: True (and the flush due when the cap allows it) while the last
        flush started less than 1/``max_per_s`` ago, unless this one is full (``size``,
        ``flush_soon``)."""
        if self.max_per_s is None or not self._pending or reason in _FULL:
            return False
        loop = asyncio.get_running_loop()
        allowed = self._started_at + 1 / self.max_per_s
        if loop.time() >= allowed - _EARLY_S:
            return False
        self._capped_reasons.add(reason)
        if self._capped is None:
            self._capped = loop.call_at(allowed, self._uncapped)
        return True

    def _uncapped(self) -> None:
        """The cap allows a flush again: the one put off goes, unless it was one of
        caught-up rows that no longer may (a flush runs, or a partition fell behind):
        those rows wait for what flushes them then."""
        self._capped = None
        reasons, self._capped_reasons = self._capped_reasons, set()
        if "interval" in reasons:
            self._flush_now("interval")
        elif reasons and not self._running and not self.behind:
            self._flush_now(sorted(reasons)[0])
        elif self._pending:
            loop = asyncio.get_running_loop()
            if self._timer is None:
                self._timer = loop.call_at(self._first_at + self.max_interval_s,
                                           self._flush_now, "interval")
            self._idle_later()

    def _flush_now(self, reason: str) -> None:
        """Flush what may go now; ``reason``: what started it (logged at DEBUG: ``size``,
        ``caught up``, ``interval``, ``idle``, ``rested``, ``flush_soon``)."""
        if self._put_off(reason):
            return
        if self._capped is not None:
            self._capped.cancel()
            self._capped = None
            self._capped_reasons.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._rest is not None:
            self._rest.cancel()
            self._rest = None
        batch = self._take()
        self._pending_rows = sum(item.rows for item in self._pending)
        self._pending_bytes = sum(item.size for item in self._pending)
        if self._pending:  # held back: a later flush writes them
            loop = asyncio.get_running_loop()
            self._first_at = loop.time()
            # Looked at again after the interval even if no write comes to trigger it:
            # what held them back (an earlier batch of their partition) may be forgotten
            # or cancelled without a write of its own.
            self._timer = loop.call_later(self.max_interval_s, self._flush_now,
                                          "interval")
        if batch:
            loop = asyncio.get_running_loop()
            if not self._running:
                self._busy_backlog = False
            backlog = any(item.behind for item in batch)
            self._busy_backlog = self._busy_backlog or backlog
            self._started_at = loop.time()
            logger.debug("%s: flushing %d row(s) (%s)", self.table,
                         sum(item.rows for item in batch), reason)
            task = loop.create_task(self._flush(batch))
            self._tasks.add(task)  # a reference until done
            self._flush_started[task] = (self._started_at, backlog)
            self._running += 1
            task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._running -= 1
        now = asyncio.get_running_loop().time()
        started, backlog = self._flush_started.pop(task, (now, True))
        if self.times_flushes:
            self.took(now - started, backlog)
        if self._running:
            return
        # No rest after a backlog's rows: their flushes took long for their size, not
        # for a commit's fixed cost, and the rows caught up after them go at once.
        self._rest_until = now if self._busy_backlog or self.latency is None else (
            now + rest(self.latency, self.freshness_s, self.rest_ratio, self.cpu,
                       self.spread))
        if self._soon and self._pending:
            self._flush_now("flush_soon")
        elif self._full():
            self._flush_now("size")
        elif (not self.behind and self._pending_rows >= self.min_rows
                and not self._resting()):
            self._flush_now("caught up")  # keep the writer busy while rows wait
        elif self._pending:
            self._idle_later()
        self._soon = False
