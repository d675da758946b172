"""The ``debezium`` processor's columns when the topic's options list none: the source
table's row is the envelope's ``after`` (and ``before``) struct, and its Connect schema
(the JSON converter's ``schema``, or the Avro writer schema) gives the columns
(:mod:`processors.connect_columns`). They evolve while kstage runs as ``schema_rows``'
do (:func:`processors.type_evolution.fit`): a column added at the source (``ALTER TABLE
ADD COLUMN``) is added to the table before the first row that has it, a widened type
widens the column; an incompatible change is refused naming the field."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from processors.base import DELETED, Column, LiveColumns
from processors.column_types import Field, type_string
from processors.connect_columns import avro_connect, struct_fields
from processors.type_evolution import Unfit, fit

IMAGES = ("after", "before")
"""The envelope's fields holding the source table's row."""


@dataclass(slots=True)
class Shape:
    """What one row schema makes: its conversion of a row image, or why it is refused."""

    convert: Callable[[Any], Any] | None
    refused: str | None = None


def json_row_schema(envelope: Any) -> Mapping[str, Any] | None:
    """The Connect struct schema of the row images in a JSON envelope's ``schema``."""
    for field in (envelope or {}).get("fields") or () if isinstance(envelope, Mapping) else ():
        if isinstance(field, Mapping) and field.get("field") in IMAGES \
                and field.get("type") == "struct":
            return field
    return None


def avro_row_schema(schema: Any) -> Mapping[str, Any] | None:
    """The Connect struct schema (JSON form) of the row images of an Avro envelope's
    writer schema (fastavro's parsed schema)."""
    if not isinstance(schema, Mapping):
        return None
    named = schema.get("__named_schemas") or {}
    for field in schema.get("fields") or ():
        if field.get("name") in IMAGES:
            try:
                found = avro_connect(field["type"], named)
            except (ValueError, KeyError):
                continue
            if found.get("type") == "struct":
                return found
    return None


class SchemaColumns:
    """The table's columns, made and grown from the row schemas seen (see the module
    doc): the source table's columns in the order first seen, then ``tail`` (the
    processor's own), then columns added later; the key columns NOT NULL."""

    def __init__(self, key: tuple[str, ...], tail: tuple[Column, ...]) -> None:
        self.key = key
        self.tail = (*tail, Column(DELETED, "boolean"))
        self.live = LiveColumns()
        self._table: tuple[Field, ...] = ()
        self._first: int = 0  # how many source columns come before the tail
        self._shapes: dict[str, Shape] = {}
        self.last: Callable[[Any], Any] | None = None  # the newest shape's conversion

    def shape(self, schema: Mapping[str, Any], where: str) -> Shape:
        """The shape of rows of the row ``schema`` (cached by its text): the table
        evolved first when it adds or widens columns. ``where``: the schema in a
        refusal (``the event's schema``, ``writer schema id 7``)."""
        text = repr(schema)
        found = self._shapes.get(text)
        if found is None:
            if len(self._shapes) > 256:
                self._shapes.clear()
            found = self._shapes[text] = self._make(schema, where)
        if found.convert is not None:
            self.last = found.convert
        return found

    def _make(self, schema: Mapping[str, Any], where: str) -> Shape:
        try:
            fields, convert = struct_fields(schema)
        except ValueError as exc:
            return Shape(None, f"{where}: {exc}")
        names = [f.name for f in fields]
        missing = [k for k in self.key if k not in names]
        if missing:
            return Shape(None, f"{where}: key column(s) {', '.join(missing)} are not fields "
                         f"of the event's row schema ({', '.join(names)})")
        try:
            table, changes = fit(self._table, fields)
        except Unfit as exc:
            return Shape(None, (
                f"{where} does not fit the table: field {'.'.join(exc.path)!r} is "
                f"{type_string(exc.now)} in the event's schema, {type_string(exc.was)} in "
                "the table's column: not a widening Iceberg allows (int->long, "
                "float->double, a decimal's precision)"))
        if changes or not self.live.version:
            try:
                columns = [Column(f.name, type_string(f.type), f.name not in self.key)
                           for f in table]
            except ValueError as exc:  # a type the table sinks do not take
                return Shape(None, f"{where}: {exc}")
            if not self.live.version:
                self._first = len(columns)
            self._table = table
            self.live.set([*columns[:self._first], *self.tail, *columns[self._first:]])
        return Shape(convert)


__all__ = ["IMAGES", "SchemaColumns", "Shape", "avro_row_schema", "json_row_schema"]
