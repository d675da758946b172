"""The worker's promises, written once and run against every harness
(:mod:`tests.behaviour.harness`): the fake consumer, the embedded broker and Apache Kafka.

* commit after ack, never before;
* the revoke fence: a revoked partition's write under way is neither committed nor
  landed by the old owner, and its new owner loses nothing;
* the revoke drain: the batch being processed when a revoke begins is shipped and
  committed by the drain, so a dead letter it wrote is not written again;
* retry lanes: a partition waiting to retry holds only itself, the others move;
* drain: phase 1 of a stop waits for the write under way and commits it;
* two-phase stop: phase 2 cancels, and commits nothing it cancelled;
* ``start_from``: latest skips the backlog, earliest reads it once more.

What only one side can show stays beside it: the fake's exact interleavings in
tests/actors/, the real broker's rebalance timing and whole processes in
tests/integration/.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from actors.worker import Worker
from processors.base import Message, Row
from processors.errors import PoisonMessage
from processors.json_rows import JsonRowsProcessor
from tests.behaviour.harness import Harness
from tests.kit import FailingRows, HeldSleep, RecordingSink, stop_in_phase_two, until


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[asyncio.Task[None]]:
    """``worker`` running; stopped at exit unless the test ended it (phase 1, then
    phase 2 after 10 s: a test that failed with a write held ends soon)."""
    run = asyncio.create_task(worker.run())
    try:
        yield run
    finally:
        if not run.done():
            worker.stop()
            await asyncio.wait([run], timeout=10)
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run


def offsets(sink: RecordingSink, partition: int) -> list[int]:
    """The offsets of ``partition`` that ``sink`` wrote, in write order."""
    return [int(r["_offset"]) for r in sink.rows if r["_partition"] == partition]


async def test_offsets_are_committed_after_the_sink_acked_them_never_before(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": i} for i in range(6)])
    sink = RecordingSink(hold=2)  # the second write hangs until released
    worker = harness.worker(harness.settings(tmp_path), sink)
    async with running(worker):
        await asyncio.wait_for(sink.held.wait(), 30)
        acked = len(sink.written)
        await harness.wait_committed(0, acked, "the acked prefix committed")
        await worker.committer.commit()  # whatever the worker would commit now
        assert await harness.committed(0) == acked, "committed work the sink holds"
        sink.release.set()
        await harness.wait_committed(0, 6, "everything committed once acked")
    assert sink.written == list(range(6))


async def test_a_revoked_partitions_write_under_way_is_fenced_and_its_new_owner_loses_nothing(
        harness: Harness, tmp_path: Path) -> None:
    sink = RecordingSink(gated=True)  # a write waits for the gate of its first offset
    sink.gate(0).set()
    for partition in (0, 1):
        await harness.produce([{"i": 0}, {"i": 1}], partition)
    worker = harness.worker(harness.settings(tmp_path), sink)
    async with running(worker):
        for partition in (0, 1):
            await harness.wait_committed(partition, 2, f"partition {partition}'s first batch")
        for partition in (0, 1):
            await harness.produce([{"i": 2}, {"i": 3}], partition)
        await until(lambda: 2 in sink.attempts, "a write of offsets 2-3 under way", 30)
        lost = await harness.hand_over(worker)  # the drain gives up after 1 s: fenced
        assert lost, "the second member took nothing"
        for partition in lost:
            assert await harness.committed(partition) == 2, "committed the fenced write"
        sink.gate(2).set()  # too late for the fenced writes: they never land
        (kept,) = {0, 1} - lost
        await harness.wait_committed(kept, 4, "the partition the worker kept going on")
        for partition in lost:
            assert offsets(sink, partition) == [0, 1], "the old owner wrote after the revoke"
            assert await harness.committed(partition) == 2
        await harness.take_back(worker)  # back: read again from the committed offset
        for partition in lost:
            await harness.wait_committed(partition, 4, "the partition back, caught up")
    for partition in (0, 1):
        assert offsets(sink, partition) == [0, 1, 2, 3], "lost or written twice"


def held_then_poison() -> tuple[type[JsonRowsProcessor], asyncio.Event, asyncio.Event]:
    """json_rows whose transform of a value with ``hold`` waits until the test lets it
    go, and which refuses a value with ``poison`` for good; (processor, waiting, go)."""
    waiting, go = asyncio.Event(), asyncio.Event()

    class HeldThenPoison(JsonRowsProcessor):
        async def transform(self, message: Message) -> Sequence[Row]:  # type: ignore[override]
            if message.value.get("hold"):
                waiting.set()
                await go.wait()
            if message.value.get("poison"):
                raise PoisonMessage("a poison value")
            return super().transform(message)

    return HeldThenPoison, waiting, go


async def test_the_batch_under_way_at_a_revoke_is_drained_and_its_dead_letter_written_once(
        harness: Harness, tmp_path: Path) -> None:
    """A revoke begins while the process loop walks a batch of the revoked partition;
    the walk then dead-letters a poison value. The drain ships the batch and commits
    it, so whoever reads the partition next starts after it: one dead letter."""
    processor, waiting, go = held_then_poison()
    await harness.produce([{"hold": True}, {"poison": True}], 0)  # one batch (2 a poll)
    sink = RecordingSink()
    settings = harness.settings(tmp_path, supervisor={"shutdown_grace_s": 20})
    worker = harness.worker(settings, sink, processor_cls=processor)
    async with running(worker):
        await asyncio.wait_for(waiting.wait(), 30)
        handing = asyncio.create_task(harness.hand_over(worker))
        await until(lambda: harness.tp(0) not in worker.flow.assigned or handing.done(),
                    "the revoke begun", 60)
        go.set()  # the walk goes on inside the revoke's drain
        await asyncio.wait_for(handing, 90)
        assert await harness.committed(0) == 2, "the drain did not commit the batch"
        await harness.take_back(worker)
        await harness.produce([{"i": 2}], 0)
        await harness.wait_committed(0, 3, "partition 0 back and going on")
    dead = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [(d["partition"], d["offset"]) for d in dead] == [(0, 1)], dead
    assert offsets(sink, 0) == [0, 2], sink.rows


def lane_worker(harness: Harness, tmp_path: Path, sink: RecordingSink, sleep: HeldSleep,
                mode: str = "batch", **group: object) -> Worker:
    """A worker of :class:`FailingRows` that retries once after ``sleep``, then
    dead-letters and goes on."""
    settings = harness.settings(
        tmp_path, commit={"mode": mode}, max_poll_records=10, **group,
        failure={"mode": "retry", "max_retries": 1, "min_backoff_ms": 600_000,
                 "max_backoff_ms": 600_000, "then": "continue"})
    worker = harness.worker(settings, sink, processor_cls=FailingRows, sleep=sleep)
    sleep.stopped = worker.flow.intake_stopped
    return worker


@pytest.mark.parametrize("mode", ["batch", "per_message"])
async def test_a_retry_wait_holds_only_its_partition_and_keeps_its_order(
        harness: Harness, tmp_path: Path, mode: str) -> None:
    await harness.produce([{"i": 0}, {"fail": True}, {"i": 2}], 0)
    await harness.produce([{"i": 10}, {"i": 11}], 1)
    sink, sleep = RecordingSink(), HeldSleep()
    worker = lane_worker(harness, tmp_path, sink, sleep, mode)
    async with running(worker):
        await asyncio.wait_for(sleep.waiting.wait(), 30)
        await harness.wait_committed(1, 2, "partition 1 committed during the wait")
        await harness.produce([{"i": 12}], 1)
        await harness.wait_committed(1, 3, "more of partition 1 during the wait")
        assert await harness.committed(0) in (None, 1), "committed past the waiting message"
        assert offsets(sink, 0) == [0], "wrote past the waiting message"
        assert worker.snapshot()["paused_partitions"] == 1, "the waiting partition fetches"
        await harness.produce([{"i": 3}], 0)  # behind the wait
        sleep.release.set()  # the retry fails again: dead-lettered, then in order
        await harness.wait_committed(0, 4, "partition 0 going on after the dead letter")
    assert offsets(sink, 0) == [0, 2, 3] and offsets(sink, 1) == [0, 1, 2], sink.rows
    dead = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [(d["partition"], d["offset"], d["attempts"]) for d in dead] == [(0, 1, 2)]
    assert worker.in_flight == 0 and not worker.flow.lanes


async def test_a_revoke_ends_a_retry_wait_and_commits_nothing_past_it(
        harness: Harness, tmp_path: Path) -> None:
    for partition in (0, 1):
        await harness.produce([{"i": 0}, {"fail": True}, {"i": 2}], partition)
    sink, sleep = RecordingSink(), HeldSleep()
    worker = lane_worker(harness, tmp_path, sink, sleep)
    async with running(worker):
        await until(lambda: len(sleep.calls) == 2, "both partitions waiting", 30)
        # Never released: the revoke itself must end the waits.
        lost = await harness.hand_over(worker)
        assert lost
        waiting = {tp.partition for tp in worker.flow.lanes}
        assert not waiting & lost, "a revoked partition still waits to retry"
        for partition in lost:
            assert await harness.committed(partition) == 1, "committed past the wait"
            assert offsets(sink, partition) == [0]
        assert worker.stats["dead_lettered"] == 0
    for partition in (0, 1):
        assert await harness.committed(partition) == 1, "a stop abandons the wait"
    assert not (tmp_path / "dead.jsonl").exists()


async def test_phase_one_of_a_stop_waits_for_the_write_under_way_and_commits_it(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": i} for i in range(4)])
    sink = RecordingSink(hold=2)
    worker = harness.worker(harness.settings(tmp_path), sink)
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(sink.held.wait(), 30)
    worker.stop()
    await asyncio.wait([run], timeout=0.3)
    assert not run.done(), "phase 1 returned with a write under way"
    sink.release.set()
    await asyncio.wait_for(run, 30)
    assert await harness.committed(0) == 4, "the drained write was not committed"
    assert sink.written == [0, 1, 2, 3] and worker.abandoned() == []


async def test_phase_two_of_a_stop_cancels_and_commits_nothing_it_cancelled(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": i} for i in range(4)])
    sink = RecordingSink(hold=2)
    worker = harness.worker(harness.settings(tmp_path), sink)
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(sink.held.wait(), 30)
    acked = len(sink.written)
    await harness.wait_committed(0, acked, "the acked prefix")
    await stop_in_phase_two(worker, run)
    await harness.close()  # the cancelled worker's consumer has left the group
    assert await harness.committed(0) == acked, "committed cancelled work"
    assert sink.written == list(range(acked))
    assert worker.abandoned() == [f"{harness.topic}[0] offsets {acked}-3",
                                  f"{4 - acked} message(s) in flight"]


@pytest.mark.parametrize("start_from", ["latest", "earliest"])
async def test_start_from_seeks_at_start_and_commits_the_sought_offset(
        harness: Harness, tmp_path: Path, start_from: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="actors.worker.start_from")
    await harness.produce([{"i": i, "phase": "old"} for i in range(3)])
    await harness.commit(0, 3)  # an earlier run's
    await harness.produce([{"i": i, "phase": "backlog"} for i in range(4)])

    sink = RecordingSink()
    second = harness.worker(harness.settings(tmp_path, start_from=start_from), sink)
    async with running(second):
        if start_from == "latest":
            await harness.wait_committed(0, 7, "the end offset committed at once")
            assert second.snapshot()["start_from_counts"].get(0) == 4
            await harness.produce([{"i": i, "phase": "new"} for i in range(2)])
            await harness.wait_committed(0, 9, "the new messages committed")
        else:
            await until(lambda: len(sink.written) == 7, "everything read again", 30)
            await harness.wait_committed(0, 7, "everything committed")
            assert second.snapshot()["start_from_counts"].get(0) == 3
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert ("start_from latest: partition 0 at end offset 7, skipped 4 message(s) (from "
            "committed offset 3)" if start_from == "latest" else "start_from earliest: "
            "partition 0 at beginning offset 0, reading 3 message(s) again (committed offset "
            "3)") in said, said
    phases = [row["phase"] for row in sink.rows]
    assert phases == (["new"] * 2 if start_from == "latest"
                      else ["old"] * 3 + ["backlog"] * 4), sink.rows
