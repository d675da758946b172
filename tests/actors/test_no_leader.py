"""A partition no broker leads (its replicas' brokers down) is in state ``no_leader`` in
the worker's snapshot, an outage for ``/readyz`` rather than a stall for ``/healthz``
(:func:`actors.worker.report.partitions`); it is ``running`` again once a leader is
elected. A paused topic's end offsets, asked in the background, hold up nothing
while such a partition leaves them unanswered. The real fault, on a 3-node cluster:
test_cluster_faults' ``test_a_partition_without_a_leader_is_an_outage_for_readyz_never_a_
stall``."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from prometheus_client import generate_latest

from actors.control import TopicControl
from actors.metrics import Metrics
from actors.worker import Worker
from actors.worker_status import NO_LEADER, PARTITION_STATES
from tests.fake_consumer import FakeConsumer
from tests.kit import (
    TOPIC,
    TP,
    RecordingSink,
    make_worker,
    turns,
    until,
    values,
    worker_settings,
)


async def test_a_partition_without_a_leader_shows_no_leader_until_one_is_elected(
        tmp_path: Path) -> None:
    other = TopicPartition(TOPIC, 1)
    consumer = FakeConsumer(TOPIC, {0: values({"i": 0}), 1: values({"i": 1})})
    worker = make_worker(worker_settings(tmp_path), consumer, RecordingSink())
    run = asyncio.create_task(worker.run())

    metrics = Metrics()
    metrics.watch(lambda: [worker.snapshot()])

    def states() -> list[str]:
        return [p["state"] for p in worker.snapshot()["partitions"]]

    def counted() -> dict[str, float]:  # kstage_partitions by state, from /metrics' text
        text = generate_latest(metrics.registry).decode()
        return {state: float(value) for state, value in re.findall(
            r'kstage_partitions\{group="[^"]*",state="(\w+)",topic="t"\} (\S+)', text)}

    try:
        await until(lambda: consumer.committed_offsets == {TP: 1, other: 1},
                    "both partitions committed")
        assert states() == ["running", "running"]
        assert counted() == dict.fromkeys(PARTITION_STATES, 0.0) | {"running": 2.0}
        consumer.leaderless.add(other)  # the brokers of partition 1's replicas are down
        assert states() == ["running", NO_LEADER]
        assert counted() == dict.fromkeys(PARTITION_STATES, 0.0) | {"running": 1.0,
                                                                    NO_LEADER: 1.0}
        consumer.leaderless.clear()  # a leader is elected
        assert states() == ["running", "running"]
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)


class HangingEnds(FakeConsumer):
    """A consumer whose end offsets are not answered while a partition has no leader
    (aiokafka's request waits out ``request_timeout_ms``, 40 s)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked = 0

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.asked += 1
        if self.leaderless & set(tps):
            await asyncio.Event().wait()  # cancelled, never answered
        return await super().end_offsets(tps)


def controlled(tmp_path: Path, consumer: FakeConsumer
               ) -> tuple[Worker, TopicControl, RecordingSink]:
    """A worker of ``consumer`` that an operator can pause (its control) and the sink
    recording what it wrote."""
    settings = worker_settings(tmp_path)
    control = TopicControl(settings.group_id(settings.groups[0]), TOPIC)
    sink = RecordingSink(key="i")
    return make_worker(settings, consumer, sink, control=control), control, sink


async def test_a_paused_topics_end_offsets_without_an_answer_hold_up_nothing(
        tmp_path: Path) -> None:
    """While an operator pause holds the topic, its end offsets are asked every few
    seconds; one partition's leader gone, the request hangs. The fetch loop keeps
    turning (no liveness failure), and a resume lands the other partition's events
    without waiting for the answer."""
    other = TopicPartition(TOPIC, 1)
    consumer = HangingEnds(TOPIC, {0: values({"i": 0}), 1: values({"i": 1})})
    worker, control, sink = controlled(tmp_path, consumer)
    run = asyncio.create_task(worker.run())
    try:
        await until(lambda: consumer.committed_offsets == {TP: 1, other: 1},
                    "both partitions committed")
        consumer.leaderless.add(other)
        assert control.pause("the test")
        await until(lambda: consumer.asked >= 1, "the end offsets asked")
        consumer.append(0, values({"i": 2}))
        await turns(worker, 3, timeout=10)  # the loop turns while the request hangs
        assert sorted(sink.written) == [0, 1], "fetched while paused"
        assert control.resume()
        await until(lambda: consumer.committed_offsets.get(TP) == 2,
                    "partition 0's event once resumed")
        assert sorted(sink.written) == [0, 1, 2]
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)


async def test_a_resumed_partition_without_a_leader_keeps_the_lag_its_end_offset_showed(
        tmp_path: Path) -> None:
    """Events produced while an operator pause holds the topic show as lag through the
    end offsets asked meanwhile. Resumed while one partition has no leader, that
    partition is fetched by nobody, so its last fetch's high-water mark predates the
    events: its lag must keep what the end offsets showed, not fall to 0 (a fresh-clone
    CI run showed ``{0: ('no_leader', 0)}``) until a fetch brings a fresher mark."""
    other = TopicPartition(TOPIC, 1)
    consumer = FakeConsumer(TOPIC, {0: values({"i": 0}), 1: values({"i": 1})})
    worker, control, sink = controlled(tmp_path, consumer)
    run = asyncio.create_task(worker.run())

    def lags() -> dict[int, tuple[str, int | None]]:
        return {p["partition"]: (p["state"], p["lag"])
                for p in worker.snapshot()["partitions"]}

    try:
        await until(lambda: consumer.committed_offsets == {TP: 1, other: 1},
                    "both partitions committed")
        assert control.pause("the test")
        await until(lambda: consumer.paused() == {TP, other}, "the fetch loop paused")
        consumer.append(0, values({"i": 2}))
        consumer.append(1, values({"i": 3}, {"i": 4}))
        await until(lambda: lags() == {0: ("paused", 1), 1: ("paused", 2)},
                    "the end offsets' lag while paused")
        consumer.leaderless.add(other)  # partition 1's brokers go down
        assert control.resume()
        await until(lambda: consumer.committed_offsets.get(TP) == 2,
                    "partition 0's event once resumed")
        await turns(worker, 3, timeout=10)
        assert lags() == {0: ("running", 0), 1: (NO_LEADER, 2)}
        consumer.leaderless.clear()  # a leader is elected: fetched, landed, lag 0
        await until(lambda: consumer.committed_offsets.get(other) == 3,
                    "partition 1's events once it has a leader")
        await until(lambda: lags() == {0: ("running", 0), 1: ("running", 0)}, "no lag")
        assert sorted(sink.written) == [0, 1, 2, 3, 4]
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)
