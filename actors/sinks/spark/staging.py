"""The writer of one Iceberg staging table: micro-batched appends, each one Iceberg commit
holding its rows and the Kafka offsets they cover.

:class:`StagingWriter` (a :class:`~actors.sinks.table.batching.TableWriter`) buffers the
rows of every worker of the process writing one table and appends them as one Iceberg
commit when ``flush_max_rows`` rows are pending, ``flush_max_interval_s`` passed since the
first pending row, ``flush_min_rows`` are pending while no append of the table runs,
the oldest pending row waited ``flush_idle_s`` while no append runs, or a worker cannot
send more rows (its ``max_in_flight``); an append that ``flush_min_rows`` starts rests
after the appends before it (``flush_rest_ratio``, see :func:`rest_ratio`). A flush
hands the JVM one contiguous Arrow table (one task, one data file), written with
``DataFrameWriterV2.append`` and the snapshot properties of
:mod:`actors.sinks.spark.iceberg` (commit id, writer id, Kafka offsets)
(:class:`SparkAppends`); with ``spark.appends: pyiceberg``, pyiceberg writes and commits
it from this process instead, with the same properties, on its own thread
(:mod:`actors.sinks.spark.pyiceberg_appends`), where the table is also created and checked
and its offsets read (:mod:`actors.sinks.spark.pyiceberg_tables`): no JVM.

Exactly once, per Kafka partition (see :mod:`actors.sinks.spark.ledger`):

* an append records, in its own commit, how far each partition it covers is done;
* a part is appended only once every earlier batch of its partition is in the table, or in
  an append running before it (the Spark thread runs appends in order; an append whose
  predecessor failed fails too, without writing);
* an append whose outcome is unknown (the JVM died, the catalog connection broke during
  the commit) is looked up by its commit id before its rows are written again;
* when a partition is assigned, the table's offset for it is read
  (:meth:`StagingWriter.load_floors`): the worker resumes there when every sink of the
  topic stores its offsets, and rows of messages before it are dropped by the sink
  (:meth:`StagingWriter.floor`): they are in the table already.

A failed append fails every write in it with SinkError (retriable; nothing is committed).
pyspark is imported only inside functions.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from actors.errors import FatalError, SinkError
from actors.sinks.spark import iceberg, pyiceberg_tables
from actors.sinks.spark.actor import SparkActor, short
from actors.sinks.spark.catalog import dotted
from actors.sinks.spark.ledger import OffsetLedger, Stream
from actors.sinks.spark.pyiceberg_appends import PyIcebergAppends
from actors.sinks.table.batching import Pending, TableWriter
from actors.sinks.table.rows import arrow_table, record_batch
from processors.base import Column, Row
from settings.models import SparkSettings

logger = logging.getLogger(__name__)


def flush_limits(settings: SparkSettings) -> dict[str, Any]:
    """A :class:`TableWriter`'s flush limits from the ``spark:`` section."""
    return {"max_rows": settings.flush_max_rows, "min_rows": settings.flush_min_rows,
            "max_interval_s": settings.flush_max_interval_s, "idle_s": settings.flush_idle_s}


def rest_ratio(settings: SparkSettings) -> float:
    """The rest of a staging table's appends (``spark.flush_rest_ratio``; unset: 1 with
    ``appends: pyiceberg``, 0 with ``appends: spark``). A pyiceberg append's CPU grows
    with the snapshots the table keeps, all of it holding the GIL the event loop needs
    (bench/pyiceberg_commit.py: 13 ms per 1000-row append at 100 snapshots, 64 ms at 600,
    with the metadata computed once per state by
    :mod:`~actors.sinks.spark.pyiceberg_transaction`); back to back, a writer appends as
    often as it can and the snapshots, the cost and the wait of the next rows grow
    together."""
    if settings.flush_rest_ratio is not None:
        return settings.flush_rest_ratio
    return 1.0 if settings.appends == "pyiceberg" else 0.0


@dataclass(slots=True, eq=False)
class _Append:
    """One flush of the table: its batches and streams, the running appends of the same
    streams it follows, and its outcome (``failed`` is set on the Spark thread)."""

    batches: list[Any]
    streams: set[Stream]
    after: list[_Append]
    failed: bool = False
    done: bool = False


