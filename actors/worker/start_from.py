"""``groups[].start_from``: where a process starts reading, once per process run.

``committed`` (the default) continues from the group's committed offsets. ``latest``
seeks every partition this process is assigned at its start to the end of the
partition, skipping the backlog; ``earliest`` seeks them to the beginning, reading
everything once more. Either way the sought position is committed at once.

"This process's start" is the first assignment of a (group, topic) in this process run,
kept in a :class:`StartRegistry` owned by the :class:`~actors.master.Master` (one per
process run), not by the worker: a worker that crashed and was replaced by the
supervisor must not seek again (a crash loop would skip new data on every restart).
Partitions first assigned to this process later in the run (by a rebalance: another
member left) continue from their committed offsets.
"""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError

from actors.worker.committer import Committer

logger = logging.getLogger(__name__)


class StartRegistry:
    """The (group id, topic) pairs whose start position this process run has applied,
    and the messages skipped (``latest``) or read again (``earliest``) per partition."""

    def __init__(self) -> None:
        self._applied: dict[tuple[str, str], dict[int, int]] = {}

    def __repr__(self) -> str:
        return f"<StartRegistry applied={sorted(self._applied)}>"

    def claim(self, group_id: str, topic: str) -> bool:
        """True the first time only: this assignment is the start of the process run."""
        key = (group_id, topic)
        if key in self._applied:
            return False
        self._applied[key] = {}
        return True

    def counts(self, group_id: str, topic: str) -> dict[int, int]:
        """Messages skipped (latest) or read again (earliest) per partition at start."""
        return self._applied.get((group_id, topic), {})


async def seek_at_start(consumer: AIOKafkaConsumer, assigned: set[TopicPartition], *,
                        mode: str, label: str, counts: dict[int, int],
                        committer: Committer, unseeded: set[TopicPartition]) -> None:
    """Seek the partitions of the run's first assignment to ``mode`` (``latest`` or
    ``earliest``; see the module doc); called from the rebalance listener before
    anything of them was fetched. ``counts`` takes the messages skipped or read again
    per partition (the :class:`StartRegistry`'s); a sought partition's offset is
    committed by ``committer`` and leaves ``unseeded`` (its committed offset known).

    ``seek_to_end``/``seek_to_beginning`` must be the first await here: they mark the
    positions for reset (and drop prefetched records) before the fetcher can resolve the
    committed offsets. A seek or offset lookup that fails leaves the partitions at their
    committed offsets (read again, never lost), logged as an error.
    """
    if not assigned:
        logger.info("%s: start_from %s: no partition assigned at start; partitions "
                    "assigned later continue from their committed offsets", label, mode)
        return
    tps = sorted(assigned, key=lambda t: t.partition)
    owns = committer.owns_offsets
    try:
        if mode == "latest":
            await consumer.seek_to_end(*tps)
        else:
            await consumer.seek_to_beginning(*tps)
        for tp in tps:
            position = await consumer.position(tp)
            committed = await consumer.committed(tp)
            if mode == "latest":
                base = committed
                if base is None:
                    base = (await consumer.beginning_offsets([tp]))[tp]
                count = counts[tp.partition] = max(position - base, 0)
                logger.info("%s: start_from latest: partition %d at end offset %d, "
                            "skipped %d message(s) (from %s offset %d)", label,
                            tp.partition, position, count,
                            "beginning" if committed is None else "committed", base)
            elif committed is None:
                logger.info("%s: start_from earliest: partition %d at beginning offset %d "
                            "(no committed offset)", label, tp.partition, position)
            else:
                count = counts[tp.partition] = max(committed - position, 0)
                logger.info("%s: start_from earliest: partition %d at beginning offset %d, "
                            "reading %d message(s) again (committed offset %d)", label,
                            tp.partition, position, count, committed)
            if owns:
                # Committed at once: a crash right after start resumes here, not at the
                # old offset (latest: the skipped backlog stays skipped, also for a
                # member this partition moves to; earliest: the re-read is not cut short).
                committer.sought(tp, position, committed)
                unseeded.discard(tp)
    except (KafkaError, IllegalStateError) as exc:
        logger.error("%s: start_from %s: seeking %s failed (%s: %s); they continue from "
                     "their committed offsets", label, mode,
                     [tp.partition for tp in tps], type(exc).__name__, exc)
        return
    await committer.seeks_done()


__all__ = ["StartRegistry", "seek_at_start"]
