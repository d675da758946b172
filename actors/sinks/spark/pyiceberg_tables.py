"""Staging tables through pyiceberg (``spark.appends: pyiceberg``): create, check the
columns, read the Kafka offsets, with no JVM, on :class:`~actors.sinks.spark.
pyiceberg_appends.Lake`'s thread.

The layout is exactly the one Spark's DDL makes (:func:`actors.sinks.spark.iceberg.
create_staging`; ``tests/integration/test_pyiceberg_tables.py`` creates a table each way and
compares them field by field):

* the schema: the processor's columns, the coordinates, ``_ingested_at``, field ids from 1
  in that order, each column required exactly when it is NOT NULL, each type the Iceberg
  type Spark's type maps to (``TIMESTAMP``: ``timestamptz``);
* the partition spec ``days(_ingested_at)``, field ``_ingested_at_day`` (id 1000), or the
  topic's ``sink.partition_by`` (:mod:`actors.sinks.spark.partitioning`: fields from id
  1000, named as Spark names them); unsorted;
* the location ``<warehouse>/<namespace>/<table>`` (the JDBC catalog's default; a REST
  catalog's server chooses it, as for Spark's ``CREATE TABLE``), format
  version 2, the properties :data:`~actors.sinks.spark.iceberg.STAGING_PROPERTIES` (after the
  topic's ``sink.table_properties``), and those
  Spark and Iceberg's Java library add: ``owner``, ``write.parquet.compression-codec: zstd``.

An existing table (made by Spark or pyiceberg) is checked as Spark checks it: its columns'
types as Spark names them (:func:`spark_type_name`), compared with the processor's by
:func:`~actors.sinks.spark.iceberg.schema_change`: new nullable columns added as optional
ones (what Spark's ``ALTER TABLE ... ADD COLUMNS`` does), any other change refused with the
same FatalError naming the table and the column. The offsets a worker resumes from are the
highest any snapshot of the table's current history records (as
:func:`~actors.sinks.spark.offset_history.table_offsets`).

pyiceberg is imported only inside functions.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from actors.sinks.spark import iceberg, offset_history
from actors.sinks.spark.catalog import dotted, warehouse_location
from actors.sinks.spark.nested_evolution import iceberg_tree, names, nested_evolution, split
from actors.sinks.spark.partitioning import Layout, pyiceberg_spec
from actors.sinks.spark.pyiceberg_catalog import ensure_namespace, owner
from actors.sinks.table.columns import COORDINATES, INGESTED_AT, column_kind, spark_simple
from processors.base import Column
from processors.column_types import type_string
from settings.models import SparkSettings

logger = logging.getLogger(__name__)

PARTITION_FIELD = "_ingested_at_day"
"""The staging tables' partition field (``days(_ingested_at)``), named as Spark names it."""

JAVA_DEFAULTS = {"write.parquet.compression-codec": "zstd"}
"""Properties Iceberg's Java library records in every table it creates."""


NESTED_IDS = 100_000
"""Where the placeholder ids of nested fields start (the table's create or schema update
assigns fresh ones, as Iceberg's Java library does: top-level fields first)."""


def iceberg_type(kind: str, ids: Iterator[int] | None = None) -> Any:
    """The Iceberg type of a column type (as Spark's type of it becomes in Iceberg); a
    nested one's fields numbered from ``ids`` (default: placeholders from
    :data:`NESTED_IDS`)."""
    from pyiceberg import types  # only with appends: pyiceberg

    return column_kind(kind).iceberg(types, itertools.count(NESTED_IDS) if ids is None
                                     else ids)


def spark_type_name(field_type: Any) -> str:
    """An Iceberg type as Spark names it (``simpleString``: ``bigint``, ``timestamp``,
    ``decimal(10,2)``, ``array<int>`` ...), for the column check."""
    try:
        return spark_simple(iceberg_tree(field_type))
    except ValueError:  # not a type a staging table is made of
        return str(field_type)


def staging_schema(declared: Sequence[Column]) -> Any:
    """The Iceberg schema of a staging table with the ``declared`` columns (the
    processor's and the coordinates, Iceberg's names), then ``_ingested_at``."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    nested = itertools.count(NESTED_IDS)
    return Schema(*[NestedField(field_id=i, name=c.name,
                                field_type=iceberg_type(c.type, nested),
                                required=not c.nullable)
                    for i, c in enumerate((*declared, INGESTED_AT), start=1)])


def staging_spec(schema: Any, layout: Layout | None = None) -> Any:
    """``layout``'s partition spec over ``schema`` (default ``days(_ingested_at)``)."""
    return pyiceberg_spec(schema, layout.transforms if layout else ())


def staging_properties(layout: Layout | None = None) -> dict[str, str]:
    """The properties a staging table is created with (``format-version`` is taken out of
    them by the library: it is the metadata's own field): ``layout``'s, then kstage's."""
    return {**dict(layout.properties if layout else ()), **iceberg.STAGING_PROPERTIES,
            **JAVA_DEFAULTS, "owner": owner()}


def _warn_spec(loaded: Any, name: str, layout: Layout) -> None:
    """Warn when the existing table's current spec is not ``layout``'s."""
    warning = layout.differs(name, [(f.name, str(f.transform)) for f in loaded.spec().fields])
    if warning is not None:
        logger.warning("%s", warning)


