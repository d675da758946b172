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

import datetime as dt
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict

from processors.column_types import (
    FLAT_TYPES,
    MAX_DECIMAL_PRECISION,
    DecimalType,
    parse_type,
    type_problem,
)

logger = logging.getLogger(__name__)

Row = dict[str, Any]
"""One output row: column name to value."""

COORDINATE_COLUMNS = ("_topic", "_partition", "_offset", "_timestamp")

DELETED = "_is_deleted"
"""The marker column of a processor that emits deletions (:attr:`Processor.emits_deletes`):
True on a deletion (see :func:`deletion`), False on every other row (kstage sets it). Not
``_deleted``: Iceberg reserves that name for a metadata column."""

SCHEMA_DIR = Path(__file__).parent / "schemas"
"""Avro schemas and DDL shipped with kstage (see the SOURCES.md files for provenance)."""

ColumnType = str
"""A column's logical type (the grammar: :mod:`processors.column_types`): one of
:data:`COLUMN_TYPE_NAMES`, ``decimal(P,S)`` (see :func:`decimal_type`), or a nested type in
Spark's DDL syntax: ``struct<name:type,...>`` (a field may end in `` NOT NULL``; a name
that is not ``[A-Za-z_][A-Za-z0-9_]*`` in backticks), ``array<T>``, ``map<K,V>`` (K a
type without nesting), to any depth. The values a row may give each type:

* ``string``: str; ``int``/``long``: int (not bool) within 32/64 bits; ``double``: float
  or int; ``float``: float or int, stored as a 32-bit float (rounded to the nearest one,
  a finite value beyond its range refused); ``boolean``: bool; ``binary``: bytes;
* ``date``: a :class:`datetime.date` (not a datetime);
* ``timestamp``: a :class:`datetime.datetime` with a time zone (``tzinfo``); a naive one
  is refused (its instant is unknown), so are strings and numbers: convert epoch
  milliseconds with :func:`timestamp_from_millis`. Written as the instant, in UTC
  (Spark/Iceberg ``TIMESTAMP``, PostgreSQL ``TIMESTAMPTZ``), to the microsecond;
* ``timestamp_ntz``: a naive :class:`datetime.datetime` (a local date-time without a
  zone, e.g. Avro's ``local-timestamp-micros``); an aware one is refused. Written as is
  (Spark ``TIMESTAMP_NTZ``, Iceberg ``timestamp``, PostgreSQL ``TIMESTAMP``);
* ``decimal(P,S)``: :class:`decimal.Decimal` (finite) or int, with at most S digits after
  the point and P - S before it; a float is refused (it is not the amount it was meant to
  be), so are strings; a value beyond the precision is refused, never rounded. Written as
  Spark/Iceberg ``DECIMAL(P,S)``, PostgreSQL ``NUMERIC(P,S)``;
* ``struct<...>``: a dict keyed by field name (a missing nullable field is NULL, an
  unknown key is refused); ``array<T>``: a list or tuple; ``map<K,V>``: a dict (keys
  never None). PostgreSQL stores every nested type as ``jsonb`` (docs/plugins.md).

A value that does not fit is refused by the table sinks as the row's failure: the row is
dead-lettered with a reason naming the column (and the path inside a nested value)."""

COLUMN_TYPE_NAMES = FLAT_TYPES
"""The column types without parameters (``decimal(P,S)`` and the nested ones have them)."""


def decimal_type(precision: int, scale: int) -> ColumnType:
    """The column type ``decimal(precision,scale)``: ``precision`` digits in all
    (1..38), ``scale`` of them after the point (0..precision)."""
    kind = f"decimal({precision},{scale})"
    if decimal_parts(kind) is None:
        raise ValueError(f"{kind} is not a decimal type: precision 1..{MAX_DECIMAL_PRECISION}, "
                         "scale 0..precision")
    return kind


@functools.lru_cache(maxsize=256)
def decimal_parts(kind: str) -> tuple[int, int] | None:
    """``(precision, scale)`` of a ``decimal(P,S)`` type; None for any other string
    (also for a precision or scale out of range). Cached: the row check asks for every
    value of a decimal column."""
    try:
        node = parse_type(kind)
    except ValueError:
        return None
    return (node.precision, node.scale) if isinstance(node, DecimalType) else None


def column_type_problem(kind: object) -> str | None:
    """Why ``kind`` is not a column type (naming the position of the fault), or None."""
    return type_problem(kind)


def timestamp_from_millis(millis: int) -> dt.datetime:
    """A ``timestamp`` column's value from milliseconds since the epoch (UTC), such as
    :attr:`Message.timestamp`."""
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=millis)


