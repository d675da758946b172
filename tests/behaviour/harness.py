"""Where the worker's behaviour tests run: one contract, one implementation per place.

A behaviour test (``tests/behaviour/test_worker_behaviour.py``) is written once against
:class:`Harness` and runs against every implementation (``tests/behaviour/conftest.py``
parametrizes the fixture ``harness``):

* :class:`FakeHarness`: the worker over :class:`tests.fake_consumer.FakeConsumer`, no
  broker (rebalances driven by the test, every step in memory);
* :class:`BrokerHarness`: the worker over the real aiokafka consumer against the test
  session's broker, the embedded one (Tansu) and Apache Kafka (``tests/brokers.py``),
  on a fresh topic and group (:func:`tests.conftest.new_fresh`); the other member of a
  hand-over is a second aiokafka consumer joining the group.

Each harness has a topic of :data:`PARTITIONS` partitions. To add a place to run the
behaviour tests: subclass :class:`Harness`, implement its abstract methods, and name it
in ``tests/behaviour/conftest.py``.
"""

from __future__ import annotations

import asyncio
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.sinks import Sink
from actors.worker import Worker
from processors.base import Processor
from processors.json_rows import JsonRowsProcessor
from settings import Settings, SinkSettings
from tests.fake_consumer import FakeConsumer
from tests.kafkautil import FAST_GROUP, committed, produce
from tests.kit import make_worker, until, worker_settings

PARTITIONS = 2

# A worker's sinks: one for every sink of its topic, or one per sink's settings (fan-out).
Sinks = Sink | Callable[[SinkSettings], Sink]


class Harness(ABC):
    """A topic of :data:`PARTITIONS` partitions, workers of one group over it, and the
    group's committed offsets, wherever they live.

    Attributes:
        kind: the harness's name in test ids (``fake``, ``tansu``, ``kafka``).
        topic: the topic the workers consume.
        group: the group id they share.
    """

    kind: str
    topic: str
    group: str

    def tp(self, partition: int) -> TopicPartition:
        return TopicPartition(self.topic, partition)

    def settings(self, tmp_path: Path, **keys: Any) -> Settings:
        """:func:`tests.kit.worker_settings` for this harness's topic and group
        (``topic`` adds keys to the topic; the others are the kit's)."""
        topic = {"topic": self.topic, **keys.pop("topic", {})}
        return worker_settings(tmp_path, topic=topic, group_id=self.group, **keys)

    @abstractmethod
    async def produce(self, values: list[Any], partition: int = 0) -> None:
        """Append ``values`` (JSON, bytes as they are) to ``partition``, each in a record
        batch of its own (Tansu's end offsets are right only then)."""

    @abstractmethod
    def worker(self, settings: Settings, sink: Sinks, *,
               processor_cls: type[Processor] = JsonRowsProcessor, **kwargs: Any) -> Worker:
        """A worker of ``settings`` (from :meth:`settings`) writing into ``sink`` (or,
        for a fan-out, into the sink a function of each sink's settings gives);
        ``kwargs`` go to :class:`~actors.worker.Worker`."""

    @abstractmethod
    async def committed(self, partition: int) -> int | None:
        """The group's committed offset of ``partition`` (None: none)."""

    @abstractmethod
    async def commit(self, partition: int, offset: int) -> None:
        """Commit ``offset`` of ``partition`` for the group, as an earlier run did."""

    @abstractmethod
    async def hand_over(self, worker: Worker) -> set[int]:
        """A second member takes a share of ``worker``'s partitions (and reads nothing);
        returns once the rebalance is over, with the partitions ``worker`` lost."""

    @abstractmethod
    async def take_back(self, worker: Worker) -> None:
        """The second member leaves; returns once ``worker`` has every partition."""

    @abstractmethod
    async def close(self) -> None:
        """Release what the harness holds (a second member, clients); idempotent."""

    async def wait_committed(self, partition: int, offset: int, what: str,
                             timeout: float = 30) -> None:
        """Wait (bounded) until the committed offset of ``partition`` is ``offset``."""
        seen: list[int | None] = []
        deadline = time.monotonic() + timeout
        while True:
            seen.append(await self.committed(partition))
            if seen[-1] == offset:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: committed offsets "
                                     f"seen {seen[-5:]}")
            await asyncio.sleep(0.05)


