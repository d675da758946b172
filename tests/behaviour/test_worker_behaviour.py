"""The worker's promises, written once and run against every harness
(:mod:`tests.behaviour.harness`): the fake consumer, the embedded broker and Apache Kafka.

* commit after ack, never before;
* each commit mode: ``batch`` commits once ``max_messages`` are acked (the rest at the
  stop), ``per_message`` writes and commits each message before the next,
  ``savepoint`` commits exactly up to the marked messages, ``none`` never commits,
  ``auto`` (aiokafka's auto-commit) commits what was fetched, written or not;
* the revoke fence: a revoked partition's write under way is neither committed nor
  landed by the old owner, and its new owner loses nothing;
* the revoke drain: the batch being processed when a revoke begins is shipped and
  committed by the drain, so a dead letter it wrote is not written again;
* dead letters: a poison message goes to the dead-letter file, or to the dead-letter
  topic, with its context, and the partition is committed past it;
* filters: a message the processor returns no rows for, and one the topic's
  ``filter:`` drops, is committed, not written, not dead-lettered;
* fan-out (``sinks:``): every row goes to every sink; a commit waits for the slowest;
* retry lanes: a partition waiting to retry holds only itself, the others move; a
  revoke ends the wait; a retry that succeeds lands the message in order;
* pause/resume (:mod:`actors.control`): a paused topic fetches nothing more, a resume
  loses nothing;
* stall liveness (:mod:`actors.liveness`): a sink hung past ``stall_after_s`` with lag
  behind it makes the process not live, until the partition moves; also a fresh group's
  first write (its lag counts from where the worker started reading), while a fresh
  partition with nothing to read has lag 0 and never stalls;
* drain (``kstage run --drain``): the worker says it is drained once everything is
  committed;
* two-phase stop: phase 1 waits for the write under way and commits it, phase 2
  cancels and commits nothing it cancelled;
* ``start_from``: latest skips the backlog, earliest reads it once more, committed
  resumes at the committed offset.

Broker only (marked ``broker_only``, the fake's run skipped with the reason): ``auto``,
which is aiokafka's auto-commit inside the real consumer, and the dead-letter topic,
which a Kafka producer writes. What only one side can show stays beside it: the fake's
exact interleavings in tests/actors/, the real broker's rebalance timing and whole
processes in tests/integration/.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from actors.control import TopicControl
from actors.liveness import StallWatch
from actors.worker import Worker
from processors.base import Message, Row
from processors.errors import PoisonMessage
from processors.json_rows import JsonRowsProcessor
from tests.behaviour.harness import PARTITIONS, BrokerHarness, Harness
from tests.kafkautil import create_topic, read_all, unique
from tests.kit import FailingRows, HeldSleep, RecordingSink, stop_in_phase_two, turns, until


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
        await worker.parts.committer.commit()  # whatever the worker would commit now
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


# --- Commit modes (settings.models.CommitMode, actors.worker.parts.committer.POLICIES) -------

async def stopped(worker: Worker, run: asyncio.Task[None]) -> None:
    """Phase 1 of a stop, awaited: whatever the mode commits at a stop is committed."""
    worker.stop()
    await asyncio.wait_for(run, 30)


async def test_batch_commits_once_max_messages_are_acked_and_the_rest_at_the_stop(
        harness: Harness, tmp_path: Path) -> None:
    sink = RecordingSink()
    worker = harness.worker(harness.settings(
        tmp_path, commit={"max_messages": 4, "max_interval_s": 600}), sink)
    run = asyncio.create_task(worker.run())
    await harness.produce([{"i": 0}, {"i": 1}])
    await until(lambda: sink.written == [0, 1], "a first write of 2", 30)
    await harness.produce([{"i": 2}, {"i": 3}])
    await harness.wait_committed(0, 4, "a commit once 4 messages were acked")
    assert worker.stats["committed"] == 1, "committed before max_messages were acked"
    await harness.produce([{"i": 4}])
    await until(lambda: sink.written == list(range(5)) and not worker.in_flight,
                "the fifth message acked", 30)
    await stopped(worker, run)
    assert await harness.committed(0) == 5, "the stop did not commit the acked rest"
    assert worker.stats["committed"] == 2, "committed before max_messages were acked"


async def test_per_message_writes_and_commits_each_message_before_the_next(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": i} for i in range(3)])
    sink = RecordingSink(hold=2)  # the second message's write hangs
    worker = harness.worker(harness.settings(tmp_path, commit={"mode": "per_message"}), sink)
    async with running(worker):
        await asyncio.wait_for(sink.held.wait(), 30)
        await harness.wait_committed(0, 1, "the first message committed on its own")
        assert sink.written == [0], "wrote past the message under way"
        sink.release.set()
        await harness.wait_committed(0, 3, "each message committed")
    assert sink.writes == 3 and sink.written == [0, 1, 2], "not one write per message"


class SavepointRows(JsonRowsProcessor):
    """json_rows asking for a commit after each value with ``save``."""

    def wants_savepoint(self, message: Message) -> bool:
        return bool(message.value.get("save"))


async def test_savepoint_commits_exactly_up_to_the_marked_messages(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": 0}, {"i": 1, "save": True}, {"i": 2}, {"i": 3}])
    sink = RecordingSink()
    worker = harness.worker(harness.settings(tmp_path, commit={"mode": "savepoint"}), sink,
                            processor_cls=SavepointRows)
    run = asyncio.create_task(worker.run())
    await harness.wait_committed(0, 2, "the savepoint committed")
    await until(lambda: sink.written == [0, 1, 2, 3], "every message written", 30)
    await stopped(worker, run)
    assert await harness.committed(0) == 2, "committed past the last savepoint"


async def test_none_writes_everything_and_never_commits(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": i} for i in range(3)])
    sink = RecordingSink()
    worker = harness.worker(harness.settings(tmp_path, commit={"mode": "none"}), sink)
    run = asyncio.create_task(worker.run())
    await until(lambda: sink.written == [0, 1, 2], "every message written", 30)
    await stopped(worker, run)
    assert await harness.committed(0) is None, "commit mode none committed"
    assert worker.stats["committed"] == 0


@pytest.mark.broker_only("auto is aiokafka's own auto-commit, inside the real consumer: "
                         "the fake consumer has none")
async def test_auto_commits_what_was_fetched_whether_or_not_the_sink_wrote_it(
        harness: Harness, tmp_path: Path) -> None:
    """Why ``kstage validate`` warns that ``auto`` can lose data."""
    await harness.produce([{"i": 0}, {"i": 1}])  # one poll
    sink = RecordingSink(hold=1)  # the first write hangs
    worker = harness.worker(harness.settings(
        tmp_path, commit={"mode": "auto", "max_interval_s": 0.2}), sink)
    async with running(worker):
        await asyncio.wait_for(sink.held.wait(), 30)
        await harness.wait_committed(0, 2, "the fetched offsets auto-committed")
        assert sink.written == [], "the sink wrote the held batch"
        sink.release.set()
        await until(lambda: sink.written == [0, 1], "the held write lands", 30)


# --- Dead letters (failure.dead_letter_path, failure.dead_letter_topic) ---------------

class PoisonRows(JsonRowsProcessor):
    """json_rows refusing a value with ``poison`` for good."""

    def transform(self, message: Message) -> Sequence[Row]:
        if message.value.get("poison"):
            raise PoisonMessage("a poison value")
        return super().transform(message)


async def test_a_poison_message_is_dead_lettered_to_the_file_with_its_context_and_passed(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": 0}, b"{not json", {"i": 2}])
    sink = RecordingSink()
    worker = harness.worker(harness.settings(tmp_path), sink)
    async with running(worker):
        await harness.wait_committed(0, 3, "committed past the poison message")
    assert sink.written == [0, 2], "the poison message was written"
    lines = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [(d["topic"], d["partition"], d["offset"], d["error_type"]) for d in lines] == [
        (harness.topic, 0, 1, "processors.errors.PoisonMessage")], lines
    assert (worker.stats["dead_lettered"], worker.stats["processed"]) == (1, 3)


@pytest.mark.broker_only("the dead-letter topic is written by a Kafka producer: the fake "
                         "consumer has no broker to produce to")
async def test_a_poison_message_is_dead_lettered_to_the_topic_before_it_is_committed(
        harness: Harness, tmp_path: Path) -> None:
    assert isinstance(harness, BrokerHarness)
    dlq = unique("dlq")
    await create_topic(harness.bootstrap, dlq)
    await harness.produce([{"i": 0}, {"poison": True}, {"i": 2}])
    sink = RecordingSink()
    worker = harness.worker(harness.settings(
        tmp_path, failure={"dead_letter_path": None, "dead_letter_topic": dlq}), sink,
        processor_cls=PoisonRows)
    async with running(worker):
        await harness.wait_committed(0, 3, "committed past the poison message")
    assert sink.written == [0, 2], "the poison message was written"
    assert not (tmp_path / "dead.jsonl").exists()
    (record,) = await read_all(harness.bootstrap, dlq, 1)
    context = {k.removeprefix("kstage.error."): v.decode() for k, v in record.headers
               if k.startswith("kstage.error.")}
    assert record.value == b'{"poison": true}', record
    assert (context["topic"], context["partition"], context["offset"]) == (
        harness.topic, "0", "1"), context
    assert "a poison value" in context["message"], context


# --- Filters ---------------------------------------------------------------------------

class DropsSkipped(JsonRowsProcessor):
    """json_rows returning no rows for a value with ``skip``."""

    def transform(self, message: Message) -> Sequence[Row]:
        return [] if message.value.get("skip") else super().transform(message)


async def test_a_message_the_processor_returns_no_rows_for_is_committed_not_dead_lettered(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": 0}, {"skip": True}, {"skip": True}, {"i": 3}])
    sink = RecordingSink()
    worker = harness.worker(harness.settings(tmp_path), sink, processor_cls=DropsSkipped)
    async with running(worker):
        await harness.wait_committed(0, 4, "committed past the messages without rows")
    assert sink.written == [0, 3], sink.rows
    assert not (tmp_path / "dead.jsonl").exists() and worker.stats["dead_lettered"] == 0


async def test_the_topic_filter_commits_what_it_filters_and_only_matching_rows_land(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": 0, "kind": "a"}, {"i": 1, "kind": "b"},
                           {"i": 2, "kind": "a", "test": True}, {"i": 3, "kind": "a"}])
    sink = RecordingSink()
    worker = harness.worker(harness.settings(tmp_path, topic={"filter": {
        "include": {"kind": ["a"]}, "exclude": {"test": [True]}}}), sink)
    async with running(worker):
        await harness.wait_committed(0, 4, "committed past the filtered messages")
    assert sink.written == [0, 3], sink.rows
    assert worker.stats["filtered"] == 2 and not (tmp_path / "dead.jsonl").exists()


# --- Fan-out (sinks:) ------------------------------------------------------------------

async def test_every_row_goes_to_every_sink_and_commits_wait_for_the_slowest(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": i} for i in range(4)])  # writes [0, 1] [2, 3]
    sinks = {"fast": RecordingSink(), "slow": RecordingSink(hold=2)}
    settings = harness.settings(tmp_path, topic={
        "sinks": [{"type": "jsonl", "path": name} for name in sinks]})
    worker = harness.worker(settings, lambda named: sinks[named.path])  # type: ignore[attr-defined,no-any-return]
    async with running(worker):
        await asyncio.wait_for(sinks["slow"].held.wait(), 30)
        await until(lambda: sinks["fast"].written == [0, 1, 2, 3], "the fast sink wrote all")
        await harness.wait_committed(0, 2, "what both sinks acked")
        await worker.parts.committer.commit()  # whatever the worker would commit now
        assert await harness.committed(0) == 2, "committed what the slow sink lacks"
        sinks["slow"].release.set()
        await harness.wait_committed(0, 4, "everything, once both acked")
    assert sinks["slow"].written == sinks["fast"].written == [0, 1, 2, 3]


# --- start_from committed, the retry lanes ---------------------------------------------

async def test_start_from_committed_resumes_at_the_committed_offset_and_reads_nothing_again(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": i, "phase": "old"} for i in range(3)])
    await harness.commit(0, 3)  # an earlier run's
    await harness.produce([{"i": i, "phase": "backlog"} for i in range(2)])
    sink = RecordingSink()
    worker = harness.worker(harness.settings(tmp_path, start_from="committed"), sink)
    async with running(worker):
        await harness.wait_committed(0, 5, "the backlog committed")
        await until(lambda: len(sink.rows) >= 2, "the backlog written")
    assert [row["phase"] for row in sink.rows] == ["backlog"] * 2, sink.rows
    assert worker.snapshot()["start_from_counts"] == {}


class FailsOnce(JsonRowsProcessor):
    """json_rows failing (retriably) the first time it sees a value with ``fail``."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.failed: set[int] = set()

    def transform(self, message: Message) -> Sequence[Row]:
        if message.value.get("fail") and message.offset not in self.failed:
            self.failed.add(message.offset)
            raise RuntimeError(f"failing once at offset {message.offset}")
        return super().transform(message)


