"""Schema evolution over column types (:mod:`processors.column_types`' tree): whether a
writer schema's type fits a table's, and the changes the table needs first.

:func:`fit`: a writer schema's type fits a table's column when every value of it can be
written there, once the table is widened as Iceberg allows: the same type, a narrower one
the column already holds (``int`` into ``long``), or one the column can be widened to
(``int`` -> ``long``, ``float`` -> ``double``, ``decimal(P,S)`` -> ``decimal(P',S)`` with
P' > P); in a struct, fields missing from the new type stay (NULL in new rows) and new
fields are added (nullable); an array's element and a map's value follow the same rules,
a map's key must stay the same. Anything else (``string`` -> ``int``, ``double`` into ``long``)
does not fit: :class:`Unfit` names the field's path and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from processors import column_types
from processors.column_types import Array, DecimalType, Field, Flat, Map, Struct, TypeNode

WIDENS = {("int", "long"), ("float", "double")}
"""(from, to): the flat type promotions Iceberg applies to a column in place."""


@dataclass(frozen=True, slots=True)
class Change:
    """One change a table needs before rows of a new schema are written: ``add`` a
    nullable column (``path``: the column, then the struct fields down to it; ``element``
    for an array's element, ``value`` for a map's value) of ``type``, or ``widen`` the
    column at ``path`` to ``type``."""

    kind: str  # "add" | "widen"
    path: tuple[str, ...]
    type: TypeNode

    def __str__(self) -> str:
        return f"{self.kind} {'.'.join(self.path)} {column_types.type_string(self.type)}"


class Unfit(ValueError):
    """A writer schema's type does not fit the table's: ``path`` names the field."""

    def __init__(self, path: tuple[str, ...], was: TypeNode, now: TypeNode) -> None:
        self.path, self.was, self.now = path, was, now
        render = column_types.type_string
        super().__init__(f"field {'.'.join(path)!r} was {render(was)} in the table, the "
                         f"writer schema has {render(now)}: not a widening Iceberg allows "
                         "(int->long, float->double, a decimal's precision widened)")


def _fit_type(path: tuple[str, ...], was: TypeNode, now: TypeNode,
              changes: list[Change]) -> TypeNode:
    """The table's type at ``path`` once it holds ``now`` too (``changes`` gets what that
    takes); Unfit when it cannot."""
    if was == now:
        return was
    if isinstance(was, Flat) and isinstance(now, Flat):
        if (now.name, was.name) in WIDENS:  # narrower than the column: fits as it is
            return was
        if (was.name, now.name) in WIDENS:
            changes.append(Change("widen", path, now))
            return now
    if isinstance(was, DecimalType) and isinstance(now, DecimalType) \
            and was.scale == now.scale:
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


__all__ = ["WIDENS", "Change", "Unfit", "fit"]