class StagingWriter(TableWriter):
    """Micro-batches one Iceberg staging table's rows (see the module docstring)."""

    def __init__(self, actor: SparkActor, table: str, columns: tuple[Column, ...]) -> None:
        super().__init__(table, columns, **flush_limits(actor.settings),
                         rest_ratio=rest_ratio(actor.settings))
        self.actor = actor
        self.name = dotted(actor.settings, table)
        self.ledger = OffsetLedger()
        self._registered = False
        self._floors: dict[Stream, int] = {}
        self._appends: list[_Append] = []  # running, in the Spark thread's order
        # id(batch) -> commit ids of its earlier appends whose outcome is unknown
        self._doubt: dict[int, set[str]] = {}
        self._lake: PyIcebergAppends | None = None
        if actor.settings.appends == "pyiceberg":
            self._lake = PyIcebergAppends(actor.lake(), table, actor.writer_id)

    def __repr__(self) -> str:
        return (f"<StagingWriter {self.name} pending={self._pending_rows} "
                f"running={self._running} flushes={self.flushes}>")

    @property
    def registered(self) -> bool:
        return self._registered

    def convert(self, rows: Sequence[Row]) -> tuple[Any, list[tuple[Row, str]]]:
        """The rows that fit the declared columns as one Arrow record batch, and the
        rows that do not, each with the reason naming the row and column (see
        :func:`actors.sinks.table.rows.record_batch`)."""
        return record_batch(rows, self._all, f"spark sink {self.table}")

    # -- registration --------------------------------------------------------------

    def _spark_appends(self, spark: Any) -> SparkAppends:
        return SparkAppends(spark, self.actor, self.table, self.columns)

    def register_in(self, spark: Any) -> None:
        """Spark thread: create the table if needed, or check its columns (nothing for a
        table written through pyiceberg: its registration needs no session)."""
        if self._lake is not None:
            return
        self.actor.warm_up(spark)  # the JVM writes the Parquet files
        self._added(iceberg.create_staging(spark, self.actor.settings, self.table,
                                           self.columns))

    def _added(self, added: list[str]) -> None:
        if added:
            logger.warning("spark sink: table %s: new nullable column(s) %s added (rows "
                           "written before read them as NULL)", self.name, ", ".join(added))

    async def register(self) -> None:
        """Create or check the table (before the first write): through pyiceberg on the
        lake thread with ``appends: pyiceberg`` (no JVM), else on the Spark thread."""
        if self._registered:
            return
        lake = self._lake
        try:
            if lake is not None:
                self._added(await lake.lake.call(lambda: pyiceberg_tables.create_staging(
                    lake.lake.catalog(), self.actor.settings, self.table, self.columns)))
            else:
                await self.actor.call(self.register_in)
        except (SinkError, FatalError):
            raise
        except Exception as exc:  # any Spark failure is a retriable sink error
            raise SinkError(f"spark sink {self.name}: cannot register the table: "
                            f"{short(exc)}") from exc
        self._registered = True
        logger.info("spark sink: table %s registered", self.name)

    # -- offsets -------------------------------------------------------------------

    async def load_floors(self, streams: Iterable[Stream]) -> dict[Stream, int]:
        """Read the table's offsets of ``streams`` (assigned to a worker of this
        process): rows of messages before them are dropped from now on. SinkError when
        the table cannot be read (the caller retries)."""
        wanted = set(streams)
        lake = self._lake
        try:
            if lake is not None:  # on the lake thread, after the appends handed over
                found = await lake.lake.call(lambda: pyiceberg_tables.table_offsets(
                    lake.lake.table(self.table)))
            else:
                found = await self.actor.call(lambda spark: iceberg.table_offsets(
                    spark, self.actor.settings, self.table), retry=True)
        except (SinkError, FatalError):
            raise
        except Exception as exc:  # any Spark failure is a retriable sink error
            raise SinkError(f"spark sink {self.name}: cannot read the Kafka offsets the "
                            f"table holds: {short(exc)}") from exc
        floors = {stream: offset for stream, offset in found.items() if stream in wanted}
        for stream in wanted:
            self._floors[stream] = floors.get(stream, 0)
        return floors

    def floor(self, stream: Stream) -> int | None:
        """The offset before which ``stream``'s messages are in the table (None: not
        read since the partition was assigned)."""
        return self._floors.get(stream)

    def forget(self, streams: Iterable[Stream]) -> None:
        """The streams were revoked from this process's worker."""
        streams = list(streams)
        for stream in streams:
            for batch in self.ledger.open_batches(stream):
                self._doubt.pop(id(batch), None)
            self._floors.pop(stream, None)
        self.ledger.forget(streams)

    async def wait_appends(self, streams: Iterable[Stream], within_s: float) -> bool:
        """Wait (up to ``within_s``) until no running append holds a batch of
        ``streams``; False when one still runs (the revoke then lets it finish alone)."""
        wanted = set(streams)
        deadline = time.monotonic() + within_s
        while any(a.streams & wanted for a in self._appends):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def register_batch(self, stream: Stream, batch: Any) -> None:
        """A write of the worker's ``batch`` of ``stream`` started (in offset order)."""
        self.ledger.register(stream, batch)

    def finished(self, batch: Any) -> None:
        """``batch`` has no row for the table: done."""
        self.ledger.finished(batch)

    # -- flushes -------------------------------------------------------------------

    def _take(self) -> list[Pending]:
        """The pending parts whose partitions' earlier batches are in the table, in a
        running append (that has not failed), or taken with them; the others wait."""
        ids = {id(b) for a in self._appends if not a.failed for b in a.batches}
        taken: list[Pending] = []
        order = sorted(self._pending, key=lambda p: (
            p.batch is None, p.stream or ("", "", 0), getattr(p.batch, "next_offset", 0)))
        for item in order:
            if item.batch is None or self.ledger.eligible(item.batch, ids):
                taken.append(item)
                if item.batch is not None:
                    ids.add(id(item.batch))
        chosen = {id(item) for item in taken}
        self._pending = [p for p in self._pending if id(p) not in chosen]
        return taken

    async def _flush(self, batch: list[Pending]) -> None:
        batches = [item.batch for item in batch if item.batch is not None]
        streams = {item.stream for item in batch if item.stream is not None}
        append = _Append(batches, streams, [a for a in self._appends if a.streams & streams])
        self._appends.append(append)
        offsets = self.ledger.watermarks(batches)
        parts = [(item.part, item.batch) for item in batch]
        doubts = {id(b): set(self._doubt.get(id(b), ())) for b in batches}
        commit_id = uuid.uuid4().hex
        rows = sum(item.rows for item in batch)

        def first(spark: Any) -> None:
            self._append(self._spark_appends(spark), append, parts, offsets, commit_id,
                         doubts)

        def again(spark: Any) -> None:  # in a new JVM: the dead one may have committed
            self._append(self._spark_appends(spark), append, parts, offsets, commit_id,
                         doubts, whole=commit_id)

        lake = self._lake

        def through_lake() -> None:  # the lake thread: no JVM to die, no ``again``
            if lake is not None:
                self._append(lake, append, parts, offsets, commit_id, doubts)

        try:
            if lake is not None:
                await lake.lake.call(through_lake)
            else:
                await self.actor.call(first, retry=again)
        except Exception as exc:  # noqa: BLE001 - any Spark failure is a retriable sink error
            if isinstance(exc, _Unsure):
                for b in batches:  # looked up again when the batch is appended again
                    self._doubt.setdefault(id(b), set()).add(commit_id)
            error: Exception = exc if isinstance(exc, FatalError | SinkError) else SinkError(
                f"spark sink {self.name}: append of {rows} row(s) failed: "
                f"{short(exc.__cause__ or exc) if isinstance(exc, _Unsure) else short(exc)}")
            if error is not exc:
                error.__cause__ = exc
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(error)
            return
        finally:
            append.done = True
            self._appends.remove(append)
        self.flushes += 1
        self.ledger.committed(batches)
        for b in batches:
            self._doubt.pop(id(b), None)
        for item in batch:
            if not item.future.done():
                item.future.set_result(None)

    def _append(self, ops: Appends, append: _Append, parts: list[tuple[Any, Any]],
                offsets: dict[Stream, int], commit_id: str, doubts: dict[int, set[str]],
                whole: str | None = None) -> None:
        """Spark (or lake) thread: append ``parts`` (record batches, with their worker
        batches) as one Iceberg commit with the offsets they cover, through ``ops``.
        Nothing when an earlier append of the same partitions failed (SinkError).
        ``doubts``: per batch (``id``), commit ids of its earlier appends whose outcome was
        unknown: the parts of one found in the table are not written again; ``whole``: the
        commit id of an attempt of this very append (a JVM died during it): found, nothing
        is written."""
        try:
            if any(a.failed for a in append.after):
                raise SinkError(f"spark sink {self.name}: an earlier append of the same "
                                "partitions failed; written again after it")
            unsure = set().union(*doubts.values(), {whole} if whole else set())
            found = ops.committed_ids(unsure)
            todo = [part for part, b in parts
                    if whole not in found and not doubts.get(id(b), set()) & found]
            if len(todo) < len(parts):
                logger.warning("spark sink: %s: an append whose outcome was unknown is in the "
                               "table: %d of %d part(s) not written again", self.name,
                               len(parts) - len(todo), len(parts))
            if todo:
                self._write(ops, todo, offsets, commit_id)
        except BaseException:
            append.failed = True
            raise

    def _write(self, ops: Appends, parts: list[Any], offsets: dict[Stream, int],
               commit_id: str) -> None:
        """One Iceberg append of ``parts`` with its snapshot properties. When it fails,
        its commit id is looked up: found, it was committed after all; the lookup failing
        too raises :class:`_Unsure`."""
        started = time.monotonic()
        # bench/chaos.py freezes a member on this line (a zombie with an append in flight).
        logger.debug("spark sink: %s: appending %d part(s) as commit %s", self.name,
                     len(parts), commit_id)
        try:
            rows = ops.write(parts, offsets, commit_id)
        except Exception as exc:
            try:
                landed = ops.committed_ids({commit_id})
            except Exception as lookup:  # noqa: BLE001 - the catalog is unreachable
                raise _Unsure(short(lookup)) from exc
            if not landed:
                raise
            logger.warning("spark sink: %s: the append failed (%s) but its commit is in "
                           "the table", self.name, short(exc))
            return
        logger.debug("spark sink: %s: appended %d row(s) in %.3fs", self.name, rows,
                      time.monotonic() - started)


