"""The process loop of one worker, and its retry lanes.

It takes batches from the flow's inbox in offset order, walks each through the record
pipeline (:class:`~actors.worker.pipeline.RecordPipeline`: decode, filter, transform,
failure policy) and ships each partition batch to the sinks as a
:class:`~actors.sinks.SinkBatch`, tracked by the offset tracker. A message whose retries
wait (``failure.mode: retry``) parks its partition: paused, it goes on in a lane task of
its own, in order, while the other partitions keep flowing; a revoke of the partition
cancels the wait at once (:meth:`Flow.cancel_lanes <actors.worker.flow.Flow.cancel_lanes>`).

Its collaborators are narrow: the :class:`~actors.worker.flow.Flow`, the pipeline, the
committer, the outbox to the sinks and the worker's counters.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.errors import MessageFailedError
from actors.offsets import Entry
from actors.sinks import END, SinkBatch
from actors.worker.committer import Committer
from actors.worker.flow import Flow, Lane
from actors.worker.pipeline import RecordPipeline
from processors.base import Row
from processors.errors import PoisonMessage
from settings.models import FailureMode

logger = logging.getLogger(__name__)


class ProcessLoop:
    """The process task of one worker (see the module doc).

    Args:
        flow: the worker's flow state (inbox, in-flight window, lanes, generations).
        pipeline: the topic's record pipeline, its processor in use.
        committer: the worker's committer (its tracker takes every shipped entry).
        outbox: where shipped batches go to the sinks (END last).
        sink_done: set once the sinks finished their queue (a throw commits after it).
        stats: the worker's counters (``processed`` is counted here).
        wait_for_ack: never process while a commit is under way.
        label: the worker's name in log lines and task names.
    """

    def __init__(self, *, flow: Flow, pipeline: RecordPipeline, committer: Committer,
                 outbox: asyncio.Queue[Any], sink_done: asyncio.Event,
                 stats: dict[str, int], wait_for_ack: bool = False, label: str = "") -> None:
        self.flow = flow
        self.pipeline = pipeline
        self.committer = committer
        self.outbox = outbox
        self._sink_done = sink_done
        self.stats = stats
        self._wait_for_ack = wait_for_ack
        self.label = label
        self._consumer: AIOKafkaConsumer | None = None
        self._tg: asyncio.TaskGroup | None = None
        self._lane_failure: MessageFailedError | None = None
        # per_message: the commit policy ships, awaits the ack and commits after each one
        self._each = committer.policy.per_message

    def __repr__(self) -> str:
        state = ("ended" if self.flow.process_ended
                 else "running" if self._tg is not None else "idle")
        return f"<ProcessLoop {self.label} {state} lanes={len(self.flow.lanes)}>"

    async def run(self, consumer: AIOKafkaConsumer | None, tg: asyncio.TaskGroup) -> None:
        """Process the inbox until END (or an abandon, or a throw: raised after the
        work before the failed message is committed); retry lanes run in ``tg``."""
        self._consumer, self._tg = consumer, tg
        failure: MessageFailedError | None = None
        flow = self.flow
        live = flow.live
        ended = False
        try:
            while True:
                item = await flow.inbox.get()
                flow.room.set()
                if item is END:
                    break
                tp, records, gen = item
                if not live(tp, gen):  # revoked while queued: the new owner re-reads
                    flow.drop(len(records))
                    continue
                lane = flow.lanes.get(tp)
                if lane is not None:  # parked by a retry wait: behind it, in order
                    if lane.dead:  # never processed past the abandoned message
                        flow.drop(len(records))
                    else:
                        lane.queue.append(records)
                        lane.held += len(records)
                    continue
                if self._wait_for_ack and self.committer.lock.locked():
                    async with self.committer.lock:  # layline's wait_for_ack: no overlap
                        pass
                flow.processing(tp, gen)
                try:
                    finished = await self._walk(tp, records)
                finally:
                    flow.processed()
                if not finished:
                    break
            ended = True
        except MessageFailedError as exc:
            failure = exc
        finally:
            running = [lane.task for lane in flow.lanes.values()
                       if lane.task is not None and not lane.task.done()]
            if failure is not None or not ended:  # thrown or aborted: lanes abandoned
                flow.end_processing()  # at once: the batch's rest was dropped, not done
                for task in running:
                    task.cancel()
            if running:  # a stop ends their waits: they ship what they finished
                await asyncio.wait(running)
        failure = failure or self._lane_failure
        flow.end_processing()  # no position is committable from now on
        # Normal end, abandon or throw: the sink finishes what it was given first.
        await self.outbox.put(END)
        if failure is not None:
            # throw: commit the work before the failed message, never the message itself.
            await self._sink_done.wait()
            await self.committer.failed()
            raise failure

    async def _walk(self, tp: TopicPartition, records: list[Any], *,
                    lane: Lane | None = None, failed: Exception | None = None) -> bool:
        """Walk one partition batch through the pipeline to the sinks; False when
        processing must stop (abandon). In a lane (``lane``; ``failed``: the error of
        ``records[0]``'s first attempt) retries wait in place."""
        route = _Route(self, tp, self.flow.current_gen if lane is None else lane.gen, lane)
        return await self.pipeline.walk(records, route, each=self._each, failed=failed)

    # -- retry lanes -----------------------------------------------------------------

    def _parks(self, exc: Exception) -> bool:
        """A failure whose retries wait in the partition's own lane (retry mode, not
        poison, retries configured), so the other partitions keep flowing."""
        failure = self.pipeline.failure
        return (failure.settings.mode is FailureMode.RETRY and bool(failure.delays_s)
                and not isinstance(exc, PoisonMessage) and self._tg is not None)

    def _park(self, tp: TopicPartition, records: list[Any], exc: Exception) -> None:
        """Pause ``tp`` and hand ``records`` (the first failed with ``exc``) to a lane."""
        tg = self._tg
        if tg is None:  # not running (see _parks)
            raise RuntimeError(f"{self.label}: no task group for a retry lane")
        flow = self.flow
        if self.committer.owns_offsets and not flow.live(tp, flow.current_gen):
            self.flow.drop(len(records), None)  # revoked meanwhile: the new owner re-reads
            return
        lane = Lane(flow.current_gen, len(records))
        flow.park(tp, lane)
        consumer = self._consumer
        if consumer is not None and tp in consumer.assignment():
            consumer.pause(tp)  # nothing more of it is fetched while it waits
        lane.task = tg.create_task(self._run_lane(tp, lane, records, exc),
                                   name=f"{self.label}:retry:{tp.partition}")

    async def _run_lane(self, tp: TopicPartition, lane: Lane, records: list[Any],
                        exc: Exception) -> None:
        try:
            finished = await self._walk(tp, records, lane=lane, failed=exc)
            while finished and lane.queue:
                finished = await self._walk(tp, lane.queue.pop(0), lane=lane)
        except MessageFailedError as failure:
            # throw after the retries: the worker stops; what was done before is committed
            finished = False
            self._lane_failure = self._lane_failure or failure
            self.flow.stop_intake()
        if not finished:
            lane.dead = True
            self.flow.drop(lane.held, lane)
            return
        self.flow.unpark(tp, lane)
        consumer = self._consumer
        if (consumer is not None and tp in self.flow.assigned
                and tp in consumer.paused() and not self.flow.keeps_paused(tp)):
            consumer.resume(tp)

    async def _ship(
        self, tp: TopicPartition, rows: Sequence[Row], next_offset: int, count: int, *,
        savepoint: bool, gen: int | None = None, lane: Lane | None = None,
        trace: Any = None,
    ) -> SinkBatch:
        if lane is not None:
            lane.held -= count  # from here on the entry (or the fence) accounts for them
        if self.flow.ships(tp, self.flow.current_gen if gen is None else gen):
            entry = self.committer.shipped(tp, next_offset, count, savepoint=savepoint)
        elif not self.committer.owns_offsets:
            # Revoked meanwhile, offsets not kstage's (auto-commit may have committed
            # them): the rows are still written, untracked.
            entry = Entry(tp, next_offset, count, savepoint)
        else:
            # Revoked while this batch was processed (e.g. during long retry waits): the
            # partition and its messages belong to its new owner now, which re-reads
            # them: never written here (a late write could overtake newer ones).
            self.flow.drop(count)
            return SinkBatch(rows, Entry(tp, next_offset, count, savepoint, cancelled=True))
        consumer = self._consumer
        if consumer is not None:
            # A backlog waits behind this batch (the fetch's high-water mark: correct on
            # every broker, where end offsets are not): its sinks gather larger appends.
            # One past it is a transaction's commit marker, never handed over.
            highwater = consumer.highwater(tp)
            lag = 0 if highwater is None else highwater - next_offset
            entry.behind = lag > 1
            entry.lag = lag if entry.behind else 0
        batch = SinkBatch(rows, entry, trace)
        await self.outbox.put(batch)
        return batch




class _Route:
    """Where a walk of one partition batch goes (:class:`~actors.worker.records.Route`):
    to the sinks through the outbox, tracked (``per_message``: each message acked and
    committed before the next); a failure whose retries wait parks the partition."""

    __slots__ = ("_gen", "_lane", "_loop", "_tp")

    def __init__(self, loop: ProcessLoop, tp: TopicPartition, gen: int,
                 lane: Lane | None) -> None:
        self._loop, self._tp, self._gen, self._lane = loop, tp, gen, lane

    async def ship(self, rows: Sequence[Row], next_offset: int, count: int,
                   savepoint: bool, *, trace: Any = None) -> None:
        loop = self._loop
        batch = await loop._ship(self._tp, rows, next_offset, count, savepoint=savepoint,
                                 gen=self._gen, lane=self._lane, trace=trace)
        if loop._each:  # per_message: acked and committed before the next message
            progress = loop.flow.progress
            while not (batch.entry.done or batch.entry.cancelled):
                progress.clear()
                await progress.wait()
            await loop.committer.message_done()

    def drop(self, count: int) -> None:
        self._loop.flow.drop(count, self._lane)

    def parks(self, exc: Exception) -> bool:
        return self._lane is None and self._loop._parks(exc)

    def park(self, rest: Sequence[Any], exc: Exception) -> None:
        self._loop._park(self._tp, list(rest), exc)


__all__ = ["ProcessLoop"]
