"""Committing a reset of partitions' offsets in a staging table (``kstage tables
reset-offsets``): one snapshot of no data whose summary carries ``kstage.offsets-reset``
and the table's offsets with the reset ones (:func:`~actors.sinks.spark.offset_history.
reset_summary`; the rule readers follow is :mod:`actors.sinks.spark.offset_history`).

Two ways, the same snapshot:

* :class:`PyIcebergOffsets`: pyiceberg on the ``jdbc`` catalog (SQLite or PostgreSQL) or
  the ``rest`` one (its OAuth2 login included), no JVM: a fast append of no files with the
  summary properties;
* :class:`SparkOffsets`: Iceberg's Java API in the Spark session, for a catalog only the
  JVM can build (a ``catalog-impl`` class): ``newAppend().set(...).commit()``, as
  maintenance records offsets again (:func:`~actors.tables.maintenance.record_offsets`).

Both read the table's offsets back after the commit (:meth:`TableOffsets.offsets`): the
caller checks that the reset stands (an append of a running kstage that computed its
carried offsets before the reset could commit them after it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from actors.sinks.spark import offset_history
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import dotted
from actors.sinks.spark.ledger import Stream
from settings.models import SparkSettings


class TableOffsets(Protocol):
    """Reads a staging table's offsets and commits resets of them."""

    async def exists(self, table: str) -> bool:
        """Whether the catalog has ``table`` (a name of ``spark.catalog``'s namespace)."""

    async def offsets(self, table: str) -> dict[Stream, int]:
        """The offsets the table holds (resets honoured)."""

    async def reset(self, table: str, resets: Mapping[Stream, int]) -> int:
        """Commit the reset snapshot; returns its id."""


class PyIcebergOffsets:
    """:class:`TableOffsets` through pyiceberg's ``SqlCatalog`` (a ``jdbc`` catalog) or its
    ``RestCatalog`` (a ``rest`` one)."""

    def __init__(self, settings: SparkSettings) -> None:
        from actors.sinks.spark.pyiceberg_appends import Lake

        self.settings = settings
        self.lake = Lake(settings)

    def close(self) -> None:
        self.lake.stop()

    async def exists(self, table: str) -> bool:
        return await self.lake.call(lambda: self.lake.location(table) is not None)

    async def offsets(self, table: str) -> dict[Stream, int]:
        from actors.sinks.spark.pyiceberg_tables import table_offsets

        return await self.lake.call(lambda: table_offsets(self.lake.table(table)))

    async def reset(self, table: str, resets: Mapping[Stream, int]) -> int:
        def commit() -> int:
            from actors.sinks.spark.pyiceberg_tables import table_offsets

            loaded = self.lake.table(table)
            props = offset_history.reset_summary(table_offsets(loaded), resets)
            with loaded.transaction() as tx, \
                    tx.update_snapshot(snapshot_properties=props).fast_append():
                pass  # no files: a snapshot of the summary alone
            snapshot = self.lake.table(table).current_snapshot()
            return int(snapshot.snapshot_id)

        return await self.lake.call(commit)


class SparkOffsets:
    """:class:`TableOffsets` through Iceberg's Java API on ``actor`` (the process's)."""

    def __init__(self, actor: SparkActor) -> None:
        self.actor = actor
        self.settings = actor.settings

    async def exists(self, table: str) -> bool:
        return bool(await self.actor.call(
            lambda spark: spark.catalog.tableExists(dotted(self.settings, table))))

    async def offsets(self, table: str) -> dict[Stream, int]:
        return await self.actor.call(
            lambda spark: offset_history.table_offsets(spark, self.settings, table))

    async def reset(self, table: str, resets: Mapping[Stream, int]) -> int:
        def commit(spark: Any) -> int:
            current = offset_history.table_offsets(spark, self.settings, table)
            util = spark._jvm.org.apache.iceberg.spark.Spark3Util
            loaded = util.loadIcebergTable(spark._jsparkSession, dotted(self.settings, table))
            append = loaded.newAppend()
            for key, value in offset_history.reset_summary(current, resets).items():
                append = append.set(key, value)
            append.commit()
            loaded.refresh()
            return int(loaded.currentSnapshot().snapshotId())

        return await self.actor.call(commit)


__all__ = ["PyIcebergOffsets", "SparkOffsets", "TableOffsets"]
