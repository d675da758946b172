"""The row check of a nested value (``struct``, ``array``, ``map``), down to its leaves.

A struct is a dict keyed by its field names (a missing nullable field is NULL; an unknown
key, a missing NOT NULL field are refused), an array a list or tuple (elements nullable),
a map a dict (keys never None, values nullable). Each leaf is checked as a column of its
type would be (the ``leaf`` function given: :func:`actors.sinks.table.rows.convert`). A
value that does not fit raises :class:`NestedFault`, which knows the path to it inside the
column (``lines[3].qty``, ``tags['k']``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from processors.column_types import (
    Array,
    DecimalType,
    Flat,
    Map,
    Struct,
    TypeNode,
    field_name,
    type_string,
)

Leaf = Callable[[Any, str], Any]
"""Checks and converts a value (not None) of a type without nesting, named by its string."""


class NestedFault(ValueError):
    """A value inside a nested one that does not fit: ``why``, at ``path`` (its parts
    gathered innermost first, as the check unwinds)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why
        self.parts: list[str] = []

    def where(self) -> str:
        """The path, outermost first (``lines[3].qty``)."""
        return "".join(reversed(self.parts)).removeprefix(".")


@functools.cache
def _field_names(node: Struct) -> frozenset[str]:
    return frozenset(f.name for f in node.fields)


def _shown(value: Any) -> str:
    return f"{repr(value)[:80]} ({type(value).__name__})"


def _member(value: Any, node: TypeNode, nullable: bool, leaf: Leaf) -> Any:
    if value is None:
        if nullable:
            return None
        raise NestedFault("is null but it is NOT NULL")
    if isinstance(node, Flat):
        try:
            return leaf(value, node.name)
        except ValueError as exc:
            raise NestedFault(str(exc)) from None
    if isinstance(node, DecimalType):
        try:
            return leaf(value, type_string(node))
        except ValueError as exc:
            raise NestedFault(str(exc)) from None
    return nested_value(value, node, leaf)


def nested_value(value: Any, node: TypeNode, leaf: Leaf) -> Any:
    """``value`` (not None) checked against the nested type ``node``: a struct as a dict
    with every field (None for the missing ones), an array as a list, a map as a dict;
    :class:`NestedFault` naming the path when it does not fit."""
    if isinstance(node, Struct):
        if not isinstance(value, dict):
            raise NestedFault(f"value {_shown(value)} is not a struct: give a dict keyed "
                              "by field name")
        unknown = value.keys() - _field_names(node)
        if unknown:
            raise NestedFault(f"unknown field(s) {', '.join(sorted(map(repr, unknown)))}: "
                              f"{type_string(node)} has "
                              f"{', '.join(field_name(f.name) for f in node.fields)}")
        out = {}
        for field in node.fields:
            try:
                out[field.name] = _member(value.get(field.name), field.type, field.nullable,
                                          leaf)
            except NestedFault as fault:
                fault.parts.append("." + field_name(field.name))
                raise
        return out
    if isinstance(node, Array):
        if not isinstance(value, list | tuple):
            raise NestedFault(f"value {_shown(value)} is not an array: give a list")
        items = []
        for index, item in enumerate(value):
            try:
                items.append(_member(item, node.element, True, leaf))
            except NestedFault as fault:
                fault.parts.append(f"[{index}]")
                raise
        return items
    if isinstance(node, Map):
        if not isinstance(value, dict):
            raise NestedFault(f"value {_shown(value)} is not a map: give a dict")
        entries = {}
        for key, item in value.items():
            try:
                checked = _member(key, node.key, False, leaf)
            except NestedFault as fault:
                fault.why = f"key {repr(key)[:80]}: {fault.why}"
                raise
            try:
                entries[checked] = _member(item, node.value, True, leaf)
            except NestedFault as fault:
                fault.parts.append(f"[{repr(key)[:80]}]")
                raise
        return entries
    raise NestedFault(f"type {type_string(node)} is not nested")  # not reached: flat


__all__ = ["Leaf", "NestedFault", "nested_value"]
