"""A worker whose sink stores Kafka offsets (as an Iceberg table does), with a fake consumer:
assigned partitions stay paused until the sink said where it holds them, the rebalance does
not wait for the sink, and the partition resumes there."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from aiokafka import TopicPartition

from actors.sinks import Position, SinkCapabilities
from processors.base import Row
from tests.fake_consumer import FakeConsumer
from tests.kit import TOPIC, TP, RecordingSink, make_worker, until, values, worker_settings


class TableLikeSink(RecordingSink):
    """Holds partition 0 up to ``holds``; answers ``assigned`` once released."""

    type = "table-like"
    capabilities = SinkCapabilities(stores_offsets=True)

    def __init__(self, holds: int) -> None:
        super().__init__()
        self.holds = holds
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()
        self.revoked_parts: list[tuple[str, int]] = []

    async def write_at(self, rows: Sequence[Row], position: Position) -> None:
        await self.write([r for r in rows if int(r["_offset"]) >= self.holds])

    async def assigned(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self.asked.set()
        await self.answer.wait()
        return {(TP.topic, TP.partition): self.holds} if (TP.topic, TP.partition) in \
            partitions else {}

    async def revoked(self, partitions: Sequence[tuple[str, int]], timeout_s: float) -> None:
        self.revoked_parts += partitions


async def test_a_partition_waits_paused_for_its_table_then_resumes_where_it_holds_it(
        tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(10)))},
                            assign_on_poll=False)
    sink = TableLikeSink(holds=6)
    worker = make_worker(worker_settings(tmp_path), consumer, sink)
    run = asyncio.create_task(worker.run())
    try:
        await until(lambda: consumer.listener is not None and worker.task_group is not None,
                    "the worker subscribed")
        # The rebalance ends although the sink has not answered yet ...
        await asyncio.wait_for(consumer.rebalance(assigned={TP}), 2)
        assert sink.asked.is_set()
        await asyncio.sleep(0.5)  # ... and nothing of the partition is fetched meanwhile
        assert TP in consumer.paused() and sink.written == [] and worker.stats["consumed"] == 0
        sink.answer.set()
        await until(lambda: consumer.committed_offsets.get(TP) == 10, "everything committed")
        assert sink.written == [6, 7, 8, 9]  # resumed where the table holds it
        assert consumer.commits[0] == {TP: 6}  # that offset is committed at once
        assert worker.stats["consumed"] == 4  # nothing before it was read
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)


async def test_a_revoke_while_the_table_is_asked_never_seeks_the_next_owners_partition(
        tmp_path: Path) -> None:
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(4)))})
    sink = TableLikeSink(holds=3)
    worker = make_worker(worker_settings(tmp_path), consumer, sink)
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(sink.asked.wait(), 10)
        await consumer.rebalance(revoked={TP})  # taken away while the sink is asked
        assert sink.revoked_parts == [(TP.topic, TP.partition)]
        assert TP not in worker.flow.held
        sink.asked.clear()
        sink.answer.set()
        await consumer.rebalance(assigned={TP})  # back: asked again, answered at once
        await until(lambda: consumer.committed_offsets.get(TP) == 4, "everything committed")
        assert sink.written == [3]
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)



class TwoPartitionTable(RecordingSink):
    """A table that holds partition 0 up to ``holds[0]`` and partition 1 up to
    ``holds[1]``; keeps the offsets of the rows it is given."""

    type = "table-like"
    capabilities = SinkCapabilities(stores_offsets=True)

    def __init__(self, holds: dict[int, int]) -> None:
        super().__init__()
        self.holds = holds
        self.given: list[tuple[int, int]] = []

    async def write_at(self, rows: Sequence[Row], position: Position) -> None:
        part = position.tp.partition
        self.given += [(part, int(r["_offset"])) for r in rows]
        await self.write([r for r in rows if int(r["_offset"]) >= self.holds[part]])

    async def assigned(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {(t, p): self.holds[p] for t, p in partitions if p in self.holds}


async def test_a_partition_the_table_holds_past_its_high_water_mark_is_refused(
        tmp_path: Path) -> None:
    # Partition 0 was re-created: the table holds it up to 500, its log ends at 10.
    tp1 = TopicPartition(TOPIC, 1)
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(10))),
                                    1: values(*({"i": i} for i in range(4)))})
    sink = TwoPartitionTable({0: 500, 1: 2})
    worker = make_worker(worker_settings(tmp_path), consumer, sink)
    run = asyncio.create_task(worker.run())
    try:
        await until(lambda: consumer.committed_offsets.get(tp1) == 4,
                    "partition 1 flows and commits")
        assert sink.given == [(1, 2), (1, 3)]  # nothing of partition 0 read, none dropped
        assert TP not in consumer.committed_offsets and TP in consumer.paused()
        assert consumer.bounds_asked == [[TP, tp1]]
        snapshot = worker.snapshot()
        [why] = snapshot["refused"]
        assert ("partition 0 of topic 't' refused: the table-like sink holds it up to "
                "offset 500, above the partition's high-water mark 10 (log start 0)") in why
        assert "kstage tables reset-offsets --group" in why and "--partition 0" in why
        states = {p["partition"]: (p["state"], p["refused"]) for p in snapshot["partitions"]}
        assert states == {0: ("refused", why), 1: ("running", None)}
        # A revoke forgets it; the next assignment asks again.
        await consumer.rebalance(revoked={TP, tp1})
        assert worker.flow.refused == {}
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)


class TableWithItsOwnReset(TwoPartitionTable):
    def offsets_reset(self, group: str, topic: str, partition: int) -> str:
        return f"forget {topic}[{partition}] of {group} in the table"


async def test_a_refused_partition_names_the_sinks_own_way_out(tmp_path: Path) -> None:
    """The way out is the sink's (a JDBC table's offsets table is reset with SQL)."""
    tp1 = TopicPartition(TOPIC, 1)
    consumer = FakeConsumer(TOPIC, {0: values(*({"i": i} for i in range(10))),
                                    1: values(*({"i": i} for i in range(4)))})
    sink = TableWithItsOwnReset({0: 500, 1: 2})
    worker = make_worker(worker_settings(tmp_path), consumer, sink)
    run = asyncio.create_task(worker.run())
    try:
        await until(lambda: consumer.committed_offsets.get(tp1) == 4,
                    "partition 1 flows and commits")
        [why] = worker.snapshot()["refused"]
        assert why.endswith("Way out: forget t[0] of g-fake in the table, then restart kstage"), why
    finally:
        worker.stop()
        await asyncio.wait_for(run, 10)
