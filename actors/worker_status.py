"""A worker's status: the one typed value that the master, the stall watch
(:mod:`actors.liveness`), ``/status``, ``/readyz`` and ``/metrics`` read.

:meth:`Worker.snapshot` makes it on the event loop. It is a ``TypedDict``, so that mypy
checks every key its readers use and ``/status`` serves it as JSON as it is.
"""

from __future__ import annotations

from typing import Any, Final, Literal, NotRequired, TypedDict, get_args

PartitionState = Literal["running", "retrying", "no_leader", "paused", "refused"]
"""The state of an assigned partition (:func:`actors.worker.report.partitions`)."""

PARTITION_STATES: tuple[PartitionState, ...] = get_args(PartitionState)
"""Every :data:`PartitionState`, the most usual first; ``/metrics`` counts each, zero
included (``kstage_partitions``)."""

NO_LEADER: Final = "no_leader"
"""A partition's state while no broker leads it: an outage for ``/readyz``, never a stall
for ``/healthz`` (:func:`actors.worker.report.partitions`)."""


class PartitionStatus(TypedDict):
    """One assigned partition (:func:`actors.worker.report.partitions`)."""

    partition: int
    committed: int | None  # the group's committed offset known to the worker
    high_water: int | None  # as fetched, or asked while paused; None: unknown
    lag: int | None  # high-water minus what is done (report.lag); None: unknown
    state: PartitionState
    failing: dict[str, Any] | None  # the failing write: error, since (wall clock)
    refused: str | None  # why a table holds it past its high-water mark


class WorkerStatus(TypedDict):
    """One worker (one topic of one group) now."""

    group: str
    topic: str
    label: str  # the worker's name in log lines
    paused: bool  # by an operator (the control API)
    paused_at: float | None
    paused_by: str | None
    fetch_idle_s: float  # since the fetch loop last turned (0 before the first join)
    stats: dict[str, int]  # consumed, processed, failed, retried, dead_lettered, ...
    restarts: int  # how many times the supervisor restarted this topic's worker
    in_flight: int  # messages fetched, not yet durable
    partitions: list[PartitionStatus]
    paused_partitions: int  # paused in the consumer (operator, retry lanes, holds)
    joined: bool  # the group join completed at least once
    sink_open: bool
    coordinator_known: bool
    membership_lost: str | None  # why the membership is lost, while it is
    security_problem: str | None
    token_problem: str | None
    topic_missing: str | None
    refused: list[str]  # why each refused partition is not consumed
    waiting_for: str | None  # a schema the pipeline waits for (a registry outage)
    sink_error: str | None  # why the sinks are not ready
    sinks: dict[str, str | None]  # each sink's reason, by name (None: ready)
    dead_letter_error: str | None
    start_from_counts: dict[int, int]  # start_from: skipped or re-read, per partition
    stalled_partitions: NotRequired[int]  # added by the master from its stall watch


__all__ = ["NO_LEADER", "PARTITION_STATES", "PartitionState", "PartitionStatus", "WorkerStatus"]
