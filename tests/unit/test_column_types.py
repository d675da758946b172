"""The table sinks' column types are one map (actors.sinks.table.columns): every type a
processor may declare has its Python, Arrow, Spark and PostgreSQL forms there."""

from __future__ import annotations

import typing

from actors.sinks.jdbc import create_table_sql
from actors.sinks.spark.iceberg import schema_change
from actors.sinks.table.columns import COLUMN_TYPES, COORDINATES, arrow_type
from actors.sinks.table.rows import TYPES
from processors.base import Column, ColumnType


def test_every_declarable_type_is_in_the_one_map() -> None:
    declarable = set(typing.get_args(ColumnType))
    assert declarable | {"timestamp"} == set(COLUMN_TYPES) == set(TYPES)


def test_each_sink_reads_its_types_from_the_map() -> None:
    assert [str(arrow_type(kind)) for kind in ("string", "int", "long", "double", "boolean",
                                               "binary", "timestamp")] == [
        "string", "int32", "int64", "double", "bool", "binary", "timestamp[us, tz=UTC]"]
    sql = create_table_sql("t", [Column("a", "int", False), Column("b", "binary")])
    assert sql.startswith('CREATE TABLE IF NOT EXISTS "t" ("a" INTEGER NOT NULL, "b" BYTEA, '
                          '"_topic" TEXT NOT NULL')
    assert sql.endswith('"_ingested_at" TIMESTAMPTZ NOT NULL)')
    written = {c.name: COLUMN_TYPES[c.type].spark_sql.lower() for c in COORDINATES}
    added, errors = schema_change({**written, "a": "int", "_ingested_at": "timestamp"},
                                  (Column("a", "long"), *COORDINATES))
    assert (added, errors) == ([], ["column 'a' was int, is now declared bigint"])
