"""Staging appends through pyiceberg (``spark.appends: pyiceberg``).

Apache Iceberg's Python library writes a flush's Arrow table as Parquet data files and
commits them to the staging table from the Python process: the rows never cross into the
JVM (measured: about 2-4 us of CPU per row, against 35-42 us for Spark's Arrow -> rows ->
Parquet -> commit). The table, the catalog and the commit are the same as Spark's:

* the catalog is the one of ``spark.catalog``: a ``jdbc`` one (SQLite or PostgreSQL) opened
  with pyiceberg's ``SqlCatalog``, which commits with the same compare-and-swap of the
  table's metadata location in the same ``iceberg_tables`` row as Iceberg's JDBC catalog
  in the JVM, or a ``rest`` one opened with pyiceberg's ``RestCatalog`` (the same server,
  which applies a commit only on the base it asserts; its OAuth2 login:
  :mod:`actors.sinks.spark.pyiceberg_rest`); an ``s3://`` warehouse is written with
  ``spark.catalog.s3``'s endpoint, region, addressing and credentials;
* each append is one Iceberg commit whose snapshot summary carries ``kstage.commit-id``,
  ``kstage.writer-id`` and ``kstage.offsets`` (the current snapshot's offsets carried
  forward, :func:`~actors.sinks.spark.iceberg.carried`), so everything that reads the table
  (the worker's resume, the merge, ``kstage tables``, maintenance) works unchanged, and
  ``kstage.expect``, which the catalog checks against the metadata it commits on (the
  fence: a commit of a writer that fell behind is refused, not retried);
* a commit that lost the race to another writer (``CommitFailedException``) is applied again
  by pyiceberg on the reloaded table with the same data files, up to the table's
  ``commit.retry.*`` properties (30 tries), as Iceberg's Java library does for Spark; one
  still failing is a retriable sink error (its files were deleted, nothing landed);
* a commit that failed otherwise (a lost catalog connection) is looked up by its commit id
  by the caller (:class:`~actors.sinks.spark.staging.StagingWriter`) before anything is
  written again.

The table is created, its columns checked and its offsets read at assignment through
pyiceberg too (:mod:`actors.sinks.spark.pyiceberg_tables`, the catalog opened by
:mod:`actors.sinks.spark.pyiceberg_catalog`): a process whose staging tables are all
written this way starts no JVM unless something else in it needs Spark (a JDBC sink, the
merge loop of ``merge.interval_s``, the maintenance loop). Every call here runs on
:class:`Lake`'s one thread, in order. pyiceberg is imported only inside functions.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from actors.sinks.spark import iceberg, pyiceberg_nulls
from actors.sinks.spark.background_cpu import lower_this_thread
from actors.sinks.spark.ledger import Stream
from actors.sinks.spark.pyiceberg_catalog import open_catalog
from actors.sinks.spark.pyiceberg_rest import catalog_tokens, open_rest_catalog
from actors.sinks.spark.pyiceberg_tables import summaries
from actors.sinks.spark.pyiceberg_transaction import transaction
from actors.sinks.table.rows import arrow_table
from settings.models import SparkSettings

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Lake:
    """The process's pyiceberg catalog and the one thread that uses it (appends of every
    staging table, in the order they were handed over), and a second thread for the work
    beside them, with a catalog connection of its own (:meth:`aside`)."""

    def __init__(self, settings: SparkSettings) -> None:
        self.settings = settings
        self._executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="pyiceberg")
        self._aside: concurrent.futures.ThreadPoolExecutor | None = None  # the fold's
        self._aside_catalog: Any = None  # the second thread's own connection
        self._catalog: Any = None
        self.rest = settings.catalog.type == "rest"
        self._tokens = catalog_tokens(settings)  # a rest catalog's OAuth2 login

    def __repr__(self) -> str:
        return f"<Lake {self.settings.catalog.name} open={self._catalog is not None}>"

    def catalog(self) -> Any:
        """Lake thread: the catalog (opened on first use, its own tables created when
        absent: :func:`~actors.sinks.spark.pyiceberg_catalog.open_catalog`; a rest
        catalog: :func:`~actors.sinks.spark.pyiceberg_rest.open_rest_catalog`)."""
        if self._catalog is None:
            self._catalog = self._open()
        return self._catalog

    def _open(self) -> Any:
        pyiceberg_nulls.install()  # a NULL list of structs stays NULL (its docstring)
        return (open_rest_catalog(self.settings, self._tokens)
                if self.settings.catalog.type == "rest" else open_catalog(self.settings))

    def aside_table(self, name: str) -> Any:
        """The lake's second thread (:meth:`aside`): the table ``name`` loaded now through
        a connection of that thread's own (the same login), so that the appends never
        wait for its calls."""
        if self._aside_catalog is None:
            self._aside_catalog = self._open()
        return self._aside_catalog.load_table((self.settings.catalog.namespace, name))

    def table(self, name: str) -> Any:
        """Lake thread: the table ``name`` of the catalog's namespace, loaded now."""
        return self.catalog().load_table((self.settings.catalog.namespace, name))

    def location(self, name: str) -> str | None:
        """Lake thread: the metadata file the catalog's row of the table ``name`` points
        at now (a jdbc catalog: one query, no metadata read; a rest one: the table loaded,
        the REST API has nothing smaller; None: no such table)."""
        if self.rest:
            from pyiceberg.exceptions import NoSuchTableError  # only with appends: pyiceberg

            try:
                return str(self.table(name).metadata_location)
            except NoSuchTableError:
                return None
        from pyiceberg.catalog.sql import IcebergTables  # only with appends: pyiceberg
        from sqlalchemy import select
        from sqlalchemy.orm import Session

        catalog = self.catalog()
        with Session(catalog.engine) as session:
            found = session.execute(select(IcebergTables.metadata_location).where(
                IcebergTables.catalog_name == catalog.name,
                IcebergTables.table_namespace == self.settings.catalog.namespace,
                IcebergTables.table_name == name)).scalar_one_or_none()
        return None if found is None else str(found)

    async def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the lake thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def aside(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the lake's second thread, beside the appends (the background
        fold's reads and writes of data files: :mod:`actors.tables.pyiceberg_fold`), at a
        lower CPU priority than theirs (:mod:`~actors.sinks.spark.background_cpu`)."""
        if self._aside is None:
            self._aside = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="pyiceberg-aside", initializer=lower_this_thread)
        return await asyncio.get_running_loop().run_in_executor(self._aside, fn)

    def stop(self) -> None:
        """Wait for the running calls and close the catalog's connections."""
        if self._aside is not None:
            self._aside.shutdown()
        self._executor.shutdown()
        for catalog in (self._catalog, self._aside_catalog):
            if catalog is None:
                continue
            if self.rest:
                catalog.close()  # its HTTP connections
            else:
                catalog.engine.dispose()
        self._catalog = self._aside_catalog = None


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
            wanted = schema_to_pyarrow(column.field_type)
            if array.type != wanted and _widening(array.type, wanted):
                array = array.cast(wanted)  # rows converted before the column was widened
        else:
            array = pa.nulls(len(table), schema_to_pyarrow(column.field_type))
        arrays.append(array)
        fields.append(pa.field(column.name, array.type, nullable=not column.required))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _widening(have: Any, wanted: Any) -> bool:
    """Whether Arrow type ``have`` is one Iceberg widens to ``wanted`` (int32 -> int64,
    float32 -> float64, a decimal's precision)."""
    import pyarrow as pa  # only with the spark extra

    if pa.types.is_int32(have) and pa.types.is_int64(wanted):
        return True
    if pa.types.is_float32(have) and pa.types.is_float64(wanted):
        return True
    return bool(pa.types.is_decimal(have) and pa.types.is_decimal(wanted)
                and have.scale == wanted.scale and have.precision < wanted.precision)


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
        parsing the metadata file, whose size grows with the snapshots), else loaded (a
        rest catalog: always loaded, which is its one call that says where the table is)."""
        kept, self._loaded = self._loaded, None
        if self.lake.rest:
            return self.lake.table(self.table)
        if kept is not None and self.lake.location(self.table) == kept.metadata_location:
            return kept
        return self.lake.table(self.table)

    def committed_ids(self, commit_ids: set[str]) -> set[str]:
        """Which of ``commit_ids`` are in the table's current history."""
        if not commit_ids:
            return set()
        return set(summaries(self.lake.table(self.table), iceberg.COMMIT_ID)) & commit_ids

    def write(self, parts: Sequence[Any], offsets: dict[Stream, int], commit_id: str,
              expected: dict[Stream, int] | None = None) -> int:
        """One append of ``parts`` (record batches) with its snapshot properties; the
        number of rows. ``expected``: its ``kstage.expect`` (the catalog refuses the commit
        unless the table holds each stream exactly there, see
        :mod:`~actors.sinks.spark.pyiceberg_catalog`). Raises what the append raised (the
        caller looks the commit up, unless the fence refused it); the table is loaded again
        for the next append then."""
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
        if expected:
            props[iceberg.EXPECT] = iceberg.format_offsets(expected)
        # Table.append's transaction, its metadata computed once per state (not ~19 deep
        # copies of every snapshot per append: pyiceberg_transaction).
        with transaction(loaded) as appending:
            appending.append(conformed(table, loaded.schema()), snapshot_properties=props)
        self._loaded = loaded  # pyiceberg updated it to the metadata it committed
        return len(table)


__all__ = ["Lake", "PyIcebergAppends", "conformed"]
