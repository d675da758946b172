"""Fan-out: one worker's batches to every sink of its topic (``topics[].sinks``), acked
once every sink accepted them.

A topic with one sink (``sink:``) is a fan-out of one: its sink loop
(:func:`~actors.sinks.runner.run_sink`) reads the worker's mailbox itself. With several,
:func:`run_fanout` hands each batch to every sink's own bounded mailbox, each sink runs
its own loop (its own retries, its own :class:`~actors.sink_health.SinkHealth`), and a
batch is acked to the worker only when the last sink acked it (:class:`AckJoin`): its
offsets become committable then, never before. A sink refusing rows for good
dead-letters them (naming the sink) inside its write, which then returns: a refusal
counts as that sink's acceptance.

A slow or failing sink holds its mailbox full; the distribution then waits, the worker's
mailbox fills, processing and fetching pause (``max_in_flight``): the other sinks run
ahead by at most their mailbox, nothing is dropped. Every sink shares the worker's
:class:`~actors.sinks.runner.Fence`: a revoke cancels the partitions' batches in every
sink (a batch's copies share its entry, whose ``cancelled`` flag the fence reads).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from actors.sink_health import SinkHealth
from actors.sinks.base import Sink
from actors.sinks.runner import END, Fence, SinkBatch, run_sink

logger = logging.getLogger(__name__)

_SINK_BATCHES = 2  # each sink's mailbox, as the worker's own


@dataclass(frozen=True, slots=True)
class FanOutSink:
    """One sink of a fan-out: its name (logs, metrics), the sink and its health."""

    name: str
    sink: Sink
    health: SinkHealth | None = None
    on_write_seconds: Callable[[float], None] | None = None


@dataclass(slots=True, eq=False)
class _Copy(SinkBatch):
    """One sink's copy of a batch: its own row list (a sink may empty it), the batch's
    entry, and the join that acks the batch."""

    join: AckJoin | None = None


class AckJoin:
    """Acks ``batch`` (``on_ack``) once each of ``sinks`` sinks acked its copy."""

    __slots__ = ("batch", "on_ack", "waiting")

    def __init__(self, batch: SinkBatch, sinks: int,
                 on_ack: Callable[[SinkBatch], None]) -> None:
        self.batch = batch
        self.waiting = sinks
        self.on_ack = on_ack

    @property
    def done(self) -> bool:
        return self.waiting == 0

    def acked(self) -> None:
        """One sink acked its copy; the last one acks the batch."""
        self.waiting -= 1
        if self.waiting == 0:
            self.on_ack(self.batch)


def copies(batch: SinkBatch, sinks: int, on_ack: Callable[[SinkBatch], None]
           ) -> list[SinkBatch]:
    """One copy of ``batch`` per sink, joined: ``batch`` is acked when all are. Each sink
    gets its own list and its own row mappings (a sink may empty its list or change its
    rows); the first gets the batch's own list (the worker never reads it again)."""
    join = AckJoin(batch, sinks, on_ack)
    rows = batch.rows
    return [_Copy(rows if k == 0 else [dict(row) for row in rows], batch.entry, batch.trace,
                  join=join)
            for k in range(sinks)]


def _acked(copy: SinkBatch) -> None:
    assert isinstance(copy, _Copy) and copy.join is not None  # noqa: S101 - only copies
    copy.join.acked()


async def run_fanout(
    sinks: Sequence[FanOutSink],
    mailbox: asyncio.Queue[SinkBatch],
    on_ack: Callable[[SinkBatch], None],
    *,
    label: str,
    fence: Fence,
    retry_backoff_s: tuple[float, float] = (0.5, 30.0),
) -> None:
    """Run every sink's loop on the batches of ``mailbox``; ack each batch once all sinks
    acked it; return on :data:`END` once every sink finished what it was given."""
    if len(sinks) == 1:
        one = sinks[0]
        await run_sink(one.sink, mailbox, on_ack, label=label,
                       retry_backoff_s=retry_backoff_s, on_write_seconds=one.on_write_seconds,
                       fence=fence, health=one.health, name=one.name)
        return
    boxes: list[asyncio.Queue[Any]] = [asyncio.Queue(_SINK_BATCHES) for _ in sinks]
    async with asyncio.TaskGroup() as tg:
        for one, box in zip(sinks, boxes, strict=True):
            tg.create_task(run_sink(one.sink, box, _acked, label=f"{label} sink {one.name!r}",
                                    retry_backoff_s=retry_backoff_s,
                                    on_write_seconds=one.on_write_seconds, fence=fence,
                                    health=one.health, name=one.name),
                           name=f"{label}:sink:{one.name}")
        while True:
            batch = await mailbox.get()
            if batch is END:
                for box in boxes:
                    await box.put(END)  # each sink finishes what it holds
                break
            for box, copy in zip(boxes, copies(batch, len(sinks), on_ack), strict=True):
                await box.put(copy)  # a full box (a slow sink) holds the others back


__all__ = ["AckJoin", "FanOutSink", "copies", "run_fanout"]
