"""Commits: one small policy class per commit mode, and the committer that applies it.

A :class:`CommitPolicy` answers every question the worker used to answer by branching
on ``CommitMode``: does kstage own the offsets at all (not in ``none``/``auto``, where
auto-commit or nobody commits), does a periodic commit task run, is every message written
and committed on its own (``per_message``), do processors mark savepoints, and is a
commit due after an ack. A new commit mode is a new subclass in :data:`POLICIES`.

The :class:`Committer` owns the commit task and the single-flight commit over the
worker's :class:`~actors.offsets.OffsetTracker`: only offsets whose work the sink acked,
only contiguous ones, as next-offset (or the consumer position once everything before it
is done: past a transaction's commit marker).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import ClassVar

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from actors.metrics import Metrics
from actors.offsets import Entry, OffsetTracker
from settings.models import CommitMode, CommitSettings

logger = logging.getLogger(__name__)


class CommitPolicy:
    """What a commit mode means to the worker (the base: kstage commits, periodically
    and on demand).

    Attributes:
        owns_offsets: kstage commits the offsets: revoked partitions are drained and
            fenced, abandoned work is reported, stale work is dropped.
        periodic: a commit task commits every ``max_interval_s`` and when one is due.
        per_message: each message is written, acked and committed before the next.
        savepoints: processors are asked for savepoints; only those are committed.
    """

    owns_offsets: ClassVar[bool] = True
    periodic: ClassVar[bool] = True
    per_message: ClassVar[bool] = False
    savepoints: ClassVar[bool] = False

    def __init__(self, settings: CommitSettings) -> None:
        self.settings = settings

    def due_on_ack(self, entry: Entry, acked_since_commit: int) -> bool:
        """Whether this ack makes a commit due now (else the interval does)."""
        return False


class NoCommits(CommitPolicy):
    """``none`` (never commit) and ``auto`` (aiokafka's auto-commit): kstage does not own
    the offsets."""

    owns_offsets = False
    periodic = False


class PerMessageCommits(CommitPolicy):
    """``per_message``: write, await the ack and commit after every message (inline, no
    commit task)."""

    periodic = False
    per_message = True


class BatchCommits(CommitPolicy):
    """``batch``: commit after ``max_messages`` acked or ``max_interval_s``."""

    def due_on_ack(self, entry: Entry, acked_since_commit: int) -> bool:
        return acked_since_commit >= self.settings.max_messages


class SavepointCommits(CommitPolicy):
    """``savepoint``: commit exactly up to the messages the processor marks."""

    savepoints = True

    def due_on_ack(self, entry: Entry, acked_since_commit: int) -> bool:
        return entry.savepoint


POLICIES: dict[CommitMode, type[CommitPolicy]] = {
    CommitMode.NONE: NoCommits, CommitMode.AUTO: NoCommits,
    CommitMode.PER_MESSAGE: PerMessageCommits, CommitMode.BATCH: BatchCommits,
    CommitMode.SAVEPOINT: SavepointCommits,
}


def commit_policy(settings: CommitSettings) -> CommitPolicy:
    return POLICIES[settings.mode](settings)


class Committer:
    """The commit task and the single-flight commit of one worker.

    Args:
        settings: the group's ``commit`` settings.
        label: the worker's name in log lines.
        stats: the worker's counters (``committed`` is counted here).
        metrics: histograms (commit seconds), labelled ``(group, topic)``.
    """

    def __init__(self, settings: CommitSettings, *, label: str, stats: dict[str, int],
                 metrics: Metrics | None = None, metric_labels: tuple[str, str] = ("", "")
                 ) -> None:
        self.policy = commit_policy(settings)
        self.settings = settings
        self.tracker = OffsetTracker(savepoint_only=self.policy.savepoints)
        self.consumer: AIOKafkaConsumer | None = None
        self.lock = asyncio.Lock()
        self.due = asyncio.Event()
        self.acked_since_commit = 0
        self.last_commit = time.monotonic()
        self._label = label
        self._stats = stats
        self._metrics = metrics
        self._metric_labels = metric_labels

    @property
    def owns_offsets(self) -> bool:
        return self.policy.owns_offsets

    def on_ack(self, entry: Entry) -> None:
        """The sink acked ``entry`` (not fenced): its offsets become committable."""
        self.tracker.ack(entry)
        self.acked_since_commit += entry.count
        if self.policy.due_on_ack(entry, self.acked_since_commit):
            self.due.set()

    async def run(self, done: asyncio.Event) -> None:
        """The commit task: until ``done`` (the sink finished), commit when due or every
        ``max_interval_s``. Nothing periodic in modes none/auto (never) and per_message
        (inline)."""
        if not self.policy.periodic:
            return
        interval = self.settings.max_interval_s
        while not done.is_set():
            try:
                await asyncio.wait_for(self.due.wait(), interval)
            except TimeoutError:
                pass
            self.due.clear()
            await self.commit()

    async def commit(self) -> None:
        """Commit every partition's contiguous acked offset (single-flight)."""
        if not self.policy.owns_offsets or self.consumer is None:
            return
        async with self.lock:
            offsets = self.tracker.to_commit()
            if not offsets:
                return
            acked = self.acked_since_commit  # acks arriving during the commit stay counted
            started = time.monotonic()
            try:
                await self.consumer.commit(offsets)
            except (CommitFailedError, IllegalStateError) as exc:
                # A rebalance took partitions away: their new owner replays from the last
                # committed offset (at-least-once); nothing to do here.
                logger.warning("%s: commit of %s rejected: %s", self._label, offsets, exc)
                return
            except KafkaError as exc:
                logger.warning("%s: commit failed, will retry: %s", self._label, exc)
                return
            self.tracker.mark_committed(offsets)
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
        return self.policy.owns_offsets and bool(self.tracker.to_commit())


__all__ = ["POLICIES", "BatchCommits", "CommitPolicy", "Committer", "NoCommits",
           "PerMessageCommits", "SavepointCommits", "commit_policy"]
