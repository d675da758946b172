"""The flow state of one worker: what was fetched, what is in flight, and whose it is.

One small object, shared by the worker's parts the way aiokafka's fetcher, coordinator
and consumer share one ``SubscriptionState``: the fetcher
(:class:`~actors.worker.fetcher.Fetcher`), the rebalance listener
(:class:`~actors.worker.rebalance.Rebalance`), the ``start_from`` seek and the process
loop (:class:`~actors.worker.process.ProcessLoop`) each get the :class:`Flow` and a few
narrow collaborators, never the :class:`~actors.worker.Worker`. Every change of the
in-flight count goes through one of its methods:

* :meth:`Flow.fetched`: a poll returned records (in flight from now on);
* :meth:`Flow.acked`: every sink acked a batch (out of flight, progress);
* :meth:`Flow.drop`: messages leave flight unwritten (revoked, abandoned, stale).

It also holds the intake switch (:meth:`Flow.stop_intake`, :attr:`Flow.should_stop`, an
interruptible :meth:`Flow.sleep`), the assignment and its generations (:meth:`Flow.live`:
work fetched in a generation before its partition's last revoke is stale), the fence of
revoked partitions' writes, the partitions parked by retry waits (:class:`Lane`) and
those held paused until the sinks that store offsets said where to resume them (or
refused: a table holds them past their high-water mark), and the topic's operator
pause (:mod:`actors.control`).

It owns no task and does no I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import TopicPartition

from actors.control import TopicControl
from actors.offsets import OffsetView
from actors.sinks import Fence

_INBOX_BATCHES = 2


class Lane:
    """A partition parked by a retry wait (``failure.mode: retry``): its own task works
    through the failing message's retries, the rest of its batch and the batches fetched
    for the partition meanwhile (``queue``), in order, while the process loop goes on with
    the other partitions.

    Attributes:
        gen: the generation of the batch that parked it.
        held: its messages not yet shipped nor dropped (counted in ``in_flight``).
        dead: stopped (abandoned or thrown): later batches of the partition are dropped,
            never processed past the message.
    """

    __slots__ = ("dead", "gen", "held", "queue", "task")

    def __init__(self, gen: int, held: int) -> None:
        self.gen = gen
        self.held = held
        self.queue: list[list[Any]] = []
        self.task: asyncio.Task[None] | None = None
        self.dead = False

    def __repr__(self) -> str:
        state = "dead" if self.dead else "waiting"
        return f"<Lane {state} gen={self.gen} held={self.held} queued={len(self.queue)}>"


class Flow:
    """The flow state of one worker (see the module doc).

    Args:
        owns_offsets: kstage commits the offsets (not ``none``/``auto``): work of a
            revoked partition is stale from the revoke on, even if it comes back.
        control: the topic's operator state (:mod:`actors.control`): while paused, every
            assigned partition stays paused.
        label: the worker's name, for ``repr``.
    """

    def __init__(self, *, owns_offsets: bool, control: TopicControl | None = None,
                 label: str = "") -> None:
        self.label = label
        self.control = control  # the operator's pause (the master's; None: never paused)
        self.owns_offsets = owns_offsets
        self.inbox: asyncio.Queue[Any] = asyncio.Queue(_INBOX_BATCHES)
        self.in_flight = 0
        self.message_bytes = 0.0  # the mean wire size of the fetched messages (fetched)
        self.room = asyncio.Event()  # set when the inbox or the in-flight window frees up
        self.progress = asyncio.Event()  # set when a batch was acked, dropped or processed
        self.intake_stopped = asyncio.Event()
        self._on_stop: list[Callable[[], None]] = []
        # The assignment and its generations: every revoke bumps the generation; work
        # fetched in a generation before its partition's last revoke is stale.
        self.assigned: set[TopicPartition] = set()
        self.generation = 0
        self.revoked_at: dict[TopicPartition, int] = {}
        self.fence = Fence()
        self.lanes: dict[TopicPartition, Lane] = {}  # partitions parked by a retry wait
        # Assigned partitions paused until the sinks said where their tables hold them,
        # with the generation of that assignment (the fetcher does not resume them).
        self.held: dict[TopicPartition, int] = {}
        # Assigned partitions a table holds past their high-water mark, with why: paused
        # until their next assignment (actors.worker.sink_offsets).
        self.refused: dict[TopicPartition, str] = {}
        self.fetched_span: dict[TopicPartition, list[int]] = {}  # first, next offset
        self.current_tp: TopicPartition | None = None  # the partition being processed
        self.current_gen = 0  # the generation of its batch
        # A revoked partition whose batch was being processed when the revoke began, and
        # that batch's generation: it may still ship while the revoke drains (see ships).
        self.draining: dict[TopicPartition, int] = {}
        self.process_ended = False  # no position is committable from then on

    def __repr__(self) -> str:
        state = "stopping" if self.should_stop else "flowing"
        parts = sorted(tp.partition for tp in self.assigned)
        return (f"<Flow {self.label} {state} gen={self.generation} assigned={parts} "
                f"in_flight={self.in_flight} lanes={len(self.lanes)} held={len(self.held)}>")

    # -- intake ------------------------------------------------------------------------

    @property
    def should_stop(self) -> bool:
        """Intake stopped: fetch no more, finish what is queued."""
        return self.intake_stopped.is_set()

    @property
    def positions_stale(self) -> bool:
        """Processing ended (a throw, an abandon) or intake stopped: what was fetched and
        is not in flight may have been dropped rather than done, so no consumer position
        says what is done any more (neither an idle poll nor ``--drain`` commits one)."""
        return self.process_ended or self.should_stop

    def on_stop_intake(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when intake stops (the fetcher gives up its poll)."""
        self._on_stop.append(callback)

    def stop_intake(self) -> None:
        """Fetch no more (phase 1 of a stop, or a lane that threw)."""
        self.intake_stopped.set()
        for callback in self._on_stop:
            callback()

    async def sleep(self, seconds: float) -> bool:
        """Sleep that ends early when intake stops; False when interrupted."""
        try:
            await asyncio.wait_for(self.intake_stopped.wait(), seconds)
        except TimeoutError:
            return True
        return False

    # -- the in-flight window ----------------------------------------------------------

    def fetched(self, tp: TopicPartition, records: Sequence[Any]) -> None:
        """A poll returned ``records`` of ``tp``: in flight until acked or dropped."""
        span = self.fetched_span.setdefault(tp, [records[0].offset, 0])
        span[1] = records[-1].offset + 1
        self.in_flight += len(records)
        size = sum(len(r.value or b"") + len(r.key or b"") for r in records) / len(records)
        # the mean wire size of a message, over the last few dozen batches
        self.message_bytes += (size - self.message_bytes) * (
            1.0 if not self.message_bytes else 0.05)

    def window_full(self, max_messages: int, max_bytes: float) -> bool:
        """The in-flight window is full: ``max_messages`` flowing, or their estimated
        bytes (flowing times the mean wire size of the fetched messages) reach
        ``max_bytes``."""
        flowing = self.flowing
        return flowing >= max_messages or flowing * self.message_bytes >= max_bytes

    def acked(self, count: int) -> None:
        """Every sink acked a batch of ``count`` messages."""
        self.in_flight -= count
        self.room.set()
        self.progress.set()

    def drop(self, count: int, lane: Lane | None = None) -> None:
        """``count`` messages leave flight unshipped (abandoned, revoked, stale)."""
        self.in_flight -= count
        if lane is not None:
            lane.held -= count
        self.room.set()

    @property
    def flowing(self) -> int:
        """Messages in flight, less those held behind retry waits (their partitions are
        paused, so they are bounded): what ``max_in_flight`` limits, so messages waiting
        on one partition never stop the others."""
        if not self.lanes:
            return self.in_flight
        return self.in_flight - sum(lane.held for lane in self.lanes.values())

    @property
    def paused_by_operator(self) -> bool:
        """An operator paused the topic (the control API): fetch nothing of it."""
        return self.control is not None and self.control.paused

    def keeps_paused(self, tp: TopicPartition) -> bool:
        """``tp`` stays paused when the fetcher resumes: parked by a retry wait, held
        until the sinks said where to resume it, refused (a table holds it past its
        high-water mark), or the topic paused by an operator."""
        return (tp in self.lanes or tp in self.held or tp in self.refused
                or self.paused_by_operator)

    # -- the assignment and its generations --------------------------------------------

    def refusals(self) -> list[str]:
        """Why each refused partition is not consumed, in partition order."""
        return [why for _, why in sorted(self.refused.items(), key=lambda i: i[0].partition)]

    def live(self, tp: TopicPartition, gen: int) -> bool:
        """Work of ``tp`` fetched in generation ``gen`` is still this worker's (where
        kstage does not own the offsets, as long as ``tp`` is assigned)."""
        if tp not in self.assigned:
            return False
        return gen >= self.revoked_at.get(tp, 0) or not self.owns_offsets

    def ships(self, tp: TopicPartition, gen: int) -> bool:
        """Rows of ``tp`` walked from a batch of generation ``gen`` may go to the sinks:
        the work is :meth:`live`, or it is the batch that was being processed when a
        revoke of ``tp`` began, and the revoke still drains (it commits that batch, so
        what its walk did, such as a dead letter, is not done again by the partition's
        next reader)."""
        return self.live(tp, gen) or self.draining.get(tp) == gen

    # -- what the other parts report ----------------------------------------------------

    def assign(self, tps: set[TopicPartition]) -> None:
        """The group assigned ``tps`` (the whole assignment)."""
        self.assigned = tps

    def revoke(self, tps: set[TopicPartition]) -> None:
        """The group revoked ``tps`` (the rest stays assigned)."""
        self.assigned -= tps

    def lose_all(self) -> set[TopicPartition]:
        """The membership is lost: nothing is assigned, and a revoke draining meanwhile
        ships its batch under way no more. Returns what was assigned."""
        lost, self.assigned = self.assigned, set()
        self.draining.clear()
        return lost

    def drain_under_way(self, tp: TopicPartition) -> None:
        """A revoke of ``tp`` lets the batch under way ship (see :meth:`ships`)."""
        self.draining[tp] = self.current_gen

    def stop_draining(self, tps: set[TopicPartition]) -> None:
        """The revoke's drain of ``tps`` ended: their batch under way ships no more."""
        for tp in tps:
            self.draining.pop(tp, None)

    def hold(self, tps: set[TopicPartition], gen: int) -> None:
        """``tps`` wait (paused) until the sinks tell where they resume, for ``gen``."""
        self.held.update(dict.fromkeys(tps, gen))

    def refuse(self, refused: dict[TopicPartition, str], gen: int) -> None:
        """The sinks refuse ``refused`` (why, each), those still held for ``gen``."""
        self.refused.update((tp, why) for tp, why in refused.items()
                            if self.held.get(tp) == gen)

    def release(self, tps: set[TopicPartition], gen: int) -> list[TopicPartition]:
        """The hold of ``tps`` for ``gen`` ends; those it still held."""
        mine = [tp for tp in tps if self.held.get(tp) == gen]
        for tp in mine:
            del self.held[tp]
        return mine

    def processing(self, tp: TopicPartition, gen: int) -> None:
        """The process loop walks a batch of ``tp`` fetched in ``gen``."""
        self.current_tp, self.current_gen = tp, gen

    def processed(self) -> None:
        """The walk of the batch under way ended."""
        self.current_tp = None
        self.progress.set()

    def end_processing(self) -> None:
        """The process loop ended: no position is committable from now on."""
        self.process_ended = True

    def intake_ended(self) -> None:
        """The consumer stopped: nothing more comes in."""
        self.intake_stopped.set()

    def park(self, tp: TopicPartition, lane: Lane) -> None:
        """``tp`` waits in ``lane`` (a retry wait)."""
        self.lanes[tp] = lane

    def unpark(self, tp: TopicPartition, lane: Lane) -> None:
        """``lane`` of ``tp`` finished (if it is still the partition's)."""
        if self.lanes.get(tp) is lane:
            del self.lanes[tp]

    def let_go(self, tps: set[TopicPartition]) -> None:
        """``tps`` are no longer this worker's: bump the generation (their fetched work
        is stale) and forget what was held or fetched of them."""
        self.generation += 1
        for tp in tps:
            self.revoked_at[tp] = self.generation
            self.held.pop(tp, None)
            self.refused.pop(tp, None)

    def forget_spans(self, tps: set[TopicPartition]) -> None:
        """The fetched spans of ``tps`` are no longer this worker's to report."""
        for tp in tps:
            self.fetched_span.pop(tp, None)
        self.room.set()
        self.progress.set()

    def abandoned(self, tracker: OffsetView) -> list[str]:
        """The work fetched but not committed (per ``tracker``), per partition (empty:
        nothing), for a stop that had to cancel the worker; its new owner or next start
        re-reads it."""
        commits = self.owns_offsets
        pending = self.in_flight > 0 or tracker.pending_count() > 0
        if not pending and not (commits and tracker.to_commit()):
            return []
        parts = []
        spans = sorted(self.fetched_span.items(), key=lambda item: item[0].partition)
        for tp, (first, end) in (spans if commits else ()):
            committed = tracker.committed(tp)
            start = first if committed is None else max(committed, first)
            if end > start:
                parts.append(f"{tp.topic}[{tp.partition}] offsets {start}-{end - 1}")
        if self.in_flight > 0:
            parts.append(f"{self.in_flight} message(s) in flight")
        return parts or ["acked work whose commit failed"]

    def cancel_lanes(self, revoked: set[TopicPartition]) -> int:
        """A revoke: the revoked partitions' retry waits end now, their held messages
        are dropped (never written nor committed here: the new owner re-reads them).
        Returns how many messages were dropped."""
        dropped = 0
        for tp in revoked & self.lanes.keys():
            lane = self.lanes.pop(tp)
            if lane.task is not None:
                lane.task.cancel()
            dropped += lane.held
            self.drop(lane.held, lane)
            lane.dead = True
        return dropped


__all__ = ["Flow", "Lane"]
