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

Any other option key, or a value that is not a string or a list of strings, is refused
at construction (a pydantic ``ValidationError`` naming the key; ``kstage validate``
reports it with the file and line).

Payload rows: ``entity_urn, entity_type, category, operation, modifier, parameters,
audit_time, audit_actor, version, event_time`` plus the Kafka coordinates ``_topic,
_partition, _offset, _timestamp``; ``parameters`` is the event's object as a dict (None
when the event has none), not JSON text. There is no staging ``table``: the rows are
request bodies for an HTTP sink (``sink: {type: http, url: ...}``), whose idempotency key
comes from the coordinates.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field

from processors import jsonfast
from processors.base import Message, NoOptions, Processor, Row
from processors.datahub_platform_event import DatahubEntityChangeProcessor

logger = logging.getLogger(__name__)

_CASE_INSENSITIVE = frozenset({"category", "operation"})


def _one_or_many(value: Any) -> Any:
    """A single string counts as a one-item list; null as an empty one."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else value


_Strings = Annotated[list[str], BeforeValidator(_one_or_many)]


class WebhookOptions(NoOptions):
    """The event filters of ``datahub_entity_change_webhook`` (module docstring)."""

    entity_types: _Strings = Field(default_factory=list, description="Entity types to keep.")
    categories: _Strings = Field(default_factory=list, description="Categories to keep.")
    operations: _Strings = Field(default_factory=list, description="Operations to keep.")
    exclude_entity_types: _Strings = Field(
        default_factory=list, description="Entity types to drop.")
    exclude_categories: _Strings = Field(default_factory=list, description="Categories to drop.")
    exclude_operations: _Strings = Field(default_factory=list, description="Operations to drop.")

    def filters(self, include: bool) -> dict[str, frozenset[str]]:
        """Row field -> values of the non-empty include (or exclude) lists."""
        prefix = "" if include else "exclude_"
        found: dict[str, frozenset[str]] = {}
        for field, option in (("entity_type", "entity_types"), ("category", "categories"),
                              ("operation", "operations")):
            values: list[str] = getattr(self, prefix + option)
            if values:  # an empty include list means everything
                found[field] = frozenset(
                    v.casefold() if field in _CASE_INSENSITIVE else v for v in values)
        return found


class DatahubEntityChangeWebhookProcessor(Processor):
    """DataHub entity change events, filtered, as JSON webhook payload rows.

    Args:
        options: the filters of the module docstring.

    Raises:
        pydantic.ValidationError: an unknown option key, or a filter that is not a string
            or a list of strings (the error names the key).
    """

    name = "datahub_entity_change_webhook"
    formats = ("avro",)
    description = "DataHub PlatformEvent entityChangeEvent -> filtered JSON webhook payloads"
    reader_schema = DatahubEntityChangeProcessor.reader_schema
    # no table, key or columns: the rows are request bodies for an HTTP sink

    options_model = WebhookOptions
    options: WebhookOptions

    def __init__(self, options: Mapping[str, Any] | BaseModel | None = None) -> None:
        super().__init__(options)
        self._parser = DatahubEntityChangeProcessor()
        self._include = self.options.filters(include=True)
        self._exclude = self.options.filters(include=False)

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
            row["parameters"] = None if params is None else jsonfast.loads(params)
            out.append(row)
        return out


def _value(row: Row, field: str) -> str:
    value = str(row[field])
    return value.casefold() if field in _CASE_INSENSITIVE else value
