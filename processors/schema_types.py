"""The column types a schema-driven processor emits (``schema_rows``), as a small tree,
rendered to the type strings the table sinks read, and compared for schema evolution.

Type strings (the contract with the table sinks): ``string int long float double boolean
binary date timestamp timestamp_ntz decimal(P,S)``, and nested in Spark DDL syntax:
``struct<name:type,...>`` (a field may end in `` NOT NULL``; a name that is not
``[A-Za-z_][A-Za-z0-9_]*`` is quoted in backticks), ``array<T>``, ``map<K,V>``.

Evolution (:func:`fit`): a writer schema's type fits a table's column when every value of
it can be written there, once the table is widened as Iceberg allows: the same type, a
narrower one the column already holds (``int`` into ``long``), or one the column can be
widened to (``int`` -> ``long``, ``float`` -> ``double``, ``decimal(P,S)`` ->
``decimal(P',S)`` with P' > P); in a struct, fields missing from the new type stay (NULL
in new rows) and new fields are added (nullable); an array's element and a map's value
follow the same rules, a map's key must stay the same. Anything else (``string`` ->
``int``, a narrowed type) does not fit: :class:`Unfit` names the field and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

WIDENS = {("int", "long"), ("float", "double")}
"""(from, to): the primitive promotions Iceberg applies to a column in place."""


@dataclass(frozen=True, slots=True)
class Prim:
    """A primitive type: one of the names of the contract, or ``decimal(P,S)``."""

    name: str

    def sql(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Decimal:
    precision: int
    scale: int

    def sql(self) -> str:
        return f"decimal({self.precision},{self.scale})"


@dataclass(frozen=True, slots=True)
class Field:
    """A column of a table or a field of a struct."""

    name: str
    type: Type
    nullable: bool = True

    def sql(self) -> str:
        name = self.name if IDENT.fullmatch(self.name) else "`" + self.name.replace(
            "`", "``") + "`"
        return f"{name}:{self.type.sql()}{'' if self.nullable else ' NOT NULL'}"


@dataclass(frozen=True, slots=True)
class Struct:
    fields: tuple[Field, ...]

    def sql(self) -> str:
        return "struct<" + ",".join(f.sql() for f in self.fields) + ">"


@dataclass(frozen=True, slots=True)
class Array:
    element: Type

    def sql(self) -> str:
        return f"array<{self.element.sql()}>"


@dataclass(frozen=True, slots=True)
class Map:
    key: Type
    value: Type

    def sql(self) -> str:
        return f"map<{self.key.sql()},{self.value.sql()}>"


Type = Prim | Decimal | Struct | Array | Map


@dataclass(frozen=True, slots=True)
class Change:
    """One change a table needs before rows of a new schema are written: ``add`` a
    nullable column (``path``: the column, then the struct fields down to it) of ``type``,
    or ``widen`` the column at ``path`` to ``type``."""

    kind: str  # "add" | "widen"
    path: tuple[str, ...]
    type: Type

    def __str__(self) -> str:
        return f"{self.kind} {'.'.join(self.path)} {self.type.sql()}"


class Unfit(ValueError):
    """A writer schema's type does not fit the table's: ``path`` names the field."""

    def __init__(self, path: tuple[str, ...], was: Type, now: Type) -> None:
        self.path, self.was, self.now = path, was, now
        super().__init__(f"field {'.'.join(path)!r} was {was.sql()} in the table, the "
                         f"writer schema has {now.sql()}: not a widening Iceberg allows "
                         "(int->long, float->double, a decimal's precision widened)")


def _fit_type(path: tuple[str, ...], was: Type, now: Type, changes: list[Change]) -> Type:
    """The table's type at ``path`` once it holds ``now`` too (``changes`` gets what that
    takes); Unfit when it cannot."""
    if was == now:
        return was
    if isinstance(was, Prim) and isinstance(now, Prim):
        if (now.name, was.name) in WIDENS:  # narrower than the column: fits as it is
            return was
        if (was.name, now.name) in WIDENS:
            changes.append(Change("widen", path, now))
            return now
    if isinstance(was, Decimal) and isinstance(now, Decimal) and was.scale == now.scale:
        if now.precision <= was.precision:
            return was
        changes.append(Change("widen", path, now))
        return now
    if isinstance(was, Struct) and isinstance(now, Struct):
        return Struct(_fit_fields(path, was.fields, now.fields, changes))
    if isinstance(was, Array) and isinstance(now, Array):
        return Array(_fit_type((*path, "element"), was.element, now.element, changes))
    if isinstance(was, Map) and isinstance(now, Map) and was.key == now.key:
        return Map(was.key, _fit_type((*path, "value"), was.value, now.value, changes))
    raise Unfit(path, was, now)


def _fit_fields(path: tuple[str, ...], was: tuple[Field, ...], now: tuple[Field, ...],
                changes: list[Change]) -> tuple[Field, ...]:
    new = {f.name: f for f in now}
    out = []
    for old in was:  # kept, in the table's order; a field gone from ``now`` stays
        found = new.pop(old.name, None)
        kind = old.type if found is None else _fit_type((*path, old.name), old.type,
                                                        found.type, changes)
        out.append(Field(old.name, kind, True))
    for added in new.values():  # new fields last, nullable (older rows have none)
        changes.append(Change("add", (*path, added.name), added.type))
        out.append(Field(added.name, added.type, True))
    return tuple(out)


def fit(table: tuple[Field, ...], schema: tuple[Field, ...],
        ) -> tuple[tuple[Field, ...], list[Change]]:
    """The table's columns once rows of ``schema`` can be written to it, and the changes
    that takes (empty: it fits as it is). Unfit naming the first field that cannot."""
    changes: list[Change] = []
    return _fit_fields((), table, schema, changes), changes


__all__ = ["WIDENS", "Array", "Change", "Decimal", "Field", "Map", "Prim", "Struct", "Type",
           "Unfit", "fit"]
