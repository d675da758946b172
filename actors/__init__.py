"""Actors of kstage: master, workers, supervisor, sinks and the offset bookkeeping."""

from actors.errors import (
    ActorError,
    EscalationError,
    FatalError,
    MessageFailedError,
    NoCommittedOffsetError,
    PermanentSinkError,
    SinkAuthError,
    SinkError,
)
from actors.failure import FailurePolicy, Outcome, retry_delays_s
from actors.master import Master, resolve_processors
from actors.offsets import OffsetTracker
from actors.sink_health import SinkHealth
from actors.sinks import JsonlSink, NullSink, Sink, SinkBatch, build_sink
from actors.supervisor import OneForOneSupervisor, RestartPolicy
from actors.worker import Worker

__all__ = [
    "ActorError",
    "EscalationError",
    "FailurePolicy",
    "FatalError",
    "JsonlSink",
    "Master",
    "MessageFailedError",
    "NoCommittedOffsetError",
    "NullSink",
    "OffsetTracker",
    "OneForOneSupervisor",
    "PermanentSinkError",
    "Outcome",
    "RestartPolicy",
    "Sink",
    "SinkAuthError",
    "SinkBatch",
    "SinkError",
    "SinkHealth",
    "Worker",
    "build_sink",
    "resolve_processors",
    "retry_delays_s",
]
