"""Worker behaviour without a broker: a fake consumer (real ConsumerRecords, test-driven
rebalances) and a sink whose writes the test holds."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from actors.sinks import Sink
from actors.worker import Worker
from processors.base import Row
from processors.json_rows import JsonRowsProcessor
from settings import load_settings
from tests.fake_consumer import FakeConsumer, patch_consumer
from tests.kafkautil import write_config

TOPIC = "t"
TP = TopicPartition(TOPIC, 0)


class GateSink(Sink):
    """Records what it wrote; its ``hold``-th write waits until released."""

    type = "gate"

    def __init__(self, hold: int | None = None) -> None:
        self.written: list[int] = []
        self.writes = 0
        self.hold = hold
        self.held, self.release = asyncio.Event(), asyncio.Event()

    async def write(self, rows: Sequence[Row]) -> None:
        self.writes += 1
        if self.writes == self.hold:
            self.held.set()
            await self.release.wait()
        self.written.extend(int(r["_offset"]) for r in rows)


def make_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, consumer: FakeConsumer,
                sink: GateSink, *, group_keys: dict[str, Any] | None = None,
                **kwargs: Any) -> Worker:
    cfg = write_config(tmp_path / "kstage.yml", "127.0.0.1:9", "g-fake",
                       [{"topic": TOPIC, "processor": "json_rows"}],
                       commit={"mode": "batch", "max_messages": 1, "max_interval_s": 0.2},
                       supervisor={"shutdown_grace_s": 1}, max_poll_records=2,
                       **(group_keys or {}))
    settings = load_settings(cfg)
    group = settings.groups[0]
    patch_consumer(monkeypatch, consumer)
    monkeypatch.setattr("actors.worker.bound.build_sink", lambda _settings: sink)
    return Worker(settings=settings, group=group, topic=group.topics[0],
                  processor_cls=JsonRowsProcessor, bootstrap="127.0.0.1:9", **kwargs)


async def until(predicate: Callable[[], bool], what: str, timeout: float = 10) -> None:
    """Wait (bounded) until ``predicate`` holds."""
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def stop_in_phase_two(worker: Worker, run: asyncio.Task[None]) -> None:
    """A two-phase stop during a write that hangs: phase 1 (stop intake) must keep
    waiting for it; phase 2 cancels the worker."""
    worker.stop_intake()
    await asyncio.wait([run], timeout=0.5)
    assert not run.done(), "phase 1 waits for the write under way"
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


def values(*items: Any) -> list[bytes | None]:
    return [v if isinstance(v, bytes) else json.dumps(v).encode() for v in items]


async def test_a_revoke_mid_batch_commits_only_the_acked_prefix_and_loses_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(6)))})
    sink = GateSink(hold=2)  # batches [0, 1] [2, 3] [4, 5]: the second write hangs
    worker = make_worker(tmp_path, monkeypatch, consumer, sink)
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
        worker.stop_intake()
        await asyncio.wait_for(run, 10)
    assert consumer.committed_offsets == {TP: 6} and consumer.stopped
    assert worker.abandoned() == []


async def test_a_poison_record_is_dead_lettered_and_the_offset_moves_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = FakeConsumer(TOPIC, {0: values({"i": 0}, b"{not json", {"i": 2})})
    sink = GateSink()
    drained = asyncio.Event()
    worker = make_worker(tmp_path, monkeypatch, consumer, sink, drain=True,
                         on_drained=lambda _: drained.set())
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(drained.wait(), 10)
    finally:
        worker.stop_intake()
        await asyncio.wait_for(run, 10)
    assert consumer.committed_offsets == {TP: 3}
    assert sink.written == [0, 2]
    lines = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [(d["topic"], d["partition"], d["offset"], d["error_type"]) for d in lines] == [
        (TOPIC, 0, 1, "processors.errors.PoisonMessage")]
    assert (worker.stats["dead_lettered"], worker.stats["processed"]) == (1, 3)


async def test_a_stop_while_a_write_hangs_commits_nothing_of_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Phase 2 of a stop (cancelling run) abandons the hanging write: only acked work
    is committed, and the worker names what it abandoned."""
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(4)))})
    sink = GateSink(hold=2)
    worker = make_worker(tmp_path, monkeypatch, consumer, sink)
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(sink.held.wait(), 10)
    await until(lambda: consumer.committed_offsets.get(TP) == 2, "the first commit")
    await stop_in_phase_two(worker, run)
    assert consumer.committed_offsets == {TP: 2} and sink.written == [0, 1]
    assert worker.abandoned() == ["t[0] offsets 2-3", "2 message(s) in flight"]
