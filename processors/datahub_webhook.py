"""DataHub ``PlatformEvent_v1`` entity change events -> JSON webhook payloads (HTTP sinks).

Parsing is :class:`~processors.datahub_platform_event.DatahubEntityChangeProcessor`'s
(this processor delegates to it: same fields, same PoisonMessage rules, other platform
events dropped). On top of it come event filters, as DataHub Actions' event-type filters
work: include lists keep only the named values, exclude lists drop them (exclude wins).

Options (all optional; a single string counts as a one-item list; an empty or missing
include list means "all")::

    entity_types:          [dataset, dashboard]   # exact match (DataHub entity type names)
    categories:            [TAG, GLOSSARY_TERM]   # case-insensitive
    operations:            [ADD, REMOVE]          # case-insensitive
    exclude_entity_types:  [...]
    exclude_categories:    [...]
    exclude_operations:    [...]

Any other option key is a ValueError at construction, naming the key.

Payload rows: ``entity_urn, entity_type, category, operation, modifier, parameters,
audit_time, audit_actor, version, event_time`` plus the Kafka coordinates ``_topic,
_partition, _offset, _timestamp``; ``parameters`` is the event's object as a dict (None
when the event has none), not JSON text. There is no staging ``table``: the rows are
request bodies for an HTTP sink (``sink: {type: http, url: ...}``), whose idempotency key
comes from the coordinates.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from processors.base import Message, Processor, Row
from processors.datahub_platform_event import DatahubEntityChangeProcessor

logger = logging.getLogger(__name__)

# option -> (row field, include?)
_FILTERS: dict[str, tuple[str, bool]] = {
    "entity_types": ("entity_type", True),
    "categories": ("category", True),
    "operations": ("operation", True),
    "exclude_entity_types": ("entity_type", False),
    "exclude_categories": ("category", False),
    "exclude_operations": ("operation", False),
}
_CASE_INSENSITIVE = frozenset({"category", "operation"})


class DatahubEntityChangeWebhookProcessor(Processor):
    """DataHub entity change events, filtered, as JSON webhook payload rows.

    Args:
        options: the filters of the module docstring.

    Raises:
        ValueError: an unknown option key, or a filter that is not a string or a list of
            strings (the message names the key).
    """

    name = "datahub_entity_change_webhook"
    formats = ("avro",)
    description = "DataHub PlatformEvent entityChangeEvent -> filtered JSON webhook payloads"
    reader_schema = DatahubEntityChangeProcessor.reader_schema
    # no table, key or columns: the rows are request bodies for an HTTP sink

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._parser = DatahubEntityChangeProcessor()
        include: dict[str, frozenset[str]] = {}
        exclude: dict[str, frozenset[str]] = {}
        for key, value in self.options.items():
            if key not in _FILTERS:
                known = ", ".join(_FILTERS)
                raise ValueError(f"{self.name}: unknown option {key!r} (known: {known})")
            field, is_include = _FILTERS[key]
            values = _strings(key, value)
            if field in _CASE_INSENSITIVE:
                values = frozenset(v.casefold() for v in values)
            if is_include:
                if values:  # empty include list: everything
                    include[field] = values
            elif values:
                exclude[field] = values
        self._include = include
        self._exclude = exclude

    def wanted(self, row: Row) -> bool:
        """Whether a parsed event passes the include and exclude filters."""
        for field, values in self._include.items():
            if _value(row, field) not in values:
                return False
        return all(_value(row, field) not in values for field, values in self._exclude.items())

    def transform(self, message: Message) -> Sequence[Row]:
        rows = self._parser.transform(message)
        out: list[Row] = []
        for row in rows:
            if not self.wanted(row):
                logger.debug("filtered out %s %s %s of %s at offset %d", row["entity_type"],
                             row["category"], row["operation"], row["entity_urn"],
                             message.offset)
                continue
            params = row["parameters"]
            # the parent's canonical JSON text of a JSON object: loads gives the dict back
            row["parameters"] = None if params is None else json.loads(params)
            out.append(row)
        return out


def _strings(key: str, value: Any) -> frozenset[str]:
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset({value})
    if isinstance(value, list | tuple | set | frozenset) and all(
        isinstance(v, str) for v in value
    ):
        return frozenset(value)
    raise ValueError(f"option {key!r} must be a string or a list of strings")


def _value(row: Row, field: str) -> str:
    value = str(row[field])
    return value.casefold() if field in _CASE_INSENSITIVE else value
