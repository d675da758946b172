"""The ``schema_rows`` type map of ``format: protobuf`` (processors/protobuf_columns.py),
whole: every scalar, enum, nested message, repeated, map, oneof, proto3 ``optional``, the
well-known types; records written by confluent-kafka's ``ProtobufSerializer`` against the
tests' registry, decoded by kstage's decoder, turned into rows; recursive types refused
naming the cycle."""

from __future__ import annotations

import datetime as dt
import decimal
import subprocess
import sys
from typing import Any

import pytest

from actors.codecs.protobuf import ProtobufDecoder
from processors.base import Message
from processors.column_types import Struct, parse_type, type_string
from processors.errors import PoisonMessage
from processors.protobuf_columns import Recursive, protobuf_columns
from processors.schema_rows import SchemaRowsProcessor
from tests.fake_registry import FakeRegistry, kstage_client
from tests.proto_files import message_classes
from tests.registry_rows import schema_rows
from tests.unit.test_protobuf_format import TOPIC, serialize

TYPEMAP = """syntax = "proto3";
package typemap;

import "google/protobuf/duration.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

message All {
  enum Color { RED = 0; GREEN = 1; }
  message Inner {
    string name = 1;
    repeated int32 nums = 2;
  }
  int32 i32 = 1; sint32 s32 = 2; sfixed32 f32 = 3;
  int64 i64 = 4; sint64 s64 = 5; sfixed64 f64 = 6;
  uint32 u32 = 7; fixed32 x32 = 8; uint64 u64 = 9; fixed64 x64 = 10;
  float fl = 11; double db = 12; bool flag = 13; string text = 14; bytes blob = 15;
  Color color = 16;
  Inner inner = 17;
  repeated Inner inners = 18;
  repeated string tags = 19;
  map<string, Inner> by_name = 20;
  map<int64, Color> by_number = 21;
  map<bool, bytes> by_flag = 22;
  oneof choice {
    string as_text = 23;
    Inner as_inner = 24;
  }
  optional int32 maybe = 25;
%s
  repeated google.protobuf.Timestamp stamps = 37;
}

message Node {
  string name = 1;
  repeated Node children = 2;
}

message Outer {
  message Mid { Outer back = 1; }
  Mid mid = 1;
}
"""

WELL_KNOWN = ["Timestamp at", "Duration took", "Int32Value w_i32", "Int64Value w_i64",
              "UInt64Value w_u64", "BytesValue w_bytes", "StringValue w_text",
              "DoubleValue w_double", "BoolValue w_bool", "Struct doc", "Value any_value"]
TYPEMAP %= "\n".join(f"  google.protobuf.{field} = {26 + k};"
                      for k, field in enumerate(WELL_KNOWN))
CLASSES = message_classes({"typemap.proto": TYPEMAP})
INNER = "struct<name:string,nums:array<int>>"

COLUMNS = [
    ("i32", "int"), ("s32", "int"), ("f32", "int"), ("i64", "long"), ("s64", "long"),
    ("f64", "long"), ("u32", "long"), ("x32", "long"), ("u64", "decimal(20,0)"),
    ("x64", "decimal(20,0)"), ("fl", "float"), ("db", "double"), ("flag", "boolean"),
    ("text", "string"), ("blob", "binary"), ("color", "string"), ("inner", INNER),
    ("inners", f"array<{INNER}>"), ("tags", "array<string>"),
    ("by_name", f"map<string,{INNER}>"), ("by_number", "map<long,string>"),
    ("by_flag", "map<boolean,binary>"), ("as_text", "string"), ("as_inner", INNER),
    ("maybe", "int"), ("at", "timestamp"), ("took", "long"), ("w_i32", "int"),
    ("w_i64", "long"), ("w_u64", "decimal(20,0)"), ("w_bytes", "binary"),
    ("w_text", "string"), ("w_double", "double"), ("w_bool", "boolean"), ("doc", "string"),
    ("any_value", "string"), ("stamps", "array<timestamp>")]


def test_the_whole_type_map() -> None:
    columns, _ = protobuf_columns(CLASSES["typemap.All"].DESCRIPTOR)
    assert [(c.name, type_string(c.type)) for c in columns] == COLUMNS
    assert all(c.nullable for c in columns)
    for _, kind in COLUMNS:  # what the sinks parse
        assert type_string(parse_type(kind)) == kind
    # inside a struct too: every field nullable (a later schema may give it presence)
    inner = next(c for c in columns if c.name == "inner").type
    assert isinstance(inner, Struct)
    assert [(f.name, f.nullable) for f in inner.fields] == [("name", True), ("nums", True)]


def test_recursive_types_are_refused_naming_the_cycle() -> None:
    with pytest.raises(Recursive) as caught:
        protobuf_columns(CLASSES["typemap.Node"].DESCRIPTOR)
    assert caught.value.path == ("children", "element")
    assert "recursive type 'typemap.Node': children.element refers back" \
        in str(caught.value)
    with pytest.raises(Recursive) as caught:
        protobuf_columns(CLASSES["typemap.Outer"].DESCRIPTOR)
    assert (caught.value.name, caught.value.path) == ("typemap.Outer", ("mid", "back"))
    p = SchemaRowsProcessor()
    node = Message(TOPIC, 0, 0, 0, None, {"name": "n", "children": []}, [], b"",
                   value_schema=CLASSES["typemap.Node"].DESCRIPTOR, value_schema_id=4)
    with pytest.raises(PoisonMessage, match="writer schema id 4: recursive type "
                       "'typemap.Node': children.element refers back"):
        p.transform(node)


