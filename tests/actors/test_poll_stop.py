"""A stop gives up a poll that waits for a rebalance; other cancellations go through.

aiokafka's ``getmany`` waits for a new assignment while the group rebalances, whatever
its timeout (up to the rebalance timeout on Kafka). ``Worker.stop`` cancels the
fetch task while it awaits there and ``Fetcher.poll`` takes that cancellation back (no task or
future per poll on the hot path). The parts are built as the worker's run builds them
(:func:`tests.kit.assembled`), over consumers that hold their polls."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka import ConsumerRecord, TopicPartition

from actors.worker import Worker
from processors.json_rows import JsonRowsProcessor
from settings import load_settings
from tests.kafkautil import write_config
from tests.kit import assembled


class RebalancingConsumer:
    """getmany never returns: a rebalance that does not finish."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def getmany(self, timeout_ms: int, max_records: int) -> dict[Any, Any]:
        self.entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def worker(tmp_path: Path) -> Worker:
    cfg = write_config(tmp_path / "kstage.yml", "127.0.0.1:9", "g-poll",
                       [{"topic": "t", "processor": "json_rows"}])
    settings = load_settings(cfg)
    group = settings.groups[0]
    return Worker(settings=settings, group=group, topic=group.topics[0],
                  processor_cls=JsonRowsProcessor, bootstrap="127.0.0.1:9")


async def test_stop_gives_up_a_poll_held_by_a_rebalance(tmp_path: Path) -> None:
    w, consumer = worker(tmp_path), RebalancingConsumer()
    async with assembled(w, consumer) as parts:
        poll = asyncio.create_task(parts.fetcher.poll(consumer, 10, 0))  # type: ignore[arg-type]
        await asyncio.wait_for(consumer.entered.wait(), 5)
        w.stop()
        await asyncio.wait([poll], timeout=5)  # (wait_for would cancel it at its timeout)
        assert poll.done(), "the poll still waits for the rebalance after the stop"
        assert poll.result() == {}
        assert not poll.cancelled() and poll.cancelling() == 0, \
            "the cancellation was taken back"
        assert await parts.fetcher.poll(consumer, 10, 0) == {}, \
            "after a stop, no poll at all"  # type: ignore[arg-type]


async def test_a_cancellation_from_outside_is_not_swallowed(tmp_path: Path) -> None:
    w, consumer = worker(tmp_path), RebalancingConsumer()
    async with assembled(w, consumer) as parts:
        poll = asyncio.create_task(parts.fetcher.poll(consumer, 10, 0))  # type: ignore[arg-type]
        await asyncio.wait_for(consumer.entered.wait(), 5)
        poll.cancel()  # e.g. phase 2 of a stop: the worker's task group is cancelled
        with pytest.raises(asyncio.CancelledError):
            await poll


TP = TopicPartition("t", 0)


class ReassigningConsumer:
    """The first getmany waits out a rebalance (as aiokafka's does) in which the worker's
    partition is revoked and assigned to it again, then returns records of the new
    assignment."""

    def __init__(self) -> None:
        self.entered, self.release = asyncio.Event(), asyncio.Event()
        self.calls = 0
        self.records = [ConsumerRecord("t", 0, o, 0, 0, None, b"{}", None, 0, 2, [])
                        for o in range(3)]

    async def getmany(self, timeout_ms: int, max_records: int) -> dict[Any, Any]:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            await self.release.wait()
            return {TP: self.records}
        await asyncio.sleep(timeout_ms / 1000)
        return {}

    def assignment(self) -> set[TopicPartition]:
        return {TP}

    def paused(self) -> set[TopicPartition]:
        return set()

    async def committed(self, tp: TopicPartition) -> int | None:
        return None


async def test_records_of_a_poll_that_waited_out_a_reassignment_are_live(
        tmp_path: Path) -> None:
    """Found by the chaos run: such records were tagged with the generation before the
    revoke, dropped as stale while the consumer's position moved past them, and the
    next commit skipped them (lost)."""
    w, consumer = worker(tmp_path), ReassigningConsumer()
    async with assembled(w, consumer) as parts:
        parts.rebalance.on_assigned({TP})
        fetch = asyncio.create_task(parts.fetcher.run(consumer))  # type: ignore[arg-type]
        try:
            await asyncio.wait_for(consumer.entered.wait(), 5)
            await parts.rebalance.on_revoked({TP})
            parts.rebalance.on_assigned({TP})
            consumer.release.set()
            tp, records, gen = await asyncio.wait_for(w.flow.inbox.get(), 5)
            assert (tp, len(records)) == (TP, 3)
            assert w.flow.live(tp, gen), "live records of the new assignment taken for stale"
        finally:
            w.stop()
            await asyncio.wait_for(fetch, 5)
