"""Retry lanes without a broker, where only the fake can pin them: a revoke ends the
retry wait at once (well inside the drain's bound), and messages held behind a wait are
bounded by the partition's pause, not by the pipeline. That a wait holds only its
partition and keeps its order, and that a revoke commits nothing past it, are
tests/behaviour's (fake and real brokers)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from actors.worker import Worker
from tests.fake_consumer import FakeConsumer
from tests.kit import (
    FailingRows,
    HeldSleep,
    RecordingSink,
    make_worker,
    until,
    values,
    worker_settings,
)

TOPIC = "t"
TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


def parts(sink: RecordingSink) -> list[tuple[int, int]]:
    """(partition, offset) of every row ``sink`` wrote."""
    return [(int(r["_partition"]), int(r["_offset"])) for r in sink.rows]


def lane_worker(tmp_path: Path, consumer: FakeConsumer, sink: RecordingSink,
                sleep: HeldSleep, **commit: Any) -> Worker:
    settings = worker_settings(
        tmp_path, commit=commit, max_poll_records=10,
        failure={"mode": "retry", "max_retries": 1, "min_backoff_ms": 600_000,
                 "max_backoff_ms": 600_000, "then": "continue"})
    worker = make_worker(settings, consumer, sink, processor_cls=FailingRows, sleep=sleep)
    sleep.stopped = worker.flow.intake_stopped
    return worker


async def test_a_revoke_ends_the_retry_wait_at_once(
        tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values({"i": 0}, {"fail": True}, {"i": 2}),
                                    1: values({"i": 10})})
    sink, sleep = RecordingSink(), HeldSleep()
    worker = lane_worker(tmp_path, consumer, sink, sleep)
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(sleep.waiting.wait(), 10)
        await until(lambda: consumer.committed_offsets.get(TP1) == 1, "partition 1 committed")
        # Never released: the revoke itself must end the wait (the drain bound is 1 s).
        await asyncio.wait_for(consumer.rebalance(revoked={TP0}), 0.5)
        assert not worker.flow.lanes and worker.in_flight == 0
        assert consumer.committed_offsets.get(TP0) == 1, "committed past the waiting message"
        await consumer.rebalance(assigned={TP0})  # back: re-read from offset 1, wait again
        await until(lambda: len(sleep.calls) == 2, "the message retried again")
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)
    assert consumer.committed_offsets == {TP0: 1, TP1: 1}, "a stop abandons the wait"
    assert not (tmp_path / "dead.jsonl").exists()
    assert worker.in_flight == 0



async def test_messages_held_behind_a_retry_wait_do_not_fill_the_pipeline(
        tmp_path: Path) -> None:
    """The waiting partition holds more messages than ``max_in_flight``: they are
    bounded (the partition is paused), so they do not stop the other partition."""
    consumer = FakeConsumer(TOPIC, {0: values({"fail": True}, *({"i": i} for i in range(5))),
                                    1: []})
    sink, sleep = RecordingSink(), HeldSleep()
    worker = lane_worker(tmp_path, consumer, sink, sleep, max_in_flight=3)
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(sleep.waiting.wait(), 10)
        assert worker.in_flight == 6
        consumer.append(1, values(*({"i": 10 + i} for i in range(5))))
        await until(lambda: consumer.committed_offsets.get(TP1) == 5, "partition 1 flowing")
        sleep.release.set()
        await until(lambda: consumer.committed_offsets.get(TP0) == 6, "partition 0 going on")
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)
    assert [o for p, o in parts(sink) if p == 0] == [1, 2, 3, 4, 5]
    assert worker.in_flight == 0
