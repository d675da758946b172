"""Sink types by name, and the settings of a topic's ``sink:``.

The one lookup of sink types (the entry-point group ``kstage.sinks``):
:func:`sink_entry_points`, :func:`sink_entry_point` and :func:`sink_settings_model` here,
which :mod:`actors.sinks.registry` builds on to load the sink classes themselves;
:class:`SinkSettings`, the base of every sink type's settings model."""

from __future__ import annotations

import functools
from importlib.metadata import EntryPoint
from typing import Any, ClassVar, NoReturn

from pydantic import (
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from settings.base import Model
from settings.identifiers import (
    TABLE_PLACEHOLDER,
    TOPIC_PLACEHOLDER,
    table_part,
)
from settings.plugins import DuplicatePlugin, pick, registered
from settings.suggest import did_you_mean

SINK_TYPES = "kstage.sinks"
"""Entry-point group of the sink types: name -> ``module:Sink`` class, whose
``settings_model`` validates ``sink:`` mappings of that ``type``."""


class SinkSettings(Model):
    """A topic's ``sink:`` mapping, and the base of every sink type's settings model.

    ``SinkSettings.model_validate(mapping)`` is a union discriminated on ``type`` (default
    ``null``): it looks the type up in the entry-point group ``kstage.sinks`` (built-in and
    plugin sinks alike) and returns an instance of that sink's own ``settings_model``, a
    subclass of this one that narrows ``type`` to a ``Literal`` and declares the sink's
    keys (unknown keys are refused, values are frozen, inputs stay out of validation
    errors and the repr masks values named like secrets). An unknown type, a sink whose
    module cannot be imported, a typo'd key, a wrong value or a missing key are errors at
    ``sink.<key>``, with the file and line when the settings come from a file.
    """

    type: str = Field("null", description="Sink type: a name in the entry-point group "
                      "kstage.sinks (built-in: null, jsonl, http, spark, jdbc).")
    name: str | None = Field(
        None, pattern=r"^[A-Za-z0-9._-]{1,64}$", description="The sink's name in dead "
        "letters, metrics and /readyz (letters, digits, '.', '_', '-'); default: its type, "
        "or TYPE#K (K: its index in sinks) when a topic's sinks repeat the type.")

    def destination(self) -> str:
        """What the sink writes, for refusing two sinks of one topic that would write the
        same place: by default the sink's type and settings (its name aside); a sink
        whose destination is one key of several (a file's path, a table) narrows it."""
        return f"{self.type} sink {self.model_dump_json(exclude={'name'})}"

    topic_templates: ClassVar[tuple[str, ...]] = ()
    """The keys in which ``{topic}`` stands for the topic's name made safe
    (:func:`~settings.identifiers.table_part`): a table, a file's path."""

    def for_topic(self, topic: str) -> SinkSettings:
        """These settings for ``topic``: ``{topic}`` replaced in :attr:`topic_templates`,
        the result validated again (a name that is no SQL identifier is refused)."""
        data = self.model_dump(by_alias=True, exclude_unset=True)
        changed = False
        for key in self.topic_templates:
            value = getattr(self, key)
            if isinstance(value, str) and TOPIC_PLACEHOLDER in value:
                data[key] = value.replace(TOPIC_PLACEHOLDER, table_part(topic))
                changed = True
        return type(self).model_validate(data) if changed else self

    def routed_keys(self) -> list[str]:
        """The keys of :attr:`topic_templates` that hold ``{table}`` (a routed topic's
        table, see :mod:`settings.routes`)."""
        return [key for key in self.topic_templates
                if TABLE_PLACEHOLDER in str(getattr(self, key) or "")]

    def for_table(self, table: str) -> SinkSettings:
        """These settings for a routed topic's ``table``: ``{table}`` replaced by it in
        :attr:`topic_templates`, validated again."""
        keys = self.routed_keys()
        if not keys:
            return self
        data = self.model_dump(by_alias=True, exclude_unset=True)
        for key in keys:
            data[key] = str(getattr(self, key)).replace(TABLE_PLACEHOLDER, table)
        return type(self).model_validate(data)

    @model_validator(mode="wrap")
    @classmethod
    def _by_type(cls, data: Any, handler: ModelWrapValidatorHandler[SinkSettings],
                 ) -> SinkSettings:
        # Only the base class dispatches; a sink's own model validates as any model.
        if cls is not SinkSettings or not isinstance(data, dict):
            return handler(data)
        name = data.get("type", "null")
        model = sink_settings_model(name) if isinstance(name, str) else None
        if model is None:
            installed = ", ".join(sorted(sink_entry_points()))
            _sink_type_error(name, f"unknown sink type {name!r} (installed: {installed})"
                             + did_you_mean(name, sink_entry_points()))
        return model.model_validate(data)


@functools.cache
def sink_entry_points() -> dict[str, list[EntryPoint]]:
    """The installed sink types: name -> its entry points, not loaded (several targets:
    a duplicate, refused by :func:`sink_entry_point`)."""
    return registered(SINK_TYPES)


def sink_entry_point(name: str) -> EntryPoint | None:
    """The entry point of sink type ``name`` (None: not installed).

    Raises:
        DuplicatePlugin: two installed distributions register ``name`` differently.
    """
    return pick(sink_entry_points().get(name), name, "sink type")


def sink_settings_model(name: str) -> type[SinkSettings] | None:
    """The settings model of sink type ``name`` (None if no sink of that name is
    installed). Imports the sink's module, at validation time only: importing
    ``settings`` imports no sink. Raises a ValidationError at ``type`` when the module
    cannot be imported or its class declares no settings model."""
    try:
        ep = sink_entry_point(name)
    except DuplicatePlugin as exc:
        _sink_type_error(name, str(exc))
    if ep is None:
        return None
    try:
        cls = ep.load()
    except ImportError as exc:
        _sink_type_error(name, f"sink type {name!r} ({ep.value}) cannot be imported: {exc}")
    model = getattr(cls, "settings_model", None)
    if not (isinstance(model, type) and issubclass(model, SinkSettings)):
        _sink_type_error(name, f"sink type {name!r} ({ep.value}) declares no settings_model "
                         "(a subclass of SinkSettings)")
    return model


def _sink_type_error(name: object, message: str) -> NoReturn:
    raise ValidationError.from_exception_data("SinkSettings", [InitErrorDetails(
        type=PydanticCustomError("sink_type", message), loc=("type",), input=name)],
        hide_input=True)

