"""Sinks and the sink actor loop.

A :class:`Sink` durably accepts batches of rows: when ``write`` returns, the rows are
safe and their offsets may be committed. The worker hands :class:`SinkBatch` messages to
its sink through a bounded mailbox; :func:`run_sink` drains the mailbox in order and
acknowledges each batch after the write returned. A full mailbox blocks the worker's
processing, which in turn pauses fetching (backpressure without eviction).

Every write runs in its own task, known to a :class:`Fence`: when the worker loses a
partition (revoke), its batches are cancelled before their write (dropped when their
turn comes) or during it (the write task, with its retries, is cancelled and awaited),
so nothing of a revoked partition is written after the revoke finished.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.appends import torn_tail, write_all
from actors.errors import SinkError
from actors.offsets import Entry
from actors.sink_health import SinkHealth
from processors.base import Row
from settings.models import SinkSettings

logger = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class SinkBatch:
    """Rows of one partition's consecutive messages, and the work entry they finish."""

    rows: Sequence[Row]
    entry: Entry


class Fence:
    """The writes in progress, by batch; cancels those of revoked partitions.

    A batch whose entry is ``cancelled`` is never written, never retried and never
    acked: :meth:`write` returns False for it.
    """

    def __init__(self) -> None:
        self._writing: dict[asyncio.Task[None], SinkBatch] = {}

    async def write(self, sink: Sink, batch: SinkBatch, label: str,
                    backoff_s: tuple[float, float],
                    on_write_seconds: Callable[[float], None] | None,
                    health: SinkHealth | None = None) -> bool:
        """Write ``batch`` (retrying, see :func:`_write`); False when it was fenced."""
        if batch.entry.cancelled:
            return False
        task = asyncio.create_task(_write(sink, batch, label, backoff_s, on_write_seconds,
                                          health),
                                   name=f"{label}:write[{batch.entry.tp.partition}]")
        self._writing[task] = batch
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            del self._writing[task]
        if task.cancelled():
            if batch.entry.cancelled:
                return False
            raise asyncio.CancelledError
        task.result()  # a write error that is not retried
        return not batch.entry.cancelled

    async def revoke(self, tps: set[Any]) -> int:
        """Cancel the running writes of ``tps`` (whose entries are cancelled), wait until
        they ended; returns how many were cancelled."""
        tasks = [t for t, b in self._writing.items()
                 if b.entry.tp in tps and b.entry.cancelled]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        return len(tasks)


_LANE_BATCHES = 2
_PIPELINE_WINDOW = 1024

END: Any = object()
"""Mailbox sentinel: no more batches follow."""


class Sink:
    """Base class of sinks. ``write`` must only return once the rows are durable.

    The worker never reads a batch's rows after handing them to ``write``: a sink may
    keep, transform or empty the list (the Spark and JDBC sinks empty it once the rows
    are converted, to free memory while they wait for their flush). A failed write is
    retried with the same list object.

    ``health`` is set by the worker before :meth:`open`: a sink that retries inside its
    own ``write`` reports each failed attempt there, keyed ``(topic, partition)``, so
    ``/readyz`` tells about an outage before the write gives up.
    """

    type: str = ""
    health: SinkHealth | None = None

    async def open(self) -> None:
        """Open files or clients."""

    async def close(self) -> None:
        """Release what :meth:`open` acquired."""

    async def write(self, rows: Sequence[Row]) -> None:
        raise NotImplementedError


class NullSink(Sink):
    """Discards rows (benchmarks, dry runs)."""

    type = "null"

    async def write(self, rows: Sequence[Row]) -> None:
        return None


def _default(value: object) -> object:
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