@dataclass(slots=True, frozen=True)
class Column:
    """One typed column of a processor's rows (the staging table's schema).

    Attributes:
        name: column name.
        type: logical type (:data:`ColumnType`); staging sinks map it to their own
            (Spark, JDBC). ValueError when it is none.
        nullable: False for the source DDL's NOT NULL columns.
        doc: where the value comes from.
    """

    name: str
    type: ColumnType = "string"
    nullable: bool = True
    doc: str = ""

    def __post_init__(self) -> None:
        problem = column_type_problem(self.type)
        if problem is not None:
            raise ValueError(f"column {self.name!r}: {problem}")


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
        timestamp_type: Kafka's timestamp type of the record: 0 CreateTime (set by the
            producer), 1 LogAppendTime (set by the broker), -1 none or unknown.
        value_schema: for a processor with :attr:`Processor.wants_value_schema` and a
            topic of a registry format, the writer schema the value was decoded with:
            ``avro``: fastavro's parsed schema (a dict keeping every property, e.g. Kafka
            Connect's ``connect.name``); ``protobuf``: the ``Descriptor`` of the message
            type the record's index list names; ``json_schema``: a
            :class:`~processors.json_schema_columns.JsonWriterSchema`. None otherwise
            (and for a null value).
        value_schema_id: the registry's id of ``value_schema`` (None when that is None).
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: Sequence[tuple[str, bytes]]
    raw: bytes | None
    timestamp_type: int = -1
    value_schema: Any = None
    value_schema_id: int | str | None = None

    def coordinates(self) -> Row:
        """The Kafka coordinate columns every row carries."""
        return {
            "_topic": self.topic,
            "_partition": self.partition,
            "_offset": self.offset,
            "_timestamp": self.timestamp,
        }


class LiveColumns:
    """The columns of a processor whose rows' shape comes from the messages' writer
    schemas (:attr:`Processor.columns_from_schema`): they change while the worker runs.

    The processor sets them (:meth:`set`) *before* it returns the first row of a new
    shape; a table sink bound to them compares :attr:`version` with the one it last
    applied before each write, and evolves its table (new nullable columns, widened
    types) and commits that before it writes the rows. Columns only ever grow or widen:
    a column once set stays (a field removed from the schema reads NULL in new rows).

    A table sink that finds its table already there when it opens (kstage restarted)
    says the table's columns with :meth:`table_found` before any row: the processor
    (its ``found`` callback) then judges writer schemas against the table as it is, not
    against the first schema it happens to see.
    """

    __slots__ = ("_found", "columns", "version")

    def __init__(self, found: Callable[[Sequence[Column]], None] | None = None) -> None:
        self.columns: tuple[Column, ...] = ()
        self.version = 0  # 0: none known yet
        self._found = found

    def set(self, columns: Sequence[Column]) -> None:
        self.columns = tuple(columns)
        self.version += 1

    def table_found(self, columns: Sequence[Column]) -> None:
        """A table sink's table exists with ``columns`` (the processor's, without the
        sink's own: coordinates, record columns): handed to the processor, which may
        :meth:`set` the columns anew before returning."""
        if self._found is not None:
            self._found(columns)


