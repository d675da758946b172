"""Actors of kstage: master, workers, supervisor, sinks and the offset bookkeeping.

The names below are imported on first use (PEP 562): ``import actors.preflight`` (as
``kstage validate`` does) loads neither the master nor the worker.
"""

from __future__ import annotations

import typing as _typing

from actors.lazy_exports import exports as _exports

if _typing.TYPE_CHECKING:
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

_HOME = {
    "ActorError": "actors.errors",
    "EscalationError": "actors.errors",
    "FailurePolicy": "actors.failure",
    "FatalError": "actors.errors",
    "JsonlSink": "actors.sinks",
    "Master": "actors.master",
    "MessageFailedError": "actors.errors",
    "NoCommittedOffsetError": "actors.errors",
    "NullSink": "actors.sinks",
    "OffsetTracker": "actors.offsets",
    "OneForOneSupervisor": "actors.supervisor",
    "Outcome": "actors.failure",
    "PermanentSinkError": "actors.errors",
    "RestartPolicy": "actors.supervisor",
    "Sink": "actors.sinks",
    "SinkAuthError": "actors.errors",
    "SinkBatch": "actors.sinks",
    "SinkError": "actors.errors",
    "SinkHealth": "actors.sink_health",
    "Worker": "actors.worker",
    "build_sink": "actors.sinks",
    "resolve_processors": "actors.master",
    "retry_delays_s": "actors.failure",
}
"""Where each name of the package lives."""


__getattr__ = _exports(__name__, _HOME)

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
