"""A sink that cannot open at the worker's start (a SinkError: its catalog, storage or
identity provider out of reach) is opened again with backoff, its reason in the worker's
status for ``/readyz``; the worker neither crashes nor consumes before it opens
(actors/worker/opening.py). The end-to-end case, an identity provider down when
``kstage run`` starts: tests/integration/test_rest_catalog_oauth.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

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
    with pytest.raises(SinkError, match="out of reach"):
        await asyncio.wait_for(run, 5)
    assert not consumer.started and sink.written == []


async def test_a_fatal_error_at_open_is_not_retried(tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values({"i": 0})})
    sink = ClosedSink(FatalError("recording sink: refused for good"))
    worker = make_worker(worker_settings(tmp_path), consumer, sink)
    with pytest.raises(FatalError, match="refused for good"):
        await asyncio.wait_for(worker.run(), 5)
    assert sink.opens == 1 and not consumer.started
