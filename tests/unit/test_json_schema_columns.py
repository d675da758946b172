"""The ``schema_rows`` type map of ``format: json_schema``
(processors/json_schema_columns.py), whole: types, formats, arrays, objects, maps,
nullables, local ``$ref``s, what is not mappable (JSON text); records written by
confluent-kafka's ``JSONSerializer`` against the tests' registry, decoded by kstage's
decoder, turned into rows; recursive references refused naming the cycle."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from actors.codecs.json_schema import JsonSchemaDecoder
from actors.codecs.schema_registry import RegisteredSchema
from processors.base import Message
from processors.column_types import parse_type, type_string
from processors.errors import PoisonMessage
from processors.json_schema_columns import JsonWriterSchema, Recursive, json_schema_columns
from processors.schema_rows import SchemaRowsProcessor
from tests.fake_registry import FakeRegistry, kstage_client
from tests.registry_rows import schema_rows
from tests.unit.test_json_schema_format import TOPIC, serialize

ADDRESS = {"type": "object", "properties": {"city": {"type": "string"},
                                            "zip": {"type": ["null", "integer"]}}}
SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "definitions": {"address": ADDRESS},
    "required": ["id"],
    "properties": {
        "id": {"type": "string"},
        "n": {"type": "integer"},
        "x": {"type": "number"},
        "ok": {"type": "boolean"},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "mail": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "home": {"$ref": "#/definitions/address"},
        "homes": {"type": "array", "items": {"$ref": "#/definitions/address"}},
        "scores": {"type": "object", "additionalProperties": {"type": "number"}},
        "maybe": {"type": ["null", "integer"]},
        "opt": {"type": "string", "nullable": True},
        "either": {"oneOf": [{"type": "null"}, {"type": "boolean"}]},
        "color": {"enum": ["red", "green"]},
        "mixed": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        "loose": {},
        "many": {"type": ["string", "integer"]},
        "blob": {"type": "object"},
        "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]},
    },
}
ADDR = "struct<city:string,zip:long>"
COLUMNS = [
    ("id", "string"), ("n", "long"), ("x", "double"), ("ok", "boolean"), ("at", "timestamp"),
    ("day", "date"), ("mail", "string"), ("tags", "array<string>"), ("home", ADDR),
    ("homes", f"array<{ADDR}>"), ("scores", "map<string,double>"), ("maybe", "long"),
    ("opt", "string"), ("either", "boolean"), ("color", "string"), ("mixed", "string"),
    ("loose", "string"), ("many", "string"), ("blob", "string"), ("pair", "string")]


def test_the_whole_type_map() -> None:
    columns, _ = json_schema_columns(SCHEMA)
    assert [(c.name, type_string(c.type)) for c in columns] == COLUMNS
    assert all(c.nullable for c in columns)
    for _, kind in COLUMNS:  # what the sinks parse
        assert type_string(parse_type(kind)) == kind


def test_recursive_refs_are_refused_naming_the_cycle() -> None:
    tree = {"type": "object", "properties": {"root": {"$ref": "#/$defs/node"}},
            "$defs": {"node": {"type": "object", "properties": {
                "name": {"type": "string"},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}}
    with pytest.raises(Recursive) as caught:
        json_schema_columns(tree)
    assert caught.value.path == ("root", "kids", "element")
    assert "recursive type '#/$defs/node': root.kids.element refers back" in str(caught.value)
    loop = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}
    with pytest.raises(Recursive):
        json_schema_columns(loop)
    with pytest.raises(ValueError, match="not an object with properties"):
        json_schema_columns({"type": "array", "items": {"type": "string"}})
    p = SchemaRowsProcessor()
    with pytest.raises(PoisonMessage, match=r"writer schema id 3: recursive type '#/\$defs/node'"):
        p.transform(Message(TOPIC, 0, 0, 0, None, {"root": None}, [], b"",
                            value_schema=JsonWriterSchema(tree), value_schema_id=3))


VALUE = {
    "id": "a", "n": 2**40, "x": 3, "ok": True, "at": "2024-05-01T12:00:00.5+02:00",
    "day": "2024-05-01", "mail": "a@b.c", "tags": ["t"],
    "home": {"city": "Oslo", "zip": None, "extra": 1},
    "homes": [{"city": "Rome", "zip": 100}], "scores": {"m": 1.5, "k": 2},
    "maybe": None, "opt": "o", "either": False, "color": "red", "mixed": 5,
    "loose": {"b": [1], "a": None}, "many": "s", "blob": {"k": "v"}, "pair": ["p", 1],
    "unknown": "dropped"}
ROW = {
    "id": "a", "n": 2**40, "x": 3.0, "ok": True,
    "at": dt.datetime(2024, 5, 1, 10, 0, 0, 500000, tzinfo=dt.UTC),
    "day": dt.date(2024, 5, 1), "mail": "a@b.c", "tags": ["t"],
    "home": {"city": "Oslo", "zip": None}, "homes": [{"city": "Rome", "zip": 100}],
    "scores": {"m": 1.5, "k": 2.0}, "maybe": None, "opt": "o", "either": False,
    "color": "red", "mixed": "5", "loose": '{"a":null,"b":[1]}', "many": '"s"',
    "blob": '{"k":"v"}', "pair": '["p",1]'}


async def rows(*values: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of ``values`` written with SCHEMA by confluent-kafka's serializer."""
    with FakeRegistry() as registry:
        raws = [serialize(registry, SCHEMA, value) for value in values]
        async with kstage_client(registry) as client:
            found, p = await schema_rows(JsonSchemaDecoder(client), raws)
    assert [(c.name, c.type) for c in p.live_columns().columns] == COLUMNS
    return found


async def test_serialized_records_become_rows_of_exact_values() -> None:
    got = await rows(VALUE, {"id": "b"})
    assert got[0] == ROW
    assert got[1] == {name: ("b" if name == "id" else None) for name, _ in COLUMNS}
    assert got[0]["at"].utcoffset() == dt.timedelta(0)


async def test_a_value_the_map_cannot_take_is_poison_naming_the_field() -> None:
    # draft 7 does not assert formats: the serializer and the decoder let it through
    with pytest.raises(PoisonMessage, match=r"writer schema id \d+: field 'at': Invalid "
                       "isoformat string: 'yesterday'"):
        await rows({"id": "c", "at": "yesterday"})


class NotJson:
    """A registry answering a JSON schema id with text that is not JSON (no registry
    stores one; a value still parses with ``validate_schema: false``)."""

    async def get_registered(self, schema_id: int | str) -> RegisteredSchema:
        return RegisteredSchema("{not json", "JSON", ())

    async def get_version(self, subject: str, version: int) -> RegisteredSchema:
        raise AssertionError("no references")


async def test_a_writer_schema_that_is_not_json_gives_no_table() -> None:
    raw = b"\x00\x00\x00\x00\x07" + b'{"id": "a"}'
    lax = JsonSchemaDecoder(NotJson(), validate=False)
    with pytest.raises(PoisonMessage, match="writer schema id 7: the writer schema is not "
                       "an object with properties"):
        await schema_rows(lax, [raw])
    assert lax.decode(raw) == {"id": "a"}
    with pytest.raises(PoisonMessage, match="writer schema id 7 is not a valid JSON Schema"):
        await schema_rows(JsonSchemaDecoder(NotJson()), [raw])
