"""Retry waits that hold only their partition, without a broker (a fake consumer and a
retry sleep the test releases): the other partition flows and commits, the waiting one
is paused and keeps its order, in-flight accounting returns to zero, and a revoke ends
the wait at once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from actors.worker import Worker
from processors.base import Message, Row
from processors.json_rows import JsonRowsProcessor
from tests.fake_consumer import FakeConsumer
from tests.kit import RecordingSink, make_worker, until, values, worker_settings

TOPIC = "t"
TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


class FailingRows(JsonRowsProcessor):
    """json_rows, failing (retriably) on values with ``fail``."""

    def transform(self, message: Message) -> Sequence[Row]:
        if isinstance(message.value, dict) and message.value.get("fail"):
            raise RuntimeError(f"failing at offset {message.offset}")
        return super().transform(message)


class HeldSleep:
    """The retry wait: returns when the test releases it (True) or the worker stops
    (False, as the worker's own wait does)."""

    def __init__(self) -> None:
        self.calls: list[float] = []
        self.waiting, self.release = asyncio.Event(), asyncio.Event()
        self.stopped = asyncio.Event()  # the worker's intake_stopped, once it exists

    async def __call__(self, seconds: float) -> bool:
        self.calls.append(seconds)
        self.waiting.set()
        released = asyncio.ensure_future(self.release.wait())
        stopped = asyncio.ensure_future(self.stopped.wait())
        try:
            await asyncio.wait([released, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            released.cancel()
            stopped.cancel()
        return not self.stopped.is_set()


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


@pytest.mark.parametrize("mode", ["batch", "per_message"])
async def test_a_retry_wait_holds_only_its_partition_in_order(
        tmp_path: Path, mode: str) -> None:
    consumer = FakeConsumer(TOPIC, {0: values({"i": 0}, {"fail": True}, {"i": 2}),
                                    1: values({"i": 10}, {"i": 11})})
    sink, sleep = RecordingSink(), HeldSleep()
    worker = lane_worker(tmp_path, consumer, sink, sleep, mode=mode)
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(sleep.waiting.wait(), 10)
        await until(lambda: consumer.committed_offsets.get(TP1) == 2, "partition 1 committed")
        consumer.append(1, values({"i": 12}))
        await until(lambda: consumer.committed_offsets.get(TP1) == 3, "more of partition 1")
        assert consumer.paused() == {TP0}, "the waiting partition is paused"
        assert consumer.committed_offsets.get(TP0, 0) <= 1
        assert worker.in_flight == 2, "the waiting message and the one behind it"
        consumer.append(0, values({"i": 3}))  # fetched after the resume, behind the wait
        sleep.release.set()  # the retry fails again: dead-lettered, then in order
        await until(lambda: consumer.committed_offsets.get(TP0) == 4, "partition 0 going on")
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)
    assert [o for p, o in parts(sink) if p == 0] == [0, 2, 3], parts(sink)
    assert [o for p, o in parts(sink) if p == 1] == [0, 1, 2], parts(sink)
    dead = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [(d["partition"], d["offset"], d["attempts"]) for d in dead] == [(0, 1, 2)]
    assert worker.in_flight == 0 and not worker.flow.lanes and consumer.paused() == set()
    assert worker.stats["processed"] == 7


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
