"""Kafka Connect schemas as table columns, and the values Connect's converters wrote as
row values (the ``debezium`` processor's type map when its columns come from the events'
schemas).

A Debezium event carries the source table's row as a Connect struct (the envelope's
``after``, and ``before``). With the JSON converter (``schemas.enable=true``) the event
carries its Connect schema: ``{"type": "struct", "fields": [{"field": ..., "type":
"int32", "optional": ..., "name": <logical name>, "parameters": {...}}, ...]}``; with
Avro the registry's writer schema holds the same facts (an Avro type per field, Connect's
logical name in ``connect.name``, its parameters in ``connect.parameters``;
:func:`avro_connect` turns it into the JSON form). The logical name decides first, then
the Connect type:

=============================================  ===========================================
Connect schema (logical name, else type)       column type
=============================================  ===========================================
int8, int16, int32                             int
int64                                          long
float32 (JSON: float), float64 (JSON: double)  float, double
boolean; string; bytes                         boolean; string; binary (JSON: base64 text)
struct                                         struct<...> (each field as here)
array                                          array<T>
map                                            map<K,V> (K a flat type; JSON: an object,
                                               or a list of [key, value] pairs)
org.apache.kafka.connect.data.Decimal          decimal(P,S): P from the parameter
                                               ``connect.decimal.precision`` (38 when
                                               absent), S from ``scale``
io.debezium.data.VariableScaleDecimal          string: the exact decimal's text (its scale
                                               varies per value: no fixed column type)
org.apache.kafka.connect.data.Date,            date (days since the epoch)
io.debezium.time.Date
org.apache.kafka.connect.data.Timestamp        timestamp (an instant, UTC; milliseconds)
io.debezium.time.ZonedTimestamp                timestamp (ISO 8601 text with its offset)
io.debezium.time.Timestamp, MicroTimestamp,    timestamp_ntz (the source's timestamp
NanoTimestamp                                  without time zone; milli-, micro-,
                                               nanoseconds since the epoch)
org.apache.kafka.connect.data.Time,            long: microseconds since midnight (Spark
io.debezium.time.Time, MicroTime, NanoTime     has no time type), as Avro's time-*
io.debezium.time.ZonedTime                     string (ISO 8601 text)
io.debezium.time.Year                          int
io.debezium.time.MicroDuration                 long (microseconds)
io.debezium.time.Interval                      string (ISO 8601 duration)
io.debezium.data.Json, Uuid, Xml, Enum,        string (the text as written)
EnumSet, Ltree
io.debezium.data.Bits                          binary
any other logical name                         its Connect type, as above
=============================================  ===========================================

Every column is nullable (a later schema may drop the field; rows of older schemas read
NULL in fields added later). A value that does not convert (bytes that are not base64, a
date-time that is not ISO 8601) raises ValueError naming the field.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from collections.abc import Callable, Mapping
from typing import Any

from processors.column_types import (
    MAX_DECIMAL_PRECISION,
    Array,
    DecimalType,
    Field,
    Flat,
    Map,
    Struct,
    TypeNode,
)

Convert = Callable[[Any], Any] | None
"""How a value as the converter wrote it becomes the row's value (None: as it is)."""

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_NTZ = dt.datetime(1970, 1, 1)

TYPES = {"int8": "int", "int16": "int", "int32": "int", "int64": "long", "float": "float",
         "float32": "float", "double": "double", "float64": "double", "boolean": "boolean",
         "string": "string", "bytes": "binary"}
"""Connect's flat types (the JSON converter's names, and Connect's own float32/float64)."""

DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
_DATES = ("org.apache.kafka.connect.data.Date", "io.debezium.time.Date")
_INSTANTS = {"org.apache.kafka.connect.data.Timestamp": 1_000}  # units per second
_LOCAL = {"io.debezium.time.Timestamp": 1_000, "io.debezium.time.MicroTimestamp": 1_000_000,
          "io.debezium.time.NanoTimestamp": 1_000_000_000}
_TIMES = {"org.apache.kafka.connect.data.Time": 1_000, "io.debezium.time.Time": 1_000,
          "io.debezium.time.MicroTime": 1, "io.debezium.time.NanoTime": -1_000}
# ^ how a value becomes microseconds: times n (negative: divided by -n)
_ZONED = "io.debezium.time.ZonedTimestamp"
_TEXT = ("io.debezium.time.ZonedTime", "io.debezium.time.Interval", "io.debezium.data.Json",
         "io.debezium.data.Uuid", "io.debezium.data.Xml", "io.debezium.data.Enum",
         "io.debezium.data.EnumSet", "io.debezium.data.Ltree")
