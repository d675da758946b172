"""StagingWriter.convert: rows become one Arrow record batch; the column-wise fast path and
the row-by-row path agree."""

from __future__ import annotations

from pathlib import Path

from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.staging import StagingWriter
from processors.base import Column, Row
from settings import SparkSettings

COLUMNS = (Column("name", "string", False), Column("small", "int"), Column("big", "long"),
           Column("ratio", "double"), Column("flag", "boolean"), Column("blob", "binary"))


def writer(tmp_path: Path) -> StagingWriter:
    actor = SparkActor(SparkSettings(warehouse=str(tmp_path)))  # no session is started
    return StagingWriter(actor, "stg_types", COLUMNS)


def row(offset: int, **values: object) -> Row:
    base: Row = {"name": f"n{offset}", "small": 1, "big": 2**40, "ratio": 0.5, "flag": True,
                 "blob": b"\x00", "_topic": "t", "_partition": 0, "_offset": offset,
                 "_timestamp": None}
    return {**base, **values}


def test_good_rows_become_a_typed_record_batch_in_schema_order_with_floats_for_doubles(
        tmp_path: Path) -> None:
    good, rejected = writer(tmp_path).convert([row(0), row(1, ratio=3, small=None)])
    assert rejected == []
    assert good.schema.names == [c.name for c in COLUMNS] + [
        "_topic", "_partition", "_offset", "_timestamp"]
    assert [str(t) for t in good.schema.types] == [
        "string", "int32", "int64", "double", "bool", "binary", "string", "int32", "int64",
        "int64"]
    assert [tuple(r.values()) for r in good.to_pylist()] == [
        ("n0", 1, 2**40, 0.5, True, b"\x00", "t", 0, 0, None),
        ("n1", None, 2**40, 3.0, True, b"\x00", "t", 0, 1, None)]
    assert type(good.column("ratio")[1].as_py()) is float


def test_a_bad_value_sends_the_batch_row_by_row_and_names_the_row(tmp_path: Path) -> None:
    rows = [row(0), row(1, small=2**31), row(2, flag=1), row(3, small=True),
            row(4, name=None), row(5, big="7"), row(6)]
    good, rejected = writer(tmp_path).convert(rows)
    assert good.column("_offset").to_pylist() == [0, 6]
    reasons = {r["_offset"]: reason for r, reason in rejected}
    assert sorted(reasons) == [1, 2, 3, 4, 5]
    assert "spark sink stg_types: row at topic 't' partition 0 offset 1: column 'small'" \
        in reasons[1] and "not a int" in reasons[1]
    assert "column 'flag'" in reasons[2] and "column 'small'" in reasons[3]
    assert "column 'name': is null but the column is NOT NULL" in reasons[4]
    assert "column 'big'" in reasons[5] and "not a long" in reasons[5]


def test_a_batch_of_only_refused_rows_is_empty_but_typed(tmp_path: Path) -> None:
    good, rejected = writer(tmp_path).convert([row(0, name=None)])
    assert len(good) == 0 and len(rejected) == 1
    assert str(good.schema.field("small").type) == "int32"
