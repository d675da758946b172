"""The Spark sink: rows land in Parquet staging tables, written in micro-batches.

Settings: a topic's ``sink: {type: spark, table: NAME}`` (:class:`SparkSinkSettings`,
validated when the configuration is loaded) and the process-wide ``spark:`` section
(:class:`SparkSettings`). What the Spark and JDBC sinks share without Spark (column types,
row checks, Arrow conversion, micro-batching, the worker's handle) is in
:mod:`actors.sinks.table`.

How it works:

* :class:`SparkActor` owns the process's one SparkSession. Every Spark call runs on its
  single background thread (a one-thread executor), never on the event loop; the session
  is created lazily on that thread. One actor per process: :func:`spark_actor` returns it
  (a registry keyed by the settings); :func:`stop_spark_actors` stops them at shutdown.
* :class:`SparkSink` is one worker's handle. The worker calls :meth:`SparkSink.bind` with
  its processor's typed ``columns`` and default ``table`` before :meth:`~SparkSink.open`.
  ``write(rows)`` checks the rows on the event loop and turns those that fit into one
  Arrow record batch (:mod:`actors.sinks.table.rows`; a row with a wrong type or a missing NOT
  NULL value is dead-lettered through the worker's permanent-failure hook), hands it to
  the table's shared :class:`SparkTableWriter` and returns once the micro-batch holding it was
  appended (durable): the worker then commits their offsets.
* A :class:`SparkTableWriter` (a :class:`~actors.sinks.table.batching.TableWriter`)
  buffers the rows of all the workers writing one table and flushes them as one Parquet
  append when ``flush_max_rows`` rows are pending,
  ``flush_max_interval_s`` passed since the first pending row, ``flush_min_rows`` are
  pending while no append of the table runs (so a busy table keeps Spark writing and
  appends grow with the load, while a quiet one still waits for the interval), or a
  worker cannot send more rows (:meth:`TableWriter.flush_soon`, at its
  ``max_in_flight``). Sinks are ``pipelined``: the worker's sink loop hands batches over
  without waiting, so rows of many polls gather while an append runs. A failed append fails every
  write in it with SinkError (retriable; nothing is committed).
* A dead JVM (killed, out of memory) is seen by its process having exited, before a
  call or when a call fails: the session is dropped without calling into it, what its
  unfinished append staged in this process's own directories (``_temporary``) is
  removed, a new session (new JVM) starts, every table registered so far is registered
  again, and the append runs again (its rows were never acked, so nothing was
  committed; an append whose commit the JVM had finished lands twice at most, which the
  merge dedupes). More than ``spark.max_session_restarts`` new sessions within
  ``spark.session_restart_window_s`` (a replacement that fails to start counts too):
  FatalError, the process exits 1 for its orchestrator to restart it.
* Staging table = Parquet at ``<warehouse>/<table>``, registered by location at open
  (``CREATE TABLE IF NOT EXISTS ... LOCATION``, then ``RECOVER PARTITIONS``), so it survives
  restarts and can be queried from any Spark. Columns: the processor's columns, then
  ``_topic, _partition, _offset, _timestamp, _ingested_at`` (UTC), partitioned by
  ``ingest_date`` (UTC DATE; a string would be read back as a date by path readers'
  partition inference) and ``writer_id`` (``host-pid-uuid8``, unique per process) so
  several kstage processes never write the same directory (each appends into its
  own ``ingest_date=D/writer_id=W`` directory, see :meth:`SparkTableWriter._append`).
  Parquet files keep no NOT NULL: read back, every column is nullable (the sink enforces
  ``nullable``). An append leaves the table's cached file listing stale in this process's
  session; the next call on the actor that is not an append refreshes it first
  (``REFRESH TABLE``, see :meth:`SparkActor.call`), so anything run through the actor
  reads every durable row, and a stream of appends does not pay a refresh each (about a
  sixth of a warm append's fixed JVM cost).

pyspark is imported only inside functions: importing this module does not load it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import logging
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field

from actors.errors import FatalError, SinkError
from actors.sinks.base import Problem, SinkContext, SinkSettingsBase
from actors.sinks.spark.session import EXIT_WAIT_S, connection_lost, discard_session, start_session
from actors.sinks.table.batching import TableWriter
from actors.sinks.table.columns import COLUMN_TYPES, COORDINATES, INGESTED_AT, spark_type
from actors.sinks.table.rows import arrow_table, record_batch
from actors.sinks.table.sink import TableSink
from processors.base import Column, Row
from settings.identifiers import SqlIdentifier, sql_identifier
from settings.models import SparkSettings

logger = logging.getLogger(__name__)

T = TypeVar("T")

PARTITION_COLUMNS = ("ingest_date", "writer_id")


class SparkSinkSettings(SinkSettingsBase):
    """Options of ``sink: {type: spark, table: NAME}``."""

    type: Literal["spark"] = Field("spark", description="Sink type.")
    table: SqlIdentifier | None = Field(
        None, description="Staging table, a SQL identifier (default: the processor's).")

    def destination(self) -> str:
        table = self.table or "(the processor's)"
        return f"spark table {table}"


def _writer_id() -> str:
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class SparkJvmDiedError(SinkError):
    """The session's JVM died during a Spark call (retriable: a new session starts)."""


