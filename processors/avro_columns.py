"""Avro writer schemas as table columns, and the decoded values as row values (the
``schema_rows`` processor's type map for ``format: avro``).

=====================================  ===============================================
Avro                                   column type
=====================================  ===============================================
int, long, float, double, boolean      int, long, float, double, boolean
string; bytes; fixed                   string; binary; binary
decimal (bytes or fixed)               decimal(P,S)
date                                   date
time-millis, time-micros               long: microseconds since midnight (Spark has no
                                       time type)
timestamp-millis, timestamp-micros     timestamp (an instant, UTC)
local-timestamp-millis/-micros         timestamp_ntz
uuid                                   string
enum                                   string (the symbol)
record                                 struct<...> (each field as here)
array                                  array<T>
map                                    map<string,V>
["null", T] (either order)             T, nullable
any other union                        struct<one field per non-null branch, named by the
                                       branch's type (``int``, ``string``, a record's or
                                       enum's or fixed's short name, ``array``, ``map``)>,
                                       nullable; the field of the branch holding the
                                       value is set, the others NULL (a branch is chosen
                                       by the value's Python type, the first that takes it)
a recursive type                       refused (:class:`Recursive` names the cycle)
=====================================  ===============================================

Top-level fields become the table's columns, every one nullable (a field removed later
reads NULL in new rows, older rows read NULL in fields added later). Row values: a record
is a dict, an array a list, a map a dict; the decoded values of fastavro are used as they
are except time (to microseconds), uuid (to its text) and general unions (to their
struct).
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from processors.column_types import Array, DecimalType, Field, Flat, Map, Struct, TypeNode

Convert = Callable[[Any], Any] | None
"""How a decoded value becomes the row's value (None: as it is)."""

PRIMITIVES = {"int": "int", "long": "long", "float": "float", "double": "double",
              "boolean": "boolean", "string": "string", "bytes": "binary"}
LOGICAL = {"date": "date", "time-millis": "long", "time-micros": "long",
           "timestamp-millis": "timestamp", "timestamp-micros": "timestamp",
           "local-timestamp-millis": "timestamp_ntz", "local-timestamp-micros": "timestamp_ntz",
           "uuid": "string"}


class Recursive(ValueError):
    """A recursive Avro type: it has no finite table schema. ``path``: the fields from
    the top record to where the type refers back to itself."""

    def __init__(self, name: str, path: tuple[str, ...]) -> None:
        self.name, self.path = name, path
        super().__init__(f"recursive type {name!r}: {'.'.join(path)} refers back to it "
                         "(a recursive schema has no table schema)")


def _micros(value: Any) -> Any:
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 \
            + value.microsecond
    return value


def _text(value: Any) -> Any:
    return str(value) if isinstance(value, uuid.UUID) else value


_PYTHON: dict[str, tuple[type, ...]] = {
    "int": (int,), "long": (int,), "float": (float,), "double": (float,),
    "boolean": (bool,), "string": (str,), "binary": (bytes,), "date": (dt.date,),
    "timestamp": (dt.datetime,), "timestamp_ntz": (dt.datetime,)}


def _takes(kind: TypeNode, value: Any) -> bool:
    """Whether a union branch of ``kind`` holds the decoded ``value``."""
    if isinstance(kind, Flat):
        if kind.name in ("int", "long") and isinstance(value, bool):
            return False
        if kind.name == "date" and isinstance(value, dt.datetime):
            return False
        if kind.name == "string" and isinstance(value, uuid.UUID):
            return True
        return isinstance(value, _PYTHON.get(kind.name, ()))
    if isinstance(kind, DecimalType):
        return isinstance(value, decimal.Decimal)
    if isinstance(kind, Array):
        return isinstance(value, list)
    return isinstance(value, dict)


