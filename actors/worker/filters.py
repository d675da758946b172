"""Declared topic filters (``topics[].filter``): which decoded values reach the processor.

A filter has ``include`` and ``exclude`` mappings of PATH -> [VALUE, ...]. A value passes
when **every** include path matches one of its values and **no** exclude path does; a
value that does not pass is *filtered*: the processor never sees it, it gives no rows, its
offset is committed like a processed one, and the worker counts it in ``filtered``.

These are the semantics of DataHub Actions' ``filter.event``
(``FilterTransformer._matches``,
https://github.com/datahub-project/datahub/blob/master/datahub-actions/src/datahub_actions/plugin/transform/filter/filter_transformer.py),
with DataHub's nested mappings written as dotted paths:

* PATH is a dotted path into the decoded value: ``aspect.value.removed`` reads
  ``value["aspect"]["value"]["removed"]``. While descending, a string (or UTF-8 bytes,
  as Avro ``bytes`` decode) that holds JSON is parsed first, as DataHub parses a string
  met by a nested filter: ``payload.value.category`` reads a PlatformEvent's JSON payload.
  Lists are not indexed.
* A missing path (a key absent, a step through a non-mapping, JSON that does not parse)
  reads as ``null``, as DataHub's ``dict.get`` does: it matches only a ``null`` in the
  list, so an include of a missing path filters the message and an exclude lets it pass.
* VALUEs are scalars (string, number, boolean, null) compared by equality, with no
  coercion: the string ``"1"`` does not match the number ``1``. Numbers compare by value
  (``1`` matches ``1.0``), a boolean matches only a boolean.
* A found value that is a list or a mapping matches no VALUE (DataHub's equality of a
  scalar to a list or dict is false too).

Where kstage differs from DataHub, on purpose: DataHub compares list filters only
against strings (``[1, 2]`` never matches the number 1) but single values against any
type, and Python equality lets ``true`` match ``1``; kstage compares every VALUE the same
way, JSON's way. DataHub's ``event_type`` has no counterpart: a kstage topic carries one
event type (``config from-datahub`` drops the topics whose type is not listed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from settings.models import FilterSettings

Scalar = str | int | float | bool | None


def lookup(value: Any, path: Sequence[str]) -> Any:
    """The value at ``path`` inside ``value`` (None when missing), parsing JSON strings
    and bytes met on the way down."""
    current = value
    for segment in path:
        if isinstance(current, bytes | str):
            try:
                current = json.loads(current)
            except ValueError:  # includes UnicodeDecodeError
                return None
        if not isinstance(current, Mapping):
            return None
        current = current.get(segment)
    return current


def _key(value: Any) -> tuple[str, Any] | None:
    """A comparison key: JSON's equality (bools apart from numbers, ints equal to floats)."""
    if value is None:
        return ("null", None)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    return None  # a list, mapping or bytes value matches no VALUE


class EventFilter:
    """A compiled ``topics[].filter``.

    Args:
        include: PATH -> VALUEs; every path must match one of its values.
        exclude: PATH -> VALUEs; no path may match one of its values.
    """

    def __init__(self, include: Mapping[str, Sequence[Scalar]] | None = None,
                 exclude: Mapping[str, Sequence[Scalar]] | None = None) -> None:
        self.include = self._compile(include or {})
        self.exclude = self._compile(exclude or {})

    @staticmethod
    def _compile(paths: Mapping[str, Sequence[Scalar]]
                 ) -> list[tuple[tuple[str, ...], frozenset[tuple[str, Any]]]]:
        return [(tuple(path.split(".")),
                 frozenset(k for k in map(_key, values) if k is not None))
                for path, values in paths.items()]

    def passes(self, value: Any) -> bool:
        """Whether ``value`` (a decoded message value) reaches the processor."""
        for path, wanted in self.include:
            if _key(lookup(value, path)) not in wanted:
                return False
        return all(_key(lookup(value, path)) not in unwanted
                   for path, unwanted in self.exclude)

    def __repr__(self) -> str:
        return f"<EventFilter include={len(self.include)} exclude={len(self.exclude)}>"


__all__ = ["EventFilter", "Scalar", "lookup"]


def compile_filter(settings: FilterSettings | None) -> EventFilter | None:
    """The matcher of a topic's ``filter:`` (None: every message passes)."""
    if settings is None or not (settings.include or settings.exclude):
        return None
    return EventFilter(settings.include, settings.exclude)
