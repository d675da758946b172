"""What operators asked of the topics through the control API, owned by the master.

A topic paused by an operator (``POST /groups/{group}/topics/{topic}/pause``, ``kstage ctl
pause``) keeps its group membership: its worker pauses every partition it is assigned
(also the ones a later rebalance gives it), fetches nothing more, finishes and commits
what it had fetched, and shows ``paused`` in ``/status``, ``/metrics`` and ``/readyz``
(a paused topic is not a failure: the process stays ready). The state lives here, in the
master, not in the worker: it survives the worker's restarts, and it ends with the process
(a restarted process consumes every topic again).
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(slots=True)
class TopicControl:
    """One topic's operator state (read by its worker, written by the master).

    Attributes:
        group: the consumer group's id.
        topic: the topic.
        paused_at: wall-clock time of the pause, None while not paused.
        paused_by: who paused it (the caller's address), for ``/status``.
    """

    group: str
    topic: str
    paused_at: float | None = None
    paused_by: str | None = None

    @property
    def name(self) -> str:
        """``group/topic``: the worker's name under the supervisor."""
        return f"{self.group}/{self.topic}"

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    def pause(self, by: str) -> bool:
        """Pause; False when it already was (nothing changes)."""
        if self.paused_at is not None:
            return False
        self.paused_at, self.paused_by = time.time(), by
        return True

    def resume(self) -> bool:
        """Resume; False when it was not paused."""
        if self.paused_at is None:
            return False
        self.paused_at = self.paused_by = None
        return True


__all__ = ["TopicControl"]