_FLAT_NAMED = {"io.debezium.time.Year": "int", "io.debezium.time.MicroDuration": "long",
               "io.debezium.data.Bits": "binary"}


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        return base64.b64decode(value, validate=True)
    raise ValueError(f"{type(value).__name__} is not bytes or base64 text")


def _number(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not an integer")
    return value


def _decimal(scale: int) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, decimal.Decimal):  # Avro's decimal, decoded
            return value
        unscaled = int.from_bytes(_bytes(value), "big", signed=True)
        return decimal.Decimal(unscaled).scaleb(-scale)
    return convert


def _variable_decimal(value: Any) -> Any:
    if not isinstance(value, Mapping) or "value" not in value:
        raise ValueError(f"{value!r} is not a VariableScaleDecimal {{scale, value}}")
    unscaled = int.from_bytes(_bytes(value["value"]), "big", signed=True)
    return str(decimal.Decimal(unscaled).scaleb(-int(value.get("scale") or 0)))


def _date(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):  # Avro's date, decoded
        return value
    return (_EPOCH + dt.timedelta(days=_number(value))).date()


def _since(epoch: dt.datetime, value: int, unit: int) -> dt.datetime:
    whole, part = divmod(value, unit)
    return epoch + dt.timedelta(seconds=whole, microseconds=part * 1_000_000 // unit)


def _instant(unit: int) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, dt.datetime):  # Avro's timestamp-millis, decoded
            return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return _since(_EPOCH, _number(value), unit)
    return convert


def _local(unit: int) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, dt.datetime):
            return value.replace(tzinfo=None) if value.tzinfo is None \
                else value.astimezone(dt.UTC).replace(tzinfo=None)
        return _since(_EPOCH_NTZ, _number(value), unit)
    return convert


def _zoned(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not ISO 8601 text")
    found = dt.datetime.fromisoformat(value)
    return found.astimezone(dt.UTC) if found.tzinfo is not None \
        else found.replace(tzinfo=dt.UTC)


def _time(factor: int) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, dt.time):  # Avro's time-millis, decoded
            return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 \
                + value.microsecond
        number = _number(value)
        return number * factor if factor > 0 else number // -factor
    return convert


