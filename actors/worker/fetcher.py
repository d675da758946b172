"""The fetch task: the consumer's reads, the in-flight window and pausing.

It owns ``getmany``: batches go into the flow's inbox, each tagged with the rebalance
generation current when its poll *returned*. When the pipeline is full (``max_in_flight``
messages, or ``max_in_flight_mb`` of them on the wire, not yet acked, or the inbox full)
it holds what it fetched, pauses every assigned partition once the pipeline stays full,
and keeps polling, so the member keeps heartbeating and never hits
``max_poll_interval_ms``. A stop gives up a poll held by a rebalance
(:meth:`Fetcher._give_up`, called when the flow's intake stops).

Its collaborators are narrow: the :class:`~actors.worker.flow.Flow`, the rebalance
listener (committed offsets to seed, positions to advance to), the committer (what was
fetched; the commit of a drain), the sinks' flush, the group's settings and the worker's
counters.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import (
    ConsumerStoppedError,
    IllegalStateError,
    KafkaError,
    NoOffsetForPartitionError,
)

from actors.errors import NoCommittedOffsetError
from actors.inflate import BatchRefused
from actors.sinks import END
from actors.worker.committer import Committer
from actors.worker.flow import Flow
from actors.worker.rebalance import Rebalance
from actors.worker.refused import take_refused
from settings.models import GroupSettings

logger = logging.getLogger(__name__)

_POLL_MS = 200  # getmany timeout: bounds how late a stop or a drain check is noticed
_END_OFFSETS_EVERY_S = 2.0  # how often a paused topic's end offsets are asked for

Batch = tuple[TopicPartition, list[Any], int]
"""A partition's fetched records and the generation they were fetched in."""


