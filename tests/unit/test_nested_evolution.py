"""How a staging table's nested columns follow a processor whose columns come from
writer schemas (:mod:`actors.sinks.spark.nested_evolution`): fields added and widened
inside structs, lists' elements and maps' values, required fields made optional, anything
else refused naming the field's path; the table's types read back from Spark and from
pyiceberg as column type trees."""

from __future__ import annotations

import itertools

from pyiceberg import types as it
from pyspark.sql import types as st

from actors.sinks.spark.nested_evolution import (
    iceberg_tree,
    nested_evolution,
    spark_path,
    spark_tree,
    split,
)
from actors.sinks.table.columns import iceberg_of, spark_of
from processors.base import Column
from processors.column_types import parse_type

WAS = ("struct<sku:string NOT NULL,price:decimal(9,2) NOT NULL>",
       "array<struct<n:int NOT NULL,w:float NOT NULL>>", "map<string,struct<q:int>>")

def test_nested_columns_gain_fields_and_widen_inside() -> None:
    existing = {"item": parse_type(WAS[0]), "lines": parse_type(WAS[1]),
                "m": parse_type(WAS[2])}
    declared = [Column("item", "struct<sku:string,price:decimal(12,2),color:string>"),
                Column("lines", "array<struct<n:long NOT NULL,w:float,note:string>>"),
                Column("m", "map<string,struct<q:int,r:date>>")]
    got = nested_evolution(existing, declared)
    assert got.errors == []
    assert [str(c) for c in got.changes] == [
        "widen item.price decimal(12,2)", "add item.color string", "widen lines.element.n long",
        "add lines.element.note string", "add m.value.r date"]
    assert got.loosened == [("item", "sku"), ("item", "price"), ("lines", "element", "w")]
    assert got.described()[:2] == ["widened item.price to decimal(12,2)", "added item.color"]
    assert got.described()[-1] == "made lines.element.w optional"
    # the same types: nothing to do
    same = nested_evolution(existing, [Column("item", WAS[0])])
    assert (same.changes, same.loosened, same.errors) == ([], [], [])

def test_an_unfit_nested_change_names_the_path() -> None:
    got = nested_evolution({"item": parse_type(WAS[0])},
                           [Column("item", "struct<sku:int,price:decimal(9,2)>")])
    assert got.errors == ["column 'item.sku' is string, cannot become int"]
    got = nested_evolution({"item": parse_type(WAS[0])}, [Column("item", "string")])
    assert got.errors == [f"column 'item' is {WAS[0]}, cannot become string"]

def test_split_hands_only_the_tables_nested_columns_to_the_nested_rules() -> None:
    declared = [Column("item", WAS[0]), Column("new", WAS[1]), Column("q", "int")]
    nested, rest = split({"item": "struct<...>", "q": "int"}, declared)
    assert [c.name for c in nested] == ["item"]
    assert [c.name for c in rest] == ["new", "q"]

def test_the_tables_types_read_back_as_trees_from_spark_and_pyiceberg() -> None:

    for text in (*WAS, "struct<`a b`:timestamp_ntz,t:timestamp NOT NULL,d:date,y:binary,"
                 "z:boolean,g:double>"):
        node = parse_type(text)
        assert spark_tree(spark_of(node, st)) == node
        assert iceberg_tree(iceberg_of(node, it, itertools.count(1))) == node
    assert iceberg_tree(it.UUIDType()) == parse_type("string")
    assert spark_path(("a b", "element", "x`y")) == "`a b`.`element`.`x``y`"
