"""The sink actor loop: runs one worker's sink as its :class:`~actors.sinks.base.Sink`
declares (see :mod:`actors.sinks.base` for the contract).

The worker hands :class:`SinkBatch` messages to
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
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from actors import backoff
from actors.errors import SinkError
from actors.offsets import Entry
from actors.sink_health import SinkHealth
from actors.sinks.base import Sink
from processors.base import Row

logger = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class SinkBatch:
    """Rows of one partition's consecutive messages, and the work entry they finish."""

    rows: Sequence[Row]
    entry: Entry
    trace: Any = None  # its messages' spans (actors/tracing.py BatchTrace) when tracing


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
                    health: SinkHealth | None = None, name: str | None = None) -> bool:
        """Write ``batch`` (retrying, see :func:`_write`); False when it was fenced."""
        if batch.entry.cancelled:
            return False
        task = asyncio.create_task(_write(sink, batch, label, backoff_s, on_write_seconds,
                                          health, name),
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


async def _run_pipelined(
    sink: Sink,
    mailbox: asyncio.Queue[SinkBatch],
    on_ack: Callable[[SinkBatch], None],
    label: str,
    retry_backoff_s: tuple[float, float],
    on_write_seconds: Callable[[float], None] | None,
    fence: Fence,
    health: SinkHealth | None,
    name: str | None,
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
                                              on_write_seconds, health, name),
                                  name=f"{label}:sink-write")
            await window.put((batch, task))


async def _write(sink: Sink, batch: SinkBatch, label: str,
                 backoff_s: tuple[float, float],
                 on_write_seconds: Callable[[float], None] | None,
                 health: SinkHealth | None = None, name: str | None = None) -> None:
    """Write one batch; retry failures (SinkError, OSError) with capped backoff, forever:
    the batch is neither acked nor dropped, so its offsets stay uncommitted. ``health``
    learns of every failed attempt and of the success. A traced batch (``trace``) is
    written in its ``write <sink>`` span (``name``: the sink's, else its type)."""
    if batch.trace is None:
        await _attempts(sink, batch, label, backoff_s, on_write_seconds, health)
        return
    with batch.trace.write(name or sink.type, sink.type, len(batch.rows),
                           batch.entry.tp.partition) as span:
        await _attempts(sink, batch, label, backoff_s, on_write_seconds, health, span)


async def _attempts(sink: Sink, batch: SinkBatch, label: str,
                    backoff_s: tuple[float, float],
                    on_write_seconds: Callable[[float], None] | None,
                    health: SinkHealth | None, span: Any = None) -> None:
    """:func:`_write`'s attempts (a failed one is an exception recorded on ``span``)."""
    attempt = 0
    key = (batch.entry.tp.topic, batch.entry.tp.partition)
    while not batch.entry.cancelled:
        try:
            started = time.monotonic()
            await sink.write_at(batch.rows, batch.entry)
            if on_write_seconds is not None:
                on_write_seconds(time.monotonic() - started)
            if health is not None:
                health.succeeded(key)
            return
        except (SinkError, OSError) as exc:
            if span is not None:
                span.record_exception(exc)
            if health is not None:
                error = str(exc) if isinstance(exc, SinkError) else f"{sink.type} sink: {exc!r}"
                health.failed(key, error, since=started,
                              auth=isinstance(exc, SinkError) and exc.auth)
            delay = backoff.backoff_s(attempt, *backoff_s)
            logger.warning("%s: sink write failed (%s); retrying in %.1fs", label, exc, delay)
            await asyncio.sleep(delay)
            attempt += 1


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
    name: str | None = None,
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
    if sink.capabilities.pipelined:
        await _run_pipelined(sink, mailbox, on_ack, label, retry_backoff_s, on_write_seconds,
                             fence, health, name)
        return
    concurrency = sink.capabilities.max_concurrency
    if concurrency <= 1:
        while True:
            batch = await mailbox.get()
            if batch is END:
                return
            if await fence.write(sink, batch, label, retry_backoff_s, on_write_seconds,
                                 health, name):
                on_ack(batch)

    slots = asyncio.Semaphore(concurrency)

    async def lane(queue: asyncio.Queue[SinkBatch]) -> None:
        while True:
            batch = await queue.get()
            if batch is END:
                return
            async with slots:
                written = await fence.write(sink, batch, label, retry_backoff_s,
                                            on_write_seconds, health, name)
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