class SparkActor:
    """Owns one SparkSession; runs every Spark call on its single thread.

    Attributes:
        settings: the ``spark:`` section.
        writer_id: this process's partition value (``host-pid-uuid8``).
    """

    def __init__(self, settings: SparkSettings | None = None) -> None:
        self.settings = settings or SparkSettings()
        self.writer_id = _writer_id()
        self.warehouse = Path(self.settings.warehouse).resolve()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spark")
        self._spark: Any = None
        self._proc: Any = None  # the session's JVM (a Popen), when pyspark launched it
        self._writers: dict[str, SparkTableWriter] = {}
        self._stopped = False
        self._warm = False
        self._lost_pid: int | None = None  # the JVM that died, until a new session runs
        self._restarts: list[float] = []  # monotonic times of the new sessions started
        self._reregister = False  # a new session replaced a dead one: register the tables
        self._fatal: FatalError | None = None  # gave up on the session: every call fails

    def _session(self) -> Any:
        """The SparkSession (created on first use, and again after its JVM died, with
        every registered table registered again; Spark thread only)."""
        if self._fatal is not None:
            raise self._fatal
        if self._spark is None:
            if self._lost_pid is not None:
                self._count_restart(self._lost_pid)
            self._start_session()
        if self._reregister:
            tables = [w for w in self._writers.values() if w._registered]
            for writer in tables:
                writer._create(self._spark)
            self._reregister, self._lost_pid = False, None
            logger.warning("spark: new session running; %d table(s) registered again%s",
                           len(tables), f" ({', '.join(w.table for w in tables)})"
                           if tables else "")
        return self._spark

    def _start_session(self) -> None:
        """Spark thread: start the SparkSession (a new JVM when none runs)."""
        self._spark = start_session(self.settings, self.warehouse, self.writer_id)
        self._proc = getattr(self._spark.sparkContext._gateway, "proc", None)
        logger.info("spark: session started (master %s, writer id %s, JVM pid %s)",
                    self.settings.master, self.writer_id, getattr(self._proc, "pid", "unknown"))

    @property
    def jvm_pid(self) -> int | None:
        """The pid of the running session's JVM (None before the session starts, or
        when pyspark did not launch it)."""
        return int(self._proc.pid) if self._spark is not None and self._proc else None

    def _count_restart(self, pid: int) -> None:
        """Spark thread: one more new session after a JVM death, or FatalError when
        ``max_session_restarts`` were started within ``session_restart_window_s``."""
        window = self.settings.session_restart_window_s
        limit = self.settings.max_session_restarts
        if not self._restarts_left():
            self._fatal = FatalError(
                f"spark: Spark JVM (pid {pid}) died; giving up: {len(self._restarts)} new "
                f"session(s) were already started within {window:g}s "
                f"(spark.max_session_restarts: {limit}). The rows not written yet stay "
                "uncommitted: they are read again when the process is restarted")
            raise self._fatal
        self._restarts.append(time.monotonic())

    def _restarts_left(self) -> int:
        """How many new sessions may still start within the window."""
        now = time.monotonic()
        window = self.settings.session_restart_window_s
        self._restarts = [t for t in self._restarts if now - t < window]
        return max(self.settings.max_session_restarts - len(self._restarts), 0)

    def _dead_jvm(self, exc: BaseException | None) -> int | None:
        """Spark thread: the pid of the session's JVM if it has exited, else None. After
        a failed call that lost its connection (``exc``), wait briefly for the exit: the
        socket closes a moment before the process can be reaped."""
        proc = self._proc
        if self._spark is None or proc is None:
            return None
        if exc is not None and proc.poll() is None and connection_lost(exc):
            deadline = time.monotonic() + EXIT_WAIT_S
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        return int(proc.pid) if proc.poll() is not None else None

    def _lose(self, pid: int) -> None:
        """Spark thread: the JVM ``pid`` died: drop the session without calling into it,
        and remove what its unfinished appends staged in this process's directories
        (nothing else writes there, and readers never saw it)."""
        logger.warning("spark: Spark JVM (pid %d) died (exit code %s)%s", pid,
                       self._proc.returncode,
                       "; starting a new session" if self._restarts_left() else "")
        self._discard_session()
        self._lost_pid = pid
        self._warm = False
        self._reregister = self._reregister or any(
            w._registered for w in self._writers.values())
        for writer in self._writers.values():
            writer._dates.clear()  # the new session recovers the partitions again
            for staged in writer.path.glob(f"ingest_date=*/writer_id={self.writer_id}/"
                                           "_temporary"):
                shutil.rmtree(staged, ignore_errors=True)
                logger.info("spark: removed %s (an append the dead JVM did not finish)",
                            staged)

    def _discard_session(self) -> None:
        """Spark thread: forget the session of a dead JVM (see :func:`discard_session`)."""
        discard_session(self._spark, self._proc)
        self._spark = None
        self._proc = None

    def warm_up(self, spark: Any) -> None:
        """Spark thread, once per session: append one row to a scratch table and delete
        it, so the JVM loads the Parquet writer before the first flush rather than during
        it (measured: the first append after assignment fell from ~5 s to ~1 s)."""
        if self._warm:
            return
        self._warm = True
        scratch = self.warehouse / f"_warmup-{self.writer_id}"
        columns = (Column("warmup", "string", True), *COORDINATES)
        row = {"warmup": "x", "_topic": "t", "_partition": 0, "_offset": 0, "_timestamp": 0}
        started = time.monotonic()
        try:
            batch, _ = record_batch([row], columns, "spark warm-up")
            spark.createDataFrame(arrow_table([batch], dt.datetime.now(dt.UTC))
                                  ).write.mode("overwrite").parquet(str(scratch))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        logger.debug("spark: Parquet writer warmed up in %.1fs", time.monotonic() - started)

    def _attempt(self, fn: Callable[[Any], T], fresh: bool = True) -> T:
        """Spark thread: ``fn(spark)`` in a live session (a new one if the JVM died
        since the last call), after refreshing the tables appended to since the last
        refresh when ``fresh``; SparkJvmDiedError if the JVM dies meanwhile."""
        pid = self._dead_jvm(None)
        if pid is not None:  # died while idle
            self._lose(pid)
        try:
            spark = self._session()
            if fresh:
                for writer in self._writers.values():
                    writer._refresh(spark)
            return fn(spark)
        except FatalError:
            raise
        except Exception as exc:
            pid = self._dead_jvm(exc)
            if pid is None:
                raise
            self._lose(pid)
            raise SparkJvmDiedError(f"spark: Spark JVM (pid {pid}) died during the call; "
                                    "the next call starts a new session") from exc

    def _run(self, fn: Callable[[Any], T], retry: bool, fresh: bool) -> T:
        try:
            return self._attempt(fn, fresh)
        except SparkJvmDiedError:
            if not retry:
                raise
        return self._attempt(fn, fresh)  # in a new session

    async def call(self, fn: Callable[[Any], T], *, retry: bool = False,
                   fresh: bool = True) -> T:
        """Run ``fn(spark)`` on the Spark thread and return its result.

        When ``fresh`` (all but the staging appends), the staging tables appended to
        since their last refresh are refreshed first, so ``fn`` sees every row appended
        before it.

        When the session's JVM died (before or during the call), a new session is
        started with the tables registered again; then ``fn`` runs again if ``retry``
        (it must be safe to repeat, like an append whose rows are not acked yet), else
        the call fails with SinkError. FatalError once ``max_session_restarts`` new
        sessions were started within ``session_restart_window_s``."""
        if self._fatal is not None:
            raise self._fatal
        if self._stopped:
            raise SinkError("spark actor is stopped")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._run, fn, retry, fresh)

    def writer(self, table: str, columns: Sequence[Column]) -> SparkTableWriter:
        """The shared writer of ``table`` (created on first use)."""
        writer = self._writers.get(table)
        if writer is None:
            writer = self._writers[table] = SparkTableWriter(self, table, tuple(columns))
        elif writer.columns != tuple(columns):
            raise FatalError(f"spark sink: table {table!r} is written with two different "
                             "column lists in this process")
        return writer

    def _stop_session(self) -> None:
        if self._spark is None:
            return
        pid = self._dead_jvm(None)
        if pid is not None:
            self._discard_session()
            logger.warning("spark: session dropped (its JVM, pid %d, had exited)", pid)
            return
        try:
            self._spark.stop()
        except Exception as exc:  # noqa: BLE001 - stopping must not fail the shutdown
            logger.warning("spark: the session did not stop cleanly: %s", _short(exc))
        self._spark = None
        self._proc = None
        logger.info("spark: session stopped")

    def stop(self) -> None:
        """Stop the session and the thread (blocking; idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        self._executor.submit(self._stop_session).result()
        self._executor.shutdown()

    async def astop(self) -> None:
        """:meth:`stop` off the event loop."""
        await asyncio.to_thread(self.stop)


_ACTORS: dict[str, SparkActor] = {}


def spark_actor(settings: SparkSettings | None = None) -> SparkActor:
    """The process's SparkActor for ``settings`` (created on first use)."""
    settings = settings or SparkSettings()
    key = settings.model_dump_json()
    actor = _ACTORS.get(key)
    if actor is None or actor._stopped:
        actor = _ACTORS[key] = SparkActor(settings)
    return actor


