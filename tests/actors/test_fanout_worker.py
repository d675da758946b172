"""A worker with a fan-out (``sinks:``) and a fake consumer: a revoke and a stop while one
sink's write hangs commit only what every sink acked, and lose nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

from actors.worker import Worker
from tests.fake_consumer import FakeConsumer
from tests.kit import (
    TOPIC,
    TP,
    RecordingSink,
    make_worker,
    stop_in_phase_two,
    until,
    values,
    worker_settings,
)


def fan_out_worker(tmp_path: Path, consumer: FakeConsumer,
                   sinks: dict[str, RecordingSink]) -> Worker:
    """A worker whose topic fans out to ``sinks`` (by name: jsonl sinks of that path)."""
    settings = worker_settings(tmp_path, topic={
        "sinks": [{"type": "jsonl", "path": name} for name in sinks]})
    return make_worker(settings, consumer,
                       lambda named: sinks[named.path])  # type: ignore[attr-defined]


async def test_a_revoke_while_one_sink_hangs_commits_what_every_sink_acked(
        tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(6)))})
    fast, slow = RecordingSink(), RecordingSink(hold=2)  # batches [0, 1] [2, 3] [4, 5]
    worker = fan_out_worker(tmp_path, consumer, {"fast": fast, "slow": slow})
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(slow.held.wait(), 10)
        await until(lambda: fast.written == [0, 1, 2, 3, 4, 5], "the fast sink wrote all")
        await until(lambda: consumer.committed_offsets.get(TP) == 2, "the first commit")
        await consumer.rebalance(revoked={TP})  # the drain gives up after 1 s: fenced
        assert all(c[TP] <= 2 for c in consumer.commits), \
            "committed past what the slow sink acked"
        slow.release.set()  # too late: the fenced write was cancelled, never lands
        assert slow.written == [0, 1]
        assert worker.parts.committer.offsets.pending_count(TP) == 0

        await consumer.rebalance(assigned={TP})  # back: re-read from the committed offset
        await until(lambda: consumer.committed_offsets.get(TP) == 6, "everything committed")
        assert slow.written == [0, 1, 2, 3, 4, 5], "lost or written twice"
        assert fast.written == [0, 1, 2, 3, 4, 5, 2, 3, 4, 5], "re-read: at-least-once"
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)
    assert consumer.committed_offsets == {TP: 6} and worker.abandoned() == []


async def test_a_stop_while_one_sink_hangs_commits_nothing_that_sink_lacks(
        tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(4)))})
    fast, slow = RecordingSink(), RecordingSink(hold=2)
    worker = fan_out_worker(tmp_path, consumer, {"fast": fast, "slow": slow})
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(slow.held.wait(), 10)
    await until(lambda: fast.written == [0, 1, 2, 3], "the fast sink wrote all")
    await until(lambda: consumer.committed_offsets.get(TP) == 2, "the first commit")
    await stop_in_phase_two(worker, run)
    assert consumer.committed_offsets == {TP: 2} and slow.written == [0, 1]
    assert worker.abandoned() == ["t[0] offsets 2-3", "2 message(s) in flight"]