class JsonlSink(Sink):
    """Appends rows as JSON lines to a file; each write is one ``O_APPEND`` write + fsync.

    One ``write(2)`` per batch keeps the lines of concurrent writers (several kstage
    processes with one config) from interleaving inside a line.

    A write cut short (a full disk, a file size limit, a process killed inside the
    ``write(2)``) leaves a partial last line whose rows were never acknowledged. Before
    the first write after :meth:`open` and after a failed write, the sink looks at the
    file's last byte and, if it is not a newline, starts its write with one: the fragment
    stays an unreadable line of its own and the rows written again after it stay whole.
    """

    type = "jsonl"

    def __init__(self, path: str | Path, fsync: bool = True) -> None:
        self.path = Path(path)
        self._fsync = fsync
        self._fd: int | None = None
        self._check_tail = True

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Read and write: the tail check reads the last byte (writes still only append).
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        self._check_tail = True

    async def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write(self, data: bytes) -> None:
        assert self._fd is not None, "sink not open"  # noqa: S101 - internal invariant
        if self._check_tail and torn_tail(self._fd, os.fstat(self._fd).st_size):
            logger.warning("jsonl sink %s: the file ends in a partial last line (a write cut "
                           "short; its rows were not committed and are written again): "
                           "ending it with a newline", self.path)
            data = b"\n" + data
        self._check_tail = True  # until this write and its fsync returned
        write_all(self._fd, data)
        if self._fsync:
            os.fsync(self._fd)
        self._check_tail = False

    async def write(self, rows: Sequence[Row]) -> None:
        if not rows:
            return
        data = "".join(
            json.dumps(r, ensure_ascii=False, default=_default) + "\n" for r in rows
        ).encode("utf-8")
        try:
            await asyncio.to_thread(self._write, data)
        except OSError as exc:
            raise SinkError(f"jsonl sink {self.path}: {exc}") from exc


def _http_sink(settings: SinkSettings) -> Sink:
    from actors.http_sink import HttpSink, HttpSinkSettings  # noqa: PLC0415 - only if used

    return HttpSink(HttpSinkSettings.model_validate(settings.model_dump()))


def _spark_sink(settings: SinkSettings) -> Sink:
    from actors.spark_sink import SparkSink, SparkSinkSettings  # noqa: PLC0415 - only if used

    return SparkSink(SparkSinkSettings.model_validate(settings.model_dump()))


def _jdbc_sink(settings: SinkSettings) -> Sink:
    from actors.jdbc_sink import JdbcSink, JdbcSinkSettings  # noqa: PLC0415 - only if used

    return JdbcSink(JdbcSinkSettings.model_validate(settings.model_dump()))


SINK_TYPES: dict[str, Callable[[SinkSettings], Sink]] = {
    "null": lambda s: NullSink(),
    "jsonl": lambda s: JsonlSink(str(s.path), fsync=bool(getattr(s, "fsync", True))),
    "http": _http_sink,
    "spark": _spark_sink,
    "jdbc": _jdbc_sink,
}


async def _run_pipelined(
    sink: Sink,
    mailbox: asyncio.Queue[SinkBatch],
    on_ack: Callable[[SinkBatch], None],
    label: str,
    retry_backoff_s: tuple[float, float],
    on_write_seconds: Callable[[float], None] | None,
    fence: Fence,
    health: SinkHealth | None,
) -> None:
    """:func:`run_sink` for a pipelined sink: start each write at once (each retries on
    its own, see :func:`_write`), ack in mailbox order as the writes return."""
    window: asyncio.Queue[Any] = asyncio.Queue(_PIPELINE_WINDOW)

    async def acker() -> None:
        while True:
            item = await window.get()
            if item is END:
                return
            batch, task = item
            if await task:
                on_ack(batch)

    async with asyncio.TaskGroup() as tg:
        tg.create_task(acker(), name=f"{label}:sink-acks")
        while True:
            batch = await mailbox.get()
            if batch is END:
                await window.put(END)  # the acker finishes the outstanding writes first
                break
            task = tg.create_task(fence.write(sink, batch, label, retry_backoff_s,
                                              on_write_seconds, health),
                                  name=f"{label}:sink-write")
            await window.put((batch, task))


def build_sink(settings: SinkSettings) -> Sink:
    """Create the sink a topic's ``sink`` settings describe."""
    try:
        factory = SINK_TYPES[settings.type]
    except KeyError:
        known = ", ".join(sorted(SINK_TYPES))
        raise SinkError(f"unknown sink type {settings.type!r} (known: {known})") from None
    return factory(settings)


