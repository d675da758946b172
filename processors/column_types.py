"""The grammar of column types: a type string parsed once into a small typed tree.

A column type (:data:`processors.base.ColumnType`) is a string: a flat type (one of
:data:`FLAT_TYPES`), ``decimal(P,S)``, or a nested type in Spark's DDL syntax::

    struct<name:type,...>     a field may end in " NOT NULL"; a name that is not
                              [A-Za-z_][A-Za-z0-9_]* is quoted in backticks (a backtick
                              inside doubled): struct<`order id`:long NOT NULL>
    array<T>                  elements nullable
    map<K,V>                  keys never null, K a flat type or decimal; values nullable

nested to any depth. Spaces are allowed only in `` NOT NULL`` and after a comma.
:func:`parse_type` turns a string into its tree (cached: once per distinct string);
:func:`type_problem` says why a string is not a type, naming the position of the fault.
Every sink builds its own type from the tree, recursively
(:mod:`actors.sinks.table.columns`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

FLAT_TYPES = ("string", "int", "long", "float", "double", "boolean", "binary", "date",
              "timestamp", "timestamp_ntz")
"""The column types without parameters."""

MAX_DECIMAL_PRECISION = 38
"""The largest precision of ``decimal(P,S)`` (Spark's, Iceberg's and Arrow's decimal128)."""

PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A struct field name written without backticks."""


@dataclass(frozen=True, slots=True)
class Flat:
    """A type without parameters: ``name`` is one of :data:`FLAT_TYPES`."""

    name: str


@dataclass(frozen=True, slots=True)
class DecimalType:
    """``decimal(precision,scale)``."""

    precision: int
    scale: int


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a :class:`Struct`."""

    name: str
    type: TypeNode
    nullable: bool = True


@dataclass(frozen=True, slots=True)
class Struct:
    """``struct<...>``: a row value is a dict keyed by field name."""

    fields: tuple[Field, ...]


@dataclass(frozen=True, slots=True)
class Array:
    """``array<T>``: a list (or tuple); elements nullable."""

    element: TypeNode


@dataclass(frozen=True, slots=True)
class Map:
    """``map<K,V>``: a dict; keys never null, values nullable."""

    key: TypeNode
    value: TypeNode


TypeNode = Flat | DecimalType | Struct | Array | Map
"""A parsed column type."""


def field_name(name: str) -> str:
    """A struct field's name as the grammar writes it (backticks when not plain)."""
    return name if PLAIN_NAME.fullmatch(name) else "`" + name.replace("`", "``") + "`"


def type_string(node: TypeNode) -> str:
    """The canonical string of a parsed type (no spaces but in `` NOT NULL``)."""
    if isinstance(node, Flat):
        return node.name
    if isinstance(node, DecimalType):
        return f"decimal({node.precision},{node.scale})"
    if isinstance(node, Array):
        return f"array<{type_string(node.element)}>"
    if isinstance(node, Map):
        return f"map<{type_string(node.key)},{type_string(node.value)}>"
    return "struct<" + ",".join(f"{field_name(f.name)}:{type_string(f.type)}"
                                + ("" if f.nullable else " NOT NULL")
                                for f in node.fields) + ">"


class _Parser:
    """A recursive-descent parser over one type string; ValueError names the position
    (0-based character index) of the first fault."""

    _WORD = re.compile(r"[a-z_]+")
    _DECIMAL = re.compile(r"\((\d{1,3}),(\d{1,3})\)")

    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def fail(self, why: str) -> ValueError:
        return ValueError(f"{why} at position {self.pos} of {self.text!r}")

    def expect(self, token: str) -> None:
        if not self.text.startswith(token, self.pos):
            found = self.text[self.pos:self.pos + 1] or "the end"
            raise self.fail(f"expected {token!r}, found {found!r}")
        self.pos += len(token)

    def comma(self) -> None:
        self.expect(",")
        while self.text.startswith(" ", self.pos):
            self.pos += 1

    def parse(self) -> TypeNode:
        node = self.type()
        if self.pos != len(self.text):
            raise self.fail(f"unexpected {self.text[self.pos:self.pos + 10]!r} after the type")
        return node

    def type(self) -> TypeNode:
        start = self.pos
        word = self._WORD.match(self.text, self.pos)
        if word is None:
            raise self.fail("expected a type name")
        name = word[0]
        self.pos = word.end()
        if name == "decimal":
            return self.decimal(start)
        if name == "array":
            self.expect("<")
            element = self.type()
            self.expect(">")
            return Array(element)
        if name == "map":
            self.expect("<")
            key_at = self.pos
            key = self.type()
            if not isinstance(key, Flat | DecimalType):
                self.pos = key_at
                raise self.fail("a map's key must be a flat type or a decimal, not "
                                f"{type_string(key)}")
            self.comma()
            value = self.type()
            self.expect(">")
            return Map(key, value)
        if name == "struct":
            return self.struct()
        if name in FLAT_TYPES:
            return Flat(name)
        self.pos = start
        raise self.fail(f"unknown type {name!r} (types: {', '.join(FLAT_TYPES)}, "
                        "decimal(P,S), struct<...>, array<T>, map<K,V>)")

    def decimal(self, start: int) -> DecimalType:
        found = self._DECIMAL.match(self.text, self.pos)
        if found is None:
            raise self.fail("expected (P,S) after decimal, no spaces")
        precision, scale = int(found[1]), int(found[2])
        if not (1 <= precision <= MAX_DECIMAL_PRECISION and 0 <= scale <= precision):
            self.pos = start
            raise self.fail(f"decimal({precision},{scale}) is out of range: precision "
                            f"1..{MAX_DECIMAL_PRECISION}, scale 0..precision")
        self.pos = found.end()
        return DecimalType(precision, scale)

    def struct(self) -> Struct:
        self.expect("<")
        fields: list[Field] = []
        while True:
            name_at = self.pos
            name = self.name()
            if any(f.name == name for f in fields):
                self.pos = name_at
                raise self.fail(f"field {name!r} appears twice")
            self.expect(":")
            kind = self.type()
            nullable = not self.text.startswith(" NOT NULL", self.pos)
            if not nullable:
                self.pos += len(" NOT NULL")
            fields.append(Field(name, kind, nullable))
            if self.text.startswith(">", self.pos):
                self.pos += 1
                return Struct(tuple(fields))
            self.comma()

    def name(self) -> str:
        if self.text.startswith("`", self.pos):
            out, i = [], self.pos + 1
            while i < len(self.text):
                if self.text[i] == "`":
                    if self.text.startswith("``", i):
                        out.append("`")
                        i += 2
                        continue
                    if i == self.pos + 1:
                        raise self.fail("empty field name")
                    self.pos = i + 1
                    return "".join(out)
                out.append(self.text[i])
                i += 1
            raise self.fail("unterminated backtick-quoted field name")
        found = PLAIN_NAME.match(self.text, self.pos)
        if found is None:
            raise self.fail("expected a field name ([A-Za-z_][A-Za-z0-9_]* or `quoted`)")
        self.pos = found.end()
        return found[0]


@functools.lru_cache(maxsize=1024)
def parse_type(kind: str) -> TypeNode:
    """The tree of the type string ``kind`` (cached); ValueError naming the position of
    the fault when it is not a type."""
    if kind in FLAT_TYPES:
        return Flat(kind)
    return _Parser(kind).parse()


def type_problem(kind: object) -> str | None:
    """Why ``kind`` is not a column type, or None."""
    if not isinstance(kind, str):
        return f"type {kind!r} is not a string"
    try:
        parse_type(kind)
    except ValueError as exc:
        return f"type {kind!r} is not a column type: {exc}"
    return None


def is_nested(node: TypeNode) -> bool:
    """Whether ``node`` is a struct, an array or a map."""
    return isinstance(node, Struct | Array | Map)


__all__ = ["FLAT_TYPES", "MAX_DECIMAL_PRECISION", "PLAIN_NAME", "Array", "DecimalType", "Field",
           "Flat", "Map", "Struct", "TypeNode", "field_name", "is_nested", "parse_type",
           "type_problem", "type_string"]
