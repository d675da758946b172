"""run_sink's fence: batches of a revoked partition are cancelled before or during their
write (with their retries), never written or acked afterwards."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition

from actors.sinks import END, Fence, SinkBatch, SinkCapabilities, run_sink
from tests.kit import RecordingSink, batch

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def hanging_sink(concurrency: int = 1, pipelined: bool = False) -> RecordingSink:
    """Writes of partition 0 fail and are retried until released; partition 1 writes."""
    return RecordingSink(key="n", fails=lambda rows: rows[0]["p"] == 0,
                         capabilities=SinkCapabilities(max_concurrency=concurrency,
                                                       pipelined=pipelined))


async def run_case(sink: RecordingSink) -> list[int]:
    fence = Fence()
    mailbox: asyncio.Queue[SinkBatch] = asyncio.Queue()
    acked: list[int] = []
    task = asyncio.create_task(run_sink(sink, mailbox, lambda b: acked.append(b.entry.next_offset),
                                        label="t", retry_backoff_s=(0.001, 0.001), fence=fence))
    revoked = [batch(TP0, 0), batch(TP0, 1)]
    for b in revoked:
        await mailbox.put(b)
    await asyncio.wait_for(sink.attempted.wait(), 5)
    for b in revoked:  # what the worker's tracker does on revoke
        b.entry.cancelled = True
    assert await asyncio.wait_for(fence.revoke({TP0}), 5) == 1
    attempts = len(sink.attempts)
    await mailbox.put(batch(TP1, 2))
    await mailbox.put(END)
    await asyncio.wait_for(task, 5)
    assert sink.attempts[:attempts] == [0] * attempts
    assert sink.attempts[attempts:] == [2], "no retry of a fenced write, batch 1 dropped"
    return acked


async def test_fence_cancels_the_retrying_write_and_drops_queued_batches() -> None:
    assert await run_case(hanging_sink()) == [3]


async def test_fence_with_partition_lanes() -> None:
    assert await run_case(hanging_sink(concurrency=4)) == [3]


async def test_fence_with_a_pipelined_sink() -> None:
    sink = hanging_sink(pipelined=True)
    fence = Fence()
    mailbox: asyncio.Queue[SinkBatch] = asyncio.Queue()
    acked: list[int] = []
    task = asyncio.create_task(run_sink(sink, mailbox, lambda b: acked.append(b.entry.next_offset),
                                        label="t", retry_backoff_s=(0.001, 0.001), fence=fence))
    stale = batch(TP0, 0)
    await mailbox.put(stale)
    await asyncio.wait_for(sink.attempted.wait(), 5)
    stale.entry.cancelled = True
    assert await fence.revoke({TP0}) == 1
    await mailbox.put(batch(TP1, 1))
    await mailbox.put(END)
    await asyncio.wait_for(task, 5)
    assert acked == [2] and sink.written == [1]
