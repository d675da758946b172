"""Protobuf messages as table columns, and their decoded values as row values (the
``schema_rows`` processor's type map for ``format: protobuf``).

The message is the one the record's Confluent message-index list names; its fields are
the table's columns. Every column and every field of a struct is nullable (a later
version of the message may give a field presence, or drop it).

=========================================  ===========================================
Protobuf                                   column type
=========================================  ===========================================
int32, sint32, sfixed32                    int
int64, sint64, sfixed64                    long
uint32, fixed32                            long
uint64, fixed64                            decimal(20,0)
float; double; bool                        float; double; boolean
string; bytes                              string; binary
enum                                       string (the value's name; a number the
                                           schema does not name: its digits)
message                                    struct<...> (each field as here)
repeated T                                 array<T> (empty when unset, never NULL)
map<K,V>                                   map<K,V> (keys as here: int, long, string,
                                           boolean...; empty when unset)
oneof                                      each member its own nullable field: at most
                                           one of them set, the others NULL
proto3 ``optional`` T; a message field     T, NULL when unset (the field has presence)
a proto3 scalar without presence           T, its default when unset (``0``, ``""``,
                                           ``false``, the enum's first name): not NULL,
                                           the wire does not tell unset from default
google.protobuf.Timestamp                  timestamp (an instant, UTC; microseconds)
google.protobuf.Duration                   long: microseconds (nanoseconds truncated)
wrappers (Int32Value, ..., BytesValue)     the wrapped scalar as above, NULL when unset
google.protobuf.Struct, Value, ListValue,  string: the JSON text the proto3 JSON mapping
Any, Empty (any other google.protobuf.*)   gives, keys sorted (``{"a":1.0}``: a Struct's
                                           numbers are doubles)
google.protobuf.FieldMask                  string (``"a.b,c"``)
a recursive message type                   refused (:class:`Recursive`, as for Avro,
                                           names the cycle)
=========================================  ===========================================

Values come from :mod:`actors.codecs.protobuf_dict` (the proto3 JSON mapping with Python's
types) and are turned into what the table sinks take: base64 text back to bytes, a
Timestamp's text to a ``datetime`` in UTC, a Duration's to microseconds, 64-bit wrapper
text to ``int``, uint64 to ``Decimal``, map keys back to their type, JSON values to text.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Callable
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from processors.avro_columns import Recursive
from processors.column_types import Array, DecimalType, Field, Flat, Map, Struct, TypeNode

Convert = Callable[[Any], Any] | None
"""How a decoded value becomes the row's value (None: as it is)."""

FD = FieldDescriptor
SCALARS: dict[int, TypeNode] = {
    FD.TYPE_INT32: Flat("int"), FD.TYPE_SINT32: Flat("int"), FD.TYPE_SFIXED32: Flat("int"),
    FD.TYPE_INT64: Flat("long"), FD.TYPE_SINT64: Flat("long"), FD.TYPE_SFIXED64: Flat("long"),
    FD.TYPE_UINT32: Flat("long"), FD.TYPE_FIXED32: Flat("long"),
    FD.TYPE_UINT64: DecimalType(20, 0), FD.TYPE_FIXED64: DecimalType(20, 0),
    FD.TYPE_FLOAT: Flat("float"), FD.TYPE_DOUBLE: Flat("double"), FD.TYPE_BOOL: Flat("boolean"),
    FD.TYPE_STRING: Flat("string"), FD.TYPE_BYTES: Flat("binary"), FD.TYPE_ENUM: Flat("string"),
}
"""The column type of each scalar field type (an enum: its value's name)."""


def _bytes(value: Any) -> Any:
    return base64.b64decode(value) if isinstance(value, str) else value


