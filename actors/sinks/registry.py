"""Sink types by name: the entry-point group ``kstage.sinks``.

A sink package registers its :class:`~actors.sinks.base.Sink` subclass under the name
used as ``sink: {type: NAME}``::

    [project.entry-points."kstage.sinks"]
    csv = "kstage_example_sink:CsvSink"

The built-in sinks (``null``, ``jsonl``, ``http``, ``spark``, ``jdbc``) are registered the
same way in kstage's own ``pyproject.toml``. Loading a sink type imports only its module,
so a process without PySpark can use every sink but ``spark`` and ``jdbc``.

The lookup of a name's entry point (a name registered twice refused) is
:mod:`settings.sink_types`', the one the settings model validates ``sink:`` with; this
module loads the sink classes from it.
"""

from __future__ import annotations

from pydantic import BaseModel

from actors.sinks.base import Sink, SinkSettingsBase
from settings.plugins import DuplicatePlugin
from settings.sink_types import SINK_TYPES, sink_entry_point, sink_entry_points
from settings.suggest import did_you_mean

ENTRY_POINT_GROUP = SINK_TYPES


class SinkTypeError(LookupError):
    """A sink type that is not installed, or whose package cannot be imported."""


def available() -> list[str]:
    """The installed sink type names, sorted."""
    return sorted(sink_entry_points())


def load(name: str) -> type[Sink]:
    """The sink class registered as ``name``.

    Raises:
        SinkTypeError: not installed (the message lists the known types), its module
            fails to import (e.g. a missing optional library), or it is not a Sink.
    """
    try:
        ep = sink_entry_point(name)
    except DuplicatePlugin as exc:
        raise SinkTypeError(str(exc)) from None
    if ep is None:
        raise SinkTypeError(f"unknown sink type {name!r} (installed: {', '.join(available())})"
                            + did_you_mean(name, available()))
    try:
        cls = ep.load()
    except ImportError as exc:
        raise SinkTypeError(f"sink type {name!r} ({ep.value}) cannot be imported: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Sink)):
        raise SinkTypeError(f"sink type {name!r} ({ep.value}) is not a kstage Sink subclass")
    return cls


def settings_for(raw: BaseModel | dict[str, object]) -> SinkSettingsBase:
    """A topic's ``sink`` as its type's settings model: a model already validated (as
    ``TopicSettings.sink`` is) is returned as it is, a mapping is validated (see
    :class:`settings.SinkSettings`)."""
    if isinstance(raw, SinkSettingsBase) and type(raw) is load(raw.type).settings_model:
        return raw
    data = raw.model_dump() if isinstance(raw, BaseModel) else raw
    return SinkSettingsBase.model_validate(data)


def build_sink(raw: BaseModel | dict[str, object]) -> Sink:
    """Create (not open) the sink a topic's ``sink`` settings describe."""
    settings = settings_for(raw)
    return load(settings.type).from_settings(settings)
