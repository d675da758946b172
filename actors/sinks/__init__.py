"""Sinks: the contract (:mod:`.base`), the registry of sink types (:mod:`.registry`),
the sink loop (:mod:`.runner`), the fan-out to several sinks (:mod:`.fanout`) and the
built-in sinks: files (:mod:`.files`), HTTP (:mod:`.http`), the table sinks' shared
machinery (:mod:`.table`), Spark staging tables (:mod:`.spark`; their merge and the other
table jobs: :mod:`actors.tables`) and JDBC (:mod:`.jdbc`).

The names below are imported on first use (PEP 562): ``kstage validate`` loads the
registry and the checks of its sinks, not the sink loop or the fan-out."""

from __future__ import annotations

import typing as _typing

from actors.lazy_exports import exports as _exports

if _typing.TYPE_CHECKING:
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

__getattr__ = _exports(__name__, {
    "Column": "processors.base",
    "END": "actors.sinks.runner",
    "ENTRY_POINT_GROUP": "actors.sinks.registry",
    "FanOutSink": "actors.sinks.fanout",
    "Fence": "actors.sinks.runner",
    "JsonlSink": "actors.sinks.files",
    "NullSink": "actors.sinks.files",
    "PermanentSinkError": "actors.errors",
    "Position": "actors.sinks.base",
    "RefuseRows": "actors.sinks.base",
    "Row": "processors.base",
    "Sink": "actors.sinks.base",
    "SinkBatch": "actors.sinks.runner",
    "SinkCapabilities": "actors.sinks.base",
    "SinkContext": "actors.sinks.base",
    "SinkError": "actors.errors",
    "SinkSettingsBase": "actors.sinks.base",
    "SinkTypeError": "actors.sinks.registry",
    "available": "actors.sinks.registry",
    "build_sink": "actors.sinks.registry",
    "load": "actors.sinks.registry",
    "run_fanout": "actors.sinks.fanout",
    "run_sink": "actors.sinks.runner",
})

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
