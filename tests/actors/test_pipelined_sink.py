"""run_sink with a pipelined sink: writes start without waiting, acks come in order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import TopicPartition

from actors.errors import SinkError
from actors.offsets import Entry
from actors.sinks import END, Sink, SinkBatch, SinkCapabilities, run_sink
from processors.base import Row


class GatedSink(Sink):
    """Each write waits for its gate; the first attempt of ``fail_once`` fails."""

    capabilities = SinkCapabilities(pipelined=True)

    def __init__(self, fail_once: int | None = None) -> None:
        self.gates: dict[int, asyncio.Event] = {}
        self.started: list[int] = []
        self.fail_once = fail_once

    async def write(self, rows: Sequence[Row]) -> None:
        n = int(rows[0]["n"])
        self.started.append(n)
        await self.gates.setdefault(n, asyncio.Event()).wait()
        if n == self.fail_once:
            self.fail_once = None
            raise SinkError("refused once")


def batch(n: int) -> SinkBatch:
    return SinkBatch([{"n": n}], Entry(TopicPartition("t", 0), n + 1, 1))


async def test_writes_overlap_and_acks_keep_mailbox_order() -> None:
    sink = GatedSink(fail_once=0)
    mailbox: asyncio.Queue[SinkBatch] = asyncio.Queue()
    acked: list[int] = []
    task = asyncio.create_task(run_sink(sink, mailbox, lambda b: acked.append(b.rows[0]["n"]),
                                        label="t", retry_backoff_s=(0.01, 0.01)))
    for n in range(3):
        mailbox.put_nowait(batch(n))
    async with asyncio.timeout(5):
        while len(sink.started) < 3:  # all three started before any returned
            await asyncio.sleep(0.001)
        for n in (2, 1):  # later batches finish first: no ack before batch 0's
            sink.gates.setdefault(n, asyncio.Event()).set()
        await asyncio.sleep(0.05)
        assert acked == []
        sink.gates.setdefault(0, asyncio.Event()).set()  # fails once, is retried
        while len(acked) < 3:
            await asyncio.sleep(0.001)
        mailbox.put_nowait(END)
        await task
    assert acked == [0, 1, 2]
    assert sink.started == [0, 1, 2, 0]
