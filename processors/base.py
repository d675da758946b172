"""The public processor API: what a plugin implements, and how kstage calls it.

A processor turns one decoded Kafka message into rows (for a staging table) or
requests (for an HTTP API). Lifecycle, as the worker drives it::

    cls(options)          once per worker, with the topic's ``options`` mapping,
                          validated into ``options_model`` (``self.options``)
    await start()         before the first message (open clients here)
    transform(message)    per message, in offset order per partition; pure
    await stop()          after the last message, also after a crash

Guarantees kstage gives a processor:

* messages of one partition reach ``transform`` in offset order, one at a time;
* a message is committed only after the rows returned for it were durably accepted by
  the sink, so a crash replays it (at-least-once): ``transform`` must be deterministic;
* every row automatically carries the Kafka coordinates ``_topic, _partition,
  _offset, _timestamp`` (see :func:`with_coordinates`), which makes rows idempotent.

Options: a processor declares its topic options as a pydantic model, the class
attribute ``options_model`` (default :class:`NoOptions`: any key is refused), and reads
the validated instance as ``self.options``. ``kstage validate`` and ``kstage run`` build
every processor with its topic's options before anything starts, so an unknown key or a
wrong type is a configuration error naming the file, the line and the key, never a
crash at run time. Give the model ``extra="forbid"`` so typos are refused.

Failures: raise :class:`~processors.errors.PoisonMessage` for a message that can never
be processed (dead-lettered or thrown per policy), :class:`~processors.errors.Retry` or
any other exception for failures the group's ``failure`` policy should handle.
``transform`` may be ``async def`` when it must await (it can then be cancelled on
shutdown); plain functions are faster.

Processors are found through the entry-point group ``kstage.processors`` (see
:mod:`processors.registry`). This module imports neither aiokafka nor pyspark.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

logger = logging.getLogger(__name__)

Row = dict[str, Any]
"""One output row: column name to value."""

COORDINATE_COLUMNS = ("_topic", "_partition", "_offset", "_timestamp")

SCHEMA_DIR = Path(__file__).parent / "schemas"
"""Avro schemas and DDL shipped with kstage (see the SOURCES.md files for provenance)."""

ColumnType = Literal["string", "int", "long", "double", "boolean", "binary"]


@dataclass(slots=True, frozen=True)
class Column:
    """One typed column of a processor's rows (the staging table's schema).

    Attributes:
        name: column name.
        type: logical type; staging sinks map it to their own (Spark, JDBC).
        nullable: False for the source DDL's NOT NULL columns.
        doc: where the value comes from.
    """

    name: str
    type: ColumnType = "string"
    nullable: bool = True
    doc: str = ""


class Message(NamedTuple):
    """One decoded Kafka message, as handed to :meth:`Processor.transform`.

    Immutable and cheap to build (a NamedTuple: it is created once per message).

    Attributes:
        topic, partition, offset: the Kafka coordinates.
        timestamp: the record timestamp in milliseconds since the epoch.
        key: the key, decoded per the topic's ``key_format`` (raw bytes by default).
        value: the decoded value (a fresh dict for ``json``/``avro``, bytes for ``bytes``);
            it belongs to the processor, which may reuse it as a row.
        headers: the record headers as (name, bytes) pairs.
        raw: the undecoded value bytes.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: Sequence[tuple[str, bytes]]
    raw: bytes | None

    def coordinates(self) -> Row:
        """The Kafka coordinate columns every row carries."""
        return {
            "_topic": self.topic,
            "_partition": self.partition,
            "_offset": self.offset,
            "_timestamp": self.timestamp,
        }


class NoOptions(BaseModel):
    """The options of a processor that takes none: any key is refused.

    Subclass it (or any pydantic model with ``extra="forbid"``) to declare options.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)


class Processor:
    """Base class of processors. Subclass it and override :meth:`transform`.

    Class attributes:
        name: the registered name (set it to the entry-point name).
        formats: value formats the processor accepts (checked at start).
        description: one line shown by ``kstage processors``.
        table, columns, key: the rows' staging table, typed columns and natural key.
        final_partition: how the merge partitions the final table (optional).
        reader_schema: the Avro schema the processor expects, if it reads Avro.
        options_model: the pydantic model of the topic's ``options``.

    Attributes:
        options: the validated ``options_model`` instance.
    """

    name: ClassVar[str] = ""
    formats: ClassVar[tuple[str, ...]] = ("json", "bytes", "avro", "protobuf", "json_schema")
    description: ClassVar[str] = ""
    table: ClassVar[str] = ""
    """Default staging table of the rows (a sink may override it)."""
    columns: ClassVar[tuple[Column, ...]] = ()
    """Typed columns of the rows, without the Kafka coordinates; empty = schemaless."""
    key: ClassVar[tuple[str, ...]] = ()
    """Natural key of the rows (the source DDL's primary key), used by the merge."""
    final_partition: ClassVar[tuple[str, str] | None] = None
    """Partition of the final table the merge writes: ``(column name, Spark SQL
    expression over key columns only)``, e.g. ``("log_date",
    "to_date(timestamp_millis(log_event_time))")``. A key then never moves between
    partitions, so a merge rewrites only the partitions its staging rows fall into
    (checked: the expression is analysed against the key columns alone). None: every
    merge rewrites the whole final table."""
    reader_schema: ClassVar[str | None] = None
    """Path of the Avro schema the processor expects (relative to SCHEMA_DIR), if any.
    ``kstage schemas check`` checks writer schemas against it. Decoding resolves writer
    data to a reader schema only when the topic names one (``reader_schema`` in the
    topic's settings); otherwise values are read as written."""

    options_model: ClassVar[type[BaseModel]] = NoOptions
    """The pydantic model of the topic's ``options`` (see the module docstring)."""

    def __init__(self, options: Mapping[str, Any] | BaseModel | None = None) -> None:
        """Validate ``options`` into :attr:`options_model`.

        Raises:
            pydantic.ValidationError: an unknown key or a bad value (its error locations
                are the option keys, which ``validate`` maps to the file's lines).
        """
        self.options: BaseModel = self.parse_options(options)

    @classmethod
    def parse_options(cls, options: Mapping[str, Any] | BaseModel | None) -> BaseModel:
        """The topic's ``options`` as a validated :attr:`options_model` instance."""
        if isinstance(options, cls.options_model):
            return options
        if isinstance(options, BaseModel):
            options = options.model_dump()
        return cls.options_model.model_validate(dict(options or {}))

    async def start(self) -> None:
        """Open clients or load resources. Called once before the first message."""

    async def stop(self) -> None:
        """Release what :meth:`start` opened. Called once, also after a failure."""

    def transform(self, message: Message) -> Sequence[Row] | Awaitable[Sequence[Row]]:
        """Return the rows for ``message`` (may be empty, to filter it out)."""
        raise NotImplementedError

    def wants_savepoint(self, message: Message) -> bool:
        """In ``commit.mode: savepoint``: commit once this message is durably written."""
        return False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def with_coordinates(row: Row, message: Message) -> Row:
    """Return ``row`` with the Kafka coordinate columns of ``message`` added."""
    row["_topic"] = message.topic
    row["_partition"] = message.partition
    row["_offset"] = message.offset
    row["_timestamp"] = message.timestamp
    return row
