"""The table sinks' column types are one map (actors.sinks.table.columns): every type a
processor may declare has its Python, Arrow, Spark and PostgreSQL forms there."""

from __future__ import annotations

from actors.sinks.jdbc import create_table_sql, table_mismatches
from actors.sinks.spark.iceberg import schema_change
from actors.sinks.table.columns import COLUMN_TYPES, COORDINATES, arrow_type, column_kind
from actors.sinks.table.rows import TYPES
from processors.base import COLUMN_TYPE_NAMES, Column


def test_every_declarable_type_is_in_the_one_map() -> None:
    assert set(COLUMN_TYPE_NAMES) == set(COLUMN_TYPES) == set(TYPES)


def test_decimal_types_are_built_for_their_precision_and_scale() -> None:
    kind = column_kind("decimal(12,2)")
    assert (kind.spark_sql, kind.postgres) == ("DECIMAL(12,2)", "NUMERIC(12,2)")
    assert str(arrow_type("decimal(12,2)")) == "decimal128(12, 2)"
    sql = create_table_sql("t", [Column("amount", "decimal(12,2)", False),
                                 Column("at", "timestamp")])
    assert '"amount" NUMERIC(12,2) NOT NULL, "at" TIMESTAMPTZ, ' in sql
    # an existing column of another precision is a mismatch, named
    found = [("amount", "numeric(10,2)", True, False), ("at", "timestamp with time zone",
                                                         False, False)]
    assert table_mismatches("t", found, [Column("amount", "decimal(12,2)", False),
                                         Column("at", "timestamp")]) == [
        "table t column 'amount' is numeric(10,2), the processor declares decimal(12,2) "
        "(NUMERIC(12,2))"]
    added, errors = schema_change({"amount": "decimal(10,2)"},
                                  (Column("amount", "decimal(12,2)"), Column("at", "timestamp")))
    assert added == [Column("at", "timestamp")]
    assert errors[0] == "column 'amount' was decimal(10,2), is now declared decimal(12,2)"


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


def test_jdbc_evolution_adds_missing_columns_and_widens_only_what_iceberg_widens() -> None:
    from actors.sinks.jdbc_tables import evolution_sql

    found = [("id", "integer", True, False), ("qty", "integer", False, False),
             ("w", "real", False, False), ("amount", "numeric(12,2)", False, False),
             ("name", "text", False, False), ("tags", "jsonb", False, False)]
    declared = [Column("id", "int", False), Column("qty", "long"), Column("w", "double"),
                Column("amount", "decimal(14,2)"), Column("name", "int"),
                Column("tags", "array<string>"), Column("note", "string")]
    assert evolution_sql("s.t", found, declared) == [
        ('ALTER TABLE "s"."t" ALTER COLUMN "qty" TYPE BIGINT', "widened qty to long"),
        ('ALTER TABLE "s"."t" ALTER COLUMN "w" TYPE DOUBLE PRECISION', "widened w to double"),
        ('ALTER TABLE "s"."t" ALTER COLUMN "amount" TYPE NUMERIC(14,2)',
         "widened amount to decimal(14,2)"),
        ('ALTER TABLE "s"."t" ADD COLUMN IF NOT EXISTS "note" TEXT', "added note")]
    # text -> int is no widening: left for table_mismatches to refuse
    assert table_mismatches("s.t", found, [Column("name", "int")])
