"""The writer of one Iceberg staging table: micro-batched appends, each one Iceberg commit
holding its rows and the Kafka offsets they cover.

:class:`StagingWriter` (a :class:`~actors.sinks.table.batching.TableWriter`) buffers the
rows of every worker of the process writing one table and appends them as one Iceberg
commit when ``flush_max_rows`` rows are pending, ``flush_max_interval_s`` passed since the
first pending row, ``flush_min_rows`` are pending while no append of the table runs,
the oldest pending row waited ``flush_idle_s`` while no append runs, or a worker cannot
send more rows (its ``max_in_flight``). The appends of caught-up rows follow the catalog
(:func:`pace`, the rule in :mod:`actors.sinks.table.batching`): the writer measures how
long its appends take, *L*, give or take *S* (their spread), and an append that
``flush_min_rows`` starts first rests ``freshness_target_s`` - 2 (*L* + 2 *S*) after the
one before (at least ``flush_rest_ratio`` times the CPU an append costs the process:
pyiceberg's, measured on its thread; *L* for Spark's), so that a row waits at most about
``freshness_target_s``; when *L* + 2 *S* passes half the target they go back to back.
No append of the table that is not full (``flush_max_rows`` or ``flush_max_mb`` reached, a
worker's window full) starts less than 1/``max_commits_per_s`` after the previous one.
Each append's duration is ``kstage_table_commit_seconds``, the latency the rule uses
``kstage_table_commit_latency_seconds`` and the interval it aims at between appends
``kstage_table_append_interval_seconds`` (per table). A flush
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
  (:meth:`StagingWriter.floor`): they are in the table already;
* a batch of a revoked partition (cancelled) is never appended, and holds every later
  batch of its partition back; an append whose partition was revoked or forgotten after
  it was handed over refuses to write, on its thread, right before writing;
* each append carries ``kstage.expect``, where it continues each partition from (the
  offset read at assignment, or the end of this writer's previous append of it), and
  commits only if the table still holds every partition exactly there, checked in the
  catalog's commit (:mod:`actors.sinks.spark.iceberg`, the fence): a writer that fell
  behind (frozen past its session, its append stuck in a commit's retries) cannot land
  offsets another writer appended. A refused append is counted
  (``kstage_fenced_appends_total``) and logged, its writes fail (retriable), and the
  partitions' offsets are read again: the retries drop the rows the table holds (a
  batch wholly held is done without an append).

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
from dataclasses import dataclass, field
from typing import Any, Protocol

from actors.column_rows import ColumnRows
from actors.errors import FatalError, SinkAuthError, SinkError
from actors.sinks.spark import (
    catalog_auth,
    catalog_connection,
    iceberg,
    offset_history,
    pyiceberg_tables,
)
from actors.sinks.spark.actor import SparkActor, short
from actors.sinks.spark.catalog import dotted
from actors.sinks.spark.ledger import Stream
from actors.sinks.spark.partitioning import Layout
from actors.sinks.spark.pyiceberg_appends import PyIcebergAppends
from actors.sinks.table.batching import Pending
from actors.sinks.table.columns import COORDINATES
from actors.sinks.table.exactly_once import ExactlyOnceWriter, Flight, held
from actors.sinks.table.rows import arrow_table, column_batch, record_batch
from processors.base import Column, Row
from settings.models import SparkSettings

logger = logging.getLogger(__name__)


def flush_limits(settings: SparkSettings) -> dict[str, Any]:
    """A :class:`TableWriter`'s flush limits from the ``spark:`` section."""
    return {"max_rows": settings.flush_max_rows, "min_rows": settings.flush_min_rows,
            "max_interval_s": settings.flush_max_interval_s, "idle_s": settings.idle_s,
            "max_bytes": int(settings.flush_max_mb * 2**20)}


