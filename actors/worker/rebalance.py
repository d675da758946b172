"""Rebalance handling: the consumer's listener, the assignment and its generations.

* On assign: the partitions are this worker's; their committed offsets are read later
  (:meth:`Rebalance.seed_committed`, from the fetch task) as the base of their lag. The
  first assignment of the process run applies ``start_from``
  (:mod:`actors.worker.start_from`); otherwise a partition resumes where the topic's
  tables hold it when that is ahead of its committed offset
  (:mod:`actors.worker.sink_offsets`).
* On revoke: in-flight work of the revoked partitions is drained (bounded by half the
  rebalance timeout) and committed, then what is left is fenced: its batches are
  cancelled before or during their write (:class:`actors.sinks.Fence`), batches fetched
  before the revoke are dropped, and nothing of the partition is written after the
  revoke returned. Every revoke bumps the generation: work fetched in a generation before
  its partition's last revoke is stale (:meth:`Rebalance.live`).
* On a lost membership (:meth:`Rebalance.watch`): when no heartbeat was answered for
  about ``session_timeout_ms`` (the coordinator may have expired the member and given its
  partitions to another one: a network partition, a coordinator out of reach), the
  partitions are fenced as on a revoke but without a drain or a commit (a commit would
  be of a stale generation), ``/readyz`` says so, and the member rejoins the group, its
  positions read again from the committed offsets.
* A topic missing from the consumer's metadata (not created yet, or created a moment
  ago and not yet known to the broker that answered): the group assigned nothing, and
  aiokafka would look again only after ``metadata.max.age.ms`` (5 min). The watch asks
  for the metadata every second until the topic is there (then the group leader
  rebalances), and ``/readyz`` says what it waits for.
* After an empty poll with nothing in flight, each partition's consumer position is
  committable (:meth:`Rebalance.advance_to_positions`: past a transaction's marker).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError

from actors.kafka import GroupMember, rebalance_timeout_ms
from actors.worker.sink_offsets import resume_from_sinks, revoke_in_sinks
from actors.worker.start_from import seek_at_start

if TYPE_CHECKING:
    from actors.worker.worker import Worker

logger = logging.getLogger(__name__)

_PROBE_AFTER_S, _PROBE_EVERY_S = 3.0, 10.0  # security probes while the group is out of reach


class Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """The rebalance listener of one worker, and the assignment it keeps."""

    def __init__(self, worker: Worker) -> None:
        self._w = worker
        self.assigned: set[TopicPartition] = set()
        self.joined = asyncio.Event()
        # Fencing of revoked partitions: every revoke bumps the generation; work fetched
        # in a generation before its partition's last revoke is stale and dropped.
        self.generation = 0
        self.revoked_at: dict[TopicPartition, int] = {}
        self.unseeded: set[TopicPartition] = set()  # assigned, committed offset not read
        self.assigned_at = time.monotonic()  # the last assignment (a join is a heartbeat)
        self.lost: str | None = None  # why the membership is lost, until the next assignment
        self.topic_missing: str | None = None  # the topic is not in the consumer's metadata
        # Why the brokers refuse this client (a login, certificate or token refused
        # mid-run), from a probe while the group is out of reach; None: no such reason.
        self.security_problem: str | None = None
        # Assigned partitions paused until the sinks said where their tables hold them
        # (see on_partitions_assigned), with the generation of that assignment; the
        # fetcher does not resume them.
        self.held: dict[TopicPartition, int] = {}
        self._resuming: set[asyncio.Task[None]] = set()

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.on_assigned(set(assigned))
        w = self._w
        consumer = w.committer.consumer
        # A sink that stores offsets is asked where its table holds each partition before
        # anything of them is fetched: paused now, before the first await (else aiokafka
        # fetches from the committed offset meanwhile, and those records come too, beside
        # the ones from the table's offset). The tables are read off the rebalance (a Spark
        # call may wait behind an append or a merge): the group's rebalance ends at once,
        # and the partitions are resumed when their tables answered (:meth:`_resume`).
        hold = (consumer is not None and bool(assigned)
                and any(s.capabilities.stores_offsets for s in w.sinks))
        gen = self.generation
        if hold and consumer is not None:
            consumer.pause(*assigned)
            self.held.update(dict.fromkeys(assigned, gen))
        started = False
        if (w.group.start_from != "committed" and consumer is not None
                and w.starts.claim(w.group_id, w.topic.topic)):
            await seek_at_start(w, consumer, set(assigned))  # first assignment of the run
            started = True
        if hold and consumer is not None:
            tg = w.task_group
            resume = self._resume(consumer, set(assigned), seek=not started, gen=gen)
            if tg is None:  # not running its loops (a test driving the listener): inline
                await resume
            else:
                task = tg.create_task(resume, name=f"{w.label}:resume")
                self._resuming.add(task)
                task.add_done_callback(self._resuming.discard)

    async def _resume(self, consumer: AIOKafkaConsumer, assigned: set[TopicPartition], *,
                      seek: bool, gen: int) -> None:
        """Ask the sinks that store offsets where their tables hold ``assigned`` (seek
        there, see :mod:`actors.worker.sink_offsets`), then resume the partitions still
        held for generation ``gen``."""
        w = self._w
        try:
            await resume_from_sinks(w, consumer, assigned, seek=seek,
                                    live=lambda tp: self.held.get(tp) == gen)
        except Exception as exc:  # noqa: BLE001 - never lose the partitions over it
            logger.warning("%s: asking the sinks where to resume %s failed (%s); reading "
                           "from the committed offsets", w.label,
                           sorted(tp.partition for tp in assigned), exc)
        finally:
            mine = [tp for tp in assigned if self.held.get(tp) == gen]
            for tp in mine:
                del self.held[tp]
            current = consumer.assignment()
            consumer.resume(*(tp for tp in mine if tp in current and tp not in w.lanes))

    def live(self, tp: TopicPartition, gen: int) -> bool:
        """Work of ``tp`` fetched in generation ``gen`` is still this worker's (in modes
        none/auto, where kstage does not own the offsets, as long as ``tp`` is assigned)."""
        if tp not in self.assigned:
            return False
        return (gen >= self.revoked_at.get(tp, 0)
                or not self._w.committer.owns_offsets)

    def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned = assigned
        self.unseeded = set(assigned)
        self.assigned_at = time.monotonic()
        self.lost = None
        self.security_problem = None
        if assigned:
            self.topic_missing = None  # the group leader found its partitions
        self.joined.set()
        parts = sorted(tp.partition for tp in assigned)
        logger.info("%s: assigned partitions %s of %s", self._w.label, parts,
                    self._w.topic.topic)

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        """Drain in-flight work of revoked partitions (bounded), commit it, fence the rest.

        The whole callback ends well within the rebalance timeout, so the member is not
        dropped from the group: the drain waits at most half of it, the commit a quarter.
        Work not drained by then is cancelled (never written later, never committed):
        the partitions' new owner re-reads it from the committed offset.
        """
        self.assigned -= revoked
        if revoked:
            await self._let_go(revoked, drain=True)
            logger.info("%s: revoked partitions %s", self._w.label,
                        sorted(tp.partition for tp in revoked))

    async def on_lost(self, silent_s: float) -> None:
        """The membership is lost: no heartbeat answered for ``silent_s``. Every assigned
        partition is fenced at once, without a drain or a commit: the coordinator may
        have handed it to another member already, whose writes a late one of ours could
        overtake, and a commit now would be of a generation the group left behind."""
        lost, self.assigned = self.assigned, set()
        w = self._w
        parts = sorted(tp.partition for tp in lost)
        self.lost = (f"lost its group membership: no heartbeat answered for {silent_s:.1f}s "
                     f"(session_timeout_ms {w.group.session_timeout_ms}); partitions "
                     f"{parts} fenced, rejoining")
        logger.warning("%s: %s", w.label, self.lost)
        await self._let_go(lost, drain=False)

    async def watch(self, consumer: GroupMember) -> None:
        """The membership watch (a task of the worker), every quarter second at most:

        - once no heartbeat was answered (nor the group joined) for
          ``session_timeout_ms`` less a margin (a heartbeat interval, at most a tenth of
          the session), fence the partitions (:meth:`on_lost`) and rejoin. The
          coordinator expires a member no earlier than a session after the last
          heartbeat it answered was *sent*, so the fence comes before any other member
          can be given the partitions;
        - with nothing assigned and the topic unknown to the consumer's metadata, ask
          for the metadata every second (:meth:`check_topic`);
        - while the membership is lost or the coordinator out of reach, probe the first
          broker every ten seconds for a security reason (:attr:`security_problem`: a
          password rotated, a certificate or token refused), for ``/readyz``."""
        w = self._w
        session_s = w.group.session_timeout_ms / 1000
        limit = session_s - min(w.group.heartbeat_interval_ms / 1000, session_s / 10)
        every = min(0.25, limit / 10)
        asked = probed = 0.0
        out_of_reach: float | None = None  # since when the group is
        probe: asyncio.Task[None] | None = None
        async with asyncio.TaskGroup() as probes:  # a probe (up to 10 s) never holds the
            try:                                   # fence back: it runs beside the loop
                while not w.should_stop:
                    try:
                        await asyncio.wait_for(w.intake_stopped.wait(), every)
                    except TimeoutError:
                        pass
                    if w.should_stop:
                        break
                    now = time.monotonic()
                    if self.lost is None and w.coordinator_reachable():
                        out_of_reach = None
                    else:
                        out_of_reach = out_of_reach or now
                        if (now - out_of_reach >= _PROBE_AFTER_S
                                and now - probed >= _PROBE_EVERY_S
                                and (probe is None or probe.done())):
                            probed = now
                            probe = probes.create_task(self._probe(consumer))
                    if not self.assigned:
                        if self.joined.is_set() and self.check_topic(consumer) \
                                and time.monotonic() - asked >= 1:
                            asked = time.monotonic()
                            consumer.refresh_metadata()
                        continue
                    silent = now - max(self.assigned_at, consumer.last_heartbeat() or 0)
                    if silent >= limit:
                        await self.on_lost(silent)
                        consumer.rejoin()
            finally:
                if probe is not None:
                    probe.cancel()  # a stop does not wait for it

    async def _probe(self, consumer: GroupMember) -> None:
        self.security_problem = await consumer.diagnose()

    def check_topic(self, consumer: GroupMember) -> bool:
        """Whether the worker's topic is missing from the consumer's metadata (and say
        so, once, and in :attr:`topic_missing` for ``/readyz``)."""
        w = self._w
        topic = w.topic.topic
        if consumer.partitions_for_topic(topic) is not None:
            self.topic_missing = None
            return False
        if self.topic_missing is None:
            self.topic_missing = (f"topic {topic!r} is not in the cluster's metadata (not "
                                  "created yet?); asking again every second")
            logger.warning("%s: %s", w.label, self.topic_missing)
        return True

    async def _let_go(self, tps: set[TopicPartition], *, drain: bool) -> None:
        """``tps`` are no longer this worker's: bump the generation (their fetched work
        is stale), then (kstage owning the offsets) drain and commit if ``drain``, and
        fence whatever is left; else (none/auto) forget them, writes under way finish."""
        w = self._w
        committer = w.committer
        tracker = committer.tracker
        for tp in tps:
            self.held.pop(tp, None)
        for task in list(self._resuming):  # their partitions are being taken away
            task.cancel()
        self.generation += 1
        for tp in tps:
            self.revoked_at[tp] = self.generation
        self.unseeded -= tps
        parts = sorted(tp.partition for tp in tps)
        rebalance_s = rebalance_timeout_ms(w.settings, w.group) / 1000
        if committer.owns_offsets:
            # A retry wait of a revoked partition ends now (its messages are re-read by
            # the new owner), not after its backoff.
            dropped = w.cancel_lanes(tps)
            if drain:
                await self._drain_and_commit(tps, rebalance_s)
            cancelled = tracker.cancel(tps)
            w.in_flight -= cancelled
            writes = await w.fence.revoke(tps)
            # A table's append of the partitions already under way: let it commit before
            # the new owner reads the table's offsets (on a lost membership, not waited
            # for: the new owner may be reading already, and the table's own offsets keep
            # a late append from writing what it holds twice).
            await revoke_in_sinks(w, tps, rebalance_s / 4 if drain else 0)
            if cancelled or writes or dropped:
                logger.info("%s: revoke: cancelled %d message(s) of partitions %s (%d "
                            "write(s) stopped)", w.label, cancelled + dropped, parts, writes)
        else:
            # none/auto: kstage does not own the offsets (auto-commit already committed
            # the position): writes under way finish, or their messages would be lost.
            tracker.forget(tps)
            await revoke_in_sinks(w, tps, 0)
        for tp in tps:
            w.fetcher.fetched_span.pop(tp, None)
        w.room.set()
        w.progress.set()

    async def _drain_and_commit(self, revoked: set[TopicPartition], rebalance_s: float
                                ) -> None:
        """Wait for the revoked partitions' in-flight work (at most half the rebalance
        timeout), then commit what the sink acked (at most a quarter of it)."""
        w = self._w
        tracker = w.committer.tracker
        parts = sorted(tp.partition for tp in revoked)
        timeout = min(w.settings.supervisor.shutdown_grace_s,
                      w.group.max_poll_interval_ms / 2000, rebalance_s / 2)

        def drained() -> bool:
            return w.current_tp not in revoked and all(
                tracker.pending_count(tp) == 0 for tp in revoked)

        try:
            async with asyncio.timeout(timeout):
                while not drained():
                    w.progress.clear()
                    await w.progress.wait()
        except TimeoutError:
            logger.warning("%s: revoke: in-flight work of %s not drained within %.1fs; "
                           "cancelling it: the new owner re-reads it", w.label, parts,
                           timeout)
        try:
            async with asyncio.timeout(rebalance_s / 4):
                await w.committer.commit()
        except TimeoutError:
            logger.warning("%s: revoke: commit of %s did not finish within %.1fs",
                           w.label, parts, rebalance_s / 4)

    async def seed_committed(self, consumer: AIOKafkaConsumer) -> None:
        """Read the group's committed offsets of newly assigned partitions: the base of
        their lag until their own work moves it (a restart with nothing to read has lag
        high-water minus committed, as ``kstage lag`` says, not high-water)."""
        gen = self.generation
        for tp in sorted(self.unseeded, key=lambda t: t.partition):
            try:
                offset = await consumer.committed(tp)
            except KafkaError as exc:
                logger.debug("%s: committed offset of %s not read yet: %s", self._w.label,
                             tp, exc)
                return
            if not self.live(tp, gen) or tp not in self.unseeded:
                continue  # revoked meanwhile
            self.unseeded.discard(tp)
            if offset is not None:
                self._w.committer.tracker.seed(tp, offset)

    async def advance_to_positions(self, consumer: AIOKafkaConsumer) -> None:
        """A poll came back empty and nothing is in flight: everything before each
        partition's consumer position is done, so the position is committable (it is past
        a transaction's commit marker, one more than the last record + 1)."""
        w = self._w
        committer = w.committer
        tracker = committer.tracker
        if (w.in_flight or w.process_ended or w.should_stop
                or not w.inbox.empty() or not committer.owns_offsets):
            return
        gen = self.generation
        advanced = False
        for tp in list(self.assigned):
            if tracker.pending_count(tp) or tracker.committable(tp) is None:
                continue  # work pending, or no offset known yet (advance needs one)
            try:
                async with asyncio.timeout(1):  # a position being reset: try next time
                    position = await consumer.position(tp)
            except (IllegalStateError, KafkaError, TimeoutError):
                continue  # errors of the partition surface from the next poll
            if w.in_flight or not self.live(tp, gen) or tp in w.lanes:
                return  # fetched, revoked or parked meanwhile (a lane that threw stays)
            advanced = tracker.advance(tp, position) or advanced
        if advanced and committer.policy.per_message:
            await committer.commit()  # no commit loop in this mode


__all__ = ["Rebalance"]
