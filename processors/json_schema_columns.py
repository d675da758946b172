"""JSON Schema objects as table columns, and the parsed JSON values as row values (the
``schema_rows`` processor's type map for ``format: json_schema``).

The writer schema must be an object with ``properties``; they are the table's columns.
Every column and every field of a struct is nullable, ``required`` or not (a value may
lack it when ``validate_schema`` is off, and a later version may drop it).

==========================================  ==========================================
JSON Schema                                 column type
==========================================  ==========================================
``type: string``                            string
``type: string, format: date-time``         timestamp (an instant, UTC; text without
                                            an offset read as UTC)
``type: string, format: date``              date
``type: integer``; ``number``; ``boolean``  long; double; boolean
``type: array, items: S``                   array<S>
``type: object`` with ``properties``        struct<...> (each property as here; other
                                            keys of the value dropped)
``type: object``, ``additionalProperties``  map<string,S>
a schema S, no ``properties``
``type: [null, T]``, ``nullable: true``,    T, nullable
``oneOf``/``anyOf`` of one T and ``null``
``$ref`` to ``#/...`` of the same schema    what it refers to
``enum`` / ``const`` of strings             string
a recursive ``$ref``                        refused (:class:`Recursive`, as for Avro,
                                            names the ``$ref`` and the cycle's path)
anything else: no ``type``, ``oneOf``/      string holding the value's JSON text, keys
``anyOf``/``allOf`` of different types,     sorted (``{"a":1}``, ``"x"``, ``5``)
several types, ``$ref`` to another
document, ``items`` not one schema, an
object of no known keys
==========================================  ==========================================

Values: an object is a dict, an array a list, a map a dict; a date-time's text becomes a
``datetime`` in UTC, a date's a ``date``, an integral number a ``long`` (``1.0``
too), an integer a ``double`` in a number column. A value the type map cannot take (a
date-time that is not RFC 3339) raises ValueError naming the field.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from processors.avro_columns import Recursive
from processors.column_types import Array, Field, Flat, Map, Struct, TypeNode

Convert = Callable[[Any], Any] | None
"""How a parsed value becomes the row's value (None: as it is)."""