def pace(settings: SparkSettings) -> dict[str, Any]:
    """How a staging table's appends follow the catalog (a :class:`TableWriter`'s
    ``freshness_s``, ``max_per_s`` and ``rest_ratio``) from the ``spark:`` section."""
    return {"freshness_s": settings.freshness_s, "max_per_s": settings.max_commits_per_s,
            "rest_ratio": rest_ratio(settings)}


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
class _Append(Flight):
    """One flush of the table: its batches and streams, the running appends of the same
    streams it follows, what it records (``offsets``) and where it continues each stream
    from (``expected``, the fence), the ownership of each stream it was handed over in
    (``owners``), and its outcome (``failed`` and ``resolved`` are set on the Spark or lake
    thread: ``resolved``, per stream, the end of an earlier append in doubt that the
    lookup found in the table)."""

    resolved: dict[Stream, int] = field(default_factory=dict)
    done: bool = False


@dataclass(slots=True, eq=False)
class _Doubt:
    """The appends of one batch whose outcome is unknown: commit id -> the offset that
    append recorded for the batch's stream. Holds the batch itself: an entry is looked up
    by ``id(batch)`` and used only for that very object (a later batch reusing the id of
    one that is gone never inherits it)."""

    batch: Any
    ends: dict[str, int] = field(default_factory=dict)


