"""Commit modes: one small policy class per mode.

A :class:`CommitPolicy` answers, through hooks, every question the worker used to answer
by branching on ``CommitMode``: does kstage own the offsets at all (not in
``none``/``auto``, where auto-commit or nobody commits), is every message written and
committed on its own (``per_message``), do processors mark savepoints, is a commit due
after an ack, after an idle advance or at an event, and what runs in the background. The
:class:`~actors.worker.committer.Committer` asks these hooks and alone applies them. A new
commit mode is one subclass here and its line in :data:`POLICIES` (see
docs/architecture.md, "A commit mode").
"""

from __future__ import annotations

import asyncio
from typing import ClassVar, Protocol

from actors.offsets import Entry
from settings.models import CommitMode, CommitSettings


class Committer(Protocol):
    """What a policy's background task uses of the
    :class:`~actors.worker.committer.Committer`."""

    @property
    def due(self) -> asyncio.Event:
        """Set when an ack made a commit due (:meth:`CommitPolicy.due_on_ack`)."""

    async def commit(self) -> None:
        """Commit every partition's contiguous acked offset (single-flight)."""


class CommitPolicy:
    """What a commit mode means to the worker (the base: kstage commits, periodically,
    when an ack makes it due, and at each event that needs its offsets committed).

    Attributes:
        owns_offsets: kstage commits the offsets: revoked partitions are drained and
            fenced, abandoned work is reported, stale work is dropped.
        per_message: each message is written, acked and committed before the next.
        savepoints: processors are asked for savepoints; only those are committed.
    """

    owns_offsets: ClassVar[bool] = True
    per_message: ClassVar[bool] = False
    savepoints: ClassVar[bool] = False

    def __init__(self, settings: CommitSettings) -> None:
        self.settings = settings

    def due_on_ack(self, entry: Entry, acked_since_commit: int) -> bool:
        """Whether this ack makes a commit due now (else the interval does)."""
        return False

    def commits_when_idle(self) -> bool:
        """Whether positions advanced past transaction markers on an idle poll are
        committed at once (else the background task commits them when due)."""
        return False

    async def background(self, committer: Committer, done: asyncio.Event) -> None:
        """The commit task, until ``done`` (the sink finished): commit when an ack made
        it due or every ``max_interval_s``."""
        interval = self.settings.max_interval_s
        while not done.is_set():
            try:
                await asyncio.wait_for(committer.due.wait(), interval)
            except TimeoutError:
                pass
            committer.due.clear()
            await committer.commit()


class NoCommits(CommitPolicy):
    """``none`` (never commit) and ``auto`` (aiokafka's auto-commit): kstage does not own
    the offsets."""

    owns_offsets = False

    async def background(self, committer: Committer, done: asyncio.Event) -> None:
        return


class PerMessageCommits(CommitPolicy):
    """``per_message``: write, await the ack and commit after every message (inline, no
    commit task)."""

    per_message = True

    def commits_when_idle(self) -> bool:
        return True  # no commit task would

    async def background(self, committer: Committer, done: asyncio.Event) -> None:
        return


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


__all__ = ["POLICIES", "BatchCommits", "CommitPolicy", "NoCommits", "PerMessageCommits",
           "SavepointCommits", "commit_policy"]
