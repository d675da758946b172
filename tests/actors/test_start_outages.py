"""Outages at a worker's start (actors/worker/opening.py): a sink that cannot open (a
SinkError: its catalog, storage or identity provider out of reach) is opened again with
backoff, and a consumer whose brokers do not answer is started again with backoff, each
reason in the worker's status for ``/readyz``; the worker neither crashes nor consumes
before both are up. End to end: an identity provider down when ``kstage run`` starts
(tests/integration/test_rest_catalog_oauth.py), the broker not up yet
(tests/integration/test_broker_restart.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka.errors import KafkaConnectionError

from actors.errors import FatalError, SinkError
from tests.fake_consumer import FakeConsumer
from tests.kit import TOPIC, TP, RecordingSink, make_worker, until, values, worker_settings


class ClosedSink(RecordingSink):
    """A sink whose ``open`` fails (SinkError) until :attr:`reachable` is set."""

    def __init__(self, error: Exception | None = None) -> None:
        super().__init__()
        self.reachable = False
        self.opens = 0
        self.error = error or SinkError("recording sink: its catalog is out of reach")

    async def open(self) -> None:
        self.opens += 1
        if not self.reachable:
            raise self.error


async def test_a_sink_out_of_reach_at_start_is_opened_again_and_said(tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(4)))})
    sink = ClosedSink()
    worker = make_worker(worker_settings(tmp_path), consumer, sink)
    run = asyncio.create_task(worker.run())
    try:
        await until(lambda: sink.opens >= 2, "the second open")
        assert worker.snapshot()["security_problem"] == \
            "recording sink: its catalog is out of reach"
        assert not consumer.started and sink.written == [], "consumed before the sink opened"
        assert not run.done()
        sink.reachable = True
        await until(lambda: consumer.committed_offsets.get(TP) == 4, "everything committed")
        assert sink.written == [0, 1, 2, 3]
        assert worker.snapshot()["security_problem"] is None
        assert worker.restarts == 0
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)


async def test_a_stop_ends_the_wait_without_consuming(tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values({"i": 0})})
    sink = ClosedSink()
    worker = make_worker(worker_settings(tmp_path), consumer, sink)
    run = asyncio.create_task(worker.run())
    await until(lambda: sink.opens >= 1, "the first open")
    worker.stop()
    await asyncio.wait_for(run, 5)  # ends, no crash: nothing to commit
    assert not consumer.started and sink.written == []


async def test_a_fatal_error_at_open_is_not_retried(tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values({"i": 0})})
    sink = ClosedSink(FatalError("recording sink: refused for good"))
    worker = make_worker(worker_settings(tmp_path), consumer, sink)
    with pytest.raises(FatalError, match="refused for good"):
        await asyncio.wait_for(worker.run(), 5)
    assert sink.opens == 1 and not consumer.started


class NotUpYet(FakeConsumer):
    """A consumer whose brokers do not answer its first ``down`` starts."""

    def __init__(self, down: int) -> None:
        super().__init__(TOPIC, {0: values({"i": 0}, {"i": 1})})
        self.down, self.starts = down, 0

    async def start(self) -> None:
        self.starts += 1
        if self.starts <= self.down:
            raise KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 9)]")
        await super().start()


async def test_brokers_not_up_at_start_are_waited_for_and_said(tmp_path: Path) -> None:
    consumer = NotUpYet(down=2)
    sink = RecordingSink()
    worker = make_worker(worker_settings(tmp_path), consumer, sink)
    run = asyncio.create_task(worker.run())
    try:
        await until(lambda: consumer.starts >= 2, "the second start")
        problem = worker.snapshot()["security_problem"]
        assert problem is not None and problem.startswith(
            "cannot reach the Kafka brokers at 127.0.0.1:9: "), problem
        assert "Unable to bootstrap" in problem and not run.done()
        await until(lambda: consumer.committed_offsets.get(TP) == 2, "everything committed")
        assert consumer.starts == 3 and sink.written == [0, 1]
        assert worker.snapshot()["security_problem"] is None and worker.restarts == 0
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)


async def test_a_stop_ends_the_wait_for_the_brokers(tmp_path: Path) -> None:
    consumer = NotUpYet(down=1000)
    worker = make_worker(worker_settings(tmp_path), consumer, RecordingSink())
    run = asyncio.create_task(worker.run())
    await until(lambda: consumer.starts >= 1, "the first start")
    worker.stop()
    await asyncio.wait_for(run, 5)  # ends, no crash: nothing to commit
    assert consumer.stopped  # each failed start's connections closed
    assert consumer.committed_offsets == {}
