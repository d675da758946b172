"""A topic's ``columns:`` (:class:`settings.columns.TopicColumns`) at work: the record's
key, chosen headers and timestamp type added to every row of its message, with the typed
:class:`~processors.base.Column` of each for the table sinks.

The extra columns follow the processor's and come before the coordinates in a table. Their
types: the key is ``binary`` for ``key_format: bytes``, else ``string`` (a ``json`` or
``avro`` key that is not a string lands as its JSON text); a header is ``string`` (UTF-8)
or ``binary``; the timestamp type is ``string`` (``CreateTime``, ``LogAppendTime``). Every
extra column is nullable (a record may have no key or lack a header), so an Iceberg
staging table written before the topic declared them gains them as new nullable columns.

A name that collides with a processor column, a coordinate or ``_ingested_at`` is a
configuration error (:func:`column_problems`, run by ``kstage validate`` and ``run``); a
schemaless processor's row that already holds an extra column's name, or a header that is
not UTF-8, is poison (the message is dead-lettered, never half written).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from processors.base import (
    COORDINATE_COLUMNS,
    Column,
    Message,
    Processor,
    Row,
    table_columns,
)
from processors.errors import PoisonMessage
from processors.jsonfast import dumps_compact
from settings.columns import RecordColumn
from settings.models import TopicSettings

RESERVED = (*COORDINATE_COLUMNS, "_ingested_at")
"""Columns every staging row has besides the processor's: no extra column may take one."""

TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
"""Kafka's timestamp types by their id (a record without one, id -1, gives NULL)."""

Problem = tuple[tuple[str | int, ...], str]


def _column(topic: TopicSettings, declared: RecordColumn) -> Column:
    if declared.source == "key":
        kind = "binary" if topic.key_format == "bytes" else "string"
        return Column(declared.name, kind, doc=f"record key ({topic.key_format})")
    if declared.source == "header":
        return Column(declared.name, declared.type or "string",
                      doc=f"header {declared.header!r}")
    return Column(declared.name, "string", doc="timestamp type: CreateTime or LogAppendTime")


def extra_columns(topic: TopicSettings) -> tuple[Column, ...]:
    """The typed columns a topic's ``columns:`` adds (empty when it declares none)."""
    return tuple(_column(topic, c) for c in topic.columns or ())


def sink_columns(topic: TopicSettings, processor: type[Processor]) -> tuple[Column, ...]:
    """The columns a table sink of the topic writes: the processor's, then the extra ones
    (none for a processor that declares no columns: the sink refuses it anyway)."""
    if processor.columns_from_schema:  # the processor's come from the writer schemas
        return extra_columns(topic)
    if not processor.columns:
        return ()
    return (*table_columns(processor), *extra_columns(topic))


def record_column_names(topic: TopicSettings) -> tuple[str, ...]:
    """The names of the topic's ``columns:``, in order."""
    return tuple(c.name for c in topic.columns or ())


def column_problems(topic: TopicSettings, processor: type[Processor],
                    where: tuple[str | int, ...]) -> Iterator[Problem]:
    """The extra columns that collide with a processor column or a coordinate, each at
    its ``name`` under ``where`` (the topic's ``columns``)."""
    own = {c.name for c in table_columns(processor)}
    for k, declared in enumerate(topic.columns or ()):
        name = declared.name
        if name in RESERVED:
            yield (*where, k, "name"), (f"column {name!r} is one of the coordinate columns "
                                        f"every row has ({', '.join(RESERVED)}); choose "
                                        "another name")
        elif name in own:
            yield (*where, k, "name"), (f"column {name!r} is a column of processor "
                                        f"{topic.processor!r}; choose another name")


def _text(key: Any) -> str | None:
    """A decoded json/avro key as text: a string as it is, anything else its JSON."""
    if key is None or isinstance(key, str):
        return key
    return dumps_compact(key, str).decode("utf-8")


class RecordColumns:
    """Adds a topic's extra columns to the rows of each message (see the module doc)."""

    __slots__ = ("_declared", "_key_text", "names")

    def __init__(self, topic: TopicSettings, declared: Sequence[RecordColumn]) -> None:
        self._declared = tuple((c.name, c.source, c.header, c.type == "binary")
                               for c in declared)
        self._key_text = topic.key_format in ("json", "avro")
        self.names = tuple(c.name for c in declared)

    @classmethod
    def of(cls, topic: TopicSettings) -> RecordColumns | None:
        """The topic's extra columns, or None when it declares none."""
        return cls(topic, topic.columns) if topic.columns else None

    def values(self, msg: Message) -> Row:
        """The extra columns of ``msg``; PoisonMessage for a header that is not UTF-8."""
        out: Row = {}
        headers: dict[str, bytes | None] | None = None
        for name, source, header, binary in self._declared:
            if source == "key":
                out[name] = _text(msg.key) if self._key_text else msg.key
            elif source == "timestamp_type":
                out[name] = TIMESTAMP_TYPES.get(msg.timestamp_type)
            else:
                if headers is None:
                    headers = {}
                    for h, value in msg.headers:
                        headers.setdefault(h, value)
                raw = headers.get(header or "")
                if raw is None or binary:
                    out[name] = raw
                    continue
                try:
                    out[name] = bytes(raw).decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise PoisonMessage(
                        f"header {header!r} of topic {msg.topic!r} partition {msg.partition} "
                        f"offset {msg.offset} is not UTF-8 ({exc}); declare its column "
                        f"{name!r} with type: binary to keep its bytes") from None
        return out

    def add(self, rows: Sequence[Row], msg: Message) -> None:
        """Put the extra columns of ``msg`` in each of its ``rows``; PoisonMessage when a
        row holds one of their names already (a schemaless processor's field)."""
        if not rows:
            return
        values = self.values(msg)
        for row in rows:
            taken = [name for name in self.names if name in row]
            if taken:
                raise PoisonMessage(
                    f"the processor's row already has the column(s) {', '.join(taken)} that "
                    "the topic's columns: declares; rename them in columns:")
            row.update(values)


__all__ = ["RESERVED", "TIMESTAMP_TYPES", "RecordColumns", "column_problems",
           "extra_columns", "record_column_names", "sink_columns"]