def _double(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def connect_type(schema: Mapping[str, Any], path: tuple[str, ...] = ()
                 ) -> tuple[TypeNode, Convert]:
    """The column type of a Connect schema (its JSON form) and how its values convert
    (see the module doc); ValueError naming ``path`` for a schema without a known type."""
    name = schema.get("name")
    kind = schema.get("type")
    params = schema.get("parameters") or {}
    if name == DECIMAL:
        scale = int(params.get("scale", 0))
        precision = int(params.get("connect.decimal.precision", MAX_DECIMAL_PRECISION))
        if not 1 <= precision <= MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
            raise ValueError(f"field {'.'.join(path)!r}: decimal({precision},{scale}) has no "
                             f"column type (precision 1..{MAX_DECIMAL_PRECISION}, scale "
                             "0..precision)")
        return DecimalType(precision, scale), _decimal(scale)
    if name == VARIABLE_DECIMAL:
        return Flat("string"), _variable_decimal
    if name in _DATES:
        return Flat("date"), _date
    if name in _INSTANTS:
        return Flat("timestamp"), _instant(_INSTANTS[name])
    if name == _ZONED:
        return Flat("timestamp"), _zoned
    if name in _LOCAL:
        return Flat("timestamp_ntz"), _local(_LOCAL[name])
    if name in _TIMES:
        return Flat("long"), _time(_TIMES[name])
    if name in _TEXT:
        return Flat("string"), None
    if name in _FLAT_NAMED:
        flat = _FLAT_NAMED[name]
        return Flat(flat), _bytes if flat == "binary" else None
    if kind == "struct":
        fields, convert = struct_fields(schema, path)
        return Struct(fields), convert
    if kind == "array":
        element, conv = connect_type(schema.get("items") or {}, (*path, "element"))
        return Array(element), None if conv is None else _each(conv)
    if kind == "map":
        key, key_conv = connect_type(schema.get("keys") or {}, (*path, "key"))
        if not isinstance(key, Flat | DecimalType):
            raise ValueError(f"field {'.'.join(path)!r}: a map's key must be a flat type, "
                             f"not {kind!r} of {schema.get('keys')!r}")
        value, conv = connect_type(schema.get("values") or {}, (*path, "value"))
        return Map(key, value), _entries(key_conv, conv)
    if kind in TYPES:
        flat = TYPES[kind]
        return Flat(flat), (_bytes if flat == "binary" else _double if flat == "double"
                            else None)
    raise ValueError(f"field {'.'.join(path) or '(top)'!r}: Connect type {kind!r} is not one "
                     f"of {', '.join(sorted({*TYPES, 'struct', 'array', 'map'}))}")


def struct_fields(schema: Mapping[str, Any], path: tuple[str, ...] = (),
                  ) -> tuple[tuple[Field, ...], Callable[[Any], Any]]:
    """The fields of a Connect struct schema, every one nullable, and the function that
    turns a struct value (a dict) into the row's values (a new dict, the schema's fields
    only); ValueError naming the field whose value does not convert."""
    out: list[Field] = []
    converts: list[tuple[str, Convert]] = []
    for field in schema.get("fields") or ():
        name = str(field.get("field"))
        kind, conv = connect_type(field, (*path, name))
        out.append(Field(name, kind, True))
        converts.append((name, conv))

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise ValueError(f"{'.'.join(path) or 'the row'} is "
                             f"{type(value).__name__}, not a struct")
        row = {}
        for name, conv in converts:
            found = value.get(name)
            if found is not None and conv is not None:
                try:
                    found = conv(found)
                except (ValueError, TypeError, ArithmeticError) as exc:
                    raise ValueError(f"field {'.'.join((*path, name))!r}: "
                                     f"{repr(found)[:80]} does not convert: {exc}") from None
            row[name] = found
        return row
    return tuple(out), convert


def _each(conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda items: [None if x is None else conv(x) for x in items]


def _entries(key: Convert, value: Convert) -> Callable[[Any], Any]:
    def convert(entries: Any) -> Any:
        pairs = entries.items() if isinstance(entries, Mapping) else entries  # JSON: pairs
        out = {}
        for k, v in pairs:
            out[k if key is None else key(k)] = v if v is None or value is None else value(v)
        return out
    return convert


_AVRO = {"int": "int32", "long": "int64", "float": "float", "double": "double",
         "boolean": "boolean", "string": "string", "bytes": "bytes", "fixed": "bytes",
         "enum": "string"}


def avro_connect(schema: Any, named: Mapping[str, Any]) -> dict[str, Any]:
    """The Connect schema (JSON form) an Avro type of Connect's AvroConverter stands for:
    its type (``connect.type`` for int8/int16), ``connect.name`` as the logical name,
    ``connect.parameters`` (and an Avro decimal's precision and scale) as parameters;
    ``["null", T]`` is T. ``named``: fastavro's named types of the schema."""
    if isinstance(schema, list):
        rest = [b for b in schema if b != "null"]
        if len(rest) != 1:
            raise ValueError(f"an Avro union of {rest!r} is not a Connect type")
        return avro_connect(rest[0], named)
    if isinstance(schema, str):
        found = named.get(schema)
        return avro_connect(found, named) if found is not None else {"type": _AVRO[schema]}
    kind = schema["type"]
    if kind == "record":
        return {"type": "struct", "name": schema.get("connect.name"), "fields": [
            {**avro_connect(f["type"], named), "field": f["name"]} for f in schema["fields"]]}
    if kind == "array":
        return {"type": "array", "items": avro_connect(schema["items"], named)}
    if kind == "map":
        return {"type": "map", "keys": {"type": "string"},
                "values": avro_connect(schema["values"], named)}
    if isinstance(kind, list | dict):
        return avro_connect(kind, named)
    params = dict(schema.get("connect.parameters") or {})
    if schema.get("logicalType") == "decimal":
        params.setdefault("scale", str(schema.get("scale", 0)))
        params.setdefault("connect.decimal.precision", str(schema.get("precision")))
    found = named.get(kind) if kind not in _AVRO else None
    base = avro_connect(found, named) if found is not None else \
        {"type": schema.get("connect.type") or _AVRO[kind]}
    return {**base, "name": schema.get("connect.name") or base.get("name"),
            "parameters": params}


__all__ = ["DECIMAL", "TYPES", "VARIABLE_DECIMAL", "avro_connect", "connect_type",
           "struct_fields"]
