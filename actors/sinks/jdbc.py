"""The JDBC sink: rows land in a PostgreSQL staging table through Spark's JDBC writer.

Settings: a topic's ``sink: {type: jdbc, table: NAME, url: jdbc:postgresql://..., user,
password}`` (:class:`~actors.sinks.jdbc_settings.JdbcSinkSettings`); Spark itself is
the process-wide ``spark:`` section, shared with the spark sinks (one SparkSession per
process, see :mod:`actors.sinks.spark.actor`).

How it works:

* The sink gets the same rows a spark sink gets: the processor's typed ``columns``, then
  ``_topic, _partition, _offset, _timestamp`` and ``_ingested_at`` (UTC, set at flush).
  The database takes concurrent inserts from several processes itself.
* Every JDBC call runs on the :class:`~actors.sinks.spark.actor.SparkActor`'s one thread. The
  driver jar (``jar``, default Debian's ``/usr/share/java/postgresql.jar``) is added to
  the running session with ``ADD JAR`` when the driver class is not on its classpath
  already (``spark.conf: {spark.jars: ...}`` also works); ``ADD JAR`` also ships it to
  the executors of a cluster.
* A :class:`~actors.sinks.jdbc_append.JdbcTableWriter` (a
  :class:`~actors.sinks.table.batching.TableWriter`) batches the rows of all the workers
  writing one table (``spark.flush_max_rows`` / ``spark.flush_max_interval_s``) and
  appends each micro-batch in one transaction: the rows of a flush land together or not
  at all.
* ``mode: append`` is exactly once (:class:`JdbcSink` ``stores_offsets``): a flush of the
  worker's batches writes its rows through the driver (one ``INSERT ... SELECT FROM
  json_populate_recordset`` per flush) and moves the Kafka offsets they cover in the
  table's offsets table, in the same transaction, with a compare-and-set
  (:mod:`actors.sinks.jdbc_offsets`); batches of a partition are flushed in offset order
  (the ledger of :mod:`actors.sinks.spark.ledger`), a partition resumes where the table
  holds it, and a flush another writer got ahead of is rolled back, counted and said.
  Rows PostgreSQL refuses are found by halving inside that transaction (savepoints),
  which is then rolled back: the writes fail with
  :class:`~actors.sinks.table.batching.RowsRefused` after the refused rows were taken
  off, and the sink dead-letters them, then writes the others at once. Writes without a
  position (:meth:`JdbcSink.write`) go through Spark's JDBC writer as before.
* The table is created if missing with explicit PostgreSQL DDL (TEXT, INTEGER, BIGINT,
  REAL, DOUBLE PRECISION, BOOLEAN, BYTEA, DATE, TIMESTAMP, TIMESTAMPTZ, NUMERIC(P,S), JSONB
  for a nested type: :mod:`actors.sinks.table.columns`; NOT NULL where the column is not
  nullable). An existing table must have every column with a compatible type and
  nullability (FatalError naming the table and the columns otherwise).
* Failures are told apart by the PostgreSQL SQLSTATE of the JDBC exception
  (:func:`~actors.sinks.jdbc_errors.sql_error`). A row that does not fit its column types
  (checked before the write), or that PostgreSQL refuses with a data error (class ``22``:
  too long for its ``varchar(n)``, out of range, invalid text...) or an integrity one
  (class ``23``: a duplicate key, NOT NULL, a foreign key, a CHECK) goes to
  ``on_permanent_failure``: the worker dead-letters it, with the SQLSTATE, the server's
  message and the row's topic/partition/offset. A flush refused with such an error is
  split in halves, each written on its own (one transaction each) and split again while it
  fails, until the refused rows are alone: k bad rows in n cost O(k log n) writes, the
  other rows land. Every other failure (class ``08`` connection, ``53`` resources,
  ``57P01`` shutdown, ``40001``/``40P01`` serialization/deadlock, no SQLSTATE at all...)
  raises :class:`~actors.errors.SinkError`: the worker backs off and retries the batch,
  and commits nothing meanwhile. A write that failed wrote nothing (one transaction); the
  rows an interrupted split already wrote or refused are taken off the batch, so its retry
  writes the others and nothing twice. The table check at :meth:`JdbcSink.open` is retried
  at the first write when the database cannot be reached at open.
* ``mode: upsert`` (default ``append``): one row per natural key of the processor
  (``Processor.key``; ``kstage validate`` refuses a processor without one), created with a
  PRIMARY KEY on it (an existing table needs a unique index on exactly the key). Each
  flush keeps the newest row of each key and writes them in one ``INSERT ... ON CONFLICT
  DO UPDATE ... WHERE`` *the incoming record is newer* statement, through the driver on
  the JVM (Spark's writer cannot upsert), in one transaction: one statement per
  ``batch_size`` rows, the rows as one JSON parameter. What "newer" means, and why, is
  in :mod:`actors.sinks.jdbc_upsert`. Failures are classified and split exactly as appends are.
  A processor's deletions delete the key's row, recorded in the deletions table
  ``<table>_deletions`` so that an older upsert replayed after them never lands (same
  module).

The modules: the settings (:mod:`actors.sinks.jdbc_settings`), the table's DDL and checks
(:mod:`actors.sinks.jdbc_tables`), the SQLSTATE classification
(:mod:`actors.sinks.jdbc_errors`), the writer (:mod:`actors.sinks.jdbc_writer`), its
exactly-once ``mode: append`` (:mod:`actors.sinks.jdbc_append`, on
:mod:`actors.sinks.table.exactly_once`), the offsets table
(:mod:`actors.sinks.jdbc_offsets`), the upsert SQL (:mod:`actors.sinks.jdbc_upsert`);
this module holds the sink (:class:`JdbcSink`).

The password is never logged; URLs are shown without their query string.
pyspark is imported only inside functions: importing this module does not load it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from actors.errors import SinkError
from actors.sinks.base import Position, Problem
from actors.sinks.jdbc_append import JdbcTableWriter, table_writer
from actors.sinks.jdbc_offsets import offsets_name_problem, offsets_table
from actors.sinks.jdbc_settings import JdbcSinkSettings, safe_url
from actors.sinks.jdbc_tables import create_table_sql, qualified, table_mismatches
from actors.sinks.jdbc_upsert import deletions_name_problem
from actors.sinks.jdbc_writer import execute_statement
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.sink import SparkTableSink
from actors.sinks.table.columns import COORDINATES
from actors.sinks.table.sink import TableSink
from processors.base import Column, Row
from settings.identifiers import sql_identifier

logger = logging.getLogger(__name__)

_RESERVED = (*(c.name for c in COORDINATES), "_ingested_at")


class JdbcSink(SparkTableSink):
    """One worker's handle on a JDBC staging table (see the module docstring)."""

    type = "jdbc"
    settings_model = JdbcSinkSettings
    requires = {"pyspark": "kstage[spark]"}
    settings: JdbcSinkSettings
    _writer: JdbcTableWriter | None

    def __init__(self, settings: JdbcSinkSettings, actor: SparkActor | None = None,
                 columns: Sequence[Column] = (), table: str | None = None) -> None:
        super().__init__(settings, actor, columns, table)
        # mode: append stores its offsets (exactly once, with the offsets table of
        # actors.sinks.jdbc_offsets); mode: upsert is idempotent by key.
        self.capabilities = replace(TableSink.capabilities,
                                    stores_offsets=settings.mode == "append",
                                    evolves_columns=True)

    def offsets_reset(self, group: str, topic: str, partition: int) -> str:
        """The SQL that forgets the partition's offset in the table's offsets table
        (the group stopped)."""
        # Shown to the operator, never run: the names come from the configuration.
        table = qualified(offsets_table(self.table))
        return (f"with the group stopped, `DELETE FROM {table} "  # noqa: S608
                f"WHERE group_id = '{group}' AND topic = '{topic}' AND partition = "
                f"{partition}` in the database at {safe_url(self.settings.url)}")

    async def write_at(self, rows: Sequence[Row], position: Position) -> None:
        """``mode: append``: write the rows of one batch with its offsets; rows of
        messages the table already holds (before its offset for the partition) are
        dropped. ``mode: upsert``: :meth:`write`."""
        await self._follow_schema()
        writer = self._writer
        if writer is None:
            if self.context.live is not None and not rows:
                return  # nothing known of the schema, nothing to write
            raise SinkError("jdbc sink: write before open")
        if writer.offsets is None:
            await self.write(rows)
            return
        await self._write_after_floor(writer, rows, position)

    async def write(self, rows: Sequence[Row]) -> None:
        await self._follow_schema()
        if self._writer is None and self.context.live is not None and not rows:
            return
        await super().write(rows)

    async def _evolve(self, live: tuple[Column, ...]) -> None:
        columns = (*live, *self._extras)
        if self._writer is None:
            self.columns = columns
            self._writer = table_writer(
                self._spark(), self.settings, self.table, columns, self.context.key,
                self.context.emits_deletes, self.context.source_order, evolving=True)
        await self._writer.evolve(columns)
        self.columns = columns

    async def assigned(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """``mode: append``: the table's offsets of the assigned partitions (SinkError
        when the database cannot be read now: the first write of each partition reads
        them again); batches of an earlier ownership are forgotten first."""
        writer = self._writer
        if writer is None or writer.offsets is None:
            return {}
        return await self._assign_to(writer, partitions)

    async def revoked(self, partitions: Sequence[tuple[str, int]], timeout_s: float) -> None:
        """Wait (up to ``timeout_s``) for running flushes of the partitions, then forget
        them; one still running past the wait commits only if the table's offsets are
        still where it continues from (the compare-and-set)."""
        writer = self._writer
        if writer is None or writer.offsets is None:
            return
        still = await self._revoke_from(writer, partitions, timeout_s)
        if still:
            logger.warning("%s: %d flush(es) of revoked partitions %s still running after "
                           "%.1fs; each commits only if no other writer moved their offsets",
                           writer.where, still, sorted(partitions), timeout_s)

    def check(self) -> list[Problem]:
        """The table name must be ``name`` or ``schema.name`` of plain identifiers; the
        processor must declare columns, none named like the sink's own."""
        problems: list[Problem] = []
        try:
            sql_identifier(self.table, qualified=True)
        except ValueError as exc:
            problems.append((("sink", "table"), f"jdbc sink: table name of {self._what()}: "
                             f"{exc}; set sink.table"))
        problems += self._column_problems(_RESERVED)
        if self.settings.mode == "append":
            offsets_problem = offsets_name_problem(self.table)
            if offsets_problem:
                problems.append((("sink", "table"), f"jdbc sink {self.table}: {offsets_problem}"))
        if self.settings.mode == "upsert" and self.context.columns_from_schema:
            if not self.context.key:
                problems += self._key_problems()
        elif self.settings.mode == "upsert" and self.columns:
            problems += self._key_problems()
            order = self._source_order_problem()
            if order:
                problems.append((("processor",), f"jdbc sink {self.table}: {order}"))
            name_problem = deletions_name_problem(self.table)
            if self.context.emits_deletes and name_problem:
                problems.append((("sink", "table"), f"jdbc sink {self.table}: {name_problem}"))
        return problems

    def _source_order_problem(self) -> str | None:
        """The processor's source position column must be a long column of its rows."""
        name = self.context.source_order
        kinds = {c.name: c.type for c in self.columns}
        if name is None or kinds.get(name) == "long":
            return None
        return (f"{self._what()} orders changes across partitions by {name!r} "
                "(Processor.source_order), which is not a long column of its rows")

    def _key_problems(self) -> list[Problem]:
        """``mode: upsert`` needs the processor's natural key, made of its columns."""
        key = self.context.key
        if not key:
            return [(("sink", "mode"), f"jdbc sink {self.table}: mode upsert needs a natural "
                     f"key, and {self._what()} declares none (Processor.key); use mode: "
                     "append, or a processor with a key")]
        names = {c.name for c in self.columns}
        missing = [k for k in key if k not in names]
        if missing:
            return [(("sink", "mode"), f"jdbc sink {self.table}: mode upsert: the natural "
                     f"key column(s) {', '.join(missing)} of {self._what()} are not among "
                     "its columns")]
        return []

    async def open(self) -> None:
        self._refuse_problems()
        if self.context.live is not None:
            # Columns from writer schemas: the table is made (or evolved) with the first
            # ones the processor knows, before the rows of that shape.
            self._extras = self.columns
            try:
                await self._follow_schema()
            except SinkError as exc:  # the database may come back: at the first write
                logger.warning("%s; the table is created or evolved at the first write", exc)
            return
        self._writer = table_writer(self._spark(), self.settings, self.table, self.columns,
                                    self.context.key, self.context.emits_deletes,
                                    self.context.source_order)
        try:
            await self._writer.register()
        except SinkError as exc:  # the database may come back: check again at first write
            logger.warning("%s; the table is created or checked at the first write", exc)


__all__ = ["JdbcSink", "JdbcSinkSettings", "JdbcTableWriter", "create_table_sql",
           "execute_statement", "safe_url", "table_mismatches"]
