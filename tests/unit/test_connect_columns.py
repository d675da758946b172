"""The Kafka Connect schema -> column type map (processors/connect_columns.py): every
Connect type and logical name of its table, with the values the JSON converter and the
Avro decoder give."""

from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from fastavro import parse_schema

from processors.column_types import type_string
from processors.connect_columns import avro_connect, connect_type, struct_fields


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


UTC = dt.UTC
CASES: list[tuple[dict[str, Any], str, Any, Any]] = [
    # (Connect schema, column type, value as the JSON converter writes it, row value)
    ({"type": "int8"}, "int", 7, 7),
    ({"type": "int16"}, "int", -300, -300),
    ({"type": "int32"}, "int", 70000, 70000),
    ({"type": "int64"}, "long", 2**40, 2**40),
    ({"type": "float"}, "float", 1.5, 1.5),
    ({"type": "float32"}, "float", 1.5, 1.5),
    ({"type": "double"}, "double", 3, 3.0),
    ({"type": "float64"}, "double", 2.25, 2.25),
    ({"type": "boolean"}, "boolean", True, True),
    ({"type": "string"}, "string", "x", "x"),
    ({"type": "bytes"}, "binary", b64(b"\x00\xff"), b"\x00\xff"),
    ({"type": "struct", "fields": [{"field": "a", "type": "int32"},
                                   {"field": "b", "type": "bytes"}]},
     "struct<a:int,b:binary>", {"a": 1, "b": b64(b"z")}, {"a": 1, "b": b"z"}),
    ({"type": "array", "items": {"type": "int64"}}, "array<long>", [1, None], [1, None]),
    ({"type": "array", "items": {"type": "bytes"}}, "array<binary>", [b64(b"q")], [b"q"]),
    ({"type": "map", "keys": {"type": "string"}, "values": {"type": "int32"}},
     "map<string,int>", {"k": 1}, {"k": 1}),
    ({"type": "map", "keys": {"type": "int32"}, "values": {"type": "bytes"}},
     "map<int,binary>", [[1, b64(b"v")]], {1: b"v"}),  # JSON: non-string keys as pairs
    ({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
      "parameters": {"scale": "2", "connect.decimal.precision": "12"}},
     "decimal(12,2)", b64((-1250).to_bytes(2, "big", signed=True)), Decimal("-12.50")),
    ({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
      "parameters": {"scale": "3"}}, "decimal(38,3)", b64(b"\x01"), Decimal("0.001")),
    ({"type": "struct", "name": "io.debezium.data.VariableScaleDecimal",
      "fields": [{"field": "scale", "type": "int32"}, {"field": "value", "type": "bytes"}]},
     "string", {"scale": 3, "value": b64((12345).to_bytes(2, "big"))}, "12.345"),
    ({"type": "int32", "name": "org.apache.kafka.connect.data.Date"}, "date", 2,
     dt.date(1970, 1, 3)),
    ({"type": "int32", "name": "io.debezium.time.Date"}, "date", -1, dt.date(1969, 12, 31)),
    ({"type": "int64", "name": "org.apache.kafka.connect.data.Timestamp"}, "timestamp",
     1_500, dt.datetime(1970, 1, 1, 0, 0, 1, 500_000, UTC)),
    ({"type": "string", "name": "io.debezium.time.ZonedTimestamp"}, "timestamp",
     "2026-11-26T10:00:00.123456+02:00", dt.datetime(2026, 11, 26, 8, 0, 0, 123456, UTC)),
    ({"type": "int64", "name": "io.debezium.time.Timestamp"}, "timestamp_ntz", 1_001,
     dt.datetime(1970, 1, 1, 0, 0, 1, 1000)),
    ({"type": "int64", "name": "io.debezium.time.MicroTimestamp"}, "timestamp_ntz",
     86_400_000_001, dt.datetime(1970, 1, 2, 0, 0, 0, 1)),
    ({"type": "int64", "name": "io.debezium.time.NanoTimestamp"}, "timestamp_ntz",
     1_000_001_999, dt.datetime(1970, 1, 1, 0, 0, 1, 1)),
    ({"type": "int32", "name": "org.apache.kafka.connect.data.Time"}, "long", 1_500,
     1_500_000),
    ({"type": "int32", "name": "io.debezium.time.Time"}, "long", 2, 2_000),
    ({"type": "int64", "name": "io.debezium.time.MicroTime"}, "long", 7, 7),
    ({"type": "int64", "name": "io.debezium.time.NanoTime"}, "long", 7_999, 7),
    ({"type": "string", "name": "io.debezium.time.ZonedTime"}, "string", "10:00:00Z",
     "10:00:00Z"),
    ({"type": "int32", "name": "io.debezium.time.Year"}, "int", 2026, 2026),
    ({"type": "int64", "name": "io.debezium.time.MicroDuration"}, "long", 5, 5),
    ({"type": "string", "name": "io.debezium.time.Interval"}, "string", "P1D", "P1D"),
    ({"type": "string", "name": "io.debezium.data.Json"}, "string", '{"a":1}', '{"a":1}'),
    ({"type": "string", "name": "io.debezium.data.Uuid"}, "string", "a-b", "a-b"),
    ({"type": "string", "name": "io.debezium.data.Xml"}, "string", "<a/>", "<a/>"),
    ({"type": "string", "name": "io.debezium.data.Enum"}, "string", "red", "red"),
    ({"type": "string", "name": "io.debezium.data.EnumSet"}, "string", "a,b", "a,b"),
    ({"type": "string", "name": "io.debezium.data.Ltree"}, "string", "a.b", "a.b"),
    ({"type": "bytes", "name": "io.debezium.data.Bits"}, "binary", b64(b"\x05"), b"\x05"),
    ({"type": "int32", "name": "some.other.Name"}, "int", 1, 1),
]


