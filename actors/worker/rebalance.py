"""Rebalance handling: the consumer's listener, the assignment and its generations.

* On assign: the partitions are this worker's; their committed offsets are read later
  (:meth:`Rebalance.seed_committed`, from the fetch task) as the base of their lag; a
  partition without one (a fresh group) counts its lag from where the worker started
  reading (the first record fetched, else the consumer position after an empty poll:
  :meth:`Rebalance.note_starts`). The
  first assignment of the process run applies ``start_from``
  (:mod:`actors.worker.start_from`); otherwise a partition resumes where the topic's
  tables hold it when that is ahead of its committed offset
  (:mod:`actors.worker.sink_offsets`); a partition a table holds past its high-water
  mark (a re-created topic) is refused there: it stays paused until its next assignment
  (:attr:`Flow.refused <actors.worker.flow.Flow.refused>`, in ``/readyz`` and ``/status``).
* On revoke: in-flight work of the revoked partitions is drained (bounded by half the
  rebalance timeout) and committed, the batch being processed when the revoke began
  included (it is shipped, so what its walk did, such as a dead letter, is not done
  again by the partition's next reader), then what is left is fenced: its batches are
  cancelled before or during their write (:class:`actors.sinks.Fence`), batches fetched
  before the revoke are dropped, and nothing of the partition is written after the
  revoke returned (but an Iceberg append already in its commit, which the table's
  commit-time fence lets land only where no other writer appended the partition); its
  failing writes no longer make ``/readyz`` answer 503 (the sink
  health forgets them: the new owner retries them). Every revoke bumps the generation:
  work fetched in a generation before its partition's last revoke is stale
  (:meth:`Flow.live <actors.worker.flow.Flow.live>`).
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
from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError

from actors.kafka import GroupMember, coordinator_known
from actors.log_bounds import LogBounds
from actors.sink_health import SinkHealth
from actors.sinks import Sink
from actors.worker.committer import Committer
from actors.worker.flow import Flow
from actors.worker.sink_offsets import resume_from_sinks, revoke_in_sinks
from actors.worker.start_from import StartRegistry, seek_at_start
from settings.models import GroupSettings

logger = logging.getLogger(__name__)

_PROBE_AFTER_S, _PROBE_EVERY_S = 3.0, 10.0  # security probes while the group is out of reach


class Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """The rebalance listener of one worker: it keeps the flow's assignment and
    generations (:class:`~actors.worker.flow.Flow`).

    Args:
        consumer: the worker's consumer, whose listener this is.
        flow: the worker's flow state.
        committer: the worker's committer (drained work is committed on revoke).
        group: the group's settings (``start_from``, session and poll timeouts).
        topic: the topic's name.
        group_id: the group's id (the ``start_from`` registry's key).
        starts: the process run's ``start_from`` registry.
        rebalance_s: the group's rebalance timeout: a revoke's drain waits at most half
            of it, its commit a quarter.
        grace_s: a revoke's drain waits at most this long too (``shutdown_grace_s``).
        healths: the worker's sink healths: a fenced partition's failing writes are
            forgotten there (the new owner retries them; /readyz stays about this
            worker's own partitions).
        label: the worker's name in log lines.
        bounds: reads the assigned partitions' log start and high-water mark, to refuse
            a partition a table holds past its end (None: not checked).
        sinks: the topic's sinks, asked on assignment where their tables hold the
            partitions, and told of revokes.
        tasks: the task group of the worker's loops: the sinks are asked there, off the
            rebalance.
    """

    def __init__(self, *, consumer: AIOKafkaConsumer, flow: Flow, committer: Committer,
                 group: GroupSettings, topic: str, group_id: str, starts: StartRegistry,
                 rebalance_s: float, grace_s: float, healths: Sequence[SinkHealth] = (),
                 label: str = "", bounds: LogBounds | None = None,
                 sinks: Sequence[Sink] = (), tasks: asyncio.TaskGroup) -> None:
        self.consumer = consumer
        self.flow = flow
        self.committer = committer
        self.group = group
        self.topic = topic
        self.group_id = group_id
        self.starts = starts
        self.rebalance_s = rebalance_s
        self.grace_s = grace_s
        self.healths = healths
        self.label = label
        self.bounds = bounds
        self.sinks = sinks
        self.tasks = tasks
        self.joined = asyncio.Event()
        self.unseeded: set[TopicPartition] = set()  # assigned, committed offset not read
        self.assigned_at = time.monotonic()  # the last assignment (a join is a heartbeat)
        self.lost: str | None = None  # why the membership is lost, until the next assignment
        self.topic_missing: str | None = None  # the topic is not in the consumer's metadata
        # Why the brokers refuse this client (a login, certificate or token refused
        # mid-run), from a probe while the group is out of reach; None: no such reason.
        self.security_problem: str | None = None
        self._resuming: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        state = ("lost" if self.lost is not None else "joined" if self.joined.is_set()
                 else "joining")
        return (f"<Rebalance {self.label} {state} gen={self.flow.generation} "
                f"assigned={sorted(tp.partition for tp in self.flow.assigned)}>")

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.on_assigned(set(assigned))
        flow = self.flow
        consumer = self.consumer
        # A sink that stores offsets is asked where its table holds each partition before
        # anything of them is fetched: paused now, before the first await (else aiokafka
        # fetches from the committed offset meanwhile, and those records come too, beside
        # the ones from the table's offset). The tables are read off the rebalance (a Spark
        # call may wait behind an append or a merge): the group's rebalance ends at once,
        # and the partitions are resumed when their tables answered (:meth:`_resume`).
        hold = bool(assigned) and any(s.capabilities.stores_offsets for s in self.sinks)
        gen = flow.generation
        if hold:
            consumer.pause(*assigned)
            flow.hold(set(assigned), gen)
        elif flow.paused_by_operator:
            consumer.pause(*assigned)  # before the first await, as above
        started = False
        if (self.group.start_from != "committed"
                and self.starts.claim(self.group_id, self.topic)):
            # the first assignment of the run
            await seek_at_start(
                consumer, set(assigned), mode=self.group.start_from, label=self.label,
                counts=self.starts.counts(self.group_id, self.topic),
                committer=self.committer, unseeded=self.unseeded)
            started = True
        if hold:
            task = self.tasks.create_task(
                self._resume(consumer, set(assigned), seek=not started, gen=gen),
                name=f"{self.label}:resume")
            self._resuming.add(task)
            task.add_done_callback(self._resuming.discard)

    async def _resume(self, consumer: AIOKafkaConsumer, assigned: set[TopicPartition], *,
                      seek: bool, gen: int) -> None:
        """Ask the sinks that store offsets where their tables hold ``assigned`` (seek
        there, see :mod:`actors.worker.sink_offsets`), then resume the partitions still
        held for generation ``gen``."""
        held = self.flow.held
        try:
            refused = await resume_from_sinks(
                self.sinks, consumer, assigned, seek=seek,
                live=lambda tp: held.get(tp) == gen, label=self.label,
                committer=self.committer, unseeded=self.unseeded, bounds=self.bounds,
                group=self.group_id)
            self.flow.refuse(refused, gen)
        except Exception as exc:  # noqa: BLE001 - never lose the partitions over it
            logger.warning("%s: asking the sinks where to resume %s failed (%s); reading "
                           "from the committed offsets", self.label,
                           sorted(tp.partition for tp in assigned), exc)
        finally:
            mine = self.flow.release(assigned, gen)
            current = consumer.assignment()
            consumer.resume(*(tp for tp in mine
                              if tp in current and not self.flow.keeps_paused(tp)))

    def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.flow.assign(assigned)
        self.unseeded = set(assigned)
        self.assigned_at = time.monotonic()
        self.lost = None
        self.security_problem = None
        if assigned:
            self.topic_missing = None  # the group leader found its partitions
        self.joined.set()
        parts = sorted(tp.partition for tp in assigned)
        logger.info("%s: assigned partitions %s of %s", self.label, parts, self.topic)

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        """Drain in-flight work of revoked partitions (bounded), commit it, fence the rest.

        The whole callback ends well within the rebalance timeout, so the member is not
        dropped from the group: the drain waits at most half of it, the commit a quarter.
        Work not drained by then is cancelled (never written later, never committed):
        the partitions' new owner re-reads it from the committed offset.
        """
        self.flow.revoke(revoked)
        if revoked:
            await self._let_go(revoked, drain=True)
            logger.info("%s: revoked partitions %s", self.label,
                        sorted(tp.partition for tp in revoked))

    async def on_lost(self, silent_s: float) -> None:
        """The membership is lost: no heartbeat answered for ``silent_s``. Every assigned
        partition is fenced at once, without a drain or a commit: the coordinator may
        have handed it to another member already, whose writes a late one of ours could
        overtake, and a commit now would be of a generation the group left behind."""
        flow = self.flow
        lost = flow.lose_all()  # and a revoke draining meanwhile ships no more
        parts = sorted(tp.partition for tp in lost)
        self.lost = (f"lost its group membership: no heartbeat answered for {silent_s:.1f}s "
                     f"(session_timeout_ms {self.group.session_timeout_ms}); partitions "
                     f"{parts} fenced, rejoining")
        logger.warning("%s: %s", self.label, self.lost)
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
        flow = self.flow
        session_s = self.group.session_timeout_ms / 1000
        limit = session_s - min(self.group.heartbeat_interval_ms / 1000, session_s / 10)
        every = min(0.25, limit / 10)
        asked = probed = 0.0
        out_of_reach: float | None = None  # since when the group is
        probe: asyncio.Task[None] | None = None
        async with asyncio.TaskGroup() as probes:  # a probe (up to 10 s) never holds the
            try:                                   # fence back: it runs beside the loop
                while not flow.should_stop:
                    try:
                        await asyncio.wait_for(flow.intake_stopped.wait(), every)
                    except TimeoutError:
                        pass
                    if flow.should_stop:
                        break
                    now = time.monotonic()
                    if self.lost is None and coordinator_known(consumer):
                        out_of_reach = None
                    else:
                        out_of_reach = out_of_reach or now
                        if (now - out_of_reach >= _PROBE_AFTER_S
                                and now - probed >= _PROBE_EVERY_S
                                and (probe is None or probe.done())):
                            probed = now
                            probe = probes.create_task(self._probe(consumer))
                    if not flow.assigned:
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
        topic = self.topic
        if consumer.partitions_for_topic(topic) is not None:
            self.topic_missing = None
            return False
        if self.topic_missing is None:
            self.topic_missing = (f"topic {topic!r} is not in the cluster's metadata (not "
                                  "created yet?); asking again every second")
            logger.warning("%s: %s", self.label, self.topic_missing)
        return True

    async def _let_go(self, tps: set[TopicPartition], *, drain: bool) -> None:
        """``tps`` are no longer this worker's: bump the generation (their fetched work
        is stale), then (kstage owning the offsets) drain and commit if ``drain``, and
        fence whatever is left; else (none/auto) forget them, writes under way finish."""
        flow = self.flow
        committer = self.committer
        for task in list(self._resuming):  # their partitions are being taken away
            task.cancel()
        under_way = flow.current_tp if drain and flow.current_tp in tps else None
        flow.let_go(tps)
        if under_way is not None and committer.owns_offsets:
            flow.drain_under_way(under_way)  # shipped and drained, see below
        self.unseeded -= tps
        parts = sorted(tp.partition for tp in tps)
        rebalance_s = self.rebalance_s
        if committer.owns_offsets:
            # A retry wait of a revoked partition ends now (its messages are re-read by
            # the new owner), not after its backoff.
            dropped = flow.cancel_lanes(tps)
            if drain:
                await self._drain_and_commit(tps, rebalance_s)
            cancelled = committer.let_go(tps)
            flow.drop(cancelled)
            writes = await flow.fence.revoke(tps)
            for health in self.healths:
                health.forget((tp.topic, tp.partition) for tp in tps)
            # A table's append of the partitions already under way: let it commit before
            # the new owner reads the table's offsets (on a lost membership, not waited
            # for: the new owner may be reading already). Either way the sink forgets the
            # partitions: an append of them not yet writing refuses to, and one already
            # in its commit is fenced there (actors/sinks/spark/iceberg.py): it commits
            # only if the table still holds each partition where this member continues
            # from, so it and the new owner's appends never both land the same offsets;
            # the one refused writes nothing and commits nothing to Kafka.
            await revoke_in_sinks(self.sinks, tps, rebalance_s / 4 if drain else 0)
            if cancelled or writes or dropped:
                logger.info("%s: revoke: cancelled %d message(s) of partitions %s (%d "
                            "write(s) stopped)", self.label, cancelled + dropped, parts,
                            writes)
        else:
            # none/auto: kstage does not own the offsets (auto-commit already committed
            # the position): writes under way finish, or their messages would be lost.
            committer.let_go(tps)
            await revoke_in_sinks(self.sinks, tps, 0)
        flow.forget_spans(tps)

    async def _drain_and_commit(self, revoked: set[TopicPartition], rebalance_s: float
                                ) -> None:
        """Wait for the revoked partitions' in-flight work (at most half the rebalance
        timeout), then commit what the sink acked (at most a quarter of it)."""
        flow = self.flow
        tracker = self.committer.offsets
        parts = sorted(tp.partition for tp in revoked)
        timeout = min(self.grace_s, self.group.max_poll_interval_ms / 2000, rebalance_s / 2)

        def drained() -> bool:
            return flow.current_tp not in revoked and all(
                tracker.pending_count(tp) == 0 for tp in revoked)

        try:
            async with asyncio.timeout(timeout):
                while not drained():
                    flow.progress.clear()
                    await flow.progress.wait()
        except TimeoutError:
            logger.warning("%s: revoke: in-flight work of %s not drained within %.1fs; "
                           "cancelling it: the new owner re-reads it", self.label, parts,
                           timeout)
        finally:
            flow.stop_draining(revoked)  # the batch under way ships no more: fenced
        try:
            async with asyncio.timeout(rebalance_s / 4):
                await self.committer.revoking()
        except TimeoutError:
            logger.warning("%s: revoke: commit of %s did not finish within %.1fs",
                           self.label, parts, rebalance_s / 4)

    async def seed_committed(self, consumer: AIOKafkaConsumer) -> None:
        """Read the group's committed offsets of newly assigned partitions: the base of
        their lag until their own work moves it (a restart with nothing to read has lag
        high-water minus committed, as ``kstage lag`` says, not high-water)."""
        gen = self.flow.generation
        for tp in sorted(self.unseeded, key=lambda t: t.partition):
            try:
                offset = await consumer.committed(tp)
            except KafkaError as exc:
                logger.debug("%s: committed offset of %s not read yet: %s", self.label,
                             tp, exc)
                return
            if not self.flow.live(tp, gen) or tp not in self.unseeded:
                continue  # revoked meanwhile
            self.unseeded.discard(tp)
            if offset is not None:
                self.committer.seeded(tp, offset)

    async def note_starts(self, consumer: AIOKafkaConsumer) -> None:
        """A poll came back empty: each assigned partition whose lag has no base yet (no
        committed offset, nothing fetched: a fresh group with nothing to read) gets its
        consumer position as the base, the offset the worker starts reading at, so its
        lag is 0, not unknown."""
        flow = self.flow
        committer = self.committer
        tracker = committer.offsets
        gen = flow.generation
        for tp in sorted(flow.assigned - self.unseeded, key=lambda t: t.partition):
            if tracker.lag_base(tp) is not None:
                continue
            try:
                async with asyncio.timeout(1):  # a position being reset: try next time
                    position = await consumer.position(tp)
            except (IllegalStateError, KafkaError, TimeoutError):
                continue
            if flow.live(tp, gen):  # not revoked meanwhile
                committer.positioned(tp, position)

    async def advance_to_positions(self, consumer: AIOKafkaConsumer) -> None:
        """A poll came back empty and nothing is in flight: everything before each
        partition's consumer position is done, so the position is committable (it is past
        a transaction's commit marker, one more than the last record + 1)."""
        flow = self.flow
        committer = self.committer
        tracker = committer.offsets
        if (flow.in_flight or flow.positions_stale or not flow.inbox.empty()
                or not committer.owns_offsets):
            return
        gen = flow.generation
        advanced = False
        for tp in list(flow.assigned):
            if tracker.pending_count(tp) or tracker.committable(tp) is None:
                continue  # work pending, or no offset known yet (advance needs one)
            try:
                async with asyncio.timeout(1):  # a position being reset: try next time
                    position = await consumer.position(tp)
            except (IllegalStateError, KafkaError, TimeoutError):
                continue  # errors of the partition surface from the next poll
            if (flow.in_flight or flow.positions_stale or not flow.live(tp, gen)
                    or tp in flow.lanes):
                return  # fetched, thrown, revoked or parked meanwhile (a lane that threw
                # stays)
            advanced = committer.reached(tp, position) or advanced
        await committer.idle(advanced)


__all__ = ["Rebalance"]
