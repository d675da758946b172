"""A fake ``AIOKafkaConsumer`` for worker tests without a broker.

It hands out real :class:`aiokafka.structs.ConsumerRecord`s from in-memory partitions
and keeps what a worker reads of a consumer: the assignment, positions, pauses, high-water
marks and committed offsets. Rebalances are driven by the test: :meth:`FakeConsumer.
rebalance` calls the worker's listener as aiokafka's coordinator would (revoked first,
then assigned), and ``getmany`` holds while one is under way, as aiokafka's does.

A worker takes it as its ``consumer_factory`` (:func:`tests.kit.make_worker`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.structs import ConsumerRecord

from actors.log_bounds import Bounds


class FakeConsumer:
    """In-memory partitions of one topic; see the module doc.

    Args:
        topic: the topic name.
        partitions: the values of each partition, in offset order (from offset 0).
        assign_on_poll: assign every partition at the first ``getmany`` (as joining the
            group does); else the test calls :meth:`rebalance`.
        shares: another consumer of the same group whose partitions and committed
            offsets this one shares (a later member, or the worker's replacement: what
            one appends or commits, the other reads); ``partitions`` is then ignored.
    """

    def __init__(self, topic: str, partitions: dict[int, list[bytes | None]], *,
                 assign_on_poll: bool = True, shares: FakeConsumer | None = None) -> None:
        self.topic = topic
        self.logs: dict[TopicPartition, list[ConsumerRecord[Any, Any]]] = {
            TopicPartition(topic, p): [self._record(p, o, v) for o, v in enumerate(values)]
            for p, values in partitions.items()} if shares is None else shares.logs
        self._assignment: set[TopicPartition] = set()
        self._paused: set[TopicPartition] = set()
        self._positions: dict[TopicPartition, int] = {}
        self.committed_offsets: dict[TopicPartition, int] = (
            {} if shares is None else shares.committed_offsets)
        self.commits: list[dict[TopicPartition, int]] = []
        self.listener: ConsumerRebalanceListener | None = None
        self._assign_on_poll = assign_on_poll
        self._idle = asyncio.Event()  # no rebalance under way
        self._idle.set()
        self._data = asyncio.Event() if shares is None else shares._data  # new records
        self.started = self.stopped = False
        self._coordinator = None  # read by actors.kafka.coordinator_known
        self.heartbeats = True  # False: heartbeats go unanswered (actors.kafka.GroupMember)
        self._answered: float | None = None
        self.rejoins = 0
        self.security_problem: str | None = None  # what diagnose() finds
        self.leaderless: set[TopicPartition] = set()  # no leader now (leader_of: -1)
        self.bounds_asked: list[list[TopicPartition]] = []  # log_bounds() calls
        # The high-water mark of each partition's last fetch, as aiokafka's highwater():
        # a paused or leaderless partition is not fetched, so its mark is not renewed.
        self._high: dict[TopicPartition, int] = {}

    def _record(self, partition: int, offset: int, value: bytes | None
                ) -> ConsumerRecord[Any, Any]:
        return ConsumerRecord(self.topic, partition, offset, 1_700_000_000_000 + offset, 0,
                              None, value, None, 0, len(value or b""), ())

    # -- what the test drives --------------------------------------------------------

    def append(self, partition: int, values: list[bytes | None]) -> None:
        log = self.logs[TopicPartition(self.topic, partition)]
        log.extend(self._record(partition, len(log), v) for v in values)
        self._data.set()

    async def rebalance(self, *, revoked: set[TopicPartition] = frozenset(),  # type: ignore[assignment]
                        assigned: set[TopicPartition] = frozenset()) -> None:  # type: ignore[assignment]
        """A rebalance: ``revoked`` leave the assignment (after the listener returned, as
        in aiokafka), then ``assigned`` join it; polls wait meanwhile."""
        assert self.listener is not None, "subscribe() first"
        self._idle.clear()
        try:
            await self.listener.on_partitions_revoked(set(revoked))
            self._assignment -= set(revoked)
            self._paused -= set(revoked)
            for tp in revoked:
                self._positions.pop(tp, None)
                self._high.pop(tp, None)
            if assigned:
                self._assignment |= set(assigned)
                for tp in assigned:
                    self._positions[tp] = self.committed_offsets.get(tp, 0)
                await self.listener.on_partitions_assigned(set(self._assignment))
        finally:
            self._idle.set()

    # -- the AIOKafkaConsumer surface a worker uses ----------------------------------

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    def subscribe(self, topics: list[str], listener: ConsumerRebalanceListener) -> None:
        assert topics == [self.topic]
        self.listener = listener

    async def getmany(self, timeout_ms: int = 0, max_records: int | None = None
                      ) -> dict[TopicPartition, list[ConsumerRecord[Any, Any]]]:
        if self._assign_on_poll and not self._assignment:
            self._assign_on_poll = False
            await self.rebalance(assigned=set(self.logs))
        await self._idle.wait()
        data = self._take(max_records)
        if not data and timeout_ms:
            self._data.clear()
            try:
                await asyncio.wait_for(self._data.wait(), timeout_ms / 1000)
            except TimeoutError:
                return {}
            await self._idle.wait()
            data = self._take(max_records)
        return data

    def _take(self, max_records: int | None) -> dict[TopicPartition, list[Any]]:
        left = max_records or 1 << 30
        data: dict[TopicPartition, list[Any]] = {}
        fetchable = self._assignment - self._paused - self.leaderless
        self._high.update((tp, len(self.logs[tp])) for tp in fetchable)
        for tp in sorted(fetchable, key=lambda t: t.partition):
            position = self._positions[tp]
            records = self.logs[tp][position:position + left]
            if records:
                data[tp] = records
                self._positions[tp] = position + len(records)
                left -= len(records)
            if not left:
                break
        return data

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def last_heartbeat(self) -> float | None:
        if self.heartbeats:
            self._answered = time.monotonic()
        return self._answered

    def rejoin(self) -> None:
        self.rejoins += 1

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return {tp.partition for tp in self.logs} if topic == self.topic else None

    def refresh_metadata(self) -> None:
        pass

    def leader_of(self, tp: TopicPartition) -> int | None:
        return -1 if tp in self.leaderless else 0 if tp in self.logs else None

    async def diagnose(self) -> str | None:
        return self.security_problem

    def pause(self, *tps: TopicPartition) -> None:
        self._paused |= set(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self._paused -= set(tps)
        self._data.set()

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def highwater(self, tp: TopicPartition) -> int | None:
        return self._high.get(tp) if tp in self._assignment else None

    async def position(self, tp: TopicPartition) -> int:
        return self._positions[tp]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset

    async def seek_to_end(self, *tps: TopicPartition) -> None:
        for tp in tps:
            self._positions[tp] = len(self.logs[tp])

    async def seek_to_beginning(self, *tps: TopicPartition) -> None:
        for tp in tps:
            self._positions[tp] = 0

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(tps, 0)

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Each log's length (asked while an operator pause fetches nothing)."""
        return {tp: len(self.logs.get(tp, [])) for tp in tps}

    async def log_bounds(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, Bounds]:
        """:class:`~actors.log_bounds.LogBounds`: every log starts at 0 and ends at its
        length (the worker's, see ``tests.kit.make_worker``)."""
        self.bounds_asked.append(list(tps))
        return {tp: Bounds(0, len(self.logs.get(tp, []))) for tp in tps}

    async def committed(self, tp: TopicPartition) -> int | None:
        return self.committed_offsets.get(tp)

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.commits.append(dict(offsets))
        self.committed_offsets.update(offsets)