@pytest.mark.parametrize(("schema", "kind", "value", "expected"), CASES,
                         ids=[f"{c[0].get('name') or c[0]['type']}-{i}"
                              for i, c in enumerate(CASES)])
def test_every_connect_type_maps_to_its_column_type_and_value(
        schema: dict[str, Any], kind: str, value: Any, expected: Any) -> None:
    node, _ = connect_type(schema)
    assert type_string(node) == kind
    fields, convert = struct_fields({"type": "struct",
                                     "fields": [{**schema, "field": "c"}]})
    assert [(f.name, type_string(f.type), f.nullable) for f in fields] == [("c", kind, True)]
    assert convert({"c": value}) == {"c": expected}
    assert convert({"c": None}) == {"c": None}
    assert convert({}) == {"c": None}  # a field the value lacks: NULL


def test_an_unknown_type_or_value_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="field 'row.x': Connect type 'int128' is not one"):
        struct_fields({"fields": [{"field": "x", "type": "int128"}]}, ("row",))
    with pytest.raises(ValueError, match=r"decimal\(50,2\) has no column type"):
        connect_type({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
                      "parameters": {"scale": "2", "connect.decimal.precision": "50"}})
    _, convert = struct_fields({"fields": [{"field": "b", "type": "bytes"}]})
    with pytest.raises(ValueError, match="field 'b': 'not base64!' does not convert"):
        convert({"b": "not base64!"})
    _, convert = struct_fields({"fields": [
        {"field": "d", "type": "int32", "name": "io.debezium.time.Date"}]})
    with pytest.raises(ValueError, match="field 'd': 'x' does not convert"):
        convert({"d": "x"})


def test_avro_writer_schemas_of_connect_map_the_same_way() -> None:
    """The AvroConverter's writer schema (connect.name, connect.parameters, connect.type)
    and fastavro's decoded values give the same columns and values as JSON."""
    schema = parse_schema({"type": "record", "name": "Value", "namespace": "dbz",
                           "fields": [
        {"name": "id", "type": "int"},
        {"name": "small", "type": {"type": "int", "connect.type": "int16"}},
        {"name": "balance", "type": ["null", {
            "type": "bytes", "scale": 2, "precision": 12, "connect.version": 1,
            "connect.parameters": {"scale": "2", "connect.decimal.precision": "12"},
            "connect.name": "org.apache.kafka.connect.data.Decimal",
            "logicalType": "decimal"}], "default": None},
        {"name": "born", "type": {"type": "int", "connect.name": "io.debezium.time.Date"}},
        {"name": "seen", "type": {"type": "long", "connect.name":
                                  "org.apache.kafka.connect.data.Timestamp",
                                  "logicalType": "timestamp-millis"}},
        {"name": "at", "type": {"type": "long",
                                "connect.name": "io.debezium.time.MicroTimestamp"}},
        {"name": "doc", "type": ["null", {"type": "string",
                                          "connect.name": "io.debezium.data.Json"}]},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "var", "type": {"type": "record", "name": "VariableScaleDecimal",
                                 "namespace": "io.debezium.data",
                                 "connect.name": "io.debezium.data.VariableScaleDecimal",
                                 "fields": [{"name": "scale", "type": "int"},
                                            {"name": "value", "type": "bytes"}]}},
        {"name": "raw", "type": {"type": "fixed", "name": "F", "size": 2}},
        {"name": "color", "type": {"type": "enum", "name": "C", "symbols": ["red"]}}]})
    connect = avro_connect(schema, schema["__named_schemas"])
    fields, convert = struct_fields(connect)
    assert [(f.name, type_string(f.type)) for f in fields] == [
        ("id", "int"), ("small", "int"), ("balance", "decimal(12,2)"), ("born", "date"),
        ("seen", "timestamp"), ("at", "timestamp_ntz"), ("doc", "string"),
        ("tags", "array<string>"), ("attrs", "map<string,long>"), ("var", "string"),
        ("raw", "binary"), ("color", "string")]
    decoded = {"id": 1, "small": 2, "balance": Decimal("1.25"), "born": 3,
               "seen": dt.datetime(2026, 1, 1, tzinfo=UTC), "at": 1, "doc": "{}",
               "tags": ["a"], "attrs": {"k": 1}, "var": {"scale": 1, "value": b"\x0c"},
               "raw": b"ab", "color": "red"}
    assert convert(decoded) == decoded | {
        "born": dt.date(1970, 1, 4), "at": dt.datetime(1970, 1, 1, 0, 0, 0, 1),
        "var": "1.2"}
    with pytest.raises(ValueError, match="an Avro union of"):
        avro_connect(["null", "int", "string"], {})
