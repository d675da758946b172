"""Partitions resumed where the topic's sinks hold them (sinks that ``stores_offsets``:
Iceberg staging tables, which commit the Kafka offsets of their rows with the rows).

A process can die after its table commit and before its Kafka commit. The table then
holds messages past Kafka's committed offset; read again from there, they would land
twice. So when a worker is assigned partitions, every sink that stores offsets is asked
how far it holds each one (:meth:`Sink.assigned <actors.sinks.base.Sink.assigned>`; the
sink also drops, from then on, rows of messages it holds already). When *every* sink of
the topic stores offsets and all hold a partition past its committed offset, the
partition is sought to the lowest of their offsets (the Kafka offset is committed there
at once, so ``kstage lag`` and the offset tools stay true). A topic that also feeds a
sink without offsets (a fan-out to HTTP) reads from the committed offset, and the table
drops what it holds.

``start_from`` (``earliest``/``latest``) wins at the first assignment of a process run:
its seek stands (the table still drops what it holds). When a sink cannot tell (its
catalog is down), the partitions read from the committed offset, and the sink reads its
offsets again at the first write of each partition, before writing anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError

from actors.errors import FatalError, SinkError
from actors.sinks import Sink
from actors.worker.committer import Committer

logger = logging.getLogger(__name__)


async def resume_from_sinks(sinks: Sequence[Sink], consumer: AIOKafkaConsumer,
                            assigned: set[TopicPartition], *, seek: bool,
                            committer: Committer, unseeded: set[TopicPartition],
                            live: Callable[[TopicPartition], bool] = lambda tp: True,
                            label: str = "") -> None:
    """Ask the ``sinks`` (the topic's) that store offsets how far they hold
    ``assigned``; seek where all of them are ahead of the committed offset (only if
    ``seek``, and only partitions still ``live``: this assignment's, not revoked
    meanwhile), commit there with ``committer`` and take the partition out of
    ``unseeded`` (its committed offset known)."""
    storing = [s for s in sinks if s.capabilities.stores_offsets]
    if not storing or not assigned:
        return
    parts = sorted((tp.topic, tp.partition) for tp in assigned)
    held: list[dict[tuple[str, int], int]] = []
    for sink in storing:
        try:
            held.append(await sink.assigned(parts))
        except (SinkError, FatalError) as exc:
            logger.warning("%s: the %s sink cannot tell which offsets it holds (%s); "
                           "partitions %s read from their committed offsets, and the sink "
                           "drops the rows it holds already", label, sink.type, exc,
                           [p for _, p in parts])
            return
    if not seek or len(storing) != len(sinks):
        return
    tracker = committer.tracker
    sought = False
    for tp in sorted(assigned, key=lambda t: t.partition):
        offsets = [h.get((tp.topic, tp.partition)) for h in held]
        if not offsets or any(o is None for o in offsets):
            continue
        target = min(o for o in offsets if o is not None)
        try:
            committed = await consumer.committed(tp)
            if committed is not None and target <= committed:
                continue
            if not live(tp) or tp not in consumer.assignment():
                continue  # revoked meanwhile: its next assignment asks again
            consumer.seek(tp, target)
        except (KafkaError, IllegalStateError) as exc:
            logger.warning("%s: partition %d: not resumed from the table's offset %d (%s); "
                           "the table drops the rows it holds", label, tp.partition, target,
                           exc)
            continue
        logger.info("%s: partition %d resumes at offset %d, where the table holds it "
                    "(Kafka's committed offset: %s)", label, tp.partition, target, committed)
        if committer.owns_offsets:
            tracker.start_at(tp, target, committed)
            unseeded.discard(tp)
            sought = True
    if sought:
        await committer.commit()


async def revoke_in_sinks(sinks: Sequence[Sink], revoked: set[TopicPartition],
                          within_s: float) -> None:
    """Tell the sinks that store offsets that ``revoked`` left this worker: each waits
    (up to ``within_s``) for its writes of them under way, then forgets them."""
    parts = sorted((tp.topic, tp.partition) for tp in revoked)
    for sink in sinks:
        if sink.capabilities.stores_offsets and parts:
            await sink.revoked(parts, within_s)


__all__ = ["resume_from_sinks", "revoke_in_sinks"]