class Appends(Protocol):
    """How a :class:`StagingWriter` commits: through Spark (:class:`SparkAppends`) or
    pyiceberg (:class:`~actors.sinks.spark.pyiceberg_appends.PyIcebergAppends`)."""

    def committed_ids(self, commit_ids: set[str]) -> set[str]:
        """Which of ``commit_ids`` are in the table's current history."""

    def write(self, parts: Sequence[Any], offsets: dict[Stream, int], commit_id: str) -> int:
        """One append of ``parts`` as one commit carrying ``commit_id``, this process's
        writer id and ``offsets`` (carried forward); the number of rows."""


class SparkAppends:
    """A staging table's commits through Spark's ``DataFrameWriterV2.append`` (Spark
    thread)."""

    def __init__(self, spark: Any, actor: SparkActor, table: str,
                 columns: tuple[Column, ...]) -> None:
        self.spark, self.actor, self.table, self.columns = spark, actor, table, columns

    def committed_ids(self, commit_ids: set[str]) -> set[str]:
        return iceberg.committed_ids(self.spark, self.actor.settings, self.table, commit_ids)

    def write(self, parts: Sequence[Any], offsets: dict[Stream, int], commit_id: str) -> int:
        spark, settings = self.spark, self.actor.settings
        table = arrow_table(parts, dt.datetime.now(dt.UTC))
        table = table.rename_columns([iceberg.column_name(n) for n in table.column_names])
        frame = spark.createDataFrame(table, iceberg.struct_type(self.columns))
        writer = frame.writeTo(dotted(settings, self.table))
        for key, value in settings.staging_write_options.items():
            writer = writer.option(key, value)
        writer = (writer.option(f"snapshot-property.{iceberg.COMMIT_ID}", commit_id)
                  .option(f"snapshot-property.{iceberg.WRITER_ID}", self.actor.writer_id))
        if offsets:
            recorded = iceberg.carried(
                iceberg.current_offsets(spark, settings, self.table), offsets)
            writer = writer.option(f"snapshot-property.{iceberg.OFFSETS}",
                                   iceberg.format_offsets(recorded))
        writer.append()
        return len(table)


class _Unsure(Exception):  # an internal signal, not an error type
    """The append failed and the catalog could not say whether it was committed."""


__all__ = ["Appends", "SparkAppends", "StagingWriter", "flush_limits", "rest_ratio"]
