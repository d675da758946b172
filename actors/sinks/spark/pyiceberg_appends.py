"""Staging appends through pyiceberg (``spark.appends: pyiceberg``).

Apache Iceberg's Python library writes a flush's Arrow table as Parquet data files and
commits them to the staging table from the Python process: the rows never cross into the
JVM (measured: about 2-4 us of CPU per row, against 35-42 us for Spark's Arrow -> rows ->
Parquet -> commit). The table, the catalog and the commit are the same as Spark's:

* the catalog is the ``jdbc`` one of ``spark.catalog`` (SQLite or PostgreSQL), opened with
  pyiceberg's ``SqlCatalog``, which commits with the same compare-and-swap of the table's
  metadata location in the same ``iceberg_tables`` row as Iceberg's JDBC catalog in the
  JVM; an ``s3://`` warehouse is written with ``spark.catalog.s3``'s endpoint, region,
  addressing and credentials;
* each append is one Iceberg commit whose snapshot summary carries ``kstage.commit-id``,
  ``kstage.writer-id`` and ``kstage.offsets`` (the current snapshot's offsets carried
  forward, :func:`~actors.sinks.spark.iceberg.carried`), so everything that reads the table
  (the worker's resume, the merge, ``kstage tables``, maintenance) works unchanged;
* a commit that lost the race to another writer (``CommitFailedException``) is applied again
  by pyiceberg on the reloaded table with the same data files, up to the table's
  ``commit.retry.*`` properties (30 tries), as Iceberg's Java library does for Spark; one
  still failing is a retriable sink error (its files were deleted, nothing landed);
* a commit that failed otherwise (a lost catalog connection) is looked up by its commit id
  by the caller (:class:`~actors.sinks.spark.staging.StagingWriter`) before anything is
  written again.

Spark still creates the table (its DDL is the layout of every staging table) and checks its
columns, reads the offsets at assignment, merges and maintains: the process's JVM still
starts, at the table's registration. Every call here runs on :class:`Lake`'s one thread, in
order. pyiceberg is imported only inside functions.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import logging
from collections.abc import Callable, Sequence
from importlib.util import find_spec
from typing import Any, TypeVar
from urllib.parse import parse_qs, quote, urlsplit

from actors.sinks.spark import iceberg
from actors.sinks.spark.catalog import catalog_uri, sqlite_file, warehouse_location
from actors.sinks.spark.ledger import Stream
from actors.sinks.table.rows import arrow_table
from settings.models import SparkSettings

logger = logging.getLogger(__name__)

T = TypeVar("T")

SQLITE_TIMEOUT_S = 30.0
"""How long a commit waits for another writer of a SQLite catalog (its URI's
``busy_timeout``, in ms, when it has one)."""


def sqlalchemy_uri(settings: SparkSettings) -> str:
    """The jdbc catalog's URI as SQLAlchemy's: ``sqlite:///PATH?timeout=S`` (the JDBC
    URI's ``busy_timeout``), ``postgresql+psycopg2://USER:PASSWORD@HOST[:PORT]/DB``."""
    database = sqlite_file(settings)
    uri = catalog_uri(settings)
    if database is not None:
        query = parse_qs(uri.partition("?")[2])
        timeout = SQLITE_TIMEOUT_S
        if query.get("busy_timeout"):
            timeout = int(query["busy_timeout"][0]) / 1000
        return f"sqlite:///{database}?timeout={timeout:g}"
    if not uri.startswith("jdbc:postgresql:"):
        raise ValueError(f"appends: pyiceberg: no SQLAlchemy URL for the catalog {uri!r}")
    parts = urlsplit(uri.removeprefix("jdbc:"))
    catalog = settings.catalog
    login = ""
    if catalog.user:
        secret = catalog.password.get_secret_value() if catalog.password else ""
        login = f"{quote(catalog.user, safe='')}:{quote(secret, safe='')}@"
    return f"postgresql+psycopg2://{login}{parts.netloc}{parts.path}"


def catalog_properties(settings: SparkSettings) -> dict[str, str]:
    """pyiceberg's ``SqlCatalog`` properties of ``spark.catalog`` (secrets included:
    never logged)."""
    props = {"uri": sqlalchemy_uri(settings), "warehouse": warehouse_location(settings),
             # Spark's catalog makes the catalog's tables (V1 layout) at registration.
             "init_catalog_tables": "false",
             # A pooled connection the server closed (a restart) is replaced, not failed.
             "pool_pre_ping": "true"}
    s3 = settings.catalog.s3
    if s3 is not None:
        props |= {"s3.region": s3.region,
                  "s3.force-virtual-addressing": str(not s3.path_style_access).lower()}
        if s3.endpoint is not None:
            props["s3.endpoint"] = s3.endpoint
        if s3.access_key_id is not None and s3.secret_access_key is not None:
            props["s3.access-key-id"] = s3.access_key_id.get_secret_value()
            props["s3.secret-access-key"] = s3.secret_access_key.get_secret_value()
    return props


def missing_modules(settings: SparkSettings) -> list[str]:
    """The packages ``appends: pyiceberg`` needs with this catalog that are not
    installed (pyiceberg, pyiceberg-core for the ``days()`` transform, SQLAlchemy, and
    psycopg2 for a PostgreSQL catalog)."""
    needed = {"pyiceberg": "pyiceberg", "pyiceberg_core": "pyiceberg-core",
              "sqlalchemy": "SQLAlchemy"}
    if sqlite_file(settings) is None:
        needed["psycopg2"] = "psycopg2-binary"
    return [package for module, package in needed.items() if find_spec(module) is None]


