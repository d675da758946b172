"""``debezium``: Debezium's change events of one table become upserts and deletions.

Debezium (a Kafka Connect source connector) writes one event per changed row of a table,
keyed by the row's primary key, to one topic per table. Its value is an *envelope*::

    {"op": "c" | "u" | "r" | "d", "before": {...} | null, "after": {...} | null,
     "source": {"lsn": ..., "txId": ..., "ts_ms": ..., ...}, "ts_ms": ...}

as JSON with its schema (``{"schema": {...}, "payload": <envelope>}``, the JSON converter's
default), as bare JSON (``schemas.enable=false``), or as Avro through the registry (the
decoded record is the same envelope). The processor maps:

* ``c`` (insert), ``u`` (update), ``r`` (a snapshot's read) to the row ``after``;
* ``d`` (delete) to a deletion of the key (:func:`~processors.base.deletion`);
* the tombstone Debezium writes after a delete (a null value, for log compaction) to a
  deletion of its record key too, as Kafka Connect's JDBC sinks do with
  ``delete.enabled``: on a compacted topic a consumer that fell behind may see the
  tombstone without the ``d`` before it (compaction removed it). After the ``d`` it is a
  newer deletion of a key already deleted: nothing changes. Its ``_op`` and source
  columns are NULL (a tombstone has no envelope). It needs the record key decoded
  (``key_format: json`` or ``avro``), else it is poison naming that;
* ``t`` (truncate) and ``m`` (a logical decoding message) to poison: neither is a change
  of one row (Debezium's PostgreSQL connector skips truncates unless told otherwise).

The table's columns are not known in advance: the topic's options declare them, with the
natural key (``key_columns``) and the staging table::

    options:
      table: customers
      key_columns: [id]
      columns:
        - {name: id, type: int}
        - {name: email, type: string}
        - {name: balance, type: "decimal(12,2)"}
        - {name: updated_at, type: timestamp}

Each row also carries where the change comes from: ``_op`` (c, u, r or d),
``_source_lsn`` (PostgreSQL's log sequence number, ``source.lsn``), ``_source_txid``
(the source transaction, ``source.txId``) and ``_source_ts_ms`` (when the source
committed it, ``source.ts_ms``); NULL where the connector does not say.

The key's values come from the record key (a struct of the primary key's columns, with
``key_format: json`` or ``avro``) when it is decoded, else from the row image (``after``,
or ``before`` for a delete).

Values are converted to the declared types as Debezium's connectors write them by
default: ``decimal(P,S)`` from Connect's Decimal (bytes, or their base64 in JSON: the
unscaled value; Avro's decimal logical type; ``{"scale", "value"}`` of a variable scale)
or from a string with ``decimal_handling: string``; ``timestamp`` from ISO 8601 text
(``timestamptz``: ZonedTimestamp), from Avro's date and timestamp logical types, or from
an epoch number read in the unit of its time type (``io.debezium.time.Date`` and
Connect's ``Date``: days, midnight UTC; ``Timestamp`` and Connect's ``Timestamp``:
milliseconds; ``MicroTimestamp``; ``NanoTimestamp``). The time type comes from the event's
schema: the JSON envelope's ``schema`` (a field's ``name``), or the Avro writer schema
(a type's ``connect.name``: the processor reads it, :attr:`wants_value_schema`). An
event without a schema (JSON with ``schemas.enable=false``) uses the column's declared
``time_type``; with ``json_schemas: false`` every timestamp column must declare one
(refused at start otherwise), and an epoch number whose unit nothing names is poison,
never guessed. A time of day (``Time``, ``MicroTime``, ...) is not an instant: poison in
a timestamp column (declare it ``long``). ``binary`` from bytes or base64 text. A value
that does not convert is poison naming the column.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from processors.base import (
    Column,
    LiveColumns,
    Message,
    NoOptions,
    Processor,
    Row,
    column_type_problem,
    decimal_parts,
    deletion,
    with_coordinates,
)
from processors.debezium_schema import SchemaColumns, avro_row_schema, json_row_schema
from processors.errors import PoisonMessage, StopTopic

SOURCE_COLUMNS = (
    Column("_op", "string", doc="Debezium's op: c insert, u update, r snapshot read, d delete"),
    Column("_source_lsn", "long", doc="source.lsn: PostgreSQL's log sequence number"),
    Column("_source_txid", "long", doc="source.txId: the source transaction"),
    Column("_source_ts_ms", "long", doc="source.ts_ms: when the source committed the change"),
)
_UPSERTS = frozenset("cur")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# Debezium's and Kafka Connect's names of time types (a JSON schema field's "name", an
# Avro type's "connect.name"): how a timestamp column reads the value.
_DATES = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")  # days
_TIME_UNITS = {"io.debezium.time.Timestamp": 1_000, "org.apache.kafka.connect.data.Timestamp":
               1_000, "io.debezium.time.MicroTimestamp": 1_000_000,
               "io.debezium.time.NanoTimestamp": 1_000_000_000}  # units per second
_ZONED = "io.debezium.time.ZonedTimestamp"  # ISO 8601 text
_TIMES_OF_DAY = ("io.debezium.time.Time", "io.debezium.time.MicroTime",
                 "io.debezium.time.NanoTime", "io.debezium.time.ZonedTime",
                 "org.apache.kafka.connect.data.Time")
TIME_TYPES = (*_DATES, *_TIME_UNITS, _ZONED)
"""The time types a ``timestamp`` column may declare (``time_type``) for events that carry
no schema."""


class TableColumn(BaseModel):
    """One column of the source table, as the rows carry it."""

    model_config = NoOptions.model_config

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Column name.")
    type: str = Field("string", description="string, int, long, double, boolean, binary, "
                      "timestamp or decimal(P,S).")
    nullable: bool = Field(True, description="False for NOT NULL (the key's are).")
    time_type: str | None = Field(
        None, description="timestamp columns: the Debezium (or Kafka Connect) type of the "
        "value, as its schema would name it (io.debezium.time.MicroTimestamp, ...): how an "
        "epoch number reads when the event carries no schema (JSON without schemas).")

    @field_validator("type")
    @classmethod
    def _known(cls, value: str) -> str:
        problem = column_type_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("time_type")
    @classmethod
    def _time_type(cls, value: str | None) -> str | None:
        if value is not None and value not in TIME_TYPES:
            raise ValueError(f"time_type {value!r} is not one of {', '.join(TIME_TYPES)}")
        return value


class DebeziumOptions(NoOptions):
    """Options of ``debezium``."""

    table: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                              description="Staging table (default: set sink.table).")
    columns: list[TableColumn] | None = Field(
        None, min_length=1, description="The source table's columns kept, in order. "
        "Optional: without it they come from the events' schema (JSON with schemas, "
        "Avro) and follow the source's changes (processors.debezium_schema).")
    key_columns: list[str] = Field(min_length=1, description="The natural key: the source "
                                   "table's primary key columns.")
    decimal_handling: Literal["precise", "string"] = Field(
        "precise", description="How the connector writes decimals (its "
        "decimal.handling.mode): precise (Connect's Decimal) or string.")
    json_schemas: bool = Field(
        True, description="format json: the events carry their schema (the JSON "
        "converter's schemas.enable, its default), which names each value's time type. "
        "false: they do not, and every timestamp column declares its time_type.")
    on_incompatible: Literal["dead_letter", "stop"] = Field(
        "dead_letter", description="Without columns: an event whose schema does not fit "
        "the table (a column's type narrowed or changed): dead_letter it (naming the field) "
        "or stop the topic.")

    @model_validator(mode="after")
    def _key_in_columns(self) -> DebeziumOptions:
        if self.columns is None:
            if not self.json_schemas:
                raise ValueError("json_schemas is false: the events carry no schema to take "
                                 "the columns from; list them in columns")
            return self
        names = [c.name for c in self.columns]
        taken = [n for n in names if n in {c.name for c in SOURCE_COLUMNS}]
        if taken:
            raise ValueError(f"column(s) {', '.join(taken)} are the source columns every "
                             "row gets; leave them out")
        if len(set(names)) != len(names):
            raise ValueError(f"columns: a name is given twice ({', '.join(names)})")
        missing = [k for k in self.key_columns if k not in names]
        if missing:
            raise ValueError(f"key column(s) {', '.join(missing)} are not among the columns "
                             f"({', '.join(names)})")
        unknown = [InitErrorDetails(
            type=PydanticCustomError("value_error", "{why}", {"why": (
                f"column {c.name!r} is a timestamp and json_schemas is false: the events "
                "carry no schema to say whether a number is days, milliseconds, "
                "microseconds or nanoseconds since the epoch; declare its time_type (one "
                f"of {', '.join(TIME_TYPES)})")}),
            loc=("columns", i, "time_type"), input=None)
            for i, c in enumerate(self.columns)
            if not self.json_schemas and c.type == "timestamp" and c.time_type is None]
        if unknown:
            raise ValidationError.from_exception_data(type(self).__name__, unknown)
        return self


def _decimal(value: Any, kind: str, mode: str) -> decimal.Decimal | int:
    scale = (decimal_parts(kind) or (0, 0))[1]
    if isinstance(value, decimal.Decimal | int) and not isinstance(value, bool):
        return value
    if isinstance(value, Mapping) and "value" in value:  # VariableScaleDecimal
        return _unscaled(value["value"], int(value.get("scale", 0)))
    if isinstance(value, str) and mode == "string":
        return decimal.Decimal(value)
    return _unscaled(value, scale)


def _unscaled(value: Any, scale: int) -> decimal.Decimal:
    """Connect's Decimal: the unscaled value's big-endian two's complement bytes."""
    raw = _bytes(value)
    return decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        return base64.b64decode(value, validate=True)
    raise ValueError(f"{type(value).__name__} is not bytes or base64 text")