class Fetcher:
    """The fetch loop of one worker (see the module doc).

    Args:
        flow: the worker's flow state (the inbox, the in-flight window, the intake).
        rebalance: the worker's rebalance listener.
        committer: the worker's committer (told what was fetched; ``--drain`` commits).
        flush_soon: the topic's micro-batching sinks flush now: the rows in flight wait
            in their next flush while the window is full.
        group: the group's settings (``max_in_flight``, ``max_poll_records``,
            ``max_poll_interval_ms``).
        topic: the topic's name (for errors).
        group_id: the group's id (for errors).
        stats: the worker's counters (``consumed`` and ``paused`` are counted here).
        observe_batch: observes the size of each fetched batch (a histogram).
        on_drained: ``--drain``: after each empty poll, check whether every assigned
            partition is processed and committed up to its high-water mark; call this
            once when it is (None: no check).
        label: the worker's name in log lines.
    """

    def __init__(self, *, flow: Flow, rebalance: Rebalance, committer: Committer,
                 flush_soon: Callable[[], None], group: GroupSettings,
                 topic: str, group_id: str, stats: dict[str, int],
                 observe_batch: Callable[[float], None] | None = None,
                 on_drained: Callable[[], None] | None = None,
                 label: str = "") -> None:
        self.flow = flow
        self._rebalance = rebalance
        self._committer = committer
        self._flush_soon = flush_soon
        self._group = group
        self._topic = topic
        self._group_id = group_id
        self._stats = stats
        self._observe_batch = observe_batch
        self._on_drained = on_drained
        self._drained = False
        self.label = label
        # The fetch task while it awaits getmany (see poll), and whether _give_up
        # cancelled it there.
        self._poll_task: asyncio.Task[Any] | None = None
        self._poll_given_up = False
        # The fetch loop's last turn (liveness): it turns at least every second (a poll,
        # or a wait for room in the pipeline); a poll may wait out a rebalance.
        self.turned_at = time.monotonic()
        # End offsets asked while paused by an operator (no fetch: no high-water mark),
        # kept after a resume until fetches pass them, and the request under way (see
        # _end_offsets, _forget_passed_ends).
        self.end_offsets: dict[TopicPartition, int] = {}
        self._end_offsets_at = 0.0
        self._asking: asyncio.Task[dict[TopicPartition, int]] | None = None
        flow.on_stop_intake(self._give_up)

    def __repr__(self) -> str:
        state = ("polling" if self._poll_task is not None
                 else "stopped" if self.flow.should_stop else "idle")
        return f"<Fetcher {self.label} {state}>"

    def _give_up(self) -> None:
        """A stop: give up the poll under way (if any); see :meth:`poll`."""
        if self._poll_task is not None and not self._poll_given_up:
            self._poll_given_up = True  # poll takes this cancellation back
            self._poll_task.cancel()

    async def run(self, consumer: AIOKafkaConsumer) -> None:
        """Fetch batches into the inbox; apply backpressure without risking eviction.

        When the pipeline is full (inbox full or ``max_in_flight`` reached) the loop waits
        for room on an event, holding what it fetched. Short stalls are normal (fetching
        is faster than processing) and cost nothing. Only when the pipeline stays full for
        a good part of ``max_poll_interval_ms`` are the partitions paused; from then on the
        loop calls ``getmany(timeout_ms=0)`` at least every second, which resets the
        consumer's poll timer, so a slow sink never gets the member evicted. (Pausing at
        once would be costly: aiokafka drops a paused partition's prefetched records.)
        """
        flow = self.flow
        rebalance = self._rebalance
        max_in_flight = self._group.commit.max_in_flight
        max_bytes = self._group.commit.max_in_flight_mb * 2**20
        max_records = self._group.max_poll_records
        pause_after = min(self._group.max_poll_interval_ms / 4000, 5.0)
        backlog: deque[Batch] = deque()
        inbox = flow.inbox
        room = flow.room
        paused = False
        operator_paused = False
        full_since: float | None = None
        while not flow.should_stop:
            self.turned_at = time.monotonic()
            if rebalance.unseeded:
                await rebalance.seed_committed(consumer)
            if flow.paused_by_operator:  # before any poll; again for a new assignment
                if not operator_paused:
                    operator_paused = True
                    logger.warning("%s: paused by the operator: fetching nothing until "
                                   "resumed", self.label)
                consumer.pause(*consumer.assignment())
                await self._end_offsets(consumer)
            elif operator_paused:
                operator_paused = False
                self._stop_asking()  # the end offsets asked stand until fetches pass them
                consumer.resume(*(tp for tp in consumer.paused()
                                  if not flow.keeps_paused(tp)))
                logger.warning("%s: resumed by the operator", self.label)
            elif self.end_offsets:
                self._forget_passed_ends(consumer)
            while backlog and not inbox.full():
                inbox.put_nowait(backlog.popleft())
            full = flow.window_full(max_in_flight, max_bytes)
            if backlog and not full:
                # Keep aiokafka's buffer drained so its next fetch request goes out early
                # (prefetch up to max_in_flight), without blocking: the inbox may free up.
                data = await self.poll(consumer, max_records, 0)
                self._fetched(data, backlog)
                if not data:
                    room.clear()
                    try:
                        await asyncio.wait_for(room.wait(), 0.005)
                    except TimeoutError:
                        pass
                continue
            if backlog or full:
                if full:
                    self._flush_soon()  # the rows in flight wait in the sink's next flush
                now = time.monotonic()
                full_since = full_since or now
                if not paused and now - full_since >= pause_after:
                    self._stats["paused"] += 1
                    paused = True
                    logger.info("%s: pipeline full for %.1fs: pausing partitions",
                                self.label, now - full_since)
                if paused:
                    consumer.pause(*consumer.assignment())
                    self._fetched(await self.poll(consumer, max_records, 0), backlog)
                room.clear()
                try:
                    await asyncio.wait_for(room.wait(), min(pause_after, 1.0))
                except TimeoutError:
                    pass
                continue
            full_since = None
            if paused:  # partitions parked by a retry wait stay paused, and those whose
                # tables are being asked where to resume (Flow.keeps_paused)
                consumer.resume(*(tp for tp in consumer.paused()
                                  if not flow.keeps_paused(tp)))
                paused = False
            data = await self.poll(consumer, max_records, _POLL_MS)
            if not data:
                await rebalance.note_starts(consumer)
                await rebalance.advance_to_positions(consumer)
                if self._on_drained is not None:
                    await self._check_drained(consumer)
                continue
            self._fetched(data, backlog)
        self._stop_asking()
        for item in backlog:  # fetched, never processed: not committed, re-read later
            flow.drop(len(item[1]))
        await inbox.put(END)

    async def _end_offsets(self, consumer: AIOKafkaConsumer) -> None:
        """While paused by an operator, nothing is fetched, so aiokafka learns no
        high-water mark: ask for the end offsets every few seconds instead (the lag of
        ``/status`` and ``/metrics`` stays true). Asked in a task of their own, never
        awaited by the loop: a partition without a leader (its brokers down) holds the
        answer for ``request_timeout_ms`` (40 s), and the loop must keep turning for a
        resume, the other partitions and the liveness (it looked stuck)."""
        asking = self._asking
        if asking is not None:
            if not asking.done():
                return
            self._asking = None
            try:
                self.end_offsets = asking.result()
            except KafkaError as exc:
                logger.debug("%s: end offsets of the paused partitions: %s", self.label, exc)
        now = time.monotonic()
        if now - self._end_offsets_at < _END_OFFSETS_EVERY_S:
            return
        self._end_offsets_at = now
        assigned = list(consumer.assignment())
        if assigned:
            self._asking = asyncio.create_task(consumer.end_offsets(assigned),
                                               name=f"{self.label}-end-offsets")

    def _forget_passed_ends(self, consumer: AIOKafkaConsumer) -> None:
        """After a resume, each end offset asked while paused stays the floor of its
        partition's high-water mark until a fetch brings a mark at least as high: a
        partition that cannot be fetched (no leader) keeps the lag the pause showed,
        rather than the older mark of its last fetch (a lag of 0 while events wait)."""
        assigned = consumer.assignment()
        for tp, end in list(self.end_offsets.items()):
            hw = consumer.highwater(tp)
            if tp not in assigned or (hw is not None and hw >= end):
                del self.end_offsets[tp]

    def _stop_asking(self) -> None:
        """Forget the end offsets under way (a resume, the loop's end)."""
        asking, self._asking = self._asking, None
        if asking is None:
            return
        if not asking.done():
            asking.cancel()
        elif not asking.cancelled():
            asking.exception()  # an answer no longer wanted, or a failure: both moot

    def _fetched(self, data: dict[TopicPartition, list[Any]], backlog: deque[Batch]) -> None:
        """Queue fetched batches, tagged with the generation current when their poll
        *returned*: aiokafka's getmany waits out a rebalance and then returns records of
        the new assignment only (records of the old one are discarded), so a poll that
        started before a revoke and returns after the partition came back holds live
        records. Tagged with the generation it started in, they were dropped as stale
        while the position moved past them, and the next commit skipped them: lost
        (seen in the chaos run: ~100-record gaps after a revoke and reassignment)."""
        flow = self.flow
        gen = flow.generation
        observe = self._observe_batch
        committer = self._committer
        for tp, records in data.items():
            if records and tp in flow.assigned:  # a fresh group's lag counts from here
                committer.fetched(tp, records[0].offset)
            flow.fetched(tp, records)
            self._stats["consumed"] += len(records)
            if observe is not None:
                observe(len(records))
            backlog.append((tp, records, gen))

    async def poll(self, consumer: AIOKafkaConsumer, max_records: int, timeout_ms: int
                   ) -> Any:
        """getmany, given up (empty) on stop: while the group rebalances, aiokafka's
        getmany waits for the new assignment whatever its timeout (up to the rebalance
        timeout of Kafka), and a stop must not wait for a rejoin it does not need.

        :meth:`_give_up` cancels the fetch task while it awaits here (and only here),
        and the cancellation is taken back: no task or future per poll on the hot path
        (the fetch loop polls with ``timeout_ms=0`` many times a second).
        """
        if self.flow.should_stop:
            return {}
        task = asyncio.current_task()
        self._poll_task = task
        try:
            try:
                return await consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
            except BatchRefused as exc:  # a decompression bomb: its offsets become poison
                return await take_refused(consumer, exc, self.label)
        except asyncio.CancelledError:
            if not self._poll_given_up or task is None:
                raise
            task.uncancel()  # our own stop, not a cancellation from outside: no data
            return {}
        except NoOffsetForPartitionError as exc:
            parts = ", ".join(str(a) for a in exc.args) or "(unknown)"
            raise NoCommittedOffsetError(
                f"group {self._group_id!r} has no committed offset for {parts} of topic "
                f"{self._topic!r} and auto_offset_reset is 'none': refusing to start"
            ) from exc
        except ConsumerStoppedError:
            self.flow.intake_ended()
            return {}
        finally:
            self._poll_task = None
            self._poll_given_up = False

    # -- drain -----------------------------------------------------------------------

    async def _check_drained(self, consumer: AIOKafkaConsumer) -> None:
        """``--drain``: all assigned partitions processed and committed up to high-water
        (then ``on_drained``, once); never once :attr:`Flow.positions_stale` (a throw
        drops the rest of its batch: the consumer's position is past messages never
        done)."""
        rebalance = self._rebalance
        committer = self._committer
        tracker = committer.offsets
        flow = self.flow
        if (self._drained or not rebalance.joined.is_set() or rebalance.lost is not None
                or flow.positions_stale):
            return
        if flow.in_flight or not flow.inbox.empty():
            # A poll came back empty: the rows waiting in the sink's next flush are the
            # last ones for now. --drain ends with them, so flush them now rather than
            # after the sink's interval (flush_max_interval_s).
            self._flush_soon()
            return
        if not flow.assigned and not await self._group_done(consumer):
            return  # a generation without this topic: the next one brings its partitions
        positions = []
        for tp in flow.assigned:
            hw = consumer.highwater(tp)
            if hw is None:
                return
            try:
                position = await consumer.position(tp)
            except IllegalStateError:
                return
            if position < hw or tracker.pending_count(tp) or tp in flow.lanes:
                return  # a retry lane (waiting, or abandoned by a throw) holds it
            positions.append((tp, position))
        if flow.in_flight or not flow.inbox.empty() or flow.positions_stale:
            return  # fetched, thrown or stopping while the positions were asked
        for tp, position in positions:
            committer.reached(tp, position)  # past a transaction marker: commit it
        if not await committer.drained():
            return  # commit failed: try again on the next empty poll
        self._drained = True
        logger.info("%s: drained partitions %s", self.label,
                    sorted(tp.partition for tp in flow.assigned))
        if self._on_drained is not None:
            self._on_drained()

    async def _group_done(self, consumer: AIOKafkaConsumer) -> bool:
        """With nothing assigned, ``--drain`` is done only when the group has committed
        every partition of the topic up to its end offset: while members join, the
        group's leader assigns only the topics its metadata knows, and a member whose
        topic it does not know yet gets nothing in that generation; taking that for
        drained stopped the process before its partitions came (another member holding
        them and committing them to the end is the other way this holds)."""
        parts = consumer.partitions_for_topic(self._topic)
        if not parts:
            return False
        tps = [TopicPartition(self._topic, p) for p in sorted(parts)]
        try:
            ends = await consumer.end_offsets(tps)
            for tp in tps:
                if (await consumer.committed(tp) or 0) < ends[tp]:
                    return False
        except (KafkaError, IllegalStateError, KeyError) as exc:
            logger.debug("%s: the group's progress on %s not read yet: %s", self.label,
                         self._topic, exc)
            return False
        return True


__all__ = ["Batch", "Fetcher"]