async def stop_spark_actors() -> None:
    """Stop every actor :func:`spark_actor` created (call once at process shutdown)."""
    actors = list(_ACTORS.values())
    _ACTORS.clear()
    for actor in actors:
        await actor.astop()


def struct_type(columns: Sequence[Column]) -> Any:
    """The Spark schema of a staging table with the processor's ``columns``."""
    from pyspark.sql import types as t  # noqa: PLC0415 - pyspark only if used

    fields = [t.StructField(c.name, spark_type(c.type), c.nullable)
              for c in (*columns, *COORDINATES, INGESTED_AT)]
    fields += [t.StructField("ingest_date", t.DateType(), False),
               t.StructField("writer_id", t.StringType(), False)]
    return t.StructType(fields)


def schema_change(existing: dict[str, str], declared: Sequence[Column],
                  ) -> tuple[list[str], list[str]]:
    """Compare a table's written columns (name -> Spark simple type string, without
    the partition columns) with the ``declared`` ones (coordinates
    included): the names of new nullable columns, and one message per change that is not
    allowed (a column removed, a type changed, a new NOT NULL column)."""
    declared_types = {c.name: COLUMN_TYPES[c.type].spark_sql.lower()
                      for c in (*declared, INGESTED_AT)}
    errors = [f"column {name!r} ({kind}) is no longer declared" for name, kind in
              existing.items() if name not in declared_types]
    errors += [f"column {name!r} was {existing[name]}, is now declared {kind}"
               for name, kind in declared_types.items()
               if name in existing and existing[name] != kind]
    added = []
    for column in declared:
        if column.name in existing:
            continue
        if column.nullable:
            added.append(column.name)
        else:
            errors.append(f"new column {column.name!r} is NOT NULL but the rows already "
                          "written have no value for it")
    return added, errors


