"""The column types of issue 34 (``float``, ``date``, ``timestamp_ntz``, ``struct``,
``array``, ``map``): the grammar (parsed once, a fault named by its position), the row
check (a value that does not fit named by its column and its path inside it), and each
table sink's type built from the parsed tree."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg import types as it
from pyspark.sql import types as st

from actors.sinks.jdbc import create_table_sql, table_mismatches
from actors.sinks.jdbc_tables import pg_check
from actors.sinks.jdbc_upsert import rows_json
from actors.sinks.spark.iceberg import schema_change
from actors.sinks.spark.pyiceberg_tables import iceberg_type, spark_type_name, staging_schema
from actors.sinks.table.columns import COORDINATES, arrow_type, column_kind, spark_type
from actors.sinks.table.rows import check, check_rows, record_batch
from processors import testing
from processors.base import Column, column_type_problem
from processors.column_types import (
    Array,
    DecimalType,
    Field,
    Flat,
    Map,
    Struct,
    parse_type,
    type_string,
)
from tests.doc_blocks import run_block

ORDER = ("struct<id:long NOT NULL,lines:array<struct<sku:string,qty:int NOT NULL>>,"
         "attrs:map<string,array<struct<at:timestamp_ntz,on:date>>>,`unit price`:decimal(9,2),"
         "w:float,raw:binary>")


def test_the_grammar_parses_into_a_typed_tree_once_per_string() -> None:
    node = parse_type(ORDER)
    assert parse_type(ORDER) is node  # cached
    assert isinstance(node, Struct)
    assert node.fields[0] == Field("id", Flat("long"), nullable=False)
    assert node.fields[1].type == Array(Struct((Field("sku", Flat("string")),
                                                Field("qty", Flat("int"), False))))
    assert node.fields[2].type == Map(Flat("string"), Array(Struct((
        Field("at", Flat("timestamp_ntz")), Field("on", Flat("date"))))))
    assert node.fields[3] == Field("unit price", DecimalType(9, 2))
    assert type_string(node) == ORDER
    # spaces after commas, a backtick inside a quoted name doubled
    assert type_string(parse_type("map<string, struct<`a``b`:long, c:int>>")) == \
        "map<string,struct<`a``b`:long,c:int>>"
    for kind in ("float", "date", "timestamp_ntz", "array<map<date,array<long>>>"):
        assert column_type_problem(kind) is None


@pytest.mark.parametrize(("kind", "why"), [
    ("struct<a:long,>", "expected a field name ([A-Za-z_][A-Za-z0-9_]* or `quoted`) at "
                        "position 14"),
    ("array<int", "expected '>', found 'the end' at position 9"),
    ("map<array<int>,long>", "a map's key must be a flat type or a decimal, not array<int> "
                             "at position 4"),
    ("struct<a:int,a:long>", "field 'a' appears twice at position 13"),
    ("struct<a:int not null>", "expected ',', found ' ' at position 12"),
    ("array<timestamp_tz>", "unknown type 'timestamp_tz'"),
    ("struct<a b:int>", "expected ':', found ' ' at position 8"),
    ("array<decimal(39,1)>", "decimal(39,1) is out of range: precision 1..38, scale "
                             "0..precision at position 6"),
    ("array< int>", "expected a type name at position 6"),
    ("struct<`a:int>", "unterminated backtick-quoted field name at position 7"),
    ("long>", "unexpected '>' after the type at position 4"),
    ("decimal(10, 2)", "expected (P,S) after decimal, no spaces at position 7"),
])
def test_a_type_that_is_not_one_is_refused_naming_the_position(kind: str, why: str) -> None:
    problem = column_type_problem(kind)
    assert problem is not None and why in problem, problem
    with pytest.raises(ValueError, match="column 'c': type"):
        Column("c", kind)


def test_the_flat_types_check_their_values() -> None:
    naive, aware = dt.datetime(2024, 2, 29, 23, 59, 1, 5), dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    assert check(1.5, Column("f", "float")) == 1.5
    assert check(3, Column("f", "float")) == 3.0
    assert check(dt.date(2024, 2, 29), Column("d", "date")) == dt.date(2024, 2, 29)
    assert check(naive, Column("t", "timestamp_ntz")) is naive
    refused = [(True, "float", "value True (bool) is not a float"),
               ("1.5", "float", "value '1.5' (str) is not a float"),
               (1e39, "float", "value 1e+39 is beyond the range of a float (32-bit"),
               (2**200, "float", "is beyond the range of a float"),
               (naive, "date", "is not a date: a datetime is not a date"),
               ("2024-01-01", "date", "value '2024-01-01' (str) is not a date"),
               (aware, "timestamp_ntz", "has a time zone, but a timestamp_ntz is a local "
                                        "date-time without one"),
               (dt.date(2024, 1, 1), "timestamp_ntz", "is not a timestamp_ntz")]
    for value, kind, why in refused:
        with pytest.raises(ValueError, match=None) as caught:
            check(value, Column("c", kind))
        assert why in str(caught.value), (value, kind, caught.value)
    assert check(float("inf"), Column("f", "float")) == float("inf")


def test_a_nested_value_is_checked_to_its_leaves_naming_the_path() -> None:
    order = Column("order", ORDER)
    good = {"id": 7, "lines": [{"sku": "a", "qty": 1}, None, {"qty": 2}],
            "attrs": {"k": [{"at": dt.datetime(2024, 1, 2, 3, 4, 5, 6), "on": None}, None]},
            "unit price": Decimal("1.5"), "w": 2}
    assert check(good, order) == {**good, "lines": [{"sku": "a", "qty": 1}, None,
                                                    {"sku": None, "qty": 2}],
                                  "unit price": Decimal("1.50"), "w": 2.0, "raw": None}
    bad = [({"id": 1, "lines": [{"qty": 1}, {"qty": 1}, {"qty": 1}, {"qty": "3"}]},
            "at lines[3].qty: value '3' (str) is not a int"),
           ({"id": 1, "lines": [{"qty": 2**31}]}, "at lines[0].qty: value 2147483648 (int) "
                                                  "is not a int"),
           ({"id": 1, "lines": [{"qty": None}]}, "at lines[0].qty: is null but it is NOT NULL"),
           ({"lines": []}, "at id: is null but it is NOT NULL"),
           ({"id": 1, "qty": 2}, "unknown field(s) 'qty': struct<"),
           ({"id": 1, "lines": {"qty": 1}}, "at lines: value {'qty': 1} (dict) is not an "
                                            "array: give a list"),
           ([{"id": 1}], "value [{'id': 1}] (list) is not a struct: give a dict"),
           ({"id": 1, "attrs": {"k": [{"at": dt.datetime(2024, 1, 1, tzinfo=dt.UTC)}]}},
            "at attrs['k'][0].at: datetime 2024-01-01T00:00:00+00:00 has a time zone"),
           ({"id": 1, "attrs": {None: []}}, "at attrs: key None: is null but it is NOT NULL"),
           ({"id": 1, "attrs": {1: []}}, "at attrs: key 1: value 1 (int) is not a string"),
           ({"id": 1, "unit price": 1.5}, "at `unit price`: value 1.5 is a float"),
           ({"id": 1, "w": 1e40}, "at w: value 1e+40 is beyond the range of a float")]
    for value, why in bad:
        with pytest.raises(ValueError) as caught:
            check(value, order)
        assert why in str(caught.value), (value, caught.value)
    # the row's failure names the table, the row and the column, then the path
    _, rejected = check_rows([{"order": bad[0][0], "_topic": "t", "_partition": 0,
                               "_offset": 9}], [order], "spark sink stg")
    assert rejected[0][1] == ("spark sink stg: row at topic 't' partition 0 offset 9: column "
                              "'order': at lines[3].qty: value '3' (str) is not a int")


def test_each_sink_builds_its_type_from_the_tree() -> None:
    kind = "struct<id:long NOT NULL,tags:array<string>,m:map<date,struct<`a b`:timestamp_ntz>>>"
    assert arrow_type(kind) == pa.struct([
        pa.field("id", pa.int64(), False),
        pa.field("tags", pa.list_(pa.field("element", pa.string()))),
        pa.field("m", pa.map_(pa.field("key", pa.date32(), False),
                              pa.field("value", pa.struct([pa.field("a b",
                                                                    pa.timestamp("us"))]))))])
    assert [arrow_type(k) for k in ("float", "date", "timestamp_ntz")] == [
        pa.float32(), pa.date32(), pa.timestamp("us")]
    assert spark_type(kind) == st.StructType([
        st.StructField("id", st.LongType(), False),
        st.StructField("tags", st.ArrayType(st.StringType(), True)),
        st.StructField("m", st.MapType(st.DateType(), st.StructType([
            st.StructField("a b", st.TimestampNTZType())]), True))])
    assert [spark_type(k) for k in ("float", "date", "timestamp_ntz")] == [
        st.FloatType(), st.DateType(), st.TimestampNTZType()]
    got = column_kind(kind)
    assert got.spark_sql == ("STRUCT<`id`: BIGINT NOT NULL, `tags`: ARRAY<STRING>, "
                             "`m`: MAP<DATE, STRUCT<`a b`: TIMESTAMP_NTZ>>>")
    assert got.spark_simple == spark_type(kind).simpleString() == \
        "struct<id:bigint,tags:array<string>,m:map<date,struct<a b:timestamp_ntz>>>"
    assert (got.postgres, got.postgres_found) == ("JSONB", ("jsonb",))
    # Iceberg: the type Spark's becomes, named back as Spark names it for the column check
    for k in (kind, "float", "date", "timestamp_ntz", "array<map<string,decimal(9,2)>>"):
        assert spark_type_name(iceberg_type(k)) == column_kind(k).spark_simple
    assert iceberg_type("timestamp_ntz") == it.TimestampType()
    # nested field ids are unique across the whole schema
    schema = staging_schema([Column("a", kind), Column("b", "array<struct<x:int>>")])
    ids = [f.field_id for f in schema._lazy_id_to_field.values()]
    assert len(ids) == len(set(ids))


def test_the_column_checks_compare_nested_types() -> None:
    kind = "struct<id:long,tags:array<string>>"
    existing = {"o": "struct<id:bigint,tags:array<string>>"}
    assert schema_change(existing, [Column("o", kind)]) == ([], [])
    added, errors = schema_change(existing, [Column("o", "struct<id:long>"),
                                             Column("n", "map<string,long>")])
    assert added == [Column("n", "map<string,long>")]
    assert errors == ["column 'o' was struct<id:bigint,tags:array<string>>, is now "
                      "declared struct<id:bigint>"]
    sql = create_table_sql("t", [Column("o", kind), Column("f", "float"), Column("d", "date"),
                                 Column("n", "timestamp_ntz")])
    assert '("o" JSONB, "f" REAL, "d" DATE, "n" TIMESTAMP, ' in sql
    found = [("o", "jsonb", False, False), ("f", "real", False, False),
             ("d", "date", False, False), ("n", "timestamp with time zone", False, False)]
    assert table_mismatches("t", found, [Column("o", kind), Column("f", "float"),
                                         Column("d", "date"), Column("n", "timestamp_ntz")]) \
        == ["table t column 'n' is timestamp with time zone, the processor declares "
            "timestamp_ntz (TIMESTAMP)"]


def test_postgres_gets_a_nested_value_as_its_exact_json() -> None:
    kind = ("map<string,struct<on:date,at:timestamp,l:timestamp_ntz,d:decimal(20,8),"
            "b:binary,f:float,ok:boolean,xs:array<long>,m:map<int,string>>>")
    value = {"k": {"on": dt.date(2024, 2, 29),
                   "at": dt.datetime(2024, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))),
                   "l": dt.datetime(2024, 1, 1, 12, 0, 0, 123456),
                   "d": Decimal("123456789012.00000001"), "b": b"\xff\x00", "f": 0.1,
                   "ok": True, "xs": [1, None, 2**63 - 1], "m": {5: "five"}},
             "z": None}
    text = pg_check(value, Column("c", kind))
    assert text == (
        '{"k":{"on":"2024-02-29","at":"2024-01-01T00:00:00+00:00",'
        '"l":"2024-01-01T12:00:00.123456","d":123456789012.00000001,"b":"/wA=",'
        '"f":0.1,"ok":true,"xs":[1,null,9223372036854775807],"m":{"5":"five"}},"z":null}')
    both = rows_json([(text, 1, dt.date(2024, 1, 2))], ["c", "n", "d"])
    assert json.loads(both) == [{"c": json.loads(text), "n": 1, "d": "2024-01-02"}]
    for bad, why in [({"k": {"f": float("nan")}}, "at ['k'].f: nan has no JSON form"),
                     ({"k": {"m": {1: "a\x00"}}}, "at ['k'].m[1]: contains a NUL")]:
        with pytest.raises(ValueError) as caught:
            pg_check(bad, Column("c", kind))
        assert why in str(caught.value), caught.value


def test_arrow_takes_the_checked_rows_of_every_new_type() -> None:
    columns = [Column("o", ORDER), Column("f", "float"), Column("d", "date"),
               Column("n", "timestamp_ntz")]
    rows: list[dict[str, Any]] = [
        {"o": {"id": 1, "lines": [{"qty": 2}], "attrs": {"x": [{"on": dt.date(2024, 1, 1)}]}},
         "f": 0.1, "d": dt.date(2024, 1, 1), "n": dt.datetime(2024, 1, 1, 1)},
        {"o": {"id": 2, "lines": [{"qty": "x"}]}, "f": 1.0, "d": None, "n": None},
        {"o": None, "f": None, "d": dt.datetime(2024, 1, 1), "n": None}]
    batch, rejected = record_batch(rows, columns, "t")
    assert batch.num_rows == 1 and [r["f"] for r, _ in rejected] == [1.0, None]
    assert "column 'o': at lines[0].qty: value 'x' (str) is not a int" in rejected[0][1]
    assert "column 'd': value datetime.datetime(2024, 1, 1, 0, 0) (datetime) is not a date" \
        in rejected[1][1]
    got = batch.to_pylist()
    assert got[0]["o"]["lines"] == [{"sku": None, "qty": 2}]
    assert got[0]["o"]["attrs"] == [("x", [{"at": None, "on": dt.date(2024, 1, 1)}])]
    assert got[0]["f"] == 0.10000000149011612  # the nearest float32 to 0.1
    assert got[0]["n"] == dt.datetime(2024, 1, 1, 1) and got[0]["n"].tzinfo is None


def test_the_plugin_guides_nested_example_gives_rows_that_fit() -> None:
    """docs/plugins.md's Orders processor runs; its rows fit its columns, and a line
    without a sku is refused naming the path."""
    orders = run_block("docs/plugins.md", "class Orders(Processor)")["Orders"]()
    value = {"id": "o1", "day": "2024-02-29", "lines": [{"sku": "a", "qty": 2}, {"sku": "b"}],
             "attrs": {"gift": "yes"}}
    rows = orders.transform(testing.message(value, offset=3))
    good, bad = check_rows(rows, (*orders.columns, *COORDINATES), "stg_orders")
    assert bad == []
    assert good[0][:4] == ("o1", dt.date(2024, 2, 29), [{"sku": "a", "qty": 2},
                                                        {"sku": "b", "qty": None}],
                           {"gift": "yes"})
    rows = orders.transform(testing.message({**value, "lines": [{"sku": None}]}, offset=4))
    _, bad = check_rows(rows, (*orders.columns, *COORDINATES), "stg_orders")
    assert bad[0][1].endswith("column 'lines': at [0].sku: is null but it is NOT NULL")
