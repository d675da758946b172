"""``--drain`` and a generation that gave the worker no partition (issue 34's compat
matrix, seen on Apache Kafka: a second ``run --drain`` of nine topics in one group
exited 0 with one topic's new records never read).

While members join, the group leader assigns only the topics its metadata knows: a
member whose topic it does not know yet gets nothing in that generation, and the next
rebalance gives it its partitions. A worker with nothing assigned took that for
"drained" and, once every other worker had drained, the process stopped before the
partition came. With nothing assigned the worker is drained only when the group has
committed every partition of its topic up to its end offset.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from aiokafka import TopicPartition

from tests.fake_consumer import FakeConsumer
from tests.kit import TOPIC, RecordingSink, make_worker, until, worker_settings


def _values(n: int) -> list[bytes | None]:
    return [json.dumps({"i": i}).encode() for i in range(n)]


async def test_an_empty_assignment_is_not_drained_while_the_topic_has_work(
        tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: _values(3)}, assign_on_poll=False)
    drained = asyncio.Event()
    sink = RecordingSink()
    worker = make_worker(worker_settings(tmp_path), consumer, sink, drain=True,
                         on_drained=lambda _w: drained.set())
    run = asyncio.create_task(worker.run())
    try:
        await until(lambda: consumer.listener is not None, "the subscription")
        assert consumer.listener is not None
        await consumer.listener.on_partitions_assigned(set())  # a generation without it
        turned = worker.parts.fetcher.turned_at
        await until(lambda: worker.parts.fetcher.turned_at > turned, "a fetch loop turn", 10)
        turned = worker.parts.fetcher.turned_at
        await until(lambda: worker.parts.fetcher.turned_at > turned, "another turn", 10)
        assert not drained.is_set(), "drained with the topic's partition never read"
        tp = TopicPartition(TOPIC, 0)
        await consumer.rebalance(assigned={tp})  # the next generation gives it
        await asyncio.wait_for(drained.wait(), 30)
        assert consumer.committed_offsets.get(tp) == 3
    finally:
        worker.stop()
        await asyncio.wait_for(run, 30)


async def test_an_empty_assignment_is_drained_when_the_group_committed_everything(
        tmp_path: Path) -> None:
    """Another member of the group holds the partition and has committed it to its end
    (more members than partitions): nothing is left for this one to wait for."""
    consumer = FakeConsumer(TOPIC, {0: _values(3)}, assign_on_poll=False)
    consumer.committed_offsets[TopicPartition(TOPIC, 0)] = 3
    drained = asyncio.Event()
    worker = make_worker(worker_settings(tmp_path), consumer, RecordingSink(), drain=True,
                         on_drained=lambda _w: drained.set())
    run = asyncio.create_task(worker.run())
    try:
        await until(lambda: consumer.listener is not None, "the subscription")
        assert consumer.listener is not None
        await consumer.listener.on_partitions_assigned(set())
        await asyncio.wait_for(drained.wait(), 30)
    finally:
        worker.stop()
        await asyncio.wait_for(run, 30)
