"""The Committer: the one owner of a worker's offsets and of its commits.

The worker's other parts report what happened: work was *shipped* to the sinks and
*acked* by them, records were *fetched*, the group's committed offset was *seeded*,
partitions were *sought*, a poll came back idle (positions *reached*), partitions are
*revoked* (drained, then let go), the processing *failed*, the worker is *stopping*.
The Committer alone changes the :class:`~actors.offsets.OffsetTracker`, decides (with
its :class:`~actors.worker.commit_policies.CommitPolicy`) when to commit, and calls the
consumer's commit: single-flight, only offsets whose work the sink acked, only
contiguous ones, as next-offset (or the consumer position once everything before it is
done: past a transaction's commit marker). Readers get :attr:`Committer.offsets`, a
read-only view.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from actors.metrics import Metrics
from actors.offsets import Entry, OffsetTracker, OffsetView
from actors.worker.commit_policies import (
    POLICIES,
    BatchCommits,
    CommitPolicy,
    NoCommits,
    PerMessageCommits,
    SavepointCommits,
    commit_policy,
)

logger = logging.getLogger(__name__)


class Committer:
    """The offsets and the commits of one worker.

    Args:
        policy: the group's commit mode (:func:`commit_policy` of its ``commit``
            settings).
        consumer: the worker's consumer (started): the commits go to it.
        label: the worker's name in log lines.
        stats: the worker's counters (``committed`` is counted here).
        metrics: histograms (commit seconds), labelled ``(group, topic)``.
    """

    def __init__(self, policy: CommitPolicy, consumer: AIOKafkaConsumer, *, label: str,
                 stats: dict[str, int], metrics: Metrics | None = None,
                 metric_labels: tuple[str, str] = ("", "")) -> None:
        self.policy = policy
        self.settings = policy.settings
        self._tracker = OffsetTracker(savepoint_only=policy.savepoints)
        self._consumer = consumer
        self.lock = asyncio.Lock()
        self._due = asyncio.Event()
        self.acked_since_commit = 0
        self.last_commit = time.monotonic()
        self._label = label
        self._stats = stats
        self._metrics = metrics
        self._metric_labels = metric_labels

    @property
    def owns_offsets(self) -> bool:
        return self.policy.owns_offsets

    @property
    def due(self) -> asyncio.Event:
        """Set when an ack made a commit due, or the sink finished."""
        return self._due

    @property
    def offsets(self) -> OffsetView:
        """The offsets, read-only."""
        return self._tracker

    # -- events: what the other parts report -------------------------------------------

    def shipped(self, tp: TopicPartition, next_offset: int, count: int, *,
                savepoint: bool) -> Entry:
        """``count`` messages of ``tp`` up to ``next_offset`` went to the sinks."""
        return self._tracker.add(tp, next_offset, count, savepoint=savepoint)

    def acked(self, entry: Entry) -> None:
        """The sink acked ``entry`` (not fenced): its offsets become committable."""
        self._tracker.ack(entry)
        self.acked_since_commit += entry.count
        if self.policy.due_on_ack(entry, self.acked_since_commit):
            self._due.set()

    def fetched(self, tp: TopicPartition, first_offset: int) -> None:
        """Records of ``tp`` from ``first_offset`` were fetched (a fresh group's lag
        counts from there)."""
        self._tracker.note_start(tp, first_offset)

    def positioned(self, tp: TopicPartition, position: int) -> None:
        """``tp`` has nothing to read and no lag base yet: its position is the base."""
        self._tracker.note_start(tp, position)

    def seeded(self, tp: TopicPartition, committed: int) -> None:
        """The group's committed offset of ``tp`` was read."""
        self._tracker.seed(tp, committed)

    def sought(self, tp: TopicPartition, position: int, committed: int | None) -> None:
        """``tp`` was sought to ``position`` (the group had ``committed``): where kstage
        owns the offsets, the position becomes committable (:meth:`seeks_done` commits
        it, so a crash right after resumes there)."""
        if self.owns_offsets:
            self._tracker.start_at(tp, position, committed)

    async def seeks_done(self) -> None:
        """The seeks of a start or an assignment are done: commit them at once."""
        await self.commit()

    def reached(self, tp: TopicPartition, position: int) -> bool:
        """Everything before ``position`` of ``tp`` is done (an idle poll, nothing in
        flight): whether that moved its committable offset."""
        return self._tracker.advance(tp, position)

    async def idle(self, advanced: bool) -> None:
        """An idle poll moved positions (``advanced``): committed now if the policy
        says so, else by the commit task."""
        if advanced and self.policy.commits_when_idle():
            await self.commit()

    async def message_done(self) -> None:
        """``per_message``: the message's ack arrived: commit it before the next."""
        await self.commit()

    async def revoking(self) -> None:
        """Partitions are about to be let go, their work drained: commit what was
        acked (the caller bounds the wait)."""
        await self.commit()

    def let_go(self, tps: set[TopicPartition]) -> int:
        """``tps`` are no longer this worker's: their unacked work is cancelled (kstage
        owning the offsets) or their state forgotten (none/auto). Returns how many
        messages were cancelled."""
        if self.owns_offsets:
            return self._tracker.cancel(tps)
        self._tracker.forget(tps)
        return 0

    async def failed(self) -> None:
        """Processing threw: commit the work before the failed message, never it."""
        await self.commit()

    async def drained(self) -> bool:
        """``--drain`` reached every high-water mark: commit; whether all is committed."""
        await self.commit()
        return not self.uncommitted()

    async def stopping(self) -> None:
        """The worker stops: commit what the sink acked (never cancelled work)."""
        await self.commit()

    def sink_finished(self) -> None:
        """The sink loop ended: the commit task commits what is left and ends."""
        self._due.set()

    async def run(self, done: asyncio.Event) -> None:
        """The policy's background task (the periodic commit), until ``done``."""
        await self.policy.background(self, done)

    # -- the commit --------------------------------------------------------------------

    async def commit(self) -> None:
        """Commit every partition's contiguous acked offset (single-flight)."""
        if not self.policy.owns_offsets:
            return
        async with self.lock:
            offsets = self._tracker.to_commit()
            if not offsets:
                return
            acked = self.acked_since_commit  # acks arriving during the commit stay counted
            started = time.monotonic()
            try:
                await self._consumer.commit(offsets)
            except (CommitFailedError, IllegalStateError) as exc:
                # A rebalance took partitions away: their new owner replays from the last
                # committed offset (at-least-once); nothing to do here.
                logger.warning("%s: commit of %s rejected: %s", self._label, offsets, exc)
                return
            except KafkaError as exc:
                logger.warning("%s: commit failed, will retry: %s", self._label, exc)
                return
            self._tracker.mark_committed(offsets)
            self.acked_since_commit = max(self.acked_since_commit - acked, 0)
            self.last_commit = time.monotonic()
            self._stats["committed"] += 1
            if self._metrics is not None:
                self._metrics.commit_seconds.labels(*self._metric_labels).observe(
                    self.last_commit - started)
            logger.debug("%s: committed %s in %.3fs", self._label,
                         {f"{tp.topic}[{tp.partition}]": o for tp, o in offsets.items()},
                         self.last_commit - started)

    def uncommitted(self) -> bool:
        """Acked work waits for a commit (always False where kstage commits nothing)."""
        return self.policy.owns_offsets and bool(self._tracker.to_commit())


__all__ = ["POLICIES", "BatchCommits", "CommitPolicy", "Committer", "NoCommits",
           "OffsetView", "PerMessageCommits", "SavepointCommits", "commit_policy"]