class StagingWriter(ExactlyOnceWriter):
    """Micro-batches one Iceberg staging table's rows (see the module docstring).

    Per stream it owns it keeps the positions of
    :class:`~actors.sinks.table.exactly_once.ExactlyOnceWriter`: *next* is its
    ``kstage.expect``."""

    # The appends that land are timed (a flush that writes nothing, or fails at once, is no
    # measure of the catalog's latency).
    times_flushes = False

    def __init__(self, actor: SparkActor, table: str, columns: tuple[Column, ...],
                 layout: Layout | None = None) -> None:
        super().__init__(table, columns, **flush_limits(actor.settings),
                         **pace(actor.settings))
        self.actor = actor
        self.layout = layout or Layout()  # the partition spec and properties it creates
        self.name = dotted(actor.settings, table)
        self._registered = False
        self._appends: list[_Append] = []  # running, in the Spark thread's order
        self._doubt: dict[int, _Doubt] = {}  # id(batch) -> its appends in doubt
        self.fenced = 0  # appends the fence refused
        self._lake: PyIcebergAppends | None = None
        if actor.settings.appends == "pyiceberg":
            self._lake = PyIcebergAppends(actor.lake(), table, actor.writer_id)

    def __repr__(self) -> str:
        return (f"<StagingWriter {self.name} pending={self._pending_rows} "
                f"running={self._running} flushes={self.flushes} fenced={self.fenced}>")

    @property
    def registered(self) -> bool:
        return self._registered

    def part_bytes(self, part: Any) -> int:
        """The Arrow buffers of a record batch (``flush_max_mb``)."""
        return int(part.nbytes)

    def convert(self, rows: Sequence[Row]) -> tuple[Any, list[tuple[Row, str]]]:
        """The rows that fit the declared columns as one Arrow record batch, and the
        rows that do not, each with the reason naming the row and column (see
        :func:`actors.sinks.table.rows.record_batch`)."""
        if isinstance(rows, ColumnRows):  # decoded and mapped as columns: as they are
            batch = column_batch(rows.table, self._all)
            if batch is not None:
                return batch, []
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
                                           self.columns, self.layout))

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
                    lake.lake.catalog(), self.actor.settings, self.table, self.columns,
                    self.layout)))
            else:
                await self.actor.call(self.register_in)
        except (SinkError, FatalError):
            raise
        except Exception as exc:  # any Spark failure is a retriable sink error
            raise SinkError(f"spark sink {self.name}: cannot register the table: "
                            f"{self._why(exc)}") from exc
        self._registered = True
        logger.info("spark sink: table %s registered", self.name)

    async def evolve(self, columns: tuple[Column, ...]) -> None:
        """Evolve the table to ``columns`` (a processor whose columns come from writer
        schemas: new nullable columns, widened types) and write with them from now on:
        the rows already converted are written first (with the columns they were
        converted for), then the table's schema is committed, then the columns change;
        the rows converted after are written to the evolved table. Created on first
        sight when it does not exist."""
        if self._registered and columns == self.columns:
            return
        waits = [item.future for item in self._pending] + list(self._tasks)
        if waits:
            self.flush_soon()
            await asyncio.gather(*waits, return_exceptions=True)  # their writers see errors
        lake, settings = self._lake, self.actor.settings
        # created with the layout, or an existing table's spec compared with it (once)
        layout = None if self._registered else self.layout
        try:
            if lake is not None:
                made = await lake.lake.call(lambda: pyiceberg_tables.evolve_staging(
                    lake.lake.catalog(), settings, self.table, columns, layout))
            else:
                def run(spark: Any) -> list[str]:
                    self.actor.warm_up(spark)
                    return iceberg.evolve_staging(spark, settings, self.table, columns,
                                                  layout)
                made = await self.actor.call(run)
        except (SinkError, FatalError):
            raise
        except Exception as exc:  # any catalog failure is a retriable sink error
            raise SinkError(f"spark sink {self.name}: cannot evolve the table: "
                            f"{self._why(exc)}") from exc
        self.columns = columns
        self._all = (*columns, *COORDINATES)
        if not self._registered:  # the line register() says: the table is ready
            logger.info("spark sink: table %s registered", self.name)
        self._registered = True
        if made:
            logger.warning("spark sink: table %s evolved with the writer schema: %s (rows "
                           "written before read new columns as NULL)", self.name,
                           ", ".join(made))

    # -- offsets -------------------------------------------------------------------

    async def _table_offsets(self, streams: set[Stream]) -> dict[Stream, int]:
        lake = self._lake
        try:
            if lake is not None:  # on the lake thread, after the appends handed over
                return await lake.lake.call(lambda: pyiceberg_tables.table_offsets(
                    lake.lake.table(self.table)))
            return await self.actor.call(lambda spark: offset_history.table_offsets(
                spark, self.actor.settings, self.table), retry=True)
        except (SinkError, FatalError):
            raise
        except Exception as exc:  # any Spark failure is a retriable sink error
            raise SinkError(f"spark sink {self.name}: cannot read the Kafka offsets the "
                            f"table holds: {self._why(exc)}") from exc

    def _why(self, exc: BaseException) -> str:
        """``exc`` in one line, after the catalog and its TLS settings when the catalog's
        TLS connection failed (on either append path)."""
        tls = catalog_connection.tls_failure(self.actor.settings, exc)
        return short(exc) if tls is None else f"{tls}: {short(exc)}"

    def forget(self, streams: Iterable[Stream]) -> None:
        """The streams were revoked from this process's worker: their positions and
        batches are dropped, and an append of them not yet written refuses to write
        (:meth:`_append`)."""
        streams = list(streams)
        for stream in streams:
            for batch in self.ledger.open_batches(stream):
                self._doubt.pop(id(batch), None)
        super().forget(streams)

    def finished(self, batch: Any) -> None:
        """``batch`` has no row for the table: done."""
        super().finished(batch)
        self._doubt.pop(id(batch), None)

    def _doubts(self, batch: Any) -> dict[str, int]:
        entry = self._doubt.get(id(batch))
        return dict(entry.ends) if entry is not None and entry.batch is batch else {}

    # -- flushes -------------------------------------------------------------------

    def _take(self) -> list[Pending]:
        """The parts an append may take now (:meth:`ExactlyOnceWriter._take_owned
        <actors.sinks.table.exactly_once.ExactlyOnceWriter._take_owned>`)."""
        return self._take_owned()

    def _cut(self, item: Pending, landed: int) -> None:
        if item.batch.next_offset > landed and _first_offset(item.part) < landed:
            item.part = _from_offset(item.part, landed)
            item.rows = len(item.part)

    def took(self, seconds: float, backlog: bool, cpu: float | None = None) -> None:
        """An append took ``seconds`` (``cpu`` of them the lake thread's CPU, with
        ``appends: pyiceberg``): measured (:meth:`TableWriter.took
        <actors.sinks.table.batching.TableWriter.took>`) and shown in the metrics."""
        super().took(seconds, backlog, cpu)
        metrics = self.actor.metrics
        if metrics is None:
            return
        metrics.table_commit_seconds.labels(self.name).observe(seconds)
        if self.latency is not None:
            metrics.table_commit_latency.labels(self.name).set(self.latency)
        aimed = self.interval
        if aimed is not None:
            metrics.table_append_interval.labels(self.name).set(aimed)

    def _not_written(self, why: str) -> SinkError:
        return SinkError(f"spark sink {self.name}: not appended: {why}")

    async def _flush(self, batch: list[Pending]) -> None:
        batch = self._owned(batch)
        if not batch:
            return
        batches = [item.batch for item in batch if item.batch is not None]
        streams = {item.stream for item in batch if item.stream is not None}
        offsets = self.ledger.watermarks(batches)
        append = _Append(batches, streams, [a for a in self._appends if a.streams & streams],
                         offsets=offsets,
                         expected={s: self._next[s] for s in offsets},
                         owners={s: self._owner[s] for s in offsets})
        self._hand_over(append)
        parts = [(item.part, item.batch, self.ledger.stream_of(item.batch)
                  if item.batch is not None else None) for item in batch]
        doubts = {id(b): self._doubts(b) for b in batches}
        commit_id = uuid.uuid4().hex
        rows = sum(item.rows for item in batch)

        def first(spark: Any) -> None:
            self._append(self._spark_appends(spark), append, parts, commit_id, doubts)

        def again(spark: Any) -> None:  # in a new JVM: the dead one may have committed
            self._append(self._spark_appends(spark), append, parts, commit_id, doubts,
                         whole=commit_id)

        lake = self._lake
        cpu: list[float] = []  # the lake thread's CPU seconds of the append

        def through_lake() -> None:  # the lake thread: no JVM to die, no ``again``
            if lake is not None:
                began = time.thread_time()
                try:
                    self._append(lake, append, parts, commit_id, doubts)
                finally:
                    cpu.append(time.thread_time() - began)

        loop = asyncio.get_running_loop()
        started = loop.time()
        backlog = any(item.behind for item in batch)
        try:
            if lake is not None:
                await lake.lake.call(through_lake)
            else:
                await self.actor.call(first, retry=again)
        except Exception as exc:  # noqa: BLE001 - any Spark failure is a retriable sink error
            error = await self._failed(append, exc, commit_id, rows)
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(error)
            return
        finally:
            append.done = True
            self._appends.remove(append)
        self.took(loop.time() - started, backlog, cpu[0] if cpu else None)
        self.flushes += 1
        self.ledger.committed(batches)
        for b in batches:
            self._doubt.pop(id(b), None)
        self._landed_with(append)
        for item in batch:
            if not item.future.done():
                item.future.set_result(None)

    async def _failed(self, append: _Append, exc: Exception, commit_id: str,
                      rows: int) -> Exception:
        """The append failed: its streams' next append continues from where the table
        holds them as far as this writer knows (*landed*, or the end of an append in
        doubt found meanwhile); an append whose outcome is unknown is looked up when its
        batches are appended again; one the fence refused is counted and said, and its
        streams' offsets are read again. The SinkError its writes fail with."""
        mine = self._mine(append)
        for stream in mine:
            landed = max(self._landed[stream], append.resolved.get(stream, 0))
            self._landed[stream] = self._next[stream] = landed
        refusal = iceberg.fence_refusal(exc)
        if refusal is not None:
            return await self._fenced(append, mine, refusal, rows, exc)
        if isinstance(exc, _Unsure):
            for b in append.batches:  # looked up again when the batch is appended again
                of = self.ledger.stream_of(b)
                if of is None or of not in append.offsets:
                    continue
                entry = self._doubt.get(id(b))
                if entry is None or entry.batch is not b:
                    entry = self._doubt[id(b)] = _Doubt(b)
                entry.ends[commit_id] = append.offsets[of]
        if isinstance(exc, FatalError | SinkError):
            return exc
        login = await self._catalog_login(f"append of {rows} row(s) failed")
        if login is not None:
            login.__cause__ = exc
            return login
        error = SinkError(
            f"spark sink {self.name}: append of {rows} row(s) failed: "
            f"{short(exc.__cause__ or exc) if isinstance(exc, _Unsure) else short(exc)}")
        error.__cause__ = exc
        return error

    async def _catalog_login(self, what: str) -> SinkError | None:
        """With ``spark.catalog.oauth2``: the error naming the REST catalog's identity
        provider when it is what fails (an outage: retried and shown in ``/readyz``
        after ``sink_unready_after_s``; the client refused: at once), else None."""
        oauth2 = self.actor.settings.catalog.oauth2
        if oauth2 is None:
            return None
        found = await asyncio.to_thread(catalog_auth.identity_provider_problem, oauth2)
        if found is None:
            return None
        problem, refused = found
        kind = SinkAuthError if refused else SinkError
        return kind(f"spark sink {self.name}: {what}: {problem}")

    async def _fenced(self, append: _Append, mine: list[Stream], refusal: str, rows: int,
                      exc: Exception) -> Exception:
        """The fence refused ``append``: nothing of it is in the table. Count it, say
        so, and read the table's offsets of its streams still owned (``mine``) again: the
        worker's retries drop the rows the table holds (:meth:`_take`)."""
        self.fenced += 1
        metrics = self.actor.metrics
        if metrics is not None:
            metrics.fenced_appends.labels(self.name).inc()
        logger.warning("spark sink: %s: an append of %d row(s) was refused by the fence "
                       "(nothing of it written, nothing committed to Kafka for it): %s",
                       self.name, rows, refusal)
        floors = await self._read_again(mine)
        if isinstance(floors, Exception):
            logger.warning("spark sink: %s: the offsets of the fenced partitions cannot "
                           "be read now (%s); read at the retries", self.name, floors)
        else:
            logger.warning("spark sink: %s: the table holds %s now; the retries continue "
                           "from there", self.name,
                           held(floors, mine) or "none of this writer's partitions")
        error = SinkError(f"spark sink {self.name}: append of {rows} row(s) refused: "
                          f"{refusal}")
        error.__cause__ = exc
        return error

    def _append(self, ops: Appends, append: _Append,
                parts: list[tuple[Any, Any, Stream | None]], commit_id: str,
                doubts: dict[int, dict[str, int]], whole: str | None = None) -> None:
        """Spark (or lake) thread: append ``parts`` (record batches, with their worker
        batches and streams) as one Iceberg commit with the offsets they cover, through
        ``ops``. Nothing when an earlier append of the same partitions failed, a batch
        was cancelled or a stream forgotten since the append was handed over
        (SinkError). ``doubts``: per batch (``id``), its earlier appends whose outcome was
        unknown (commit id -> the offset recorded for its stream): the parts of one found
        in the table are not written again, and its stream continues from its end;
        ``whole``: the commit id of an attempt of this very append (a JVM died during
        it): found, nothing is written."""
        try:
            if any(a.failed for a in append.after):
                raise SinkError(f"spark sink {self.name}: an earlier append of the same "
                                "partitions failed; written again after it")
            self._still_owned(append, parts)
            unsure = set().union(*(set(d) for d in doubts.values()),
                                 {whole} if whole else set())
            found = ops.committed_ids(unsure)
            expected = dict(append.expected)
            todo = []
            for part, batch, stream in parts:
                landed = {c: end for c, end in doubts.get(id(batch), {}).items()
                          if c in found}
                if whole in found:
                    continue
                if landed and stream is not None:
                    end = max(landed.values())
                    append.resolved[stream] = max(append.resolved.get(stream, 0), end)
                    if stream in expected:
                        expected[stream] = max(expected[stream], end)
                    continue
                todo.append(part)
            if len(todo) < len(parts):
                logger.warning("spark sink: %s: an append whose outcome was unknown is in the "
                               "table: %d of %d part(s) not written again", self.name,
                               len(parts) - len(todo), len(parts))
            if todo:
                self._write(ops, todo, append.offsets, commit_id, expected)
        except BaseException:
            append.failed = True
            raise

    def _still_owned(self, append: _Append, parts: list[tuple[Any, Any, Stream | None]],
                     ) -> None:
        """SinkError when a batch of the append was cancelled, or a stream of it is no
        longer owned as it was when the append was handed over (forgotten: revoked)."""
        for _, batch, stream in parts:
            if batch is not None and batch.cancelled:
                raise SinkError(f"spark sink {self.name}: not appended: a partition of the "
                                "append was revoked")
            if stream is not None and stream in append.owners \
                    and self._owner.get(stream) is not append.owners[stream]:
                raise SinkError(f"spark sink {self.name}: not appended: partition "
                                f"{stream[1]}[{stream[2]}] is no longer this writer's")

    def _write(self, ops: Appends, parts: list[Any], offsets: dict[Stream, int],
               commit_id: str, expected: dict[Stream, int]) -> None:
        """One Iceberg append of ``parts`` with its snapshot properties. When it fails,
        its commit id is looked up: found, it was committed after all; the lookup failing
        too raises :class:`_Unsure`. A fence refusal is raised as it is (nothing landed)."""
        started = time.monotonic()
        # bench/chaos.py freezes a member on this line (a zombie with an append in flight).
        logger.debug("spark sink: %s: appending %d part(s) as commit %s", self.name,
                     len(parts), commit_id)
        try:
            rows = ops.write(parts, offsets, commit_id, expected)
        except Exception as exc:
            if iceberg.fence_refusal(exc) is not None:
                raise
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


