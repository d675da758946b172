"""Sinks: the contract (:mod:`.base`), the registry of sink types (:mod:`.registry`),
the sink loop (:mod:`.runner`), the fan-out to several sinks (:mod:`.fanout`) and the
built-in sinks: files (:mod:`.files`), HTTP (:mod:`.http`), the table sinks' shared
machinery (:mod:`.table`), Spark staging tables (:mod:`.spark`; their merge and the other
table jobs: :mod:`actors.tables`) and JDBC (:mod:`.jdbc`)."""

from actors.errors import PermanentSinkError, SinkError
from actors.sinks.base import (
    Position,
    RefuseRows,
    Sink,
    SinkCapabilities,
    SinkContext,
    SinkSettingsBase,
)
from actors.sinks.fanout import FanOutSink, run_fanout
from actors.sinks.files import JsonlSink, NullSink
from actors.sinks.registry import ENTRY_POINT_GROUP, SinkTypeError, available, build_sink, load
from actors.sinks.runner import END, Fence, SinkBatch, run_sink
from processors.base import Column, Row

__all__ = [
    "END",
    "Column",
    "PermanentSinkError",
    "Row",
    "SinkError",
    "ENTRY_POINT_GROUP",
    "FanOutSink",
    "Fence",
    "JsonlSink",
    "NullSink",
    "Position",
    "RefuseRows",
    "Sink",
    "SinkBatch",
    "SinkCapabilities",
    "SinkContext",
    "SinkSettingsBase",
    "SinkTypeError",
    "available",
    "build_sink",
    "load",
    "run_fanout",
    "run_sink",
]
