"""The fan-out's ack join: a batch's offsets become committable only once every sink of
the topic acked it; a slow sink holds the commit back, never loses a row; a revoke fences
the partition's batches in every sink."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiokafka import TopicPartition

from actors.offsets import OffsetTracker
from actors.sinks import END, FanOutSink, Fence, SinkBatch, run_fanout
from tests.kit import RecordingSink, batch

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def gated_sink() -> RecordingSink:
    """Writes what it is given (the ``n`` of each row) and empties the list, as the table
    sinks may; while ``down`` every write fails (retried)."""
    return RecordingSink(key="n", clears=True)


def ack(tracker: OffsetTracker) -> Callable[[SinkBatch], None]:
    """The worker's ack: the batch's entry becomes done (committable in order)."""
    return lambda batch: tracker.ack(batch.entry)


async def wait_for(predicate: object, timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.005)


async def test_a_batch_one_sink_acked_is_not_committable_until_every_sink_acked() -> None:
    tracker = OffsetTracker()
    fast, slow = gated_sink(), gated_sink()
    slow.down = True
    mailbox: asyncio.Queue[SinkBatch] = asyncio.Queue()
    task = asyncio.create_task(run_fanout(
        [FanOutSink("fast", fast), FanOutSink("slow", slow)], mailbox, ack(tracker),
        label="t", fence=Fence(), retry_backoff_s=(0.001, 0.001)))
    for n in range(3):
        await mailbox.put(batch(TP0, n, tracker=tracker))
    await wait_for(lambda: fast.written == [0, 1, 2])
    await asyncio.wait_for(slow.attempted.wait(), 5)
    assert tracker.committable(TP0) is None, "only one sink has the rows"
    assert tracker.pending_count(TP0) == 3
    slow.down = False  # the slow sink recovers: everything lands, in order, nothing lost
    await wait_for(lambda: tracker.committable(TP0) == 3)
    await mailbox.put(END)
    await asyncio.wait_for(task, 5)
    assert slow.written == fast.written == [0, 1, 2], "each sink got its own rows"


async def test_a_revoke_fences_the_partition_in_every_sink() -> None:
    tracker = OffsetTracker()
    a, b = gated_sink(), gated_sink()
    b.down = True
    fence = Fence()
    mailbox: asyncio.Queue[SinkBatch] = asyncio.Queue()
    task = asyncio.create_task(run_fanout(
        [FanOutSink("a", a), FanOutSink("b", b)], mailbox, ack(tracker), label="t",
        fence=fence, retry_backoff_s=(0.001, 0.001)))
    await mailbox.put(batch(TP0, 0, tracker=tracker))
    await asyncio.wait_for(b.attempted.wait(), 5)
    assert tracker.cancel({TP0}) == 1  # what the worker's revoke does, then the fence
    assert await asyncio.wait_for(fence.revoke({TP0}), 5) == 1
    b.down = False
    await mailbox.put(batch(TP1, 7, tracker=tracker))
    await mailbox.put(END)
    await asyncio.wait_for(task, 5)
    assert b.written == [7], "the revoked batch is never written after the revoke"
    assert tracker.committable(TP0) is None and tracker.committable(TP1) == 8