def _timestamp(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    stamp = Timestamp()
    stamp.FromJsonString(value)
    return stamp.ToDatetime(tzinfo=dt.UTC)


def _duration(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    span = Duration()
    span.FromJsonString(value)
    return span.ToMicroseconds()


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _enum(value: Any) -> Any:
    return value if isinstance(value, str) else str(value)


def _integer(value: Any) -> Any:
    return int(value) if isinstance(value, str) else value


def _unsigned(value: Any) -> Any:
    return decimal.Decimal(int(value))


def _real(value: Any) -> Any:
    return float(value) if isinstance(value, str) else value  # "NaN", "Infinity"


WRAPPERS: dict[str, tuple[TypeNode, Convert]] = {
    "google.protobuf.DoubleValue": (Flat("double"), _real),
    "google.protobuf.FloatValue": (Flat("float"), _real),
    "google.protobuf.Int64Value": (Flat("long"), _integer),
    "google.protobuf.UInt64Value": (DecimalType(20, 0), _unsigned),
    "google.protobuf.Int32Value": (Flat("int"), None),
    "google.protobuf.UInt32Value": (Flat("long"), None),
    "google.protobuf.BoolValue": (Flat("boolean"), None),
    "google.protobuf.StringValue": (Flat("string"), None),
    "google.protobuf.BytesValue": (Flat("binary"), _bytes),
    "google.protobuf.Timestamp": (Flat("timestamp"), _timestamp),
    "google.protobuf.Duration": (Flat("long"), _duration),
    "google.protobuf.FieldMask": (Flat("string"), None),
}
"""The well-known types with a column type of their own; any other ``google.protobuf.*``
message is the JSON text of its value."""

_SCALAR_CONVERT: dict[int, Convert] = {
    FD.TYPE_BYTES: _bytes, FD.TYPE_ENUM: _enum, FD.TYPE_UINT64: _unsigned,
    FD.TYPE_FIXED64: _unsigned}

_KEYS: dict[int, Callable[[str], Any]] = {
    FD.TYPE_STRING: str, FD.TYPE_BOOL: lambda k: k == "true",
    FD.TYPE_UINT64: lambda k: decimal.Decimal(int(k)),
    FD.TYPE_FIXED64: lambda k: decimal.Decimal(int(k))}
"""A map key from the text protobuf_dict gives (the JSON mapping's) back to its column
type; the other key types are integers."""


def _single(field: FieldDescriptor, path: tuple[str, ...], seen: tuple[str, ...],
            ) -> tuple[TypeNode, Convert]:
    """(type, convert) of one value of ``field`` (an element, when repeated)."""
    if field.type not in (FD.TYPE_MESSAGE, FD.TYPE_GROUP):
        return SCALARS[field.type], _SCALAR_CONVERT.get(field.type)
    kind: Descriptor = field.message_type
    name = kind.full_name
    if name in WRAPPERS:
        return WRAPPERS[name]
    if name.startswith("google.protobuf."):
        return Flat("string"), _json_text
    if name in seen:
        raise Recursive(name, path)
    fields, convert = message_fields(kind, path, (*seen, name))
    return Struct(fields), convert


def _field(field: FieldDescriptor, path: tuple[str, ...], seen: tuple[str, ...],
           ) -> tuple[TypeNode, Convert]:
    """(type, convert) of a field's value."""
    entry: Descriptor | None = field.message_type
    if field.is_repeated and entry is not None and entry.GetOptions().map_entry:
        key_field = entry.fields_by_name["key"]
        value, conv = _single(entry.fields_by_name["value"], (*path, "value"), seen)
        key = _KEYS.get(key_field.type, int)
        return (Map(SCALARS[key_field.type], value),
                lambda entries: {key(k): v if v is None or conv is None else conv(v)
                                 for k, v in entries.items()})
    kind, conv = _single(field, path if not field.is_repeated else (*path, "element"), seen)
    if field.is_repeated:
        return Array(kind), None if conv is None else _each(conv)
    return kind, conv


def _each(conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda items: [None if x is None else conv(x) for x in items]


def message_fields(descriptor: Descriptor, path: tuple[str, ...] = (),
                   seen: tuple[str, ...] | None = None,
                   ) -> tuple[tuple[Field, ...], Convert]:
    """The fields of a message as struct fields and the conversion of its dict in place
    (None: nothing to convert); Recursive for a type that contains itself. Every field
    is nullable: a later version of the message may give it presence."""
    seen = (descriptor.full_name,) if seen is None else seen
    out, converts = [], []
    for field in descriptor.fields:
        kind, conv = _field(field, (*path, field.name), seen)
        out.append(Field(field.name, kind, True))
        if conv is not None:
            converts.append((field.name, conv))
    if not converts:
        return tuple(out), None

    def convert(record: Any) -> Any:
        if record is not None:
            record.update((name, conv(record[name])) for name, conv in converts
                          if record.get(name) is not None)
        return record
    return tuple(out), convert


def protobuf_columns(descriptor: Descriptor,
                     ) -> tuple[tuple[Field, ...], Callable[[dict[str, Any]], Any]]:
    """The columns of a message type, every one nullable, and the function that turns a
    decoded message (:mod:`actors.codecs.protobuf_dict`'s dict) into the row's values in
    place (see the module doc). Recursive for a recursive type, naming the cycle's path."""
    columns, convert = message_fields(descriptor)
    return columns, (convert if convert is not None else _same)


def _same(record: dict[str, Any]) -> dict[str, Any]:
    return record


__all__ = ["Recursive", "message_fields", "protobuf_columns"]