class SparkTableWriter(TableWriter):
    """Micro-batches one staging table's rows (see :class:`TableWriter`); a flush appends
    the pending parts (Arrow record batches) together as one Parquet write
    (:meth:`_append`, on the Spark thread)."""

    def __init__(self, actor: SparkActor, table: str, columns: tuple[Column, ...]) -> None:
        super().__init__(table, columns, **flush_limits(actor.settings))
        self.actor = actor
        self.path = actor.warehouse / table
        self._registered = False
        self._dates: set[dt.date] = set()
        self._stale = False  # appended to since the last REFRESH TABLE in this session

    def convert(self, rows: Sequence[Row]) -> tuple[Any, list[tuple[Row, str]]]:
        """The rows that fit the declared columns as one Arrow record batch, and the
        rows that do not, each with the reason naming the row and column (see
        :func:`actors.sinks.table.rows.record_batch`)."""
        return record_batch(rows, self._all, f"spark sink {self.table}")

    def _create(self, spark: Any) -> None:
        """Spark thread: create the table by location if needed (in this session's
        catalog), and find its existing partitions."""
        cols = ", ".join(f"`{c.name}` {COLUMN_TYPES[c.type].spark_sql}" for c in self._all)
        ddl = (f"CREATE TABLE IF NOT EXISTS `{self.table}` ({cols}, `_ingested_at` TIMESTAMP, "
               "`ingest_date` DATE, `writer_id` STRING) USING parquet "
               f"PARTITIONED BY (ingest_date, writer_id) LOCATION {_quote(str(self.path))}")
        self.actor.warm_up(spark)
        self.path.mkdir(parents=True, exist_ok=True)  # RECOVER PARTITIONS lists it
        added = self._check_files(spark)
        spark.sql(ddl)
        known = {f.name for f in spark.table(self.table).schema}
        missing = [c for c in self._all if c.name not in known]
        if missing:  # a persistent catalog holds the table with fewer columns
            spark.sql(f"ALTER TABLE `{self.table}` ADD COLUMNS (" + ", ".join(
                f"`{c.name}` {COLUMN_TYPES[c.type].spark_sql}" for c in missing) + ")")
        spark.sql(f"ALTER TABLE `{self.table}` RECOVER PARTITIONS")
        if added:
            logger.warning("spark sink: table %s: new nullable column(s) %s added (rows "
                           "written before read them as NULL)", self.table, ", ".join(added))

    async def register(self) -> None:
        """Create the table by location if needed, and find its existing partitions."""
        if self._registered:
            return
        try:
            await self.actor.call(self._create)
        except (SinkError, FatalError):
            raise
        except Exception as exc:  # noqa: BLE001 - any Spark failure is a retriable sink error
            raise SinkError(f"spark sink {self.table}: cannot register the table: "
                            f"{_short(exc)}") from exc
        self._registered = True
        logger.info("spark sink: table %s registered at %s", self.table, self.path)

    def _check_files(self, spark: Any) -> list[str]:
        """Spark thread: compare the columns of the Parquet files already in the table with
        the declared ones; the new (nullable) columns, or FatalError (see
        :func:`schema_change`)."""
        if next(self.path.rglob("*.parquet"), None) is None:
            return []
        found = spark.read.option("mergeSchema", "true").parquet(str(self.path)).schema
        existing = {f.name: f.dataType.simpleString() for f in found
                    if f.name not in PARTITION_COLUMNS}
        added, errors = schema_change(existing, self._all)
        if errors:
            raise FatalError(f"spark sink: table {self.table} at {self.path}: the processor's "
                             "columns do not fit the files already written: "
                             + "; ".join(errors) + " (only new nullable columns can be "
                             "added; write to a new table with sink.table, or move the old "
                             "files away)")
        return added

    def _file_schema(self) -> Any:
        """The Spark schema of the files (the table's without its partition columns)."""
        from pyspark.sql import types as t  # noqa: PLC0415 - pyspark only if used

        return t.StructType([f for f in struct_type(self.columns).fields
                             if f.name not in PARTITION_COLUMNS])

    async def _flush(self, batch: list[tuple[Any, asyncio.Future[None]]]) -> None:
        parts = [part for part, _ in batch]
        try:
            # retry: after a JVM death the append runs again in the new session (its rows
            # are not acked yet; what the dead JVM staged was removed).
            await self.actor.call(lambda spark: self._append(spark, parts), retry=True,
                                  fresh=False)
        except Exception as exc:  # noqa: BLE001 - any Spark failure is a retriable sink error
            rows = sum(map(len, parts))
            error: Exception = exc if isinstance(exc, FatalError) else SinkError(
                f"spark sink {self.table}: append of {rows} row(s) failed: {_short(exc)}")
            if error is not exc:
                error.__cause__ = exc
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        self.flushes += 1
        for _, future in batch:
            if not future.done():
                future.set_result(None)

    def _append(self, spark: Any, parts: list[Any]) -> None:
        """Spark thread: append ``parts`` (record batches) as one Parquet write into this
        process's own partition directory; the table is refreshed before the next call
        that reads (:meth:`_refresh`).

        The write targets ``<table>/ingest_date=D/writer_id=W`` itself rather than the
        table with ``partitionBy``: Hadoop's output committer stages a job under
        ``<target>/_temporary`` and deletes that directory when the job ends, so two
        processes writing through the table's root would delete each other's staged
        files (failed commits, leaked rows). A directory per writer keeps them apart."""
        started = time.monotonic()
        now = dt.datetime.now(dt.UTC)
        date = now.date()
        target = self.path / f"ingest_date={date.isoformat()}" / f"writer_id={self.actor.writer_id}"
        table = arrow_table(parts, now)
        frame = spark.createDataFrame(table, self._file_schema())
        writer = frame.write.mode("append")
        for key, value in self.actor.settings.staging_write_options.items():
            writer = writer.option(key, value)
        writer.parquet(str(target))
        written = time.monotonic()
        if date not in self._dates:
            spark.sql(f"ALTER TABLE `{self.table}` RECOVER PARTITIONS")
            self._dates.add(date)
        self._stale = True
        logger.debug("spark sink: %s: appended %d row(s) in %.3fs (write %.3fs)", self.table,
                     len(table), time.monotonic() - started, written - started)

    def _refresh(self, spark: Any) -> None:
        """Spark thread: refresh the table's cached file listing in this session if
        appends landed since the last refresh (before any call but an append: one
        ``REFRESH TABLE`` per read instead of one per append)."""
        if self._stale:
            spark.sql(f"REFRESH TABLE `{self.table}`")
            self._stale = False


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def flush_limits(settings: SparkSettings) -> dict[str, Any]:
    """A :class:`TableWriter`'s flush limits from the ``spark:`` section."""
    return {"max_rows": settings.flush_max_rows, "min_rows": settings.flush_min_rows,
            "max_interval_s": settings.flush_max_interval_s, "idle_s": settings.flush_idle_s}