class FakeHarness(Harness):
    """The worker over :class:`~tests.fake_consumer.FakeConsumer`: every worker gets a
    consumer of its own sharing one set of partitions and committed offsets."""

    kind = "fake"

    def __init__(self, topic: str = "t", group: str = "g-fake") -> None:
        self.topic, self.group = topic, group
        self.log = FakeConsumer(topic, {p: [] for p in range(PARTITIONS)})
        self.consumers: dict[int, FakeConsumer] = {}  # by id of the worker

    async def produce(self, values: list[Any], partition: int = 0) -> None:
        self.log.append(partition, [v if isinstance(v, bytes) else json.dumps(v).encode()
                                    for v in values])

    def worker(self, settings: Settings, sink: Sinks, *,
               processor_cls: type[Processor] = JsonRowsProcessor, **kwargs: Any) -> Worker:
        consumer = FakeConsumer(self.topic, {}, shares=self.log)
        worker = make_worker(settings, consumer, sink, processor_cls=processor_cls, **kwargs)
        self.consumers[id(worker)] = consumer
        return worker

    async def committed(self, partition: int) -> int | None:
        return self.log.committed_offsets.get(self.tp(partition))

    async def commit(self, partition: int, offset: int) -> None:
        self.log.committed_offsets[self.tp(partition)] = offset

    async def hand_over(self, worker: Worker) -> set[int]:
        await self.consumers[id(worker)].rebalance(revoked={self.tp(0)})
        return {0}

    async def take_back(self, worker: Worker) -> None:
        await self.consumers[id(worker)].rebalance(assigned={self.tp(0)})

    async def close(self) -> None:
        pass  # nothing but memory


class BrokerHarness(Harness):
    """The worker over the real aiokafka consumer of ``bootstrap``, on a topic and group
    made for the test (:func:`tests.conftest.new_fresh`)."""

    def __init__(self, kind: str, bootstrap: str, topic: str, group: str) -> None:
        self.kind, self.bootstrap, self.topic, self.group = kind, bootstrap, topic, group
        self._other: AIOKafkaConsumer | None = None

    async def produce(self, values: list[Any], partition: int = 0) -> None:
        await produce(self.bootstrap, self.topic, values, partition_of=lambda _: partition,
                      one_per_batch=True)

    def worker(self, settings: Settings, sink: Sinks, *,
               processor_cls: type[Processor] = JsonRowsProcessor, **kwargs: Any) -> Worker:
        return make_worker(settings, None, sink, processor_cls=processor_cls,
                           bootstrap=self.bootstrap, **kwargs)

    async def committed(self, partition: int) -> int | None:
        offset = (await committed(self.bootstrap, self.group, self.topic, PARTITIONS))[partition]
        return None if offset < 0 else offset

    async def commit(self, partition: int, offset: int) -> None:
        # A consumer of the group that assigns itself the partition: it commits without
        # joining (a join would cost a rebalance of the broker's).
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([self.tp(partition)])
            await consumer.commit({self.tp(partition): offset})
        finally:
            await consumer.stop()

    async def hand_over(self, worker: Worker) -> set[int]:
        before = set(worker.flow.assigned)
        other = self._other = AIOKafkaConsumer(
            self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
            enable_auto_commit=False, **FAST_GROUP)
        await other.start()
        await until(lambda: other.assignment() and worker.flow.assigned
                    == before - other.assignment(), "the second member's share", timeout=60)
        return {tp.partition for tp in other.assignment()}

    async def take_back(self, worker: Worker) -> None:
        assert self._other is not None, "hand_over() first"
        await self._other.stop()
        self._other = None
        await until(lambda: len(worker.flow.assigned) == PARTITIONS, "every partition back",
                    timeout=60)

    async def close(self) -> None:
        if self._other is not None:
            await self._other.stop()
        # A worker cancelled in phase 2 leaves its consumer closing under a shield: let
        # it leave the group before the test's loop closes.
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if pending:
            await asyncio.wait(pending, timeout=15)


__all__ = ["PARTITIONS", "BrokerHarness", "FakeHarness", "Harness"]
