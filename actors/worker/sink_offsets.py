"""Partitions resumed where the topic's sinks hold them (sinks that ``stores_offsets``:
Iceberg staging tables and JDBC tables in ``mode: append``, which commit the Kafka offsets
of their rows with the rows).

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

**A table ahead of the log.** Before anything is sought or resumed, each partition a
sink holds up to an offset above 0 is compared with its log's bounds (the log start and
the *fetch* high-water mark, :mod:`actors.log_bounds`). An offset above the high-water
mark cannot be a table ahead of Kafka's committed offset: the topic was deleted and
re-created, or the group now reads another cluster (a mirror) whose offsets are lower,
and every new message below that offset would be dropped as one the table holds, then
committed. Such a partition is **refused**: it stays paused (nothing fetched, dropped or
committed) until its next assignment, while the other partitions flow; the error names
the table, topic, partition, offset and high-water mark, and the way out
(:meth:`Sink.offsets_reset <actors.sinks.base.Sink.offsets_reset>`: ``kstage tables
reset-offsets``, or for a JDBC table a DELETE from its offsets table; then a restart);
``/readyz`` and ``/status`` show it (:attr:`Flow.refused
<actors.worker.flow.Flow.refused>`). An offset below the log start is not an error: the
messages between them expired by retention before the table got them (a stopped group, a
short retention); the partition reads where the group's ``auto_offset_reset`` says (the
log start with ``earliest``), with a warning naming the gap. When the bounds cannot be
read (a broker out of reach), the partitions go on as before, with a warning.

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
from actors.log_bounds import Bounds, LogBounds
from actors.sinks import Sink
from actors.worker.committer import Committer

logger = logging.getLogger(__name__)


async def resume_from_sinks(sinks: Sequence[Sink], consumer: AIOKafkaConsumer,
                            assigned: set[TopicPartition], *, seek: bool,
                            committer: Committer, unseeded: set[TopicPartition],
                            live: Callable[[TopicPartition], bool] = lambda tp: True,
                            bounds: LogBounds | None = None, group: str = "",
                            label: str = "") -> dict[TopicPartition, str]:
    """Ask the ``sinks`` (the topic's) that store offsets how far they hold
    ``assigned``; refuse the partitions a sink holds past their high-water mark (read
    with ``bounds``; None: not checked) and return them with why; seek the others where
    all the sinks are ahead of the committed offset (only if ``seek``, and only
    partitions still ``live``: this assignment's, not revoked meanwhile), commit there
    with ``committer`` and take the partition out of ``unseeded`` (its committed offset
    known). ``group``: the consumer group's id, for the way out named in a refusal."""
    storing = [s for s in sinks if s.capabilities.stores_offsets]
    if not storing or not assigned:
        return {}
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
            return {}
    refused = await _refused(storing, held, assigned, bounds, group, label)
    if not seek or len(storing) != len(sinks):
        return refused
    sought = False
    for tp in sorted(assigned - refused.keys(), key=lambda t: t.partition):
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
            committer.sought(tp, target, committed)
            unseeded.discard(tp)
            sought = True
    if sought:
        await committer.seeks_done()
    return refused


async def _refused(storing: Sequence[Sink], held: Sequence[dict[tuple[str, int], int]],
                   assigned: set[TopicPartition], bounds: LogBounds | None, group: str,
                   label: str) -> dict[TopicPartition, str]:
    """The partitions of ``assigned`` that a sink of ``storing`` (its offsets in
    ``held``, in the same order) holds past their high-water mark, with why (see the
    module docstring); a floor below the log start is logged."""
    asked = sorted((tp for tp in assigned
                    if any(h.get((tp.topic, tp.partition), 0) > 0 for h in held)),
                   key=lambda t: (t.topic, t.partition))
    if bounds is None or not asked:
        return {}
    try:
        found: dict[TopicPartition, Bounds] = await bounds.log_bounds(asked)
    except Exception as exc:  # noqa: BLE001 - a broker out of reach: go on as before
        logger.warning("%s: the log bounds of partitions %s cannot be read (%s); their "
                       "tables' offsets are not compared with the high-water marks", label,
                       [tp.partition for tp in asked], exc)
        return {}
    refused: dict[TopicPartition, str] = {}
    for tp in asked:
        log = found.get(tp)
        if log is None:
            continue
        for sink, offsets in zip(storing, held, strict=True):
            floor = offsets.get((tp.topic, tp.partition))
            if floor is None:
                continue
            if floor > log.high_water:
                refused[tp] = (
                    f"partition {tp.partition} of topic {tp.topic!r} refused: "
                    f"{sink.offsets_holder()} holds it up to offset {floor}, above the "
                    f"partition's high-water mark {log.high_water} (log start "
                    f"{log.log_start}): the topic was re-created or the group reads another "
                    "cluster, and every new message below offset "
                    f"{floor} would be dropped as one the table holds; nothing of the "
                    "partition is consumed or committed. Way out: "
                    f"{sink.offsets_reset(group, tp.topic, tp.partition)}, "
                    "then restart kstage")
                logger.error("%s: %s", label, refused[tp])
                break
            if floor < log.log_start:
                logger.warning(
                    "%s: partition %d of topic %r: %s holds it up to offset %d, below the "
                    "log start %d: offsets %d-%d expired by retention before the table got "
                    "them; the group's auto_offset_reset decides where it reads", label,
                    tp.partition, tp.topic, sink.offsets_holder(), floor, log.log_start,
                    floor, log.log_start - 1)
    return refused


async def revoke_in_sinks(sinks: Sequence[Sink], revoked: set[TopicPartition],
                          within_s: float) -> None:
    """Tell the sinks that store offsets that ``revoked`` left this worker: each waits
    (up to ``within_s``) for its writes of them under way, then forgets them."""
    parts = sorted((tp.topic, tp.partition) for tp in revoked)
    for sink in sinks:
        if sink.capabilities.stores_offsets and parts:
            await sink.revoked(parts, within_s)


__all__ = ["resume_from_sinks", "revoke_in_sinks"]