def _timestamp(value: Any, semantic: str | None) -> dt.datetime:
    """A timestamp column's value from what Debezium wrote, read as its time type
    ``semantic`` says (None: no schema named one)."""
    if isinstance(value, dt.datetime):  # Avro's timestamp logical types, decoded
        return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
    if isinstance(value, dt.date):  # Avro's date logical type: midnight UTC
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    if isinstance(value, str):
        found = dt.datetime.fromisoformat(value)
        return found if found.tzinfo is not None else found.replace(tzinfo=dt.UTC)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{type(value).__name__} is not ISO 8601 text or an epoch number")
    if semantic in _DATES:
        return _EPOCH + dt.timedelta(days=value)  # a date: days since the epoch
    unit = _TIME_UNITS.get(semantic or "")
    if unit is not None:
        whole, part = divmod(value, unit)
        return _EPOCH + dt.timedelta(seconds=whole, microseconds=part * 1_000_000 // unit)
    if semantic in _TIMES_OF_DAY:
        raise ValueError(f"{semantic} is a time of day, not an instant; declare the column "
                         "long (or string) to keep it")
    raise ValueError(f"the unit of this epoch number is unknown: the event's schema names "
                     f"{'no time type' if semantic is None else repr(semantic)} for it "
                     "(JSON without schemas: declare the column's time_type)")


def _converted(value: Any, column: Column, semantic: str | None, mode: str) -> Any:
    """``value`` as ``column`` takes it; ValueError when it does not convert."""
    if value is None:
        return None
    kind = column.type
    if kind == "timestamp":
        return _timestamp(value, semantic)
    if kind == "binary":
        return _bytes(value)
    if kind == "double" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if decimal_parts(kind) is not None:
        return _decimal(value, kind, mode)
    return value  # the table sinks check the other types


def _semantics(schema: Any) -> dict[str, str]:
    """Column name -> Connect schema name (``io.debezium.time.MicroTimestamp``) of the
    row images in a JSON envelope's ``schema``."""
    found: dict[str, str] = {}
    for field in (schema or {}).get("fields") or ():
        if isinstance(field, Mapping) and field.get("field") in ("after", "before"):
            for column in field.get("fields") or ():
                if isinstance(column, Mapping) and column.get("name"):
                    found[str(column.get("field"))] = str(column["name"])
    return found


def _avro_semantics(schema: Any) -> dict[str, str]:
    """Column name -> ``connect.name`` (``io.debezium.time.Date``) of the row images of an
    Avro envelope's writer schema (fastavro's parsed schema: named types referenced by
    name are in ``__named_schemas``)."""
    named = schema.get("__named_schemas") or {} if isinstance(schema, Mapping) else {}

    def record(kind: Any) -> Mapping[str, Any] | None:
        for branch in kind if isinstance(kind, list) else [kind]:
            branch = named.get(branch, branch) if isinstance(branch, str) else branch
            if isinstance(branch, Mapping) and branch.get("type") == "record":
                return branch
        return None

    found: dict[str, str] = {}
    for field in (schema or {}).get("fields") or () if isinstance(schema, Mapping) else ():
        image = record(field.get("type")) if field.get("name") in ("after", "before") else None
        for column in (image or {}).get("fields") or ():
            for branch in (column["type"] if isinstance(column.get("type"), list)
                           else [column.get("type")]):
                if isinstance(branch, Mapping) and branch.get("connect.name"):
                    found[str(column.get("name"))] = str(branch["connect.name"])
    return found


class DebeziumProcessor(Processor):
    """Debezium's change events of one table as upserts and deletions (module docstring).

    Options: ``columns`` (``[{name, type, nullable}]``), ``key_columns``, ``table``,
    ``decimal_handling``.
    """

    name = "debezium"
    formats = ("json", "avro")
    description = "Debezium change events (c/u/r/d) -> upserts and deletions of a table"
    emits_deletes = True
    source_order = "_source_lsn"
    wants_value_schema = True  # Avro: the time types are in the writer schema

    options_model = DebeziumOptions
    options: DebeziumOptions

    @classmethod
    def configured(cls, options: Mapping[str, Any] | BaseModel | None) -> type[Processor]:
        parsed = cls.parse_options(options)
        assert isinstance(parsed, DebeziumOptions)  # noqa: S101 - options_model
        key = tuple(parsed.key_columns)
        if parsed.columns is None:  # from the events' schema (processors.debezium_schema)
            return type(cls.__name__, (cls,), {
                "table": parsed.table or "", "key": key, "columns": (),
                "columns_from_schema": True,
                "__module__": cls.__module__, "__qualname__": cls.__qualname__})
        columns = tuple(Column(c.name, c.type, c.nullable and c.name not in key)
                        for c in parsed.columns)
        return type(cls.__name__, (cls,), {
            "table": parsed.table or "", "key": key, "columns": (*columns, *SOURCE_COLUMNS),
            "__module__": cls.__module__, "__qualname__": cls.__qualname__})

    def __init__(self, options: Mapping[str, Any] | BaseModel | None = None) -> None:
        super().__init__(options)
        shape = self.configured(self.options)
        declared = self.options.columns or []
        self._columns = shape.columns[:len(declared)]
        self._key = shape.key
        # a column's time type when the event names none (JSON without schemas)
        self._declared = {c.name: c.time_type for c in declared if c.time_type}
        self._avro: dict[int, tuple[Any, dict[str, str]]] = {}  # id(schema) -> semantics
        # no columns declared: they come from the events' schema
        self._schema = (SchemaColumns(self._key, SOURCE_COLUMNS)
                        if self.options.columns is None else None)

    def live_columns(self) -> LiveColumns | None:
        return None if self._schema is None else self._schema.live

    def schema_known(self, schema: Any, schema_id: int | str) -> None:
        """Avro: the latest writer schema of the subject makes the table before the
        first message (JSON events bring theirs with each message)."""
        if self._schema is None:
            return
        row = avro_row_schema(schema)
        if row is None:
            raise ValueError(f"writer schema id {schema_id} is not a Debezium envelope "
                             "(no record field after or before)")
        found = self._schema.shape(row, f"writer schema id {schema_id}")
        if found.refused is not None:
            raise ValueError(found.refused)

    def transform(self, message: Message) -> Sequence[Row]:
        value = message.value
        if value is None:
            return [self._tombstone(message)]
        if not isinstance(value, Mapping):
            raise PoisonMessage(f"a Debezium event is an object, not {type(value).__name__}")
        if self._schema is not None:
            return [self._derived(message, value)]
        semantics = self._declared
        if message.value_schema is not None:
            semantics = self._avro_schema(message.value_schema)
        elif "payload" in value and "schema" in value:
            semantics = {**self._declared, **_semantics(value["schema"])}
            value = value["payload"]
            if value is None:
                return [self._tombstone(message)]
            if not isinstance(value, Mapping):
                raise PoisonMessage("the payload of a Debezium event is not an object")
        op = value.get("op")
        if op in _UPSERTS:
            image = self._image(value, "after")
            row = {c.name: self._value(image, c, semantics, message) for c in self._columns}
            self._check_key(row, message)
        elif op == "d":
            image = self._image(value, "before")
            row = deletion(self._key_values(message, image, semantics), message)
        else:
            raise PoisonMessage(f"Debezium op {op!r} is not a change of one row (c, u, r or "
                                "d); a truncate (t) or a message (m) cannot be applied row "
                                "by row")
        source = value.get("source")
        source = source if isinstance(source, Mapping) else {}
        row["_op"] = op
        row["_source_lsn"] = source.get("lsn")
        row["_source_txid"] = source.get("txId")
        row["_source_ts_ms"] = source.get("ts_ms")
        return [with_coordinates(row, message)]

    def _derived(self, message: Message, value: Mapping[str, Any]) -> Row:
        """The row of an event whose columns come from its schema (no ``columns``)."""
        assert self._schema is not None  # noqa: S101 - only then
        if message.value_schema is not None:
            row_schema = avro_row_schema(message.value_schema)
            where = f"writer schema id {message.value_schema_id}"
        elif "payload" in value and "schema" in value:
            row_schema = json_row_schema(value["schema"])
            where = "the event's schema"
            value = value["payload"]
            if value is None:
                return self._tombstone(message)
            if not isinstance(value, Mapping):
                raise PoisonMessage("the payload of a Debezium event is not an object")
        else:
            row_schema, where = None, ""
        if row_schema is None:
            raise PoisonMessage(
                f"Debezium event at offset {message.offset} has no schema to take the "
                "columns from (options.columns is not set): use the JSON converter with "
                "schemas.enable=true or Avro, or list the columns")
        shape = self._schema.shape(row_schema, where)
        if shape.refused is not None:
            if self.options.on_incompatible == "stop":
                raise StopTopic(shape.refused)
            error = PoisonMessage(shape.refused)
            if message.value_schema_id is not None:
                error.details = {"schema_id": message.value_schema_id}
            raise error
        assert shape.convert is not None  # noqa: S101 - refused is None
        op = value.get("op")
        try:
            if op in _UPSERTS:
                row = shape.convert(self._image(value, "after"))
            elif op == "d":
                image = shape.convert(self._image(value, "before"))
                row = deletion(self._derived_key(message, image, shape.convert), message)
            else:
                raise PoisonMessage(f"Debezium op {op!r} is not a change of one row (c, u, "
                                    "r or d); a truncate (t) or a message (m) cannot be "
                                    "applied row by row")
        except ValueError as exc:
            raise PoisonMessage(f"Debezium event at offset {message.offset}: {exc}") from None
        self._check_key(row, message)
        source = value.get("source")
        source = source if isinstance(source, Mapping) else {}
        row["_op"] = op
        row["_source_lsn"] = source.get("lsn")
        row["_source_txid"] = source.get("txId")
        row["_source_ts_ms"] = source.get("ts_ms")
        return with_coordinates(row, message)

    def _derived_key(self, message: Message, image: Mapping[str, Any],
                     convert: Any) -> Row:
        """The natural key of a deletion: from the record key when decoded (converted as
        the row's fields are), else from the row image ``before``."""
        key = message.key
        if isinstance(key, Mapping) and "payload" in key and "schema" in key:
            key = key["payload"]
        if isinstance(key, Mapping) and all(k in key for k in self._key):
            image = convert(key) if convert is not None else key
        return {k: image.get(k) for k in self._key}

    def _avro_schema(self, schema: Any) -> dict[str, str]:
        """The time types of an Avro writer schema's columns (cached per schema: the
        decoder keeps one object per schema id)."""
        found = self._avro.get(id(schema))
        if found is None or found[0] is not schema:
            if len(self._avro) > 64:
                self._avro.clear()
            found = self._avro[id(schema)] = (schema, {**self._declared,
                                                        **_avro_semantics(schema)})
        return found[1]

    def _tombstone(self, message: Message) -> Row:
        """The deletion of a tombstone's record key (module docstring)."""
        key = message.key
        if isinstance(key, Mapping) and "payload" in key and "schema" in key:
            key = key["payload"]
        if not isinstance(key, Mapping) or not all(k in key for k in self._key):
            raise PoisonMessage(
                f"a Debezium tombstone (null value) at offset {message.offset} deletes its "
                f"key, and its record key gives no {', '.join(self._key)} (got "
                f"{type(key).__name__}); decode the key with key_format: json or avro")
        if self._schema is not None:
            try:
                row = deletion(self._derived_key(message, {}, self._schema.last), message)
            except ValueError as exc:
                raise PoisonMessage(f"Debezium tombstone at offset {message.offset}: "
                                    f"{exc}") from None
        else:
            row = deletion(self._key_values(message, {}, {}), message)
        row.update(dict.fromkeys(c.name for c in SOURCE_COLUMNS))
        return with_coordinates(row, message)

    @staticmethod
    def _image(value: Mapping[str, Any], name: str) -> Mapping[str, Any]:
        image = value.get(name)
        if not isinstance(image, Mapping):
            raise PoisonMessage(f"Debezium op {value.get('op')!r} without a row image "
                                f"{name!r} (got {type(image).__name__})")
        return image

    def _value(self, image: Mapping[str, Any], column: Column, semantics: dict[str, str],
               message: Message) -> Any:
        try:
            return _converted(image.get(column.name), column, semantics.get(column.name),
                              self.options.decimal_handling)
        except (ValueError, TypeError, ArithmeticError, binascii.Error) as exc:
            raise PoisonMessage(f"column {column.name!r} ({column.type}) at offset "
                                f"{message.offset}: {repr(image.get(column.name))[:80]} does "
                                f"not convert: {exc}") from None

    def _key_values(self, message: Message, image: Mapping[str, Any],
                    semantics: dict[str, str]) -> Row:
        """The natural key: from the record key when decoded (its JSON schema envelope
        unwrapped), else from the row image."""
        key = message.key
        if isinstance(key, Mapping) and "payload" in key and "schema" in key:
            key = key["payload"]
        source = key if isinstance(key, Mapping) and all(k in key for k in self._key) \
            else image
        by_name = {c.name: c for c in self._columns}
        row = {k: self._value(source, by_name[k], semantics, message) for k in self._key}
        self._check_key(row, message)
        return row

    def _check_key(self, row: Row, message: Message) -> None:
        missing = [k for k in self._key if row.get(k) is None]
        if missing:
            raise PoisonMessage(f"Debezium event at offset {message.offset} has no value for "
                                f"the key column(s) {', '.join(missing)}")
