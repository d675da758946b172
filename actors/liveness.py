"""Liveness: a consumer that is alive but stuck (the half of ``/healthz`` besides the
event loop's heartbeat).

A worker is stuck when its fetch loop has not run for ``service.stall_after_s``
(wedged in an await that never returns), or when one of its partitions has lag, is
neither paused by an operator nor retrying (a retry wait, a failing sink: those are
shown by ``/readyz`` and heal by themselves) nor without a leader (its brokers down: an
outage, shown by ``/readyz``; a restart would not bring them back), and the offset its
lag counts from (the committable one, else the committed one, else, in a fresh group,
where the worker started reading: :func:`actors.worker.report.lag`) has not moved for
``stall_after_s``: faust's commit livelock, or a fresh group's first write that hangs.
Readiness takes such a process out of the load balancer; liveness asks the orchestrator
to restart it, which is what a wedged consumer needs.

:class:`StallWatch` is fed the workers' snapshots once a second by the master, on the
event loop, logs a WARNING when a partition stalls and when it moves again, and keeps
the reasons ``/healthz`` answers 503 with.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from actors.worker_status import WorkerStatus

logger = logging.getLogger(__name__)


class StallWatch:
    """Which partitions and workers are stuck, from the workers' snapshots.

    Args:
        stall_after_s: ``service.stall_after_s``.
        clock: monotonic seconds (tests inject a fake).
    """

    def __init__(self, stall_after_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_after_s = stall_after_s
        self._clock = clock
        # (group, topic, partition) -> (the offset lag counts from, since when unchanged)
        self._seen: dict[tuple[str, str, int], tuple[int | None, float]] = {}
        self._stalled: dict[tuple[str, str, int], str] = {}
        self._not_polling: dict[tuple[str, str], str] = {}

    def __repr__(self) -> str:
        return (f"<StallWatch stalled={len(self._stalled)} "
                f"not_polling={len(self._not_polling)}>")

    def update(self, workers: Iterable[WorkerStatus]) -> None:
        """Look at the workers' snapshots (:meth:`Worker.snapshot`) taken now."""
        now = self._clock()
        limit = self.stall_after_s
        seen: dict[tuple[str, str, int], tuple[int | None, float]] = {}
        stalled: dict[tuple[str, str, int], str] = {}
        not_polling: dict[tuple[str, str], str] = {}
        for worker in workers:
            name = (worker["group"], worker["topic"])
            if worker["fetch_idle_s"] >= limit:
                not_polling[name] = (f"{name[0]}/{name[1]}: its fetch loop has not run for "
                                     f"{worker['fetch_idle_s']:.0f}s (service.stall_after_s "
                                     f"{limit:g}): the worker is stuck")
            for part in worker["partitions"]:
                key = (*name, part["partition"])
                done = None if part["lag"] is None or part["high_water"] is None else (
                    part["high_water"] - part["lag"])
                previous = self._seen.get(key)
                moving = (previous is None or previous[0] != done or not part["lag"]
                          or part["state"] != "running")
                since = now if moving or previous is None else previous[1]
                seen[key] = (done, since)
                if now - since >= limit:
                    stalled[key] = (
                        f"{key[0]}/{key[1]}[{key[2]}]: lag {part['lag']}, the offset "
                        f"{done} has not moved for {now - since:.0f}s "
                        f"(service.stall_after_s {limit:g}): the consumer is stuck")
        for key, reason in stalled.items():
            if key not in self._stalled:
                logger.warning("liveness: %s", reason)
        for key in self._stalled.keys() - stalled.keys():
            logger.warning("liveness: %s/%s[%d] moves again", *key)
        for name, reason in not_polling.items():
            if name not in self._not_polling:
                logger.warning("liveness: %s", reason)
        for name in self._not_polling.keys() - not_polling.keys():
            logger.warning("liveness: %s/%s: its fetch loop runs again", *name)
        self._seen, self._stalled, self._not_polling = seen, stalled, not_polling

    def reasons(self) -> list[str]:
        """Why the process is not live (empty: it is)."""
        return sorted(self._not_polling.values()) + [
            self._stalled[key] for key in sorted(self._stalled)]

    def stalled(self, group: str, topic: str) -> int:
        """How many of the topic's partitions are stalled (a gauge of ``/metrics``)."""
        return sum(1 for key in self._stalled if key[:2] == (group, topic))


__all__ = ["StallWatch"]