@dataclass(frozen=True, slots=True)
class JsonWriterSchema:
    """A JSON Schema writer schema as ``schema_rows`` reads it
    (:attr:`Message.value_schema <processors.base.Message.value_schema>` of ``format:
    json_schema``): the parsed schema document."""

    schema: Mapping[str, Any]


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _timestamp(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a date-time")
    stamp = dt.datetime.fromisoformat(value)
    return (stamp.astimezone(dt.UTC) if stamp.tzinfo is not None
            else stamp.replace(tzinfo=dt.UTC))


def _date(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a date")
    return dt.date.fromisoformat(value)


def _long(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _double(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


_TYPES: dict[str, tuple[TypeNode, Convert]] = {
    "string": (Flat("string"), None), "integer": (Flat("long"), _long),
    "number": (Flat("double"), _double), "boolean": (Flat("boolean"), None)}
_FORMATS: dict[str, tuple[TypeNode, Convert]] = {
    "date-time": (Flat("timestamp"), _timestamp), "date": (Flat("date"), _date)}
_TEXT: tuple[TypeNode, bool, Convert] = (Flat("string"), True, _json_text)


class _Mapper:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root

    def resolve(self, ref: str) -> Any:
        """The schema at a local ``$ref`` (a JSON pointer), or None."""
        if not ref.startswith("#"):
            return None
        node: Any = self.root
        for part in (p for p in ref[1:].split("/") if p):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        return node

    def map(self, schema: Any, path: tuple[str, ...], refs: tuple[str, ...],
            ) -> tuple[TypeNode, bool, Convert]:
        """(type, nullable, convert) of ``schema`` at ``path``; ``refs``: the ``$ref``s
        being followed (one among them again is a cycle)."""
        if not isinstance(schema, Mapping):
            return _TEXT  # true, false: anything
        nullable = schema.get("nullable") is True
        ref = schema.get("$ref")
        if isinstance(ref, str):
            if ref in refs:
                raise Recursive(ref, path)
            target = self.resolve(ref)
            if target is None:
                return _TEXT
            kind, null, conv = self.map(target, path, (*refs, ref))
            return kind, null or nullable, conv
        for key in ("oneOf", "anyOf"):
            if isinstance(schema.get(key), list):
                branches = [b for b in schema[key] if not _is_null(b)]
                if len(branches) != 1 or len(schema) > 1 + ("nullable" in schema):
                    return _TEXT
                kind, _, conv = self.map(branches[0], path, refs)
                return kind, True, conv
        kind_of = schema.get("type")
        if isinstance(kind_of, list):
            rest = [t for t in kind_of if t != "null"]
            nullable = nullable or len(rest) < len(kind_of)
            if len(rest) != 1:
                return _TEXT
            kind_of = rest[0]
        if kind_of is None and "properties" in schema:
            kind_of = "object"
        if kind_of is None and _strings(schema):
            kind_of = "string"
        if "allOf" in schema or "not" in schema:
            return _TEXT
        if kind_of in _TYPES:
            kind, conv = _TYPES[kind_of]
            if kind_of == "string":
                kind, conv = _FORMATS.get(schema.get("format", ""), (kind, conv))
            return kind, nullable, conv
        if kind_of == "array":
            items = schema.get("items")
            if not isinstance(items, Mapping) or "prefixItems" in schema:
                return _TEXT
            element, _, conv = self.map(items, (*path, "element"), refs)
            return Array(element), nullable, None if conv is None else _each(conv)
        if kind_of == "object":
            return self.object(schema, path, refs, nullable)
        return _TEXT

    def object(self, schema: Mapping[str, Any], path: tuple[str, ...],
               refs: tuple[str, ...], nullable: bool) -> tuple[TypeNode, bool, Convert]:
        props = schema.get("properties")
        if isinstance(props, Mapping) and props:
            fields, convert = self.fields(schema, path, refs)
            return Struct(fields), nullable, convert
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and extra:
            value, _, conv = self.map(extra, (*path, "value"), refs)
            return (Map(Flat("string"), value), nullable,
                    None if conv is None else _values(conv))
        return _TEXT

    def fields(self, schema: Mapping[str, Any], path: tuple[str, ...],
               refs: tuple[str, ...]) -> tuple[tuple[Field, ...], Callable[[Any], Any]]:
        out, plan = [], []
        for name, sub in schema["properties"].items():
            kind, _, conv = self.map(sub, (*path, name), refs)
            out.append(Field(name, kind, True))
            plan.append((name, conv))

        def convert(value: Any) -> Any:
            if not isinstance(value, Mapping):
                raise ValueError(f"{'.'.join(path) or 'the value'} is not an object")
            row: dict[str, Any] = {}
            for name, conv in plan:
                item = value.get(name)
                if item is not None and conv is not None:
                    try:
                        item = conv(item)
                    except ValueError as exc:
                        raise ValueError(f"field {'.'.join((*path, name))!r}: {exc}"
                                         ) from None
                row[name] = item
            return row
        return tuple(out), convert


def _is_null(schema: Any) -> bool:
    return isinstance(schema, Mapping) and schema.get("type") == "null" and len(schema) == 1


def _strings(schema: Mapping[str, Any]) -> bool:
    """An ``enum`` or ``const`` of strings only."""
    values = schema.get("enum", [schema["const"]] if "const" in schema else None)
    return isinstance(values, list) and bool(values) and all(isinstance(v, str)
                                                             for v in values)


def _each(conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda items: [None if x is None else conv(x) for x in items]


def _values(conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda entries: {k: None if x is None else conv(x) for k, x in entries.items()}


def json_schema_columns(schema: Mapping[str, Any],
                        ) -> tuple[tuple[Field, ...], Callable[[Any], Any]]:
    """The columns of a JSON Schema object schema, every one nullable, and the function
    that turns a parsed value into the row's values (a new dict; ValueError naming the
    field of a value the map cannot take). ValueError when the schema is not an object
    with properties; Recursive for a recursive ``$ref``, naming the path of the cycle."""
    mapper = _Mapper(schema)
    top: Any = schema
    refs: tuple[str, ...] = ()
    while isinstance(top, Mapping) and isinstance(top.get("$ref"), str):
        if top["$ref"] in refs:
            raise Recursive(top["$ref"], ())
        refs = (*refs, top["$ref"])
        top = mapper.resolve(top["$ref"])
    kind = top.get("type") if isinstance(top, Mapping) else None
    if (not isinstance(top, Mapping) or kind not in ("object", None, ["object"])
            or not isinstance(top.get("properties"), Mapping) or not top["properties"]):
        raise ValueError("the writer schema is not an object with properties: a table "
                         "needs named fields")
    return mapper.fields(top, (), refs)


__all__ = ["JsonWriterSchema", "Recursive", "json_schema_columns"]