class SparkTableSink(TableSink):
    """A table sink whose writes run on the process's :class:`SparkActor` (the Spark and
    the JDBC sinks): the actor passed in, or the one of the ``spark:`` section given at
    :meth:`bind`."""

    def __init__(self, settings: Any, actor: SparkActor | None = None,
                 columns: Sequence[Column] = (), table: str | None = None) -> None:
        super().__init__(settings, columns, table)
        self._actor = actor
        self._spark_settings: SparkSettings | None = None

    def bind(self, context: SinkContext) -> None:
        """Also take the ``spark:`` section (used when no actor was passed)."""
        super().bind(context)
        self._spark_settings = context.settings.spark if context.settings else None

    def _spark(self) -> SparkActor:
        """The actor passed in, or the process's one for the ``spark:`` section."""
        if self._actor is None:
            self._actor = spark_actor(self._spark_settings)
        return self._actor

class SparkSink(SparkTableSink):
    """One worker's handle on a Spark staging table (see the module docstring)."""

    type = "spark"
    settings_model = SparkSinkSettings
    requires = {"pyspark": "kstage[spark]", "pyarrow": "kstage[spark]"}
    settings: SparkSinkSettings

    def check(self) -> list[Problem]:
        """The table name must be a plain identifier; the processor must declare
        columns, none named like the sink's own (coordinates, partitions)."""
        problems: list[Problem] = []
        try:
            sql_identifier(self.table)
        except ValueError as exc:
            problems.append((("sink", "table"), f"spark sink: table name of {self._what()}: "
                             f"{exc}; set sink.table"))
        return problems + self._column_problems(
            (*(x.name for x in COORDINATES), "_ingested_at", *PARTITION_COLUMNS))

    async def open(self) -> None:
        self._refuse_problems()
        self._writer = self._spark().writer(self.table, self.columns)
        await self._writer.register()
