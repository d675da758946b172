"""``schema_rows``: a registry-typed topic lands in its own table by configuration alone.

Named for what it makes: rows whose columns come from each message's writer *schema*
(as ``json_rows`` makes rows of JSON objects). A topic needs no code::

    {topic: orders, format: avro, processor: schema_rows, sink: {type: spark, table: orders}}

``format: avro``, ``protobuf`` or ``json_schema``. Each message's value is decoded once,
by kstage, with the writer schema of its id (the processor reads
:attr:`Message.value_schema`, :attr:`Message.value_schema_id`); the schema's fields are
the table's columns (the type maps: :mod:`processors.avro_columns`,
:mod:`processors.protobuf_columns` for the message the record's index list names,
:mod:`processors.json_schema_columns`). Protobuf writer schemas are told apart per
message type (a schema id with two messages: two shapes).
The table is created on first sight and evolves while kstage runs, without a restart:
a message of a writer schema id not seen before is compared with the table's columns
(:func:`processors.type_evolution.fit`); a compatible change (a field added, ``int`` ->
``long``, ``float`` -> ``double``, a decimal's precision widened, required -> optional,
a field removed) is set on :class:`~processors.base.LiveColumns` before the message's row
is returned, and the table sinks apply it (one table commit) before they write that row.
Old and new producers writing at once both land: every column is nullable, older rows
read NULL in the columns added after them.

An incompatible change (``string`` -> ``int``, a type the column cannot hold) follows
``on_incompatible``: ``dead_letter`` (default) dead-letters each message of that schema
id naming the field, both schema ids and the reason, while the rest of the topic flows;
``stop`` fails the topic's worker at the first such message (nothing past it is
committed). A recursive writer schema has no table: its messages are poison naming the
cycle's path (at start too, for the latest Avro or JSON Schema schema of the topic's
subject; a Protobuf topic's table is made with its first message). A value the type
map cannot take (a JSON Schema ``date-time`` that is not one) is poison naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, StringConstraints, model_validator
from pydantic import Field as OptionField

from processors.avro_columns import Recursive, avro_columns
from processors.base import (
    DELETED,
    Column,
    LiveColumns,
    Message,
    NoOptions,
    Processor,
    Row,
    deletion,
    with_coordinates,
)
from processors.column_types import Field, parse_type, type_string
from processors.errors import PoisonMessage, StopTopic
from processors.json_schema_columns import JsonWriterSchema, json_schema_columns
from processors.type_evolution import Unfit, fit


class SchemaRowsOptions(NoOptions):
    """Options of ``schema_rows``."""

    on_incompatible: Literal["dead_letter", "stop"] = OptionField(
        "dead_letter", description="A message whose writer schema does not fit the table: "
        "dead_letter it (naming the field, both schema ids, the reason) or stop the topic.")
    key: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = \
        OptionField(default_factory=list, description="The natural key: top-level fields "
                    "of the writer schema (the final table's MERGE keeps the newest row "
                    "per key; a jdbc sink in mode: upsert upserts on it). Its values come "
                    "from the decoded record key when it holds them, else from the value.")
    deletes: bool = OptionField(False, description="A tombstone (a null value) deletes "
                                "the row of its record key's key values (needs key and a "
                                "decoded record key: key_format json or avro).")

    @model_validator(mode="after")
    def _deletes_need_a_key(self) -> SchemaRowsOptions:
        if self.deletes and not self.key:
            raise ValueError("deletes: true needs the natural key (key: [...]): a tombstone "
                             "deletes the row of its key")
        if len(set(self.key)) != len(self.key):
            raise ValueError(f"key: a field is given twice ({', '.join(self.key)})")
        return self


@dataclass(slots=True)
class _Shape:
    """What one writer schema id makes: its row conversion, or why it is refused."""

    convert: Callable[[dict[str, Any]], Any] | None
    refused: str | None = None
    schema: Any = None  # the writer schema, judged again when the table is found
    schema_id: int | str | None = None


FOUND = "the table as kstage found it at start"
"""Who typed a column the table had when a sink opened it (a restart): no schema id."""


class SchemaRowsProcessor(Processor):
    """One row per record, its columns from the writer schema (see the module doc)."""

    name = "schema_rows"
    formats = ("avro", "protobuf", "json_schema")
    description = ("Avro record, Protobuf message or JSON Schema object -> one row, its "
                   "columns from the writer schema (evolving)")
    wants_value_schema = True
    columns_from_schema: ClassVar[bool] = True
    options_model = SchemaRowsOptions
    options: SchemaRowsOptions

    @classmethod
    def configured(cls, options: Mapping[str, Any] | BaseModel | None) -> type[Processor]:
        """With ``key`` (and ``deletes``): a subclass whose ``key`` and ``emits_deletes``
        say them (the merge and the upsert read them), as ``debezium``'s do."""
        parsed = cls.parse_options(options)
        assert isinstance(parsed, SchemaRowsOptions)  # noqa: S101 - options_model
        if not parsed.key:
            return cls
        return type(cls.__name__, (cls,), {
            "key": tuple(parsed.key), "emits_deletes": parsed.deletes,
            "__module__": cls.__module__, "__qualname__": cls.__qualname__})

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self._key = tuple(self.options.key)
        self._deletes = self.options.deletes
        self._live = LiveColumns(self._table_found)
        self._table: tuple[Field, ...] = ()  # the columns the table has (merged)
        self._origin: dict[str, str] = {}  # column -> what typed it ("writer schema id N")
        self._shapes: dict[Any, _Shape] = {}  # by schema id

    def live_columns(self) -> LiveColumns:
        return self._live

    def schema_known(self, schema: Any, schema_id: int | str) -> None:
        shape = self._shapes[schema_id] = self._shape(schema, schema_id)
        if shape.refused is not None:
            raise ValueError(shape.refused)

    def _table_found(self, columns: Sequence[Column]) -> None:
        """A table sink found its table with ``columns`` (a restart): from now on writer
        schemas are judged against it, those known so far (the subject's latest) again;
        the live columns become the table's, with what those add."""
        try:
            found = tuple(Field(c.name, parse_type(c.type), True) for c in columns)
        except ValueError:  # a type the map does not make: the sink says so
            return
        self._table = found
        self._origin = {f.name: FOUND for f in found}
        for key in list(self._shapes):
            shape = self._shapes[key]
            if shape.schema is not None:
                self._shapes[key] = self._shape(shape.schema, shape.schema_id)
        # the table's columns, and what the schemas known so far add: written from now
        self._live.set([Column(f.name, type_string(f.type), True) for f in self._table])

    def _shape(self, schema: Any, schema_id: int | str | None) -> _Shape:
        try:
            fields, convert = _columns(schema)
        except (Recursive, ValueError) as exc:
            return _Shape(None, f"writer schema id {schema_id}: {exc}")
        lacking = [k for k in self._key if k not in {f.name for f in fields}]
        if lacking:
            return _Shape(None, f"writer schema id {schema_id} has no field for the key "
                          f"column(s) {', '.join(lacking)} (options.key)")
        try:
            table, changes = fit(self._table, fields)
        except Unfit as exc:
            top = exc.path[0]
            return _Shape(None, (
                f"writer schema id {schema_id} does not fit the table: field "
                f"{'.'.join(exc.path)!r} is {type_string(exc.now)} in writer schema id "
                f"{schema_id}, "
                f"{type_string(exc.was)} in the table's column (typed by "
                f"{self._origin.get(top)}): not a "
                "widening Iceberg allows (int->long, float->double, a decimal's precision)"),
                schema, schema_id)
        if changes:
            try:
                columns = [Column(f.name, type_string(f.type), True) for f in table]
            except ValueError as exc:  # a type the table sinks do not take (yet)
                return _Shape(None, f"writer schema id {schema_id}: {exc}")
            for change in changes:
                self._origin[change.path[0]] = f"writer schema id {schema_id}"
            self._table = table
            if self._deletes:  # each row says whether it deletes its key's row
                columns.append(Column(DELETED, "boolean", True))
            self._live.set(columns)
        return _Shape(convert, None, schema, schema_id)

    def transform(self, message: Message) -> Sequence[Row]:
        value = message.value
        if value is None:  # a tombstone: the deletion of its key, or no row
            return [self._tombstone(message)] if self._deletes else []
        if not isinstance(value, dict) or message.value_schema is None:
            raise PoisonMessage("schema_rows: the value is not a record with a writer "
                                "schema (format: avro, protobuf or json_schema, a registry)")
        sid = message.value_schema_id
        schema = message.value_schema
        # a Protobuf schema id holds many message types: one shape each
        key = sid if isinstance(schema, dict | JsonWriterSchema) else (sid, schema.full_name)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = self._shape(schema, sid)
        if shape.refused is not None:
            if self.options.on_incompatible == "stop":
                raise StopTopic(shape.refused)
            error = PoisonMessage(shape.refused)
            error.details = {"schema_id": sid}
            raise error
        assert shape.convert is not None  # noqa: S101 - refused is None
        try:
            row = shape.convert(value)
        except ValueError as exc:
            error = PoisonMessage(f"schema_rows: writer schema id {sid}: {exc}")
            error.details = {"schema_id": sid}
            raise error from exc
        if self._key:
            self._keyed(row, message)
        return [with_coordinates(row, message)]

    def _keyed(self, row: Row, message: Message) -> None:
        """The key's values in ``row``: the record key's when it holds them (decoded),
        else the value's; poison when one is missing."""
        key = message.key
        if isinstance(key, Mapping) and all(k in key for k in self._key):
            for k in self._key:
                row[k] = key[k]
        missing = [k for k in self._key if row.get(k) is None]
        if missing:
            raise PoisonMessage(f"schema_rows: the message at offset {message.offset} has "
                                f"no value for the key column(s) {', '.join(missing)}")

    def _tombstone(self, message: Message) -> Row:
        """The deletion of a tombstone's record key (``deletes: true``)."""
        key = message.key
        if not isinstance(key, Mapping) or not all(k in key for k in self._key):
            raise PoisonMessage(
                f"schema_rows: a tombstone (null value) at offset {message.offset} deletes "
                f"its key, and its record key gives no {', '.join(self._key)} (got "
                f"{type(key).__name__}); decode the key with key_format: json or avro")
        if not self._live.version:
            raise PoisonMessage(
                f"schema_rows: a tombstone at offset {message.offset} before any writer "
                "schema of the topic is known: the table's columns are not, so neither "
                "is what to delete")
        return deletion({k: key[k] for k in self._key}, message)


def _columns(schema: Any) -> tuple[tuple[Field, ...], Callable[[dict[str, Any]], Any]]:
    """The columns of a writer schema of any of the formats (see the module doc): Avro's
    is a dict, JSON Schema's a JsonWriterSchema, Protobuf's a message Descriptor (its map
    imported only then: the protobuf runtime is an extra)."""
    if isinstance(schema, dict):
        return avro_columns(schema)
    if isinstance(schema, JsonWriterSchema):
        return json_schema_columns(schema.schema)
    from processors.protobuf_columns import protobuf_columns

    return protobuf_columns(schema)


__all__ = ["SchemaRowsOptions", "SchemaRowsProcessor"]