def full() -> Any:
    cls = CLASSES["typemap.All"]
    inner = CLASSES["typemap.All.Inner"]
    msg = cls(i32=-1, s32=-2, f32=-3, i64=-(2**40), s64=-(2**41), f64=-(2**42),
              u32=2**32 - 1, x32=7, u64=2**64 - 1, x64=2**63, fl=1.5, db=-2.25, flag=True,
              text="héllo", blob=b"\x00\xff", color=cls.Color.Value("GREEN"),
              inner=inner(name="a", nums=[1, 2]), tags=["x", "y"], as_inner=inner(name="o"),
              maybe=0)
    msg.inners.add(name="b")
    msg.by_name["k"].name = "v"
    msg.by_number[-5] = cls.Color.Value("GREEN")
    msg.by_flag[True] = b"\x01"
    msg.at.FromJsonString("2024-05-01T12:00:00.123456789Z")
    msg.took.FromJsonString("-1.500001s")
    msg.w_i32.value = 0
    msg.w_i64.value = 2**62
    msg.w_u64.value = 2**64 - 2
    msg.w_bytes.value = b"w"
    msg.w_text.value = ""
    msg.w_double.value = float("inf")
    msg.w_bool.value = False
    msg.doc.update({"a": 1, "b": [True, None]})
    msg.any_value.string_value = "s"
    msg.stamps.add().FromJsonString("1970-01-01T00:00:01Z")
    return msg


UTC = dt.UTC
FULL_ROW = {
    "i32": -1, "s32": -2, "f32": -3, "i64": -(2**40), "s64": -(2**41), "f64": -(2**42),
    "u32": 2**32 - 1, "x32": 7, "u64": decimal.Decimal(2**64 - 1),
    "x64": decimal.Decimal(2**63), "fl": 1.5, "db": -2.25, "flag": True, "text": "héllo",
    "blob": b"\x00\xff", "color": "GREEN", "inner": {"name": "a", "nums": [1, 2]},
    "inners": [{"name": "b", "nums": []}], "tags": ["x", "y"],
    "by_name": {"k": {"name": "v", "nums": []}}, "by_number": {-5: "GREEN"},
    "by_flag": {True: b"\x01"}, "as_text": None, "as_inner": {"name": "o", "nums": []},
    "maybe": 0, "at": dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC),
    "took": -1_500_001, "w_i32": 0, "w_i64": 2**62, "w_u64": decimal.Decimal(2**64 - 2),
    "w_bytes": b"w", "w_text": "", "w_double": float("inf"), "w_bool": False,
    "doc": '{"a":1.0,"b":[true,null]}', "any_value": '"s"',  # a Struct number: a double
    "stamps": [dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)]}

EMPTY_ROW = {  # nothing set: proto3 scalars read their default, fields with presence NULL
    "i32": 0, "s32": 0, "f32": 0, "i64": 0, "s64": 0, "f64": 0, "u32": 0, "x32": 0,
    "u64": decimal.Decimal(0), "x64": decimal.Decimal(0), "fl": 0.0, "db": 0.0,
    "flag": False, "text": "", "blob": b"", "color": "RED", "inner": None, "inners": [],
    "tags": [], "by_name": {}, "by_number": {}, "by_flag": {}, "as_text": None,
    "as_inner": None, "maybe": None, "at": None, "took": None, "w_i32": None,
    "w_i64": None, "w_u64": None, "w_bytes": None, "w_text": None, "w_double": None,
    "w_bool": None, "doc": None, "any_value": None, "stamps": []}


async def test_serialized_records_become_rows_of_exact_values() -> None:
    with FakeRegistry() as registry:
        registry.register(f"{TOPIC}-value", TYPEMAP, "PROTOBUF")
        raws = [serialize(registry, full()), serialize(registry, CLASSES["typemap.All"]()),
                serialize(registry, CLASSES["typemap.All"](as_text="t"))]
        async with kstage_client(registry) as client:
            rows, p = await schema_rows(ProtobufDecoder(client), raws)
    assert rows[0] == FULL_ROW
    assert rows[1] == EMPTY_ROW
    assert (rows[2]["as_text"], rows[2]["as_inner"]) == ("t", None)  # the oneof: one set
    assert [(c.name, c.type) for c in p.live_columns().columns] == COLUMNS


def test_schema_rows_needs_no_protobuf_runtime_for_avro_and_json_schema() -> None:
    """``protobuf`` is an extra: without it schema_rows still lands Avro and JSON Schema."""
    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "google.protobuf" or name.startswith("google.protobuf."):
            raise ImportError("no protobuf runtime")
sys.meta_path.insert(0, Block())
from processors.json_schema_columns import JsonWriterSchema
from processors.schema_rows import SchemaRowsProcessor
from processors.base import Message
schema = JsonWriterSchema({"type": "object", "properties": {"a": {"type": "integer"}}})
row = SchemaRowsProcessor().transform(Message("t", 0, 0, 0, None, {"a": 1}, [], b"",
                                              value_schema=schema, value_schema_id=1))[0]
assert row["a"] == 1 and "google.protobuf" not in sys.modules, row
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