def table_location(settings: SparkSettings, table: str) -> str:
    """Where the JDBC catalog puts a new table: ``<warehouse>/<namespace>/<table>``."""
    return "/".join((warehouse_location(settings).rstrip("/"), settings.catalog.namespace,
                     table))


def create_staging(catalog: Any, settings: SparkSettings, table: str,
                   columns: Sequence[Column], layout: Layout | None = None) -> list[str]:
    """Create the staging table (and its namespace) if needed, with ``layout``'s spec and
    properties, or check the existing one's columns and add the new nullable ones (and
    warn when its spec is not ``layout``'s); returns the names of the columns added.
    FatalError when the processor's columns do not fit the table, or ``layout`` the
    columns (the texts of :func:`~actors.sinks.spark.iceberg.create_staging`'s)."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

    namespace = settings.catalog.namespace
    ensure_namespace(catalog, namespace)
    identifier = (namespace, table)
    declared = iceberg.table_columns((*columns, *COORDINATES))
    try:
        loaded = catalog.load_table(identifier)
    except NoSuchTableError:
        layout = layout or Layout()
        layout.check(dotted(settings, table), (*declared, INGESTED_AT))
        schema = staging_schema(declared)
        try:
            # A rest catalog's server places the table, as with Spark's CREATE TABLE.
            catalog.create_table(identifier, schema=schema,
                                 location=None if settings.catalog.type == "rest"
                                 else table_location(settings, table),
                                 partition_spec=staging_spec(schema, layout),
                                 properties=staging_properties(layout))
            return []
        except TableAlreadyExistsError:  # another process made it meanwhile: check it
            loaded = catalog.load_table(identifier)
    if layout is not None:
        _warn_spec(loaded, dotted(settings, table), layout)
    existing = {f.name: spark_type_name(f.field_type) for f in loaded.schema().fields}
    added, errors = iceberg.schema_change(existing, declared)
    if errors:
        raise iceberg.unfit(dotted(settings, table), errors)
    if added:
        with loaded.update_schema() as update:
            for column in added:
                update.add_column(column.name, iceberg_type(column.type), required=False)
    return [c.name for c in added]


def evolve_staging(catalog: Any, settings: SparkSettings, table: str,
                   columns: Sequence[Column], layout: Layout | None = None) -> list[str]:
    """:func:`actors.sinks.spark.iceberg.evolve_staging` through pyiceberg: create the
    table (with ``layout``), or add the new nullable columns and widen the types in one
    ``update_schema()`` commit (an existing table's spec compared with ``layout`` when
    given); the changes made, as text."""
    from pyiceberg.exceptions import NoSuchTableError

    namespace = settings.catalog.namespace
    try:
        loaded = catalog.load_table((namespace, table))
    except NoSuchTableError:
        create_staging(catalog, settings, table, columns, layout)
        return []
    if layout is not None:
        _warn_spec(loaded, dotted(settings, table), layout)
    fields = loaded.schema().fields
    existing = {f.name: spark_type_name(f.field_type) for f in fields}
    inside, declared = split(existing, iceberg.table_columns(columns))
    added, widened, errors = iceberg.evolution(existing, declared)
    nested = nested_evolution({f.name: iceberg_tree(f.field_type) for f in fields
                               if f.name in names(inside)}, inside)
    if errors or nested.errors:
        raise iceberg.unfit(dotted(settings, table), [*errors, *nested.errors])
    if added or widened or nested.changes or nested.loosened:
        with loaded.update_schema() as update:
            for column in added:
                update.add_column(column.name, iceberg_type(column.type), required=False)
            for column in widened:
                update.update_column(column.name, field_type=iceberg_type(column.type))
            for path in nested.loosened:
                update.make_column_optional(path)
            for change in nested.changes:
                kind = iceberg_type(type_string(change.type))
                if change.kind == "add":
                    update.add_column(change.path, kind, required=False)
                else:
                    update.update_column(change.path, field_type=kind)
    return ([f"added {c.name}" for c in added]
            + [f"widened {c.name} to {c.type}" for c in widened] + nested.described())


def summaries(loaded: Any, key: str) -> list[str]:
    """``summary[key]`` of the snapshots of ``loaded``'s current history that carry it
    (newest first)."""
    # One pass: pyiceberg's snapshot_by_id searches every snapshot, so a walk through it
    # was quadratic in the snapshots the table keeps.
    by_id = {snapshot.snapshot_id: snapshot for snapshot in loaded.metadata.snapshots}
    found = []
    snapshot = loaded.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if key in summary:
            found.append(str(summary[key]))
        parent = snapshot.parent_snapshot_id
        snapshot = by_id.get(parent) if parent is not None else None
    return found


def table_offsets(loaded: Any) -> dict[tuple[str, str, int], int]:
    """Per (group, topic, partition), the offset up to which the table ``loaded`` holds
    the partition (as :func:`~actors.sinks.spark.offset_history.table_offsets`: resets honoured)."""
    return offset_history.fold(offset_history.pyiceberg_summaries(loaded))


__all__ = ["JAVA_DEFAULTS", "NESTED_IDS", "PARTITION_FIELD", "create_staging", "iceberg_type",
           "spark_type_name", "staging_properties", "staging_schema", "staging_spec",
           "summaries", "table_location", "table_offsets"]
