"""Worker behaviour without a broker: a fake consumer (real ConsumerRecords, test-driven
rebalances) and a sink whose writes the test holds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

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


async def test_a_revoke_mid_batch_commits_only_the_acked_prefix_and_loses_nothing(
        tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(6)))})
    sink = RecordingSink(hold=2)  # batches [0, 1] [2, 3] [4, 5]: the second write hangs
    worker = make_worker(worker_settings(tmp_path), consumer, sink)
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(sink.held.wait(), 10)
        await until(lambda: consumer.committed_offsets.get(TP) == 2, "the first commit")
        await consumer.rebalance(revoked={TP})  # the drain gives up after 1 s: fenced
        assert consumer.committed_offsets == {TP: 2}, "committed past the acked prefix"
        assert all(c[TP] <= 2 for c in consumer.commits)
        sink.release.set()  # too late: the fenced write was cancelled, never lands
        assert worker.committer.tracker.pending_count(TP) == 0
        assert sink.written == [0, 1]

        await consumer.rebalance(assigned={TP})  # back: re-read from the committed offset
        await until(lambda: consumer.committed_offsets.get(TP) == 6, "everything committed")
        assert sink.written == [0, 1, 2, 3, 4, 5], "lost or written twice"
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)
    assert consumer.committed_offsets == {TP: 6} and consumer.stopped
    assert worker.abandoned() == []


async def test_a_poison_record_is_dead_lettered_and_the_offset_moves_on(
        tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values({"i": 0}, b"{not json", {"i": 2})})
    sink = RecordingSink()
    drained = asyncio.Event()
    worker = make_worker(worker_settings(tmp_path), consumer, sink, drain=True,
                         on_drained=lambda _: drained.set())
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(drained.wait(), 10)
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)
    assert consumer.committed_offsets == {TP: 3}
    assert sink.written == [0, 2]
    lines = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [(d["topic"], d["partition"], d["offset"], d["error_type"]) for d in lines] == [
        (TOPIC, 0, 1, "processors.errors.PoisonMessage")]
    assert (worker.stats["dead_lettered"], worker.stats["processed"]) == (1, 3)


async def test_a_stop_while_a_write_hangs_commits_nothing_of_it(
        tmp_path: Path) -> None:
    """Phase 2 of a stop (cancelling run) abandons the hanging write: only acked work
    is committed, and the worker names what it abandoned."""
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(4)))})
    sink = RecordingSink(hold=2)
    worker = make_worker(worker_settings(tmp_path), consumer, sink)
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(sink.held.wait(), 10)
    await until(lambda: consumer.committed_offsets.get(TP) == 2, "the first commit")
    await stop_in_phase_two(worker, run)
    assert consumer.committed_offsets == {TP: 2} and sink.written == [0, 1]
    assert worker.abandoned() == ["t[0] offsets 2-3", "2 message(s) in flight"]
