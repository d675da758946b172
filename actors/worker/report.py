"""What a worker reports about its partitions: lag, state and failing writes, for
``/status``, ``/metrics``, the status line and the stall watch (:mod:`actors.liveness`).

Plain functions over the worker's parts (the flow, the offset tracker, the consumer, the
sink healths), called on the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

from aiokafka import TopicPartition

from actors.offsets import OffsetView
from actors.sink_health import SinkHealth
from actors.worker.flow import Flow
from actors.worker_status import NO_LEADER, PartitionState, PartitionStatus


class Fetching(Protocol):
    """What the report reads of the worker's consumer: aiokafka's high-water mark, and
    the partition's leader (:meth:`actors.kafka.GroupMember.leader_of`)."""

    def highwater(self, tp: TopicPartition) -> int | None: ...

    def leader_of(self, tp: TopicPartition) -> int | None: ...


def high_water(consumer: Fetching | None, end_offsets: Mapping[TopicPartition, int],
               tp: TopicPartition) -> int | None:
    """The partition's high-water mark as fetched, or its end offset as asked while
    the topic was paused by an operator (nothing fetched) if higher: a resumed
    partition not fetched since (no leader) keeps that lag; None: unknown."""
    hw = consumer.highwater(tp) if consumer is not None else None
    end = end_offsets.get(tp)  # fresher than the last fetch's, if asked
    return hw if end is None else max(end, hw or 0)


def lag(tracker: OffsetView, tp: TopicPartition, high: int | None) -> int | None:
    """The one definition of lag (also ``kstage lag``'s): high-water minus the
    committable offset (everything before it done: the consumer position once a
    partition is drained), else the group's committed offset, else (a fresh group,
    nothing committed yet) the offset the worker started reading at: the first record
    it fetched, or its consumer position (the log start for ``auto_offset_reset:
    earliest``, the end for ``latest``; ``start_from`` makes its seek committable).
    None when none is known (never counted from 0)."""
    done = tracker.lag_base(tp)
    if high is None or done is None:
        return None
    return max(high - done, 0)


def failing_partitions(healths: Mapping[str, SinkHealth], topic: str,
                       ) -> dict[int, dict[str, Any]]:
    """The partitions whose sink writes fail now: the last error (naming the sink of a
    fan-out) and since when (wall clock)."""
    failing: dict[int, dict[str, Any]] = {}
    skew = time.time() - time.monotonic()
    for name, health in healths.items():
        for key, (since, error) in health.failures().items():
            if isinstance(key, tuple) and key[0] == topic:
                shown = f"sink {name!r}: {error}" if len(healths) > 1 else error
                failing[key[1]] = {"error": shown, "since": since + skew}
    return failing


def partitions(flow: Flow, tracker: OffsetView, consumer: Fetching | None,
               end_offsets: Mapping[TopicPartition, int], healths: Mapping[str, SinkHealth],
               topic: str) -> list[PartitionStatus]:
    """Each assigned partition: committed offset, high-water mark, lag, state
    (``refused``: a table holds it past its high-water mark, never consumed; ``paused``
    by an operator; ``no_leader``: no broker leads it, nothing can be read until one
    does, an outage rather than a stall; ``retrying`` a retry wait or a failing write;
    ``running``), its failing write if any and why it is refused if it is."""
    failing = failing_partitions(healths, topic)
    rows: list[PartitionStatus] = []
    for tp in sorted(flow.assigned, key=lambda t: t.partition):
        hw = high_water(consumer, end_offsets, tp)
        refused = flow.refused.get(tp)
        state: PartitionState = (
            "refused" if refused is not None
            else "paused" if flow.paused_by_operator
            else NO_LEADER if consumer is not None and consumer.leader_of(tp) == -1
            else "retrying" if tp in flow.lanes or tp.partition in failing
            else "running")
        rows.append({"partition": tp.partition, "committed": tracker.committed(tp),
                     "high_water": hw, "lag": lag(tracker, tp, hw), "state": state,
                     "failing": failing.get(tp.partition), "refused": refused})
    return rows


__all__ = ["failing_partitions", "high_water", "lag", "partitions"]
