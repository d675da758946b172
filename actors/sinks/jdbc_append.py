"""``mode: append`` of the JDBC sink, exactly once: :class:`JdbcTableWriter` writes a
flush's rows and moves the Kafka offsets they cover in the table's offsets table, in the
same transaction, with a compare-and-set (:mod:`actors.sinks.jdbc_offsets`); it keeps
per partition the positions and ownership of
:class:`~actors.sinks.table.exactly_once.ExactlyOnceWriter`, as the Iceberg writer does.
Rows PostgreSQL refuses are found by halving inside that transaction (savepoints), which
is then rolled back. :func:`table_writer`: the process's writer of a table.

pyspark is imported only inside functions."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

from actors.errors import FatalError, SinkError
from actors.sinks.jdbc_errors import AppendError, is_row_error, short, sql_error
from actors.sinks.jdbc_offsets import OffsetsMoved, insert_rows_sql, move_offsets, read_offsets
from actors.sinks.jdbc_settings import JdbcSinkSettings, safe_url
from actors.sinks.jdbc_tables import qualified
from actors.sinks.jdbc_upsert import rows_json
from actors.sinks.jdbc_writer import JdbcPart, JdbcWriter, execute_statement
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.ledger import Stream
from actors.sinks.table.batching import Pending, RowsRefused, TableWriter
from actors.sinks.table.exactly_once import ExactlyOnceWriter, Flight, held
from processors.base import Column

logger = logging.getLogger(__name__)


class JdbcTableWriter(ExactlyOnceWriter, JdbcWriter):
    """The writer of one JDBC table (:class:`JdbcWriter`); with ``mode: append``, each
    flush of the workers' batches stores the Kafka offsets it covers with its rows
    (see the module docstring)."""

    def __init__(self, actor: SparkActor, settings: JdbcSinkSettings, table: str,
                 columns: tuple[Column, ...], key: tuple[str, ...] = (),
                 deletes: bool = False, source_order: str | None = None) -> None:
        super().__init__(actor, settings, table, columns, key, deletes, source_order)
        self.fenced = 0  # flushes refused because another writer moved the offsets

    async def _flush(self, batch: list[Pending]) -> None:
        if self.offsets is not None and any(item.stream is not None for item in batch):
            await self._flush_fenced(batch)
            return
        await super()._flush(batch)

    async def load_floors(self, streams: Iterable[Stream]) -> dict[Stream, int]:
        """``mode: append``: as :meth:`ExactlyOnceWriter.load_floors
        <actors.sinks.table.exactly_once.ExactlyOnceWriter.load_floors>`; ``mode:
        upsert`` stores no offsets: none."""
        if self.offsets is None:
            await self.register()
            return {}
        return await super().load_floors(streams)

    async def _table_offsets(self, streams: set[Stream]) -> dict[Stream, int]:
        await self.register()
        offsets = self.offsets or ""

        def read(spark: Any) -> dict[Stream, int]:
            conn = self._connect(spark)
            try:
                return read_offsets(conn, qualified(offsets), streams)
            finally:
                conn.close()

        try:
            return await self.actor.call(read, retry=True)
        except (SinkError, FatalError):
            raise
        except Exception as exc:
            raise SinkError(f"{self.where}: cannot read the Kafka offsets the table holds "
                            f"({offsets}): {short(exc)}") from exc

    def _take(self) -> list[Pending]:
        """Without offsets (``mode: upsert``): every pending part. Else as the Iceberg
        writer takes them (:meth:`ExactlyOnceWriter._take_owned
        <actors.sinks.table.exactly_once.ExactlyOnceWriter._take_owned>`)."""
        if self.offsets is None:
            return TableWriter._take(self)
        return self._take_owned()

    def _cut(self, item: Pending, landed: int) -> None:
        offset_at = [c.name for c in self._all].index("_offset")
        part: JdbcPart = item.part
        part.rows[:] = [r for r in part.rows if r[offset_at] >= landed]
        item.rows = len(part)

    def _not_written(self, why: str) -> SinkError:
        return SinkError(f"{self.where}: not written: {why}")

    async def _flush_fenced(self, batch: list[Pending]) -> None:
        """Write ``batch`` and move the offsets of its partitions in one transaction
        (:mod:`actors.sinks.jdbc_offsets`). Rows PostgreSQL refuses (class 22/23) are
        found by splitting inside that transaction (savepoints), which is then rolled
        back: the writes fail with RowsRefused after the refused rows were taken off
        their parts, so the sink dead-letters them before it writes the others again
        with the offsets past them (a dead letter is never lost to a crash between the
        table commit and the dead-letter write)."""
        batch = self._owned(batch)
        if not batch:
            return
        batches = [item.batch for item in batch if item.batch is not None]
        moves = self.ledger.watermarks(batches)
        streams = set(moves)
        flight = Flight(batches, streams, [f for f in self._appends if f.streams & streams],
                        moves, {s: self._next[s] for s in moves},
                        {s: self._owner[s] for s in moves})
        self._hand_over(flight)
        rows = [(item.part, row) for item in batch for row in item.part.rows]
        error: Exception | None = None
        try:
            await self.register()
            refused = await self.actor.call(
                lambda spark: self._append_fenced(spark, flight, [r for _, r in rows]),
                retry=True)
        except OffsetsMoved as exc:
            error = await self._moved(flight, exc, len(rows))
        except AppendError as exc:
            flight.failed = True
            error = SinkError(f"{self.where}: append of {len(rows)} row(s) failed: {exc}")
            error.__cause__ = exc.__cause__
        except (FatalError, SinkError) as exc:
            flight.failed = True
            error = exc
        except Exception as exc:  # noqa: BLE001 - any other failure is retried
            flight.failed = True
            error = SinkError(f"{self.where}: append of {len(rows)} row(s) failed: "
                              f"{short(exc)}")
            error.__cause__ = exc
        else:
            if refused:
                flight.failed = True
                gone = {index for index, _ in refused}
                for index, failure in refused:
                    part, row = rows[index]
                    part.refused.append(self._refusal(row, failure))
                for part in {id(p): p for p, _ in rows}.values():
                    part.rows[:] = [r for r in part.rows
                                    if not any(r is rows[i][1] for i in gone)]
                error = RowsRefused(f"{self.where}: {len(refused)} of {len(rows)} row(s) "
                                    "refused by PostgreSQL; nothing written: the sink "
                                    "dead-letters them, then writes the others")
        finally:
            self._appends.remove(flight)
        if error is not None:
            for stream in moves:
                if self._owner.get(stream) is flight.owners[stream]:
                    self._next[stream] = self._landed[stream]
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(error)
            return
        self.flushes += 1
        self.ledger.committed(batches)
        self._landed_with(flight)
        for item in batch:
            item.part.rows.clear()
            if not item.future.done():
                item.future.set_result(None)

    async def _moved(self, flight: Flight, exc: OffsetsMoved, rows: int) -> Exception:
        """Another writer moved a partition of ``flight``: nothing of it is in the table.
        Count it, say so, and read the table's offsets of its partitions again: the
        retries drop the rows the table holds."""
        self.fenced += 1
        metrics = self.actor.metrics
        if metrics is not None:
            metrics.fenced_appends.labels(self.table).inc()
        logger.warning("%s: a flush of %d row(s) was refused (nothing of it written, "
                       "nothing committed to Kafka for it): %s", self.where, rows, exc)
        mine = self._mine(flight)
        floors = await self._read_again(mine)
        if isinstance(floors, Exception):
            logger.warning("%s: the offsets of the refused partitions cannot be read now "
                           "(%s); read at the retries", self.where, floors)
        else:
            logger.warning("%s: the table holds %s now; the retries continue from there",
                           self.where, held(floors, mine) or "none of these")
        error = SinkError(f"{self.where}: flush of {rows} row(s) refused: {exc}")
        error.__cause__ = exc
        return error

    def _append_fenced(self, spark: Any, flight: Flight,
                       rows: list[tuple[Any, ...]]) -> list[tuple[int, AppendError]]:
        """Spark thread: insert ``rows`` and move ``flight``'s offsets in one transaction
        (committed only when no row was refused); the positions of the rows PostgreSQL
        refused for a fact about rows, with why (then nothing is committed). Raises
        OffsetsMoved (rolled back), AppendError for any other failure, SinkError when an
        earlier flush of the same partitions failed or a partition was revoked."""
        if any(f.failed for f in flight.after):
            raise SinkError(f"{self.where}: an earlier flush of the same partitions "
                            "failed; written again after it")
        for batch in flight.batches:
            if batch.cancelled:
                raise SinkError(f"{self.where}: not written: a partition of the flush was "
                                "revoked")
        for stream, owner in flight.owners.items():
            if self._owner.get(stream) is not owner:
                raise SinkError(f"{self.where}: not written: partition {stream[1]}"
                                f"[{stream[2]}] is no longer this writer's")
        names = [c.name for c in self._all]
        conn = self._connect(spark)
        try:
            conn.setAutoCommit(False)
            insert = conn.prepareStatement(insert_rows_sql(qualified(self.table), names))
            refused: list[tuple[int, AppendError]] = []
            self._insert_split(conn, insert, rows, names, 0, len(rows), refused)
            insert.close()
            if refused:
                conn.rollback()
                return refused
            move_offsets(conn, qualified(self.offsets or ""), self.table, flight.offsets,
                         flight.expected)
            conn.commit()
        except (OffsetsMoved, AppendError):
            flight.failed = True
            raise
        except Exception as exc:
            flight.failed = True
            state, message = sql_error(exc)
            raise AppendError(state, message) from exc
        finally:
            conn.close()  # not committed: rolled back
        logger.debug("jdbc sink: %s: appended %d row(s) with their offsets", self.table,
                     len(rows))
        return []

    def _insert_split(self, conn: Any, insert: Any, rows: list[tuple[Any, ...]],
                      names: list[str], start: int, end: int,
                      refused: list[tuple[int, AppendError]]) -> None:
        """Spark thread: insert ``rows[start:end]`` behind a savepoint; refused for a
        fact about rows, roll back to it and split until the refused rows are alone."""
        savepoint = conn.setSavepoint()
        try:
            execute_statement(insert, rows_json(rows[start:end], names), end - start)
        except Exception as exc:
            state, message = sql_error(exc)
            if not is_row_error(state):
                raise AppendError(state, message) from exc
            conn.rollback(savepoint)
            if end - start == 1:
                refused.append((start, AppendError(state, message)))
                return
            middle = (start + end) // 2
            self._insert_split(conn, insert, rows, names, start, middle, refused)
            self._insert_split(conn, insert, rows, names, middle, end, refused)
            return
        conn.releaseSavepoint(savepoint)


# One writer per (actor, url, user, table): the workers of a process share its batches.
_WRITERS: weakref.WeakKeyDictionary[SparkActor, dict[tuple[str, str, str], JdbcTableWriter]] = (
    weakref.WeakKeyDictionary())


def table_writer(actor: SparkActor, settings: JdbcSinkSettings, table: str,
                 columns: Sequence[Column], key: Sequence[str] = (),
                 deletes: bool = False, source_order: str | None = None,
                 evolving: bool = False) -> JdbcTableWriter:
    """The shared writer of ``table`` at ``settings.url`` (created on first use).
    ``evolving``: the columns come from writer schemas and change while it runs
    (:meth:`~actors.sinks.jdbc_writer.JdbcWriter.evolve`), not a second column list."""
    writers = _WRITERS.setdefault(actor, {})
    name = (settings.url, settings.user or "", table)
    writer = writers.get(name)
    if writer is None:
        writer = writers[name] = JdbcTableWriter(actor, settings, table, tuple(columns),
                                                 tuple(key), deletes, source_order)
    elif writer.columns != tuple(columns) and not evolving:
        raise FatalError(f"jdbc sink: table {table!r} at {safe_url(settings.url)} is written "
                         "with two different column lists in this process")
    elif (writer.settings.mode, writer.key) != (
            settings.mode, tuple(key) if settings.mode == "upsert" else ()):
        raise FatalError(f"jdbc sink: table {table!r} at {safe_url(settings.url)} is written "
                         "with two different modes or natural keys in this process")
    elif writer.key and writer.source_order != source_order:
        raise FatalError(f"jdbc sink: table {table!r} at {safe_url(settings.url)} is written "
                         "by processors ordering changes by different source positions "
                         f"({writer.source_order!r}, {source_order!r}: "
                         "Processor.source_order) in this process")
    return writer
