"""The ``schema_rows`` type map (Avro -> column type strings) and the evolution rules."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from fastavro import parse_schema

from processors.avro_columns import Recursive, avro_columns
from processors.column_types import DecimalType, Field, Flat, type_string
from processors.type_evolution import Unfit, fit


def record(*fields: tuple[str, Any], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "t",
            "fields": [{"name": n, "type": t} for n, t in fields]}


def types(schema: dict[str, Any]) -> dict[str, str]:
    columns, _ = avro_columns(parse_schema(schema))
    assert all(c.nullable for c in columns)
    return {c.name: type_string(c.type) for c in columns}


def test_every_avro_type_has_its_column_type() -> None:
    fixed = {"type": "fixed", "name": "F", "size": 4}
    got = types(record(
        ("i", "int"), ("l", "long"), ("f", "float"), ("d", "double"), ("b", "boolean"),
        ("s", "string"), ("y", "bytes"), ("x", fixed),
        ("dec", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}),
        ("fdec", {"type": "fixed", "name": "FD", "size": 8, "logicalType": "decimal",
                  "precision": 10, "scale": 0}),
        ("day", {"type": "int", "logicalType": "date"}),
        ("tm", {"type": "int", "logicalType": "time-millis"}),
        ("tu", {"type": "long", "logicalType": "time-micros"}),
        ("ts", {"type": "long", "logicalType": "timestamp-millis"}),
        ("tsu", {"type": "long", "logicalType": "timestamp-micros"}),
        ("lts", {"type": "long", "logicalType": "local-timestamp-millis"}),
        ("ltu", {"type": "long", "logicalType": "local-timestamp-micros"}),
        ("id", {"type": "string", "logicalType": "uuid"}),
        ("e", {"type": "enum", "name": "E", "symbols": ["A", "B"]}),
        ("opt", ["null", "long"]), ("opt2", ["string", "null"]),
        ("arr", {"type": "array", "items": "int"}),
        ("m", {"type": "map", "values": {"type": "array", "items": "string"}}),
        ("rec", record(("a", "int"), ("weird-name", ["null", "string"]), name="In")),
        ("u", ["null", "int", "string", "In"]),
    ))
    assert got == {
        "i": "int", "l": "long", "f": "float", "d": "double", "b": "boolean",
        "s": "string", "y": "binary", "x": "binary", "dec": "decimal(12,2)",
        "fdec": "decimal(10,0)", "day": "date", "tm": "long", "tu": "long",
        "ts": "timestamp", "tsu": "timestamp", "lts": "timestamp_ntz",
        "ltu": "timestamp_ntz", "id": "string", "e": "string", "opt": "long",
        "opt2": "string", "arr": "array<int>", "m": "map<string,array<string>>",
        "rec": "struct<a:int NOT NULL,`weird-name`:string>",
        "u": "struct<int:int,string:string,In:struct<a:int NOT NULL,`weird-name`:string>>",
    }


def test_values_become_row_values() -> None:
    schema = parse_schema(record(
        ("tm", {"type": "int", "logicalType": "time-millis"}),
        ("id", {"type": "string", "logicalType": "uuid"}),
        ("u", ["null", "long", "string"]),
        ("inner", record(("t", {"type": "long", "logicalType": "time-micros"}), name="I")),
        ("ts", {"type": "long", "logicalType": "timestamp-millis"})))
    _, convert = avro_columns(schema)
    ident = uuid.UUID(int=5)
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    row = convert({"tm": dt.time(1, 2, 3, 4000), "id": ident, "u": "x",
                   "inner": {"t": dt.time(0, 0, 1)}, "ts": when})
    assert row == {"tm": 3723004000, "id": str(ident), "u": {"long": None, "string": "x"},
                   "inner": {"t": 1_000_000}, "ts": when}
    assert convert({"tm": None, "id": None, "u": None, "inner": None, "ts": None})["u"] is None


def test_a_recursive_type_is_refused_with_its_cycle() -> None:
    node = record(("v", "int"), ("kids", {"type": "array", "items": "t.Node"}), name="Node")
    with pytest.raises(Recursive, match=r"'t.Node': kids.element refers back"):
        avro_columns(parse_schema(node))
    outer = record(("tree", record(("next", ["null", "t.T"]), name="T")))
    with pytest.raises(Recursive, match=r"'t.T': tree.next refers back"):
        avro_columns(parse_schema(outer))


def test_a_non_record_schema_is_refused() -> None:
    with pytest.raises(ValueError, match="not a record"):
        avro_columns(parse_schema("string"))


def cols(**kinds: str) -> tuple[Field, ...]:
    return tuple(Field(n, Flat(k)) for n, k in kinds.items())


def test_compatible_changes_evolve_the_table() -> None:
    table = cols(a="int", b="float", c="string")
    new, changes = fit(table, cols(a="long", b="double", d="string"))
    assert [str(c) for c in changes] == ["widen a long", "widen b double", "add d string"]
    assert [(f.name, type_string(f.type)) for f in new] == [
        ("a", "long"), ("b", "double"), ("c", "string"), ("d", "string")]
    # an older writer (narrower, without d) fits the evolved table as it is
    assert fit(new, cols(a="int", b="float", c="string")) == (new, [])


def test_nested_changes_and_decimals() -> None:
    old = avro_columns(parse_schema(record(
        ("s", record(("x", "int"), name="S")),
        ("m", {"type": "map", "values": record(("y", "int"), name="V")}),
        ("p", {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}))))[0]
    new = avro_columns(parse_schema(record(
        ("s", record(("x", "long"), ("z", ["null", "string"]), name="S")),
        ("m", {"type": "map", "values": record(("y", "int"), ("w", "int"), name="V")}),
        ("p", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}))))[0]
    _, changes = fit(old, new)
    assert [str(c) for c in changes] == [
        "widen s.x long", "add s.z string", "add m.value.w int", "widen p decimal(9,2)"]


def test_incompatible_changes_name_the_field() -> None:
    with pytest.raises(Unfit, match=r"field 'a' was string in the table, the writer schema "
                       r"has int"):
        fit(cols(a="string"), cols(a="int"))
    with pytest.raises(Unfit, match="field 'a' was long"):
        fit(cols(a="long"), cols(a="double"))
    scale = avro_columns(parse_schema(record(
        ("p", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 3}))))[0]
    with pytest.raises(Unfit, match="field 'p'"):
        fit((Field("p", DecimalType(9, 2)),), scale)