async def _write(sink: Sink, batch: SinkBatch, label: str,
                 backoff_s: tuple[float, float],
                 on_write_seconds: Callable[[float], None] | None,
                 health: SinkHealth | None = None) -> None:
    """Write one batch; retry failures (SinkError, OSError) with capped backoff, forever:
    the batch is neither acked nor dropped, so its offsets stay uncommitted. ``health``
    learns of every failed attempt and of the success."""
    delay = backoff_s[0]
    key = (batch.entry.tp.topic, batch.entry.tp.partition)
    while not batch.entry.cancelled:
        try:
            started = time.monotonic()
            await sink.write(batch.rows)
            if on_write_seconds is not None:
                on_write_seconds(time.monotonic() - started)
            if health is not None:
                health.succeeded(key)
            return
        except (SinkError, OSError) as exc:
            if health is not None:
                error = str(exc) if isinstance(exc, SinkError) else f"{sink.type} sink: {exc!r}"
                health.failed(key, error, since=started,
                              auth=isinstance(exc, SinkError) and exc.auth)
            logger.warning("%s: sink write failed (%s); retrying in %.1fs", label, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, backoff_s[1])


async def run_sink(
    sink: Sink,
    mailbox: asyncio.Queue[SinkBatch],
    on_ack: Callable[[SinkBatch], None],
    *,
    label: str,
    retry_backoff_s: tuple[float, float] = (0.5, 30.0),
    on_write_seconds: Callable[[float], None] | None = None,
    fence: Fence | None = None,
    health: SinkHealth | None = None,
) -> None:
    """The sink actor: write each batch, ack it once durable; return on :data:`END`.

    A ``pipelined`` sink (Spark, JDBC: its writes join a shared micro-batch) gets every
    batch handed over at once, without waiting for the previous write to return, so rows
    of several batches gather in the next flush while the current one is written; acks
    are still given in order, each once its write returned. At most
    :data:`_PIPELINE_WINDOW` writes are outstanding; memory is bounded by the worker's
    ``max_in_flight`` long before that.

    A sink with ``max_concurrency > 1`` (HTTP) gets one lane per partition: batches of one
    partition are written in order, batches of different partitions concurrently, at most
    ``max_concurrency`` at a time. Acks may then arrive out of order across partitions;
    the offset tracker only ever commits each partition's contiguous prefix.

    Batches that ``fence`` cancelled (revoked partitions) are dropped, not acked.
    ``health`` (the worker's :class:`SinkHealth`) learns of every failed and successful
    write, for ``/readyz``.
    """
    fence = fence or Fence()
    if getattr(sink, "pipelined", False):
        await _run_pipelined(sink, mailbox, on_ack, label, retry_backoff_s, on_write_seconds,
                             fence, health)
        return
    concurrency = int(getattr(sink, "max_concurrency", 1) or 1)
    if concurrency <= 1:
        while True:
            batch = await mailbox.get()
            if batch is END:
                return
            if await fence.write(sink, batch, label, retry_backoff_s, on_write_seconds,
                                 health):
                on_ack(batch)

    slots = asyncio.Semaphore(concurrency)

    async def lane(queue: asyncio.Queue[SinkBatch]) -> None:
        while True:
            batch = await queue.get()
            if batch is END:
                return
            async with slots:
                written = await fence.write(sink, batch, label, retry_backoff_s,
                                            on_write_seconds, health)
            if written:
                on_ack(batch)

    lanes: dict[Any, asyncio.Queue[SinkBatch]] = {}
    async with asyncio.TaskGroup() as tg:
        while True:
            batch = await mailbox.get()
            if batch is END:
                for queue in lanes.values():
                    await queue.put(END)  # lanes drain what they hold, then finish
                break
            tp = batch.entry.tp
            if tp in lanes:
                queue = lanes[tp]
            else:
                # Bounded lanes: a slow partition backs up the mailbox, and fetching pauses.
                queue = lanes[tp] = asyncio.Queue(_LANE_BATCHES)
                tg.create_task(lane(queue), name=f"{label}:sink[{tp.partition}]")
            await queue.put(batch)
