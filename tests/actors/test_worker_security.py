"""A refused login at a worker's start: a configuration error at the process's start
(KafkaSecurityError, exit 2), but credentials that stopped working mid-run when a
restarted worker meets it (a rotated password): retried with backoff, named in the
worker's snapshot (``/readyz``), and the worker runs once the login works again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actors.kafka import KafkaSecurityError
from tests.fake_consumer import FakeConsumer
from tests.kit import TOPIC, TP, RecordingSink, make_worker, until, values, worker_settings

REFUSED = "the broker at 127.0.0.1:9 refused the SASL login of user 'kstage'"


class RefusingConsumer(FakeConsumer):
    """Refuses ``refusals`` starts (a fresh consumer is built for each attempt; this
    fake stands for all of them)."""

    def __init__(self, refusals: int) -> None:
        super().__init__(TOPIC, {0: values(*({"i": i} for i in range(4)))})
        self.refusals = refusals
        self.attempts = 0

    async def start(self) -> None:
        self.attempts += 1
        if self.attempts <= self.refusals:
            raise KafkaSecurityError(REFUSED)
        await super().start()


async def test_a_restarted_worker_retries_a_refused_login_and_says_so(
        tmp_path: Path) -> None:
    consumer = RefusingConsumer(refusals=2)
    sink = RecordingSink()
    worker = make_worker(worker_settings(tmp_path), consumer, sink, incarnation=1)
    run = asyncio.create_task(worker.run())
    try:
        await until(lambda: consumer.attempts == 2, "the second refused start")
        assert worker.snapshot()["security_problem"] == REFUSED
        await until(lambda: consumer.committed_offsets.get(TP) == 4, "everything committed")
        assert worker.snapshot()["security_problem"] is None
        assert consumer.attempts == 3 and sink.written == [0, 1, 2, 3]
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)


async def test_a_refused_login_at_the_process_start_is_a_configuration_error(
        tmp_path: Path) -> None:
    consumer = RefusingConsumer(refusals=1)
    worker = make_worker(worker_settings(tmp_path), consumer, RecordingSink())
    with pytest.raises(KafkaSecurityError, match="refused the SASL login"):
        await asyncio.wait_for(worker.run(), 10)
    assert consumer.attempts == 1