class Lake:
    """The process's pyiceberg catalog and the one thread that uses it (appends of every
    staging table, in the order they were handed over)."""

    def __init__(self, settings: SparkSettings) -> None:
        self.settings = settings
        self._executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="pyiceberg")
        self._catalog: Any = None

    def __repr__(self) -> str:
        return f"<Lake {self.settings.catalog.name} open={self._catalog is not None}>"

    def _open(self) -> Any:
        if self._catalog is None:
            from pyiceberg.catalog.sql import SqlCatalog  # only with appends: pyiceberg

            self._catalog = SqlCatalog(self.settings.catalog.name,
                                       **catalog_properties(self.settings))
        return self._catalog

    def table(self, name: str) -> Any:
        """Lake thread: the table ``name`` of the catalog's namespace, loaded now."""
        return self._open().load_table((self.settings.catalog.namespace, name))

    def location(self, name: str) -> str | None:
        """Lake thread: the metadata file the catalog's row of the table ``name`` points
        at now (one query, no metadata read; None: no such table)."""
        from pyiceberg.catalog.sql import IcebergTables  # only with appends: pyiceberg
        from sqlalchemy import select
        from sqlalchemy.orm import Session

        catalog = self._open()
        with Session(catalog.engine) as session:
            found = session.execute(select(IcebergTables.metadata_location).where(
                IcebergTables.catalog_name == catalog.name,
                IcebergTables.table_namespace == self.settings.catalog.namespace,
                IcebergTables.table_name == name)).scalar_one_or_none()
        return None if found is None else str(found)

    async def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the lake thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def stop(self) -> None:
        """Wait for the running call and close the catalog's connections."""
        self._executor.shutdown()
        if self._catalog is not None:
            self._catalog.engine.dispose()
            self._catalog = None


def _summaries(loaded: Any, key: str) -> list[str]:
    """``summary[key]`` of the snapshots of ``loaded``'s current history that carry it."""
    found = []
    snapshot = loaded.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if key in summary:
            found.append(str(summary[key]))
        parent = snapshot.parent_snapshot_id
        snapshot = loaded.snapshot_by_id(parent) if parent is not None else None
    return found


def conformed(table: Any, schema: Any) -> Any:
    """The Arrow ``table`` in the order of the Iceberg ``schema``'s columns, each field
    nullable exactly when the column is optional (pyiceberg refuses a nullable field for a
    required column); a column the rows do not have (added by another process's newer
    processor) is NULL."""
    import pyarrow as pa  # only with the spark extra
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    arrays, fields = [], []
    for column in schema.fields:
        if column.name in table.column_names:
            array = table.column(column.name)
        else:
            array = pa.nulls(len(table), schema_to_pyarrow(column.field_type))
        arrays.append(array)
        fields.append(pa.field(column.name, array.type, nullable=not column.required))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


class PyIcebergAppends:
    """One staging table's commits through pyiceberg, for
    :meth:`~actors.sinks.spark.staging.StagingWriter._append` (lake thread)."""

    def __init__(self, lake: Lake, table: str, writer_id: str) -> None:
        self.lake = lake
        self.table = table
        self.writer_id = writer_id
        self._loaded: Any = None  # the table as this writer's last append left it

    def _current(self) -> Any:
        """The table at its current snapshot: the one this writer's last append left
        when the catalog still points at its metadata (one query instead of reading and
        parsing the metadata file, whose size grows with the snapshots), else loaded."""
        kept, self._loaded = self._loaded, None
        if kept is not None and self.lake.location(self.table) == kept.metadata_location:
            return kept
        return self.lake.table(self.table)

    def committed_ids(self, commit_ids: set[str]) -> set[str]:
        """Which of ``commit_ids`` are in the table's current history."""
        if not commit_ids:
            return set()
        return set(_summaries(self.lake.table(self.table), iceberg.COMMIT_ID)) & commit_ids

    def write(self, parts: Sequence[Any], offsets: dict[Stream, int], commit_id: str) -> int:
        """One append of ``parts`` (record batches) with its snapshot properties; the
        number of rows. Raises what the append raised (the caller looks the commit up); the
        table is loaded again for the next append then."""
        # The flush's batches as they are (no contiguous copy of the flush in memory).
        table = arrow_table(parts, dt.datetime.now(dt.UTC), contiguous=False)
        table = table.rename_columns([iceberg.column_name(n) for n in table.column_names])
        loaded = self._current()  # kept only when this append succeeds
        props = {iceberg.COMMIT_ID: commit_id, iceberg.WRITER_ID: self.writer_id}
        if offsets:
            current = loaded.current_snapshot()
            summary = current.summary.additional_properties if current and current.summary \
                else {}
            recorded = summary.get(iceberg.OFFSETS)
            props[iceberg.OFFSETS] = iceberg.format_offsets(iceberg.carried(
                iceberg.parse_offsets(recorded) if recorded else {}, offsets))
        loaded.append(conformed(table, loaded.schema()), snapshot_properties=props)
        self._loaded = loaded  # pyiceberg updated it to the metadata it committed
        return len(table)


__all__ = ["Lake", "PyIcebergAppends", "catalog_properties", "conformed", "missing_modules",
           "sqlalchemy_uri"]
