"""The columns a staging table already has when a spark sink opens it (kstage
restarted), for a processor whose columns come from writer schemas
(:meth:`processors.base.LiveColumns.table_found`): it then judges writer schemas against
the table as it is. The sink's own columns (the Kafka coordinates, ``_ingested_at``, the
record columns) are left out; types are column type strings
(:mod:`processors.column_types`), as the Spark session or pyiceberg reads them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from actors.sinks.spark.catalog import dotted, qualified
from actors.sinks.spark.iceberg import column_name
from actors.sinks.spark.nested_evolution import iceberg_tree, spark_tree
from actors.sinks.table.columns import COORDINATES, INGESTED_AT
from processors.base import Column
from processors.column_types import type_string
from settings.models import SparkSettings


def own_names(extras: Iterable[Column]) -> frozenset[str]:
    """The table's names of the columns a spark sink adds to the processor's."""
    return frozenset(column_name(c.name) for c in (*COORDINATES, INGESTED_AT, *extras))


def _theirs(pairs: Iterable[tuple[str, str]], own: frozenset[str]) -> list[Column]:
    return [Column(name, kind, True) for name, kind in pairs if name not in own]


def through_spark(spark: Any, settings: SparkSettings, table: str,
                  extras: Sequence[Column]) -> list[Column] | None:
    """Spark thread: the processor's columns of ``table`` (None: no such table yet)."""
    if not spark.catalog.tableExists(dotted(settings, table)):
        return None
    name = qualified(settings, table)
    spark.sql(f"REFRESH TABLE {name}")
    return _theirs(((f.name, type_string(spark_tree(f.dataType)))
                    for f in spark.table(name).schema), own_names(extras))


def through_pyiceberg(catalog: Any, settings: SparkSettings, table: str,
                      extras: Sequence[Column]) -> list[Column] | None:
    """Lake thread: the processor's columns of ``table`` (None: no such table yet)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        loaded = catalog.load_table((settings.catalog.namespace, table))
    except NoSuchTableError:
        return None
    return _theirs(((f.name, type_string(iceberg_tree(f.field_type)))
                    for f in loaded.schema().fields), own_names(extras))


__all__ = ["own_names", "through_pyiceberg", "through_spark"]