async def test_a_retry_that_succeeds_lands_the_message_in_order_and_dead_letters_nothing(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": 0}, {"fail": True}, {"i": 2}])
    sink, sleep = RecordingSink(), HeldSleep()
    settings = harness.settings(tmp_path, failure={
        "mode": "retry", "max_retries": 1, "min_backoff_ms": 600_000,
        "max_backoff_ms": 600_000, "then": "continue"})
    worker = harness.worker(settings, sink, processor_cls=FailsOnce, sleep=sleep)
    sleep.stopped = worker.flow.intake_stopped
    async with running(worker):
        await asyncio.wait_for(sleep.waiting.wait(), 30)
        assert await harness.committed(0) in (None, 1), "committed past the waiting message"
        sleep.release.set()
        await harness.wait_committed(0, 3, "the retried message committed")
    assert sink.written == [0, 1, 2], "the retried message out of order or lost"
    assert worker.stats["retried"] == 1 and worker.stats["dead_lettered"] == 0
    assert not (tmp_path / "dead.jsonl").exists()


# --- Pause/resume (actors.control), stall liveness (actors.liveness), drain ------------

async def test_an_operator_pause_fetches_nothing_more_and_resume_loses_nothing(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": 0}, {"i": 1}])
    control = TopicControl(harness.group, harness.topic)
    sink = RecordingSink()
    worker = harness.worker(harness.settings(tmp_path), sink, control=control)
    async with running(worker):
        await harness.wait_committed(0, 2, "the first messages")
        assert control.pause("the test")
        await until(lambda: worker.snapshot()["paused_partitions"] == PARTITIONS,
                    "every partition paused", 30)
        await harness.produce([{"i": 2}, {"i": 3}])
        await turns(worker, 3)
        assert worker.snapshot()["paused"] and sink.written == [0, 1], "fetched while paused"
        assert await harness.committed(0) == 2
        assert control.resume()
        await harness.wait_committed(0, 4, "the messages produced during the pause")
    assert sink.written == [0, 1, 2, 3]


def lag(worker: Worker, partition: int) -> int | None:
    """``partition``'s lag in the worker's snapshot (what the stall watch reads)."""
    (row,) = [r for r in worker.snapshot()["partitions"] if r["partition"] == partition]
    value: int | None = row["lag"]
    return value


async def test_a_sink_that_hangs_past_the_stall_bound_with_lag_fails_liveness_until_it_moves(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": i} for i in range(6)])  # writes [0, 1] [2, 3] [4, 5]
    sink = RecordingSink(hold=2)  # the second write hangs
    worker = harness.worker(harness.settings(tmp_path), sink)
    now = [0.0]
    watch = StallWatch(stall_after_s=60, clock=lambda: now[0])
    async with running(worker):
        await asyncio.wait_for(sink.held.wait(), 30)
        await harness.wait_committed(0, 2, "the first write committed")
        await until(lambda: lag(worker, 0) == 4, "the lag behind the hung write", 30)
        watch.update([worker.snapshot()])
        assert watch.reasons() == []
        now[0] = 61  # past the bound, the write still hanging
        watch.update([worker.snapshot()])
        (reason,) = watch.reasons()
        assert f"{harness.topic}[0]: lag 4, the offset 2 has not moved for 61s" in reason
        sink.release.set()
        await harness.wait_committed(0, 6, "the hung write done")
        await until(lambda: lag(worker, 0) == 0, "no lag", 30)
        now[0] = 62
        watch.update([worker.snapshot()])
        assert watch.reasons() == [], "still stalled once it moved"


async def test_a_fresh_group_whose_first_write_hangs_fails_liveness_until_it_moves(
        harness: Harness, tmp_path: Path) -> None:
    """No committed offset yet: the lag counts from where the worker started reading
    (here the log start, ``auto_offset_reset: earliest``), so a first write that hangs
    is a stall like any other, not a partition without lag."""
    await harness.produce([{"i": i} for i in range(6)])  # writes [0, 1] [2, 3] [4, 5]
    sink = RecordingSink(hold=1)  # the first write hangs
    worker = harness.worker(harness.settings(tmp_path), sink)
    now = [0.0]
    watch = StallWatch(stall_after_s=60, clock=lambda: now[0])
    async with running(worker):
        await asyncio.wait_for(sink.held.wait(), 30)
        await until(lambda: lag(worker, 0) == 6, "the lag behind the hung first write", 30)
        assert await harness.committed(0) is None, "committed before the write was done"
        watch.update([worker.snapshot()])
        assert watch.reasons() == []
        now[0] = 61  # past the bound, the write still hanging
        watch.update([worker.snapshot()])
        (reason,) = watch.reasons()  # partition 1 (nothing to read) is not stalled
        assert f"{harness.topic}[0]: lag 6, the offset 0 has not moved for 61s" in reason
        sink.release.set()
        await harness.wait_committed(0, 6, "the hung write done")
        await until(lambda: lag(worker, 0) == 0, "no lag", 30)
        now[0] = 62
        watch.update([worker.snapshot()])
        assert watch.reasons() == [], "still stalled once it moved"


async def test_a_fresh_group_with_nothing_to_read_has_no_lag_and_never_stalls(
        harness: Harness, tmp_path: Path) -> None:
    """No committed offset and nothing to read: lag 0 (counted from the position the
    worker starts reading at, the log end here), not unknown, and never a stall."""
    sink = RecordingSink()
    worker = harness.worker(harness.settings(tmp_path), sink)
    now = [0.0]
    watch = StallWatch(stall_after_s=60, clock=lambda: now[0])
    async with running(worker):
        await until(lambda: bool(worker.flow.assigned) and all(
            lag(worker, p) == 0 for p in range(PARTITIONS)), "lag 0 on every partition", 30)
        watch.update([worker.snapshot()])
        now[0] = 61
        watch.update([worker.snapshot()])
        assert watch.reasons() == [], "an idle partition reported stalled"
    assert sink.written == [] and await harness.committed(0) is None


async def test_a_draining_worker_reports_drained_once_everything_is_committed(
        harness: Harness, tmp_path: Path) -> None:
    await harness.produce([{"i": i} for i in range(3)], 0)
    await harness.produce([{"i": 0}], 1)
    drained = asyncio.Event()
    sink = RecordingSink()
    worker = harness.worker(harness.settings(tmp_path), sink, drain=True,
                            on_drained=lambda _worker: drained.set())
    async with running(worker):
        await asyncio.wait_for(drained.wait(), 30)
        assert await harness.committed(0) == 3 and await harness.committed(1) == 1, \
            "drained before everything was committed"
    assert offsets(sink, 0) == [0, 1, 2] and offsets(sink, 1) == [0]
