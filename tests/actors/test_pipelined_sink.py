"""run_sink with a pipelined sink: writes start without waiting, acks come in order."""

from __future__ import annotations

import asyncio

from actors.sinks import END, SinkBatch, SinkCapabilities, run_sink
from tests.kit import TP, RecordingSink, batch


async def test_writes_overlap_and_acks_keep_mailbox_order() -> None:
    sink = RecordingSink(key="n", gated=True, fail_once=0,
                         capabilities=SinkCapabilities(pipelined=True))
    mailbox: asyncio.Queue[SinkBatch] = asyncio.Queue()
    acked: list[int] = []
    task = asyncio.create_task(run_sink(sink, mailbox, lambda b: acked.append(b.rows[0]["n"]),
                                        label="t", retry_backoff_s=(0.01, 0.01)))
    for n in range(3):
        mailbox.put_nowait(batch(TP, n))
    async with asyncio.timeout(5):
        while len(sink.attempts) < 3:  # all three started before any returned
            await asyncio.sleep(0.001)
        for n in (2, 1):  # later batches finish first: no ack before batch 0's
            sink.gate(n).set()
        await asyncio.sleep(0.05)
        assert acked == []
        sink.gate(0).set()  # fails once, is retried
        while len(acked) < 3:
            await asyncio.sleep(0.001)
        mailbox.put_nowait(END)
        await task
    assert acked == [0, 1, 2]
    assert sink.attempts == [0, 1, 2, 0]