def _first_offset(part: Any) -> int:
    """The lowest ``_offset`` of a record batch (one without rows or without the column:
    a large number, nothing to cut)."""
    import pyarrow.compute as pc  # only with the spark extra

    if not len(part) or part.schema.get_field_index("_offset") < 0:
        return 2**63 - 1
    low = pc.min(part.column("_offset")).as_py()
    return 2**63 - 1 if low is None else int(low)


def _from_offset(part: Any, offset: int) -> Any:
    """The rows of a record batch at or after Kafka ``offset``."""
    import pyarrow.compute as pc  # only with the spark extra

    return part.filter(pc.greater_equal(part.column("_offset"), offset))


class Appends(Protocol):
    """How a :class:`StagingWriter` commits: through Spark (:class:`SparkAppends`) or
    pyiceberg (:class:`~actors.sinks.spark.pyiceberg_appends.PyIcebergAppends`)."""

    def committed_ids(self, commit_ids: set[str]) -> set[str]:
        """Which of ``commit_ids`` are in the table's current history."""

    def write(self, parts: Sequence[Any], offsets: dict[Stream, int], commit_id: str,
              expected: dict[Stream, int]) -> int:
        """One append of ``parts`` as one commit carrying ``commit_id``, this process's
        writer id, ``offsets`` (carried forward) and ``expected`` (``kstage.expect``: the
        commit is refused unless the table holds each stream exactly there); the number
        of rows."""


class SparkAppends:
    """A staging table's commits through Spark's ``DataFrameWriterV2.append`` (Spark
    thread). The fence of ``kstage.expect`` is enforced in the JVM, by the catalog
    wrapper of the session (its refusal reaches Python as a Py4J error whose text holds
    ``kstage fence:``)."""

    def __init__(self, spark: Any, actor: SparkActor, table: str,
                 columns: tuple[Column, ...]) -> None:
        self.spark, self.actor, self.table, self.columns = spark, actor, table, columns

    def committed_ids(self, commit_ids: set[str]) -> set[str]:
        return iceberg.committed_ids(self.spark, self.actor.settings, self.table, commit_ids)

    def write(self, parts: Sequence[Any], offsets: dict[Stream, int], commit_id: str,
              expected: dict[Stream, int]) -> int:
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
        if expected:
            writer = writer.option(f"snapshot-property.{iceberg.EXPECT}",
                                   iceberg.format_offsets(expected))
        writer.append()
        return len(table)


class _Unsure(Exception):  # an internal signal, not an error type
    """The append failed and the catalog could not say whether it was committed."""


__all__ = ["Appends", "SparkAppends", "StagingWriter", "flush_limits", "pace", "rest_ratio"]
