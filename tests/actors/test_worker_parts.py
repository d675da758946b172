"""A worker's parts are built once, when what they need exists (actors/worker/parts.py):
before its run the worker holds only what its status needs, and says so; the parts are
built once, each given its collaborators (none filled in later)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fake_consumer import FakeConsumer
from tests.kit import TOPIC, RecordingSink, assembled, make_worker, worker_settings


async def test_before_its_run_a_worker_has_a_status_and_no_parts(tmp_path: Path) -> None:
    worker = make_worker(worker_settings(tmp_path), FakeConsumer(TOPIC, {0: []}),
                         RecordingSink())
    status = worker.snapshot()
    assert (status["joined"], status["partitions"], status["security_problem"],
            status["waiting_for"], status["fetch_idle_s"]) == (False, [], None, None, 0.0)
    assert worker.status()["lag"] == 0 and worker.abandoned() == []
    assert worker.coordinator_reachable() and worker.task_group is None
    with pytest.raises(RuntimeError, match="no parts yet"):
        _ = worker.parts


async def test_the_parts_are_built_once_with_their_collaborators(tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: []})
    worker = make_worker(worker_settings(tmp_path), consumer, RecordingSink())
    async with assembled(worker, consumer) as parts:
        assert worker.parts is parts and worker.task_group is parts.rebalance.tasks
        assert parts.rebalance.consumer is consumer
        assert parts.process.committer is parts.committer is parts.rebalance.committer
        assert parts.pipeline.processor is not None
        with pytest.raises(RuntimeError, match="built once"):
            worker.assemble(consumer, [], parts.pipeline, parts.rebalance.tasks)
