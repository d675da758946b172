"""The column types of the table sinks, in one map: what each declared type accepts in a
row and what it is in Arrow, Spark and PostgreSQL.

A processor declares its columns with the logical types of
:data:`processors.base.ColumnType`; the sinks add the Kafka coordinates
(:data:`COORDINATES`) and ``_ingested_at`` (type ``timestamp``, set at flush). Every
sink-specific name of a type comes from :func:`column_kind`: :data:`COLUMN_TYPES` for the
types without parameters (a new type is one entry there), built for ``decimal(P,S)``, and
for the nested types (``struct``, ``array``, ``map``) built recursively from their parsed
tree (:mod:`processors.column_types`), each part from the parts of its fields: Arrow
``struct``/``list``/``map``, Spark ``StructType``/``ArrayType``/``MapType``, Iceberg
``struct``/``list``/``map``, PostgreSQL ``JSONB`` (the value as its JSON).
pyarrow and pyspark are never imported by this module: their types are built by functions
given the module (:func:`arrow_type`, :func:`spark_type`).
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from processors.base import Column
from processors.column_types import (
    Array,
    DecimalType,
    Flat,
    Map,
    Struct,
    TypeNode,
    is_nested,
    parse_type,
)


@dataclass(frozen=True, slots=True)
class ColumnKind:
    """One column type as each part of a table sink sees it.

    Attributes:
        python: the Python types a row value may have (``bool`` is not an ``int`` here).
        spark_sql: the Spark SQL type (DDL of the staging and final tables).
        postgres: the PostgreSQL type of a created table.
        postgres_found: the ``format_type()`` names an existing PostgreSQL column may have.
        arrow: builds the Arrow type, given the ``pyarrow`` module.
        spark: builds the Spark type, given the ``pyspark.sql.types`` module.
        iceberg: builds the Iceberg type Spark's type becomes in an Iceberg table, given
            the ``pyiceberg.types`` module and the field ids to give nested fields
            (placeholders: a table's create or schema update assigns fresh ones).
        spark_simple: Spark's ``simpleString`` of the type (the column check compares an
            existing table's columns by it).
        node: the parsed type (:mod:`processors.column_types`).
    """

    python: frozenset[type]
    spark_sql: str
    postgres: str
    postgres_found: tuple[str, ...]
    arrow: Callable[[Any], Any]
    spark: Callable[[Any], Any]
    iceberg: Callable[[Any, Iterator[int]], Any]
    spark_simple: str = ""
    node: TypeNode | None = None


def _flat(python: frozenset[type], spark_sql: str, postgres: str,
          postgres_found: tuple[str, ...], arrow: Callable[[Any], Any],
          spark: Callable[[Any], Any], iceberg: Callable[[Any], Any]) -> ColumnKind:
    return ColumnKind(python, spark_sql, postgres, postgres_found, arrow, spark,
                      lambda i, _ids: iceberg(i), spark_sql.lower())


COLUMN_TYPES: dict[str, ColumnKind] = {
    "string": _flat(frozenset({str}), "STRING", "TEXT", ("text", "character varying"),
                    lambda pa: pa.string(), lambda t: t.StringType(),
                    lambda i: i.StringType()),
    "int": _flat(frozenset({int}), "INT", "INTEGER", ("integer", "bigint"),
                 lambda pa: pa.int32(), lambda t: t.IntegerType(),
                 lambda i: i.IntegerType()),
    "long": _flat(frozenset({int}), "BIGINT", "BIGINT", ("bigint",),
                  lambda pa: pa.int64(), lambda t: t.LongType(),
                  lambda i: i.LongType()),
    # 32 bits: a value is rounded to the nearest float32 (a finite one beyond its range is
    # refused by the row check).
    "float": _flat(frozenset({float, int}), "FLOAT", "REAL", ("real",),
                   lambda pa: pa.float32(), lambda t: t.FloatType(), lambda i: i.FloatType()),
    "double": _flat(frozenset({float, int}), "DOUBLE", "DOUBLE PRECISION",
                    ("double precision",), lambda pa: pa.float64(),
                    lambda t: t.DoubleType(), lambda i: i.DoubleType()),
    "boolean": _flat(frozenset({bool}), "BOOLEAN", "BOOLEAN", ("boolean",),
                     lambda pa: pa.bool_(), lambda t: t.BooleanType(),
                     lambda i: i.BooleanType()),
    "binary": _flat(frozenset({bytes, bytearray}), "BINARY", "BYTEA", ("bytea",),
                    lambda pa: pa.binary(), lambda t: t.BinaryType(),
                    lambda i: i.BinaryType()),
    # A calendar date: a datetime.date, never a datetime (type() is exact).
    "date": _flat(frozenset({dt.date}), "DATE", "DATE", ("date",),
                  lambda pa: pa.date32(), lambda t: t.DateType(), lambda i: i.DateType()),
    # An instant: an aware datetime, written in UTC (also the sinks' ``_ingested_at``).
    "timestamp": _flat(frozenset({dt.datetime}), "TIMESTAMP", "TIMESTAMPTZ",
                       ("timestamp with time zone", "timestamp without time zone"),
                       lambda pa: pa.timestamp("us", tz="UTC"),
                       lambda t: t.TimestampType(), lambda i: i.TimestamptzType()),
    # A local date-time without a zone: a naive datetime, written as is.
    "timestamp_ntz": _flat(frozenset({dt.datetime}), "TIMESTAMP_NTZ", "TIMESTAMP",
                           ("timestamp without time zone",),
                           lambda pa: pa.timestamp("us"), lambda t: t.TimestampNTZType(),
                           lambda i: i.TimestampType()),
}


def _decimal_kind(p: int, s: int) -> ColumnKind:
    return _flat(frozenset({decimal.Decimal, int}), f"DECIMAL({p},{s})", f"NUMERIC({p},{s})",
                 (f"numeric({p},{s})",), lambda pa: pa.decimal128(p, s),
                 lambda t: t.DecimalType(p, s), lambda i: i.DecimalType(p, s))


def _kind_of(node: TypeNode) -> ColumnKind:
    """The flat or decimal kind of a node that is not nested."""
    if isinstance(node, Flat):
        return COLUMN_TYPES[node.name]
    assert isinstance(node, DecimalType)  # noqa: S101 (the callers ask only for these)
    return _decimal_kind(node.precision, node.scale)


def spark_ddl(node: TypeNode) -> str:
    """A type in Spark's DDL (``STRUCT<`id`: BIGINT NOT NULL, ...>``)."""
    if isinstance(node, Struct):
        return "STRUCT<" + ", ".join(
            f"`{f.name.replace('`', '``')}`: {spark_ddl(f.type)}"
            + ("" if f.nullable else " NOT NULL") for f in node.fields) + ">"
    if isinstance(node, Array):
        return f"ARRAY<{spark_ddl(node.element)}>"
    if isinstance(node, Map):
        return f"MAP<{spark_ddl(node.key)}, {spark_ddl(node.value)}>"
    return _kind_of(node).spark_sql


def spark_simple(node: TypeNode) -> str:
    """Spark's ``simpleString`` of a type (field names as they are, no nullability)."""
    if isinstance(node, Struct):
        return "struct<" + ",".join(f"{f.name}:{spark_simple(f.type)}"
                                    for f in node.fields) + ">"
    if isinstance(node, Array):
        return f"array<{spark_simple(node.element)}>"
    if isinstance(node, Map):
        return f"map<{spark_simple(node.key)},{spark_simple(node.value)}>"
    return _kind_of(node).spark_simple


def arrow_of(node: TypeNode, pa: Any) -> Any:
    """The Arrow type of a type (elements and map values nullable, map keys not)."""
    if isinstance(node, Struct):
        return pa.struct([pa.field(f.name, arrow_of(f.type, pa), f.nullable)
                          for f in node.fields])
    if isinstance(node, Array):
        return pa.list_(pa.field("element", arrow_of(node.element, pa), True))
    if isinstance(node, Map):
        return pa.map_(pa.field("key", arrow_of(node.key, pa), False),
                       pa.field("value", arrow_of(node.value, pa), True))
    return _kind_of(node).arrow(pa)


def spark_of(node: TypeNode, t: Any) -> Any:
    """The Spark type of a type."""
    if isinstance(node, Struct):
        return t.StructType([t.StructField(f.name, spark_of(f.type, t), f.nullable)
                             for f in node.fields])
    if isinstance(node, Array):
        return t.ArrayType(spark_of(node.element, t), True)
    if isinstance(node, Map):
        return t.MapType(spark_of(node.key, t), spark_of(node.value, t), True)
    return _kind_of(node).spark(t)


def iceberg_of(node: TypeNode, i: Any, ids: Iterator[int]) -> Any:
    """The Iceberg type of a type, its nested fields numbered from ``ids``."""
    if isinstance(node, Struct):
        return i.StructType(*[i.NestedField(field_id=next(ids), name=f.name,
                                            field_type=iceberg_of(f.type, i, ids),
                                            required=not f.nullable) for f in node.fields])
    if isinstance(node, Array):
        return i.ListType(element_id=next(ids), element=iceberg_of(node.element, i, ids),
                          element_required=False)
    if isinstance(node, Map):
        return i.MapType(key_id=next(ids), key_type=iceberg_of(node.key, i, ids),
                         value_id=next(ids), value_type=iceberg_of(node.value, i, ids),
                         value_required=False)
    return _kind_of(node).iceberg(i, ids)


def _nested_kind(node: TypeNode) -> ColumnKind:
    python = frozenset({dict}) if isinstance(node, Struct | Map) else frozenset({list, tuple})
    return ColumnKind(python, spark_ddl(node), "JSONB", ("jsonb",),
                      lambda pa: arrow_of(node, pa), lambda t: spark_of(node, t),
                      lambda i, ids: iceberg_of(node, i, ids), spark_simple(node), node)


# The Kafka coordinates every staging row carries (the ingest time is added at flush).
COORDINATES = (Column("_topic", "string", False), Column("_partition", "int", False),
               Column("_offset", "long", False), Column("_timestamp", "long", True))
INGESTED_AT = Column("_ingested_at", "timestamp", False)
INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


@functools.cache
def column_kind(kind: str) -> ColumnKind:
    """What a column type is in each part of a table sink (KeyError: not a type)."""
    found = COLUMN_TYPES.get(kind)
    if found is not None:
        return found
    try:
        node = parse_type(kind)
    except ValueError:
        raise KeyError(kind) from None
    if is_nested(node):
        return _nested_kind(node)
    return _kind_of(node)


@functools.cache
def arrow_type(kind: str) -> Any:
    """The Arrow type of a column type (cached: every write asks once per column)."""
    import pyarrow as pa  # only with the spark extra

    return column_kind(kind).arrow(pa)


def spark_type(kind: str) -> Any:
    """The Spark type of a column type."""
    from pyspark.sql import types as t  # pyspark only if used

    return column_kind(kind).spark(t)


def spark_schema(columns: Sequence[Column]) -> Any:
    """The Spark schema of rows with ``columns`` (the processor's, then the coordinates),
    then ``_ingested_at``: what a table sink hands Spark."""
    from pyspark.sql import types as t  # pyspark only if used

    return t.StructType([t.StructField(c.name, spark_type(c.type), c.nullable)
                         for c in (*columns, INGESTED_AT)])


__all__ = ["COLUMN_TYPES", "COORDINATES", "INGESTED_AT", "INT_RANGE", "ColumnKind",
           "arrow_of", "arrow_type", "column_kind", "iceberg_of", "spark_ddl", "spark_of",
           "spark_schema", "spark_simple", "spark_type"]
