"""A batch's position says how far its partition's high-water mark was past it when the
worker shipped it (``Position.behind``, ``Position.lag``): what a table sink weighs
against its append size (actors/sinks/table/batching.py). Fake consumer, polls of 2."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from actors.sinks import Position
from processors.base import Row
from tests.fake_consumer import FakeConsumer
from tests.kit import TOPIC, TP, RecordingSink, make_worker, until, values, worker_settings


class PositionSink(RecordingSink):
    """Records each batch's (next offset, behind, lag)."""

    def __init__(self) -> None:
        super().__init__()
        self.positions: list[tuple[int, bool, int]] = []

    async def write_at(self, rows: Sequence[Row], position: Position) -> None:
        self.positions.append((position.next_offset, position.behind, position.lag))
        await self.write(rows)


async def test_each_batch_carries_its_partitions_lag_when_shipped(tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(10)))})
    sink = PositionSink()
    worker = make_worker(worker_settings(tmp_path), consumer, sink)
    run = asyncio.create_task(worker.run())
    try:
        await until(lambda: consumer.committed_offsets.get(TP) == 10, "everything committed")
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)
    # the high-water mark is 10: behind by 8, 6, 4, 2 offsets, then caught up (lag 0)
    assert sink.positions == [(2, True, 8), (4, True, 6), (6, True, 4), (8, True, 2),
                              (10, False, 0)]


async def test_a_high_water_mark_one_past_the_batch_is_caught_up(tmp_path: Path) -> None:
    """A transaction's commit marker takes the offset after its records and is never
    handed over: a high-water mark one past the batch is no backlog (lag 0)."""
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(3)))})
    consumer.logs[TP].append(consumer.logs[TP][-1])  # the high-water mark: 3 -> 4
    sink = PositionSink()
    worker = make_worker(worker_settings(tmp_path, max_poll_records=3), consumer, sink)
    run = asyncio.create_task(worker.run())
    try:
        await until(lambda: len(sink.positions) >= 1, "the first batch shipped")
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)
    assert sink.positions[0] == (3, False, 0)
