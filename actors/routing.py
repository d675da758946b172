"""A topic's ``route:`` at work (:mod:`settings.routes`): the table of each message,
chosen in the worker, where the value, the headers and the key are at hand, and carried
to the sink in each of the message's rows under :data:`ROUTE_FIELD`, which the routed
sink (:class:`actors.sinks.routed.RoutedSink`) strips before any table sees the row.

A message the route has no table for (its value has none and the route no ``default``;
the value, header or key missing from a ``template`` route; a ``template`` route past its
``max_tables``) is poison: :class:`~processors.errors.PoisonMessage` naming the topic,
partition, offset and the value, dead-lettered by the failure policy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from processors.base import Message, Row
from processors.errors import PoisonMessage
from settings.identifiers import table_part
from settings.routes import VALUE_PLACEHOLDER, RouteSettings

ROUTE_FIELD = "_kstage_route"
"""The row field holding the table of the row's route, from the worker to the routed
sink (stripped there)."""

_MISSING = object()


class Router:
    """The table of each message of one topic (one per worker: ``max_tables`` counts the
    tables it routed to since it started)."""

    def __init__(self, route: RouteSettings) -> None:
        self.route = route
        self._path = route.path
        self.tables: set[str] = set()

    def _value(self, msg: Message) -> Any:
        where, *rest = self._path
        if where == "key":
            return _MISSING if msg.key is None else msg.key
        if where == "header":
            for name, raw in msg.headers or ():
                if name == rest[0]:
                    if raw is None:
                        return _MISSING
                    try:
                        return bytes(raw).decode("utf-8")
                    except UnicodeDecodeError:
                        raise self._poison(msg, "header is not UTF-8 text", raw) from None
            return _MISSING
        found: Any = msg.value
        for part in rest:
            if not isinstance(found, dict) or part not in found:
                return _MISSING
            found = found[part]
        return _MISSING if found is None else found

    def _poison(self, msg: Message, why: str, value: Any) -> PoisonMessage:
        shown = "no value" if value is _MISSING else f"value {_text(value)!r}"
        return PoisonMessage(f"{msg.topic}[{msg.partition}]@{msg.offset}: route by "
                             f"{self.route.by}: {shown}: {why}")

    def table(self, msg: Message) -> str:
        """The table of ``msg``'s route; PoisonMessage when it has none."""
        value = self._value(msg)
        route = self.route
        if route.tables is not None:
            table = None if value is _MISSING else route.tables.get(_text(value))
            table = table or route.default
            if table is None:
                raise self._poison(msg, "no table routes it (tables: "
                                   f"{', '.join(sorted(route.tables))}) and the route has "
                                   "no default", value)
            return table
        if value is _MISSING:
            raise self._poison(msg, "a template route needs one", value)
        assert route.template is not None  # noqa: S101 - one of the two forms
        table = route.template.replace(VALUE_PLACEHOLDER, table_part(_text(value)))
        if table not in self.tables:
            if len(self.tables) >= route.max_tables:
                raise self._poison(msg, f"it would make table {table!r}, past the route's "
                                   f"max_tables ({route.max_tables}) of this topic",
                                   value)
            self.tables.add(table)
        return table

    def tag(self, rows: Sequence[Row], msg: Message) -> None:
        """Tag each of ``msg``'s rows with its table (PoisonMessage: none)."""
        if rows:
            table = self.table(msg)
            for row in rows:
                row[ROUTE_FIELD] = table


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "backslashreplace")
    return json.dumps(value, separators=(",", ":"), default=str)


__all__ = ["ROUTE_FIELD", "Router"]
