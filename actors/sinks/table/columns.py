"""The column types of the table sinks, in one map: what each declared type accepts in a
row and what it is in Arrow, Spark and PostgreSQL.

A processor declares its columns with the logical types of
:data:`processors.base.ColumnType`; the sinks add the Kafka coordinates
(:data:`COORDINATES`) and ``_ingested_at`` (type ``timestamp``, set at flush). Every
sink-specific name of a type comes from :func:`column_kind`: :data:`COLUMN_TYPES` for the
types without parameters (a new type is one entry there), built for ``decimal(P,S)``.
pyarrow and pyspark are never imported by this module: their types are built by functions
given the module (:func:`arrow_type`, :func:`spark_type`).
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from processors.base import Column, decimal_parts


@dataclass(frozen=True, slots=True)
class ColumnKind:
    """One column type as each part of a table sink sees it.

    Attributes:
        python: the Python types a row value may have (``bool`` is not an ``int`` here).
        spark_sql: the Spark SQL type (DDL of the staging tables, schema comparison).
        postgres: the PostgreSQL type of a created table.
        postgres_found: the ``format_type()`` names an existing PostgreSQL column may have.
        arrow: builds the Arrow type, given the ``pyarrow`` module.
        spark: builds the Spark type, given the ``pyspark.sql.types`` module.
        iceberg: builds the Iceberg type Spark's type becomes in an Iceberg table, given
            the ``pyiceberg.types`` module.
    """

    python: frozenset[type]
    spark_sql: str
    postgres: str
    postgres_found: tuple[str, ...]
    arrow: Callable[[Any], Any]
    spark: Callable[[Any], Any]
    iceberg: Callable[[Any], Any]


COLUMN_TYPES: dict[str, ColumnKind] = {
    "string": ColumnKind(frozenset({str}), "STRING", "TEXT", ("text", "character varying"),
                         lambda pa: pa.string(), lambda t: t.StringType(),
                         lambda i: i.StringType()),
    "int": ColumnKind(frozenset({int}), "INT", "INTEGER", ("integer", "bigint"),
                      lambda pa: pa.int32(), lambda t: t.IntegerType(),
                      lambda i: i.IntegerType()),
    "long": ColumnKind(frozenset({int}), "BIGINT", "BIGINT", ("bigint",),
                       lambda pa: pa.int64(), lambda t: t.LongType(),
                       lambda i: i.LongType()),
    "double": ColumnKind(frozenset({float, int}), "DOUBLE", "DOUBLE PRECISION",
                         ("double precision",), lambda pa: pa.float64(),
                         lambda t: t.DoubleType(), lambda i: i.DoubleType()),
    "boolean": ColumnKind(frozenset({bool}), "BOOLEAN", "BOOLEAN", ("boolean",),
                          lambda pa: pa.bool_(), lambda t: t.BooleanType(),
                          lambda i: i.BooleanType()),
    "binary": ColumnKind(frozenset({bytes, bytearray}), "BINARY", "BYTEA", ("bytea",),
                         lambda pa: pa.binary(), lambda t: t.BinaryType(),
                         lambda i: i.BinaryType()),
    # An instant: an aware datetime, written in UTC (also the sinks' ``_ingested_at``).
    "timestamp": ColumnKind(frozenset({dt.datetime}), "TIMESTAMP", "TIMESTAMPTZ",
                            ("timestamp with time zone", "timestamp without time zone"),
                            lambda pa: pa.timestamp("us", tz="UTC"),
                            lambda t: t.TimestampType(), lambda i: i.TimestamptzType()),
}

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
    parts = decimal_parts(kind)
    if parts is None:
        raise KeyError(kind)
    p, s = parts
    return ColumnKind(frozenset({decimal.Decimal, int}), f"DECIMAL({p},{s})",
                      f"NUMERIC({p},{s})", (f"numeric({p},{s})",),
                      lambda pa: pa.decimal128(p, s), lambda t: t.DecimalType(p, s),
                      lambda i: i.DecimalType(p, s))


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
           "arrow_type", "column_kind", "spark_schema", "spark_type"]