class _Mapper:
    def __init__(self, named: Mapping[str, Any]) -> None:
        self.named = named

    def map(self, schema: Any, path: tuple[str, ...], seen: tuple[str, ...],
            ) -> tuple[TypeNode, bool, Convert]:
        """(type, nullable, convert) of an Avro schema at ``path``; ``seen``: the
        records being mapped (a name among them is a cycle)."""
        if isinstance(schema, list):
            return self.union(schema, path, seen)
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return Flat(PRIMITIVES[schema]), False, None
            if schema == "null":
                return Flat("string"), True, None  # a field that is always null
            if schema in seen:
                raise Recursive(schema, path)
            return self.map(self.named[schema], path, seen)
        kind = schema["type"]
        logical = schema.get("logicalType")
        if logical == "decimal":
            precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
            return DecimalType(precision, scale), False, None
        if logical in LOGICAL and kind in ("int", "long", "string"):
            convert: Convert = (_micros if logical.startswith("time-")
                                else _text if logical == "uuid" else None)
            return Flat(LOGICAL[logical]), False, convert
        if kind == "record":
            name = schema["name"]
            if name in seen:
                raise Recursive(name, path)
            fields, convert = self.fields(schema["fields"], path, (*seen, name))
            return Struct(fields), False, convert
        if kind == "enum":
            return Flat("string"), False, None
        if kind == "fixed":
            return Flat("binary"), False, None
        if kind == "array":
            element, _, conv = self.map(schema["items"], (*path, "element"), seen)
            return Array(element), False, None if conv is None else _each(conv)
        if kind == "map":
            value, _, conv = self.map(schema["values"], (*path, "value"), seen)
            return Map(Flat("string"), value), False, None if conv is None else _values(conv)
        return self.map(kind, path, seen)  # {"type": "int"} and the like

    def fields(self, fields: list[Any], path: tuple[str, ...], seen: tuple[str, ...],
               ) -> tuple[tuple[Field, ...], Convert]:
        out, converts = [], []
        for f in fields:
            kind, nullable, conv = self.map(f["type"], (*path, f["name"]), seen)
            out.append(Field(f["name"], kind, nullable))
            if conv is not None:
                converts.append((f["name"], conv))
        if not converts:
            return tuple(out), None

        def convert(record: Any) -> Any:
            if record is None:
                return None
            for name, conv in converts:
                value = record.get(name)
                if value is not None:
                    record[name] = conv(value)
            return record
        return tuple(out), convert

    def union(self, branches: list[Any], path: tuple[str, ...], seen: tuple[str, ...],
              ) -> tuple[TypeNode, bool, Convert]:
        nullable = "null" in branches
        rest = [b for b in branches if b != "null"]
        if len(rest) == 1:
            kind, _, conv = self.map(rest[0], path, seen)
            return kind, nullable, conv
        fields, choices = [], []
        for branch in rest:
            name = _branch_name(branch, self.named)
            kind, _, conv = self.map(branch, (*path, name), seen)
            fields.append(Field(name, kind, True))
            choices.append((name, kind, conv))

        def convert(value: Any) -> Any:
            out: dict[str, Any] = dict.fromkeys(n for n, _, _ in choices)
            for name, kind, conv in choices:
                if _takes(kind, value):
                    out[name] = value if conv is None else conv(value)
                    break
            return out
        return Struct(tuple(fields)), True, convert


def _each(conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda items: [None if x is None else conv(x) for x in items]


def _values(conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda entries: {k: None if x is None else conv(x) for k, x in entries.items()}


def _branch_name(branch: Any, named: Mapping[str, Any]) -> str:
    if isinstance(branch, str):
        found = named.get(branch)
        return branch if found is None else _branch_name(found, named)
    if isinstance(branch, dict):
        if branch.get("logicalType"):
            return str(branch["logicalType"]).replace("-", "_")
        if branch["type"] in ("record", "enum", "fixed"):
            return str(branch["name"]).rsplit(".", 1)[-1]
        return str(branch["type"])
    return "union"


def avro_columns(schema: Any) -> tuple[tuple[Field, ...], Callable[[dict[str, Any]], Any]]:
    """The columns of a parsed Avro record schema (fastavro's :func:`parse_schema`), every
    one nullable, and the function that turns a decoded record into the row's values in
    place (see the module doc). ValueError when ``schema`` is not a record; Recursive for
    a recursive type, naming the path of the cycle."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError("the writer schema is not a record: a table needs named fields")
    mapper = _Mapper(schema.get("__named_schemas") or {})
    fields, convert = mapper.fields(schema["fields"], (), (schema["name"],))
    columns = tuple(Field(f.name, f.type, True) for f in fields)
    return columns, (convert if convert is not None else _same)


def _same(record: dict[str, Any]) -> dict[str, Any]:
    return record


__all__ = ["Recursive", "avro_columns"]
