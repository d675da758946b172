"""A lost group membership (no heartbeat answered for a session: a network partition,
a coordinator out of reach) fences the worker's partitions without a drain or a commit,
says so in the worker's snapshot, and rejoins; after the rejoin nothing is lost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from processors.base import Message, Row
from processors.json_rows import JsonRowsProcessor
from tests.fake_consumer import FakeConsumer
from tests.kit import TOPIC, TP, RecordingSink, make_worker, until, values, worker_settings

SESSION = {"session_timeout_ms": 1000, "heartbeat_interval_ms": 100}


async def test_silent_heartbeats_fence_the_hanging_write_and_rejoin(
        tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(6)))})
    sink = RecordingSink(hold=2)  # batches [0, 1] [2, 3] [4, 5]: the second write hangs
    worker = make_worker(worker_settings(tmp_path, **SESSION), consumer, sink)
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(sink.held.wait(), 10)
        await until(lambda: consumer.committed_offsets.get(TP) == 2, "the first commit")
        assert worker.snapshot()["membership_lost"] is None
        silent_from = time.monotonic()
        consumer.heartbeats = False  # the coordinator stops answering
        await until(lambda: consumer.rejoins == 1, "the rejoin", timeout=5)
        fenced_after = time.monotonic() - silent_from
        # the session (1 s) less the margin (one heartbeat interval, 0.1 s)
        assert 0.85 <= fenced_after < 1.5, fenced_after
        lost = worker.snapshot()["membership_lost"]
        assert lost is not None and "lost its group membership" in lost, lost
        assert "partitions [0] fenced" in lost and "session_timeout_ms 1000" in lost
        assert worker.snapshot()["partitions"] == [], "nothing assigned while lost"
        assert worker.parts.committer.offsets.pending_count(TP) == 0
        sink.release.set()  # the write was cancelled by the fence: it never lands
        await asyncio.sleep(0.3)
        assert sink.written == [0, 1]
        assert consumer.commits == [{TP: 2}], "a commit while the membership was lost"
        assert consumer.rejoins == 1, "one rejoin per loss"

        # aiokafka's rejoin: the old assignment revoked, a new one given; the positions
        # come from the committed offset.
        consumer.heartbeats = True
        await consumer.rebalance(revoked={TP})
        await consumer.rebalance(assigned={TP})
        assert worker.snapshot()["membership_lost"] is None
        await until(lambda: consumer.committed_offsets.get(TP) == 6, "everything committed")
        assert sink.written == [0, 1, 2, 3, 4, 5], "lost or written twice"
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)
    assert consumer.rejoins == 1


async def test_answered_heartbeats_keep_the_partitions(
        tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(4)))})
    sink = RecordingSink()
    worker = make_worker(worker_settings(tmp_path, **SESSION), consumer, sink)
    run = asyncio.create_task(worker.run())
    try:
        await until(lambda: consumer.committed_offsets.get(TP) == 4, "everything committed")
        await asyncio.sleep(2.5)  # more than two sessions
        assert consumer.rejoins == 0 and worker.snapshot()["membership_lost"] is None
        assert [p["partition"] for p in worker.snapshot()["partitions"]] == [0]
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)


class SlowProbe(FakeConsumer):
    """A consumer whose coordinator is out of reach and whose security probe hangs (a
    probe connection to a black-holed broker waits for its timeout)."""

    def __init__(self) -> None:
        super().__init__(TOPIC, {0: values(*({"i": i} for i in range(2)))})
        self._coordinator = SimpleNamespace(coordinator_id=None)  # out of reach
        self.probes = 0

    async def diagnose(self) -> str | None:
        self.probes += 1
        await asyncio.sleep(30)
        return None


async def test_a_hanging_security_probe_never_holds_the_fence_back(
        tmp_path: Path) -> None:
    consumer = SlowProbe()
    worker = make_worker(
        worker_settings(tmp_path, session_timeout_ms=6000, heartbeat_interval_ms=500),
        consumer, RecordingSink())
    run = asyncio.create_task(worker.run())
    try:
        await until(lambda: consumer.committed_offsets.get(TP) == 2, "the first commit")
        silent_from = time.monotonic()
        consumer.heartbeats = False
        await until(lambda: consumer.probes == 1, "the probe (3 s out of reach)", timeout=10)
        await until(lambda: consumer.rejoins == 1, "the fence", timeout=10)
        assert time.monotonic() - silent_from < 7, "the probe held the fence back"
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)  # the hanging probe does not hold the stop


async def test_a_membership_lost_while_a_revoke_drains_fences_the_batch_under_way(
        tmp_path: Path) -> None:
    """A revoke's drain ships the batch being processed when it began; when the
    membership is lost meanwhile (no heartbeat answered for a session), that batch is
    fenced too: neither written nor committed (the partition may be another's now)."""
    waiting, go = asyncio.Event(), asyncio.Event()

    class Held(JsonRowsProcessor):
        async def transform(self, message: Message) -> Sequence[Row]:  # type: ignore[override]
            if message.value.get("hold"):
                waiting.set()
                await go.wait()
            return super().transform(message)

    consumer = FakeConsumer(TOPIC, {0: values({"hold": True}, {"i": 1}), 1: []})
    sink = RecordingSink()
    settings = worker_settings(tmp_path, supervisor={"shutdown_grace_s": 20}, **SESSION)
    worker = make_worker(settings, consumer, sink, processor_cls=Held)
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(waiting.wait(), 10)
        revoking = asyncio.create_task(consumer.rebalance(revoked={TP}))
        await until(lambda: TP not in worker.flow.assigned, "the revoke begun")
        consumer.heartbeats = False  # partition 1 is still assigned: the watch looks
        await until(lambda: worker.snapshot()["membership_lost"] is not None,
                    "the membership lost")
        go.set()  # the walk of partition 0 ends inside the drain
        await asyncio.wait_for(revoking, 30)
        assert sink.rows == [], "wrote the batch under way after the membership was lost"
        assert TP not in consumer.committed_offsets, consumer.commits
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)