class MappedColumns(NamedTuple):
    """The rows :meth:`Processor.transform_columns` made of a batch of values.

    Attributes:
        table: a ``pyarrow.Table`` of the rows, a column per name of the processor's
            columns (any order; a column that is absent is all NULL).
        source: a ``pyarrow`` integer array: for each row, the index of the value (the
            message) it was made of, ascending (a value that gives no row is absent).
    """

    table: Any
    source: Any


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

    source_order: ClassVar[str | None] = None
    """A ``long`` column of :attr:`columns` holding the change's position in its source's
    log (``debezium``: ``_source_lsn``, PostgreSQL's log sequence number), or None. The
    table sinks that keep the newest row per key (the JDBC upsert, the final table's
    merge) order a key's rows by offset within a Kafka partition; across partitions (or
    topics), where offsets say nothing, by this column first (higher wins, NULL loses to
    a value), then by the record timestamp. Declare it only for a position that grows
    with every change of the source (a log sequence number), not for a clock."""

    wants_value_schema: ClassVar[bool] = False
    """The processor reads the writer schema of each value, :attr:`Message.value_schema`
    (Avro from the registry: what the decoded dict cannot say, such as Kafka Connect's
    ``connect.name`` of a field). Off by default: it costs a lookup per message."""

    emits_deletes: ClassVar[bool] = False
    """The processor may return deletions (rows made by :func:`deletion`): its rows then
    all carry the boolean column ``_is_deleted`` (:data:`DELETED`; kstage sets False on the
    others), its table sinks add that column, and a sink that cannot take a deletion is
    refused at start. A deletion carries the key columns only, so every column but the
    key must be nullable (checked at start)."""

    options_model: ClassVar[type[BaseModel]] = NoOptions
    """The pydantic model of the topic's ``options`` (see the module docstring)."""

    columns_from_schema: ClassVar[bool] = False
    """The rows' columns come from the messages' writer schemas, not from :attr:`columns`:
    the processor's :meth:`live_columns` says them while it runs, and table sinks bound
    to it evolve their table when they change (see :class:`LiveColumns`)."""

    maps_columns: ClassVar[bool] = False
    """The processor also maps a whole batch of decoded values at once, as Arrow columns
    (:meth:`transform_columns`). kstage then decodes a partition batch of registry Avro
    values of one writer schema straight into columns and hands the sinks the columns,
    when every sink of the topic takes them (:attr:`SinkCapabilities.arrow_rows
    <actors.sinks.base.SinkCapabilities.arrow_rows>`), no filter, route or record column
    asks for a message at a time, and the values are read without a reader schema."""

    def transform_columns(self, values: Any) -> MappedColumns | None:
        """The rows of a batch of decoded values, as columns, equal to what
        :meth:`transform` gives for each value in turn (a processor with
        :attr:`maps_columns`).

        Args:
            values: a ``pyarrow.Table``, one row per message, a column per field of the
                writer schema, as that schema declares them.

        Returns:
            The rows (:class:`MappedColumns`), or None when this batch must go through
            :meth:`transform` one message at a time: a writer schema of another shape, or
            any value :meth:`transform` would refuse (it then names the message at
            fault and its policy applies, as ever). Never raise for bad values.
        """
        return None

    def live_columns(self) -> LiveColumns | None:
        """The columns of a processor with :attr:`columns_from_schema` (None otherwise)."""
        return None

    def schema_known(self, schema: Any, schema_id: int | str) -> None:
        """A processor with :attr:`columns_from_schema`: the latest writer schema of the
        topic's value subject (``<topic>-value``), parsed as :attr:`Message.value_schema`
        is, given once before the sinks open when the registry has one, so the table is
        made before the first message. ValueError when the processor can never take it
        (a recursive type): the worker does not start, naming why."""

    @classmethod
    def configured(cls, options: Mapping[str, Any] | BaseModel | None) -> type[Processor]:
        """The class whose ``table``, ``columns`` and ``key`` describe the rows made with
        these topic ``options``: ``cls`` itself, unless the rows' shape comes from the
        options (a processor told its table's columns, like ``debezium``), which then
        returns a subclass with them set. kstage asks it once per topic, before anything
        starts (pydantic.ValidationError for options it refuses)."""
        return cls

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


def table_columns(processor: type[Processor]) -> tuple[Column, ...]:
    """The typed columns of ``processor``'s rows: its ``columns``, then ``_is_deleted``
    (boolean) when it emits deletions; empty when it declares none."""
    if processor.columns and processor.emits_deletes:
        return (*processor.columns, Column(DELETED, "boolean",
                                           doc="True: the row of this key was deleted"))
    return processor.columns


def source_order_problem(processor: type[Processor], columns: Sequence[Column]) -> str | None:
    """Why ``processor``'s :attr:`~Processor.source_order` is not a ``long`` column among
    ``columns``, or None."""
    name = processor.source_order
    if name is None:
        return None
    found = [c for c in columns if c.name == name]
    if not found or found[0].type != "long":
        return (f"processor {processor.name!r} orders changes across partitions by "
                f"{name!r} (Processor.source_order), which is not a long column of its rows")
    return None


def deletion(key: Mapping[str, Any], message: Message) -> Row:
    """The row that deletes the row of ``key`` (the natural key's columns and values),
    for a processor with :attr:`~Processor.emits_deletes`: the key, ``_is_deleted`` True and
    the Kafka coordinates of ``message`` (a delete is a version: the newest offset wins).
    Table sinks in upsert mode and the final table's merge delete the key's row; staging
    tables, JSONL and HTTP sinks keep the deletion as a row with its marker."""
    row: Row = dict(key)
    row[DELETED] = True
    return with_coordinates(row, message)


def with_coordinates(row: Row, message: Message) -> Row:
    """Return ``row`` with the Kafka coordinate columns of ``message`` added."""
    row["_topic"] = message.topic
    row["_partition"] = message.partition
    row["_offset"] = message.offset
    row["_timestamp"] = message.timestamp
    return row
