"""Worker behaviour without a broker that only the fake consumer shows here: a poison
record dead-lettered with its context while the offset moves on. The promises both the
fake and the real brokers keep (commit after ack, the revoke fence, the two-phase stop)
are tests/behaviour's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.fake_consumer import FakeConsumer
from tests.kit import TOPIC, TP, RecordingSink, make_worker, values, worker_settings


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
