"""A topic's ``route:``: each message's rows to one table chosen by a field of its value,
one of its headers or its key::

    route: {by: value.event_type, tables: {click: stg_clicks, view: stg_views},
            default: stg_other}
    route: {by: header.kind, template: "stg_{value}", max_tables: 50}

``by`` is ``value.PATH`` (dotted, into the decoded value), ``header.NAME`` (the first
header of that name, as UTF-8 text) or ``key`` (the decoded key). With ``tables`` a value
names its table (``default`` for the others; without one, a value with no table is
poison); with ``template`` the table is the template with ``{value}`` made safe as
``{topic}`` is (:func:`~settings.identifiers.table_part`), at most ``max_tables`` of them
per topic and process (past it, poison naming the limit). The table fills ``{table}`` in
the topic's sinks (a ``spark`` or ``jdbc`` sink's ``table``, a ``jsonl`` sink's ``path``).
"""

from __future__ import annotations

import re
from typing import NoReturn

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from settings.identifiers import TABLE_PLACEHOLDER, SqlIdentifier, sql_identifier

VALUE_PLACEHOLDER = "{value}"
"""In a route's ``template``: the routing value made safe (:func:`table_part`)."""

_BY = re.compile(r"^(value\.[^.\s]+(\.[^.\s]+)*|header\.\S+|key)$")


def _route_error(key: str, message: str) -> NoReturn:
    raise ValidationError.from_exception_data("RouteSettings", [InitErrorDetails(
        type=PydanticCustomError("route", message), loc=(key,), input=None)],
        hide_input=True)


class RouteSettings(BaseModel):
    """A topic's ``route:`` (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    by: str = Field(description="What chooses the table: value.PATH (dotted, into the "
                    "decoded value), header.NAME (its first value, UTF-8) or key.")
    tables: dict[str, SqlIdentifier] | None = Field(
        None, description="Routing value -> table; instead of template.")
    default: SqlIdentifier | None = Field(
        None, description="With tables: the table of a value it does not list (none: such "
        "a message is poison).")
    template: str | None = Field(
        None, description="Instead of tables: the table's name, {value} in it the routing "
        "value made safe (every character not a letter, digit or _ made _, lower-cased).")
    max_tables: int = Field(
        50, ge=1, le=10_000, description="With template: the most tables one topic's worker "
        "may route to in a run; a message past it is poison naming the limit.")

    @field_validator("by")
    @classmethod
    def _by(cls, value: str) -> str:
        if not _BY.match(value):
            raise ValueError(f"{value!r} is not a route: write value.PATH (value.event_type, "
                             "value.a.b), header.NAME or key")
        return value

    @field_validator("template")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if VALUE_PLACEHOLDER not in value:
            raise ValueError(f"{value!r} holds no {VALUE_PLACEHOLDER}: every value would "
                             "go to one table (name it in tables/default instead)")
        try:
            sql_identifier(value.replace(VALUE_PLACEHOLDER, "v"))
        except ValueError:
            sql_identifier(value)  # the message names the value as written
        return value

    @model_validator(mode="after")
    def _one_form(self) -> RouteSettings:
        if (self.tables is None) == (self.template is None):
            _route_error("tables", "a route names its tables (tables: {VALUE: TABLE}, "
                         "default: TABLE) or a template (template: 'stg_{value}'), "
                         "one of the two")
        if self.template is not None and self.default is not None:
            _route_error("default", "default is for tables: a template makes a table for "
                         "every value")
        if self.tables is not None and "max_tables" in self.model_fields_set:
            _route_error("max_tables", "max_tables is for template: tables names every "
                         "table already")
        return self

    @property
    def path(self) -> tuple[str, ...]:
        """``by`` split: ``("value", "a", "b")``, ``("header", NAME)``, ``("key",)``."""
        if self.by.startswith("header."):
            return ("header", self.by[len("header."):])
        return tuple(self.by.split("."))


__all__ = ["TABLE_PLACEHOLDER", "VALUE_PLACEHOLDER", "RouteSettings"]
