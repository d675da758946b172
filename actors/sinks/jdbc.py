"""The JDBC sink: rows land in a PostgreSQL staging table through Spark's JDBC writer.

Settings: a topic's ``sink: {type: jdbc, table: NAME, url: jdbc:postgresql://..., user,
password}`` (:class:`JdbcSinkSettings`); Spark itself is the process-wide ``spark:``
section, shared with the spark sinks (one SparkSession per process, see
:mod:`actors.sinks.spark.actor`).

How it works:

* The sink gets the same rows a spark sink gets: the processor's typed ``columns``, then
  ``_topic, _partition, _offset, _timestamp`` and ``_ingested_at`` (UTC, set at flush).
  The database takes concurrent inserts from several processes itself.
* Every JDBC call runs on the :class:`~actors.sinks.spark.actor.SparkActor`'s one thread. The
  driver jar (``jar``, default Debian's ``/usr/share/java/postgresql.jar``) is added to
  the running session with ``ADD JAR`` when the driver class is not on its classpath
  already (``spark.conf: {spark.jars: ...}`` also works); ``ADD JAR`` also ships it to
  the executors of a cluster.
* A :class:`JdbcTableWriter` (a :class:`~actors.sinks.table.batching.TableWriter`) batches the rows
  of all the workers writing one table (``spark.flush_max_rows`` /
  ``spark.flush_max_interval_s``) and appends each micro-batch in one transaction: the
  rows of a flush land together or not at all.
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
  DOUBLE PRECISION, BOOLEAN, BYTEA, TIMESTAMPTZ; NOT NULL where the column is not
  nullable). An existing table must have every column with a compatible type and
  nullability (FatalError naming the table and the columns otherwise).
* Failures are told apart by the PostgreSQL SQLSTATE of the JDBC exception
  (:func:`sql_error`). A row that does not fit its column types (checked before the
  write), or that PostgreSQL refuses with a data error (class ``22``: too long for its
  ``varchar(n)``, out of range, invalid text...) or an integrity one (class ``23``: a
  duplicate key, NOT NULL, a foreign key, a CHECK) goes to ``on_permanent_failure``: the
  worker dead-letters it, with the SQLSTATE, the server's message and the row's
  topic/partition/offset. A flush refused with such an error is split in halves, each
  written on its own (one transaction each) and split again while it fails, until the
  refused rows are alone: k bad rows in n cost O(k log n) writes, the other rows land.
  Every other failure (class ``08`` connection, ``53`` resources, ``57P01`` shutdown,
  ``40001``/``40P01`` serialization/deadlock, no SQLSTATE at all...) raises
  :class:`~actors.errors.SinkError`: the worker backs off and retries the batch, and
  commits nothing meanwhile. A write that failed wrote nothing (one transaction); the rows
  an interrupted split already wrote or refused are taken off the batch, so its retry
  writes the others and nothing twice. The table check at :meth:`JdbcSink.open` is
  retried at the first write when the database cannot be reached at open.
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

The password is never logged; URLs are shown without their query string.
pyspark is imported only inside functions: importing this module does not load it.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from actors.errors import FatalError, SinkError
from actors.sinks.base import Position, Problem, SinkSettingsBase
from actors.sinks.jdbc_offsets import (
    OffsetsMoved,
    create_offsets_sql,
    insert_rows_sql,
    move_offsets,
    offsets_name_problem,
    offsets_table,
    read_offsets,
)
from actors.sinks.jdbc_upsert import (
    UNIQUE_INDEXES_SQL,
    add_source_sql,
    delete_sql,
    deletions_columns,
    deletions_name_problem,
    deletions_table,
    key_constraint,
    missing_key_index,
    newest_per_key,
    record_deletions_sql,
    rows_json,
    upsert_sql,
)
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.ledger import Stream
from actors.sinks.spark.sink import SparkTableSink
from actors.sinks.spark.staging import flush_limits
from actors.sinks.table.batching import Pending, RowsRefused, TableWriter
from actors.sinks.table.columns import COORDINATES, INGESTED_AT, column_kind, spark_schema
from actors.sinks.table.exactly_once import ExactlyOnceWriter, Flight, held
from actors.sinks.table.rows import check, check_rows
from actors.sinks.table.sink import TableSink
from processors.base import DELETED, Column, Row
from settings.identifiers import IDENTIFIER, QualifiedSqlIdentifier, sql_identifier

logger = logging.getLogger(__name__)

DEFAULT_JAR = "/usr/share/java/postgresql.jar"
_RESERVED = (*(c.name for c in COORDINATES), "_ingested_at")
# Connection properties kstage sets unless the sink's ``properties`` say otherwise: fail
# fast when the server is away (the Spark thread is shared by every sink) and send the
# batched INSERTs as multi-row statements.
_DEFAULT_PROPERTIES = {"connectTimeout": "10", "socketTimeout": "120", "loginTimeout": "10",
                       "reWriteBatchedInserts": "true"}


class JdbcSinkSettings(SinkSettingsBase):
    """Options of ``sink: {type: jdbc, table: NAME, url: jdbc:postgresql://...}``."""

    type: Literal["jdbc"] = Field("jdbc", description="Sink type.")
    table: QualifiedSqlIdentifier | None = Field(
        None, description="Staging table, `name` or `schema.name` (default: the processor's).")
    url: str = Field(description="JDBC URL, e.g. jdbc:postgresql://host:5432/db.")
    user: str | None = Field(None, description="Database user.")
    password: SecretStr | None = Field(None, description="Database password (never logged).")
    driver: str = Field("org.postgresql.Driver", description="JDBC driver class.")
    jar: str = Field(DEFAULT_JAR, description="Driver jar, added to the Spark session "
                     "when the driver class is not on its classpath.")
    batch_size: int = Field(5000, ge=1, description="Rows per JDBC batch (Spark batchsize; "
                            "with mode: upsert, rows per statement).")
    mode: Literal["append", "upsert"] = Field(
        "append", description="append: every row is inserted (a staging table). upsert: "
        "one row per natural key of the processor, INSERT ... ON CONFLICT DO UPDATE when "
        "the incoming record is newer (same partition: higher offset), so a replay never "
        "rolls a row back.")
    properties: dict[str, str] = Field(
        default_factory=dict, description="Extra JDBC connection properties (override "
        "kstage's connectTimeout=10, socketTimeout=120, loginTimeout=10, "
        "reWriteBatchedInserts=true).")

    def destination(self) -> str:
        table = self.table or "(the processor's)"
        return f"jdbc table {table} at {safe_url(self.url)}"

    @field_validator("url")
    @classmethod
    def _jdbc_url(cls, value: str) -> str:
        if not value.startswith("jdbc:"):
            raise ValueError(f"jdbc sink url {safe_url(value)!r} must start with 'jdbc:'")
        return value


def safe_url(url: str) -> str:
    """``url`` without its query string and user info (they may hold a password)."""
    url = url.split("?", 1)[0].split(";", 1)[0]
    return re.sub(r"//[^/@]*@", "//", url)


def _table_parts(table: str) -> tuple[str, ...]:
    parts = tuple(table.split("."))
    if len(parts) > 2 or not all(IDENTIFIER.match(p) for p in parts):
        raise ValueError(f"jdbc sink table {table!r} is not `name` or `schema.name` made of "
                         "plain identifiers")
    return parts


def _qualified(table: str) -> str:
    return ".".join(f'"{p}"' for p in _table_parts(table))


def create_table_sql(table: str, columns: Sequence[Column], key: Sequence[str] = ()) -> str:
    """The ``CREATE TABLE IF NOT EXISTS`` of a staging table with the processor's
    ``columns`` (the Kafka coordinates and ``_ingested_at`` follow them); with a ``key``
    (``mode: upsert``), its constraint (:func:`~actors.sinks.jdbc_upsert.key_constraint`)."""
    cols = ", ".join(f'"{c.name}" {column_kind(c.type).postgres}'
                     + ("" if c.nullable else " NOT NULL")
                     for c in (*columns, *COORDINATES, INGESTED_AT))
    if key:
        cols += ", " + key_constraint(key, columns)
    return f"CREATE TABLE IF NOT EXISTS {_qualified(table)} ({cols})"


def table_mismatches(table: str, existing: Sequence[tuple[str, str, bool, bool]],
                     declared: Sequence[Column]) -> list[str]:
    """What makes an existing table unfit for the ``declared`` columns (coordinates and
    ``_ingested_at`` included). ``existing``: (name, format_type, NOT NULL, has default)."""
    found = {name: (kind, notnull, default) for name, kind, notnull, default in existing}
    errors = []
    missing = [c for c in declared if c.name not in found]
    if missing:
        added = ", ".join(f'ADD COLUMN "{c.name}" {column_kind(c.type).postgres}'
                          for c in missing if c.nullable)
        errors.append(f"table {table} has no column(s) {', '.join(c.name for c in missing)}"
                      + (f" (ALTER TABLE {table} {added} adds the nullable ones)"
                         if added else ""))
    for column in declared:
        if column.name not in found:
            continue
        kind, notnull, _ = found[column.name]
        if not kind.startswith(column_kind(column.type).postgres_found):
            errors.append(f"table {table} column {column.name!r} is {kind}, the processor "
                          f"declares {column.type} ({column_kind(column.type).postgres})")
        if notnull and column.nullable:
            errors.append(f"table {table} column {column.name!r} is NOT NULL but the "
                          "processor declares it nullable")
    names = {c.name for c in declared}
    extra = [name for name, (_, notnull, default) in found.items()
             if name not in names and notnull and not default]
    if extra:
        errors.append(f"table {table} has NOT NULL column(s) without a default the sink "
                      f"does not write: {', '.join(extra)}")
    return errors


def _pg_check(value: Any, column: Column) -> Any:
    """:func:`~actors.sinks.table.rows.check`, and no NUL in text (PostgreSQL cannot store it)."""
    value = check(value, column)
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("contains a NUL character (PostgreSQL text cannot store it)")
    return value


# SQLSTATE classes that are facts about the rows written: data exceptions and integrity
# constraint violations. Any other SQLSTATE, or none, is retried.
ROW_ERROR_CLASSES = ("22", "23")
_STATE_NAMES = {
    "22001": "string_data_right_truncation", "22003": "numeric_value_out_of_range",
    "22007": "invalid_datetime_format", "22008": "datetime_field_overflow",
    "22021": "character_not_in_repertoire", "22P02": "invalid_text_representation",
    "22P05": "untranslatable_character", "23502": "not_null_violation",
    "23503": "foreign_key_violation", "23505": "unique_violation",
    "23514": "check_violation", "23P01": "exclusion_violation",
}


def is_row_error(state: str | None) -> bool:
    """Whether a failure with this SQLSTATE is a fact about the rows written (dead-letter
    them) rather than about the database or the connection (retry)."""
    return state is not None and state[:2] in ROW_ERROR_CLASSES


def _java_chain(java: Any) -> Any:
    """``java`` and its causes, each followed by its SQL ``getNextException`` chain."""
    for _ in range(20):
        if java is None:
            return
        yield java
        try:
            following = java.getNextException()
        except Exception:  # noqa: BLE001 - not an SQLException
            following = None
        for _ in range(20):
            if following is None:
                break
            yield following
            following = following.getNextException()
        java = java.getCause()


def sql_error(exc: BaseException) -> tuple[str | None, str]:
    """Spark thread: the SQLSTATE and the message of the JDBC error inside ``exc`` (a Py4J
    error; the SQLException may be the cause of Spark's "Job aborted" exception, a
    ``BatchUpdateException`` holds the server's error as its next exception), or
    ``(None, short text)`` when no SQLException carries a SQLSTATE."""
    java = getattr(exc, "java_exception", None)
    found: list[tuple[str, str, str]] = []
    try:
        for error in _java_chain(java):
            try:
                state = error.getSQLState()
            except Exception:  # noqa: BLE001, S112 - not an SQLException
                continue
            if state:
                found.append((str(state), error.getClass().getName(),
                              " ".join(str(error.getMessage()).split())))
    except Exception:  # noqa: BLE001 - the JVM may be gone: no SQLSTATE then
        logger.debug("jdbc sink: cannot read the SQLSTATE of %s", type(exc).__name__)
    # The server's own error rather than the BatchUpdateException that quotes the batch.
    found.sort(key=lambda f: f[1].endswith("BatchUpdateException"))
    if not found:
        return None, _short(exc)
    state, name, message = found[0]
    return state, f"{name}: {message[:500]}"


def state_text(state: str | None) -> str:
    """``SQLSTATE 23505 (unique_violation)``."""
    if state is None:
        return "no SQLSTATE"
    name = _STATE_NAMES.get(state)
    return f"SQLSTATE {state}" + (f" ({name})" if name else "")


class AppendError(Exception):
    """An append of rows failed: its SQLSTATE (None if unknown) and message."""

    def __init__(self, state: str | None, message: str) -> None:
        super().__init__(f"{message} ({state_text(state)})")
        self.state = state
        self.message = message
        self.rows = 0  # how many the failed append held

    @property
    def row_error(self) -> bool:
        return is_row_error(self.state)


class JdbcPart:
    """One sink write's rows in a flush: those not written yet (a flush takes the rows
    it wrote or refused off the list), and those PostgreSQL refused, not yet reported."""

    __slots__ = ("refused", "rows")

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows
        self.refused: list[tuple[Row, str]] = []

    def __len__(self) -> int:
        return len(self.rows)


def _short(exc: BaseException) -> str:
    """The first line of a (Java) error, without the Py4J call noise."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            return f"{java.getClass().getName()}: {str(java.getMessage())[:300]}"
        except Exception:  # noqa: BLE001, S110 - the JVM may be gone: fall back to the text
            pass
    text = [line for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


class JdbcTableWriter(ExactlyOnceWriter):
    """Micro-batches one table's rows (see :class:`TableWriter`) and appends each batch
    with Spark's JDBC writer, in one transaction; with ``mode: upsert``, upserts it by
    ``key`` in one statement (:mod:`actors.sinks.jdbc_upsert`)."""

    def __init__(self, actor: SparkActor, settings: JdbcSinkSettings, table: str,
                 columns: tuple[Column, ...], key: tuple[str, ...] = (),
                 deletes: bool = False, source_order: str | None = None) -> None:
        super().__init__(table, columns, **flush_limits(actor.settings))
        self.actor = actor
        self.settings = settings
        self.key = key if settings.mode == "upsert" else ()
        # the processor's source position column: orders a key's rows across partitions
        self.source_order = source_order if self.key else None
        # mode: upsert of a processor that emits deletions: the deletions table
        # (actors.sinks.jdbc_upsert), the newest deletion of each key deleted from the table
        self.deletions = deletions_table(table) if self.key and deletes else None
        self._deletion_columns = deletions_columns(self.key, columns, self.source_order)
        self.url = settings.url
        self.where = f"jdbc sink {table} at {safe_url(settings.url)}"
        self._registered = False
        # mode: append: the Kafka offsets the table holds (actors.sinks.jdbc_offsets),
        # and per stream this writer owns, as the Iceberg writer keeps them
        # (actors.sinks.spark.staging): floor, landed, next and an ownership token.
        self.offsets = offsets_table(table) if not self.key else None
        self.fenced = 0  # flushes refused because another writer moved the offsets

    def _properties(self) -> dict[str, str]:
        props = dict(_DEFAULT_PROPERTIES) if self.url.startswith("jdbc:postgresql:") else {}
        props.update(self.settings.properties)
        if self.settings.user is not None:
            props["user"] = self.settings.user
        if self.settings.password is not None:
            props["password"] = self.settings.password.get_secret_value()
        return props

    def convert(self, rows: Sequence[Row]) -> tuple[JdbcPart, list[tuple[Row, str]]]:
        """The rows as tuples in table order, and the rows that do not fit, each with the
        reason naming the table, the row's coordinates and the column."""
        good, rejected = check_rows(rows, self._all, f"jdbc sink {self.table}", _pg_check)
        return JdbcPart(good), rejected

    def refused(self, part: JdbcPart) -> list[tuple[Row, str]]:
        return part.refused

    # -- Spark thread -----------------------------------------------------------------

    def _driver(self, spark: Any) -> Any:
        """A driver instance, after adding the jar to the session if needed."""
        jvm = spark._jvm
        name = self.settings.driver

        def load() -> Any:
            loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
            return loader.loadClass(name)

        try:
            load()
        except Exception:  # noqa: BLE001 - not on the classpath yet: add the jar
            jar = Path(self.settings.jar)
            if not jar.is_file():
                raise FatalError(f"{self.where}: the JDBC driver {name} is not on Spark's "
                                 f"classpath and the jar {jar} does not exist (install "
                                 "Debian's libpostgresql-jdbc-java or set sink.jar)") from None
            _driver_loader_add(spark, jar)  # first: every class of the jar loads there
            spark.sql(f"ADD JAR '{str(jar.resolve())}'")  # ships it to the executors
            try:
                load()
            except Exception as exc:  # noqa: BLE001
                raise FatalError(f"{self.where}: the jar {jar} has no driver class {name} "
                                 f"(sink.driver): {_short(exc)}") from None
            logger.info("jdbc sink: added %s to the Spark session (driver %s)", jar, name)
        driver = jvm
        for part in name.split("."):
            driver = getattr(driver, part)
        return driver()

    def _connect(self, spark: Any) -> Any:
        driver = self._driver(spark)
        props = spark._jvm.java.util.Properties()
        for key, value in self._properties().items():
            props.setProperty(key, value)
        conn = driver.connect(self.url, props)
        if conn is None:
            raise FatalError(f"{self.where}: the driver {self.settings.driver} does not "
                             "accept this URL (sink.url, sink.driver)")
        return conn

    def _ensure_table(self, spark: Any) -> bool:
        """Create the table (and its deletions table) if missing, else check its columns;
        True if the table was created."""
        conn = self._connect(spark)
        try:
            created = self._ensure_one(conn, self.table, self.columns)
            if self.offsets is not None:
                statement = conn.createStatement()
                statement.execute(create_offsets_sql(_qualified(self.offsets)))
                statement.close()
            if self.deletions is not None:
                if self.source_order is not None:  # a deletions table made before it
                    statement = conn.createStatement()
                    statement.execute(add_source_sql(_qualified(self.deletions),
                                                     self._deletion_columns[-1]))
                    statement.close()
                self._ensure_one(conn, self.deletions, self._deletion_columns)
        finally:
            conn.close()
        return created

    def _ensure_one(self, conn: Any, table: str, columns: tuple[Column, ...]) -> bool:
        """Spark thread: create ``table`` with ``columns`` (then the coordinates) if
        missing, else check it; True if created."""
        query = conn.prepareStatement(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
            "a.atthasdef FROM pg_attribute a WHERE a.attrelid = to_regclass(?) "
            "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum")
        query.setString(1, _qualified(table))
        result = query.executeQuery()
        existing = []
        while result.next():
            existing.append((result.getString(1), result.getString(2),
                             result.getBoolean(3), result.getBoolean(4)))
        query.close()
        if not existing:
            statement = conn.createStatement()
            statement.execute(create_table_sql(table, columns, self.key))
            statement.close()
            return True
        indexes: list[tuple[str, bool]] = []
        if self.key:
            query = conn.prepareStatement(UNIQUE_INDEXES_SQL)
            query.setString(1, _qualified(table))
            result = query.executeQuery()
            while result.next():
                indexes.append((str(result.getString(1)), bool(result.getBoolean(2))))
            query.close()
        errors = table_mismatches(table, existing, (*columns, *COORDINATES, INGESTED_AT))
        missing = (missing_key_index(table, self.key, columns, indexes)
                   if self.key else None)
        if missing and not errors:
            raise FatalError(f"{self.where}: {missing}")
        if errors:
            raise FatalError(f"{self.where}: the table does not fit the processor's columns: "
                             + "; ".join(errors) + " (alter the table, or write to a new "
                             "one with sink.table)")
        return False

    async def register(self) -> None:
        """Create the table if missing, or check the existing one (FatalError if it does
        not fit; SinkError if the database cannot be reached)."""
        if self._registered:
            return
        try:
            created = await self.actor.call(self._ensure_table)
        except (SinkError, FatalError):
            raise
        except Exception as exc:  # connection/SQL failures are retriable
            raise SinkError(f"{self.where}: cannot create or check the table: "
                            f"{_short(exc)}") from exc
        self._registered = True
        logger.info("jdbc sink: table %s %s at %s", self.table,
                    "created" if created else "checked", safe_url(self.url))

    async def _flush(self, batch: list[Pending]) -> None:
        if self.offsets is not None and any(item.stream is not None for item in batch):
            await self._flush_fenced(batch)
            return
        parts: list[JdbcPart] = [item.part for item in batch]
        rows = [(part, row) for part in parts for row in part.rows]
        done = [False] * len(rows)  # written or refused
        error: Exception | None = None
        try:
            await self.register()
            if self.key:
                await self._upsert_newest(rows, done)
            else:
                await self._write_all(rows, done, set())
        except AppendError as exc:  # not a fact about rows: the batch is retried
            error = SinkError(f"{self.where}: {self.settings.mode} of {exc.rows} row(s) "
                              f"failed: {exc}")
            error.__cause__ = exc.__cause__
        except (FatalError, SinkError) as exc:
            error = exc
        except Exception as exc:  # noqa: BLE001 - any other failure is retried
            error = SinkError(f"{self.where}: {self.settings.mode} of {len(rows)} row(s) "
                              f"failed: {_short(exc)}")
            error.__cause__ = exc
        finally:
            for part in parts:  # what a retry still has to write
                part.rows.clear()
            for (part, row), written in zip(rows, done, strict=True):
                if not written:
                    part.rows.append(row)
        if error is None:
            self.flushes += 1
        for item in batch:
            if item.future.done():
                continue
            if error is not None and item.part.rows:
                item.future.set_exception(error)
            else:
                item.future.set_result(None)

    # -- offsets (mode: append) -----------------------------------------------------

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
                return read_offsets(conn, _qualified(offsets), streams)
            finally:
                conn.close()

        try:
            return await self.actor.call(read, retry=True)
        except (SinkError, FatalError):
            raise
        except Exception as exc:
            raise SinkError(f"{self.where}: cannot read the Kafka offsets the table holds "
                            f"({offsets}): {_short(exc)}") from exc

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
                              f"{_short(exc)}")
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
            insert = conn.prepareStatement(insert_rows_sql(_qualified(self.table), names))
            refused: list[tuple[int, AppendError]] = []
            self._insert_split(conn, insert, rows, names, 0, len(rows), refused)
            insert.close()
            if refused:
                conn.rollback()
                return refused
            move_offsets(conn, _qualified(self.offsets or ""), self.table, flight.offsets,
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

    async def _write_all(self, rows: list[tuple[JdbcPart, tuple[Any, ...]]], done: list[bool],
                         refused: set[int]) -> None:
        """Write ``rows`` in one transaction or, when PostgreSQL refuses them for a fact
        about rows, split them until the refused ones are alone (their positions go to
        ``refused``). Marks in ``done`` the rows written or refused."""
        failure = await self._try_append([row for _, row in rows])
        if failure is None:
            done[:] = [True] * len(rows)
            return
        logger.warning("%s: %s of %d row(s) refused: %s; splitting the batch to find the "
                       "rows", self.where, self.settings.mode, len(rows), failure)
        await self._split(rows, 0, len(rows), done, failure, refused)

    async def _upsert_newest(self, rows: list[tuple[JdbcPart, tuple[Any, ...]]],
                             done: list[bool]) -> None:
        """Upsert the newest row of each key (PostgreSQL cannot update a row twice in one
        statement); a row superseded in the batch is done once the row that superseded it
        is written, and written in its place if PostgreSQL refuses that one."""
        names = [c.name for c in self._all]
        key = [names.index(k) for k in self.key]
        coordinates: list[int | None] = [
            names.index(c) for c in ("_topic", "_partition", "_offset", "_timestamp")]
        coordinates.append(None if self.source_order is None
                           else names.index(self.source_order))
        pending = list(range(len(rows)))
        while pending:
            groups = newest_per_key([rows[i][1] for i in pending], key, coordinates)
            items = [rows[pending[best]] for best, _ in groups]
            written = [False] * len(items)
            refused: set[int] = set()
            later: list[int] = []
            try:
                await self._write_all(items, written, refused)
            finally:  # also when the write failed: what is done stays done
                for j, (best, superseded) in enumerate(groups):
                    if not written[j]:
                        continue
                    done[pending[best]] = True
                    if j in refused:
                        later += (pending[i] for i in superseded)
                    else:
                        for i in superseded:
                            done[pending[i]] = True
            pending = sorted(later)

    async def _try_append(self, rows: list[tuple[Any, ...]]) -> AppendError | None:
        """Append ``rows`` in one transaction: None if written, the error if PostgreSQL
        refused them for a fact about rows; raises AppendError for any other failure."""
        try:
            # One transaction: a JVM that died mid-append wrote nothing; run it again.
            await self.actor.call(lambda spark: self._append_or_classify(spark, rows),
                                  retry=True)
        except AppendError as exc:
            if exc.row_error:
                return exc
            exc.rows = len(rows)
            raise
        return None

    async def _split(self, rows: list[tuple[JdbcPart, tuple[Any, ...]]], start: int,
                     end: int, done: list[bool], failure: AppendError,
                     refused_at: set[int]) -> None:
        """``rows[start:end]`` were refused with ``failure``, a fact about rows: a row
        alone goes to its part's refused list (its position to ``refused_at``); else each
        half is written on its own and a refused half split again. Marks in ``done`` the
        rows written or refused."""
        if end - start == 1:
            part, row = rows[start]
            part.refused.append(self._refusal(row, failure))
            done[start] = True
            refused_at.add(start)
            return
        middle = (start + end) // 2
        for low, high in ((start, middle), (middle, end)):
            refused = await self._try_append([row for _, row in rows[low:high]])
            if refused is None:
                done[low:high] = [True] * (high - low)
            else:
                await self._split(rows, low, high, done, refused, refused_at)

    def _refusal(self, row: tuple[Any, ...], failure: AppendError) -> tuple[Row, str]:
        """The row as a dict (for the dead letter) and the reason it was refused."""
        values = dict(zip((c.name for c in self._all), row, strict=False))
        where = (f"topic {values.get('_topic')!r} partition {values.get('_partition')} "
                 f"offset {values.get('_offset')}")
        return values, (f"jdbc sink {self.table}: row at {where}: refused by PostgreSQL "
                        f"with {state_text(failure.state)}: {failure.message}")

    def _append_or_classify(self, spark: Any, rows: list[tuple[Any, ...]]) -> None:
        """Spark thread: :meth:`_append`, its failure as an AppendError with the SQLSTATE."""
        try:
            if self.key:
                self._upsert(spark, rows)
            else:
                self._append(spark, rows)
        except (FatalError, SinkError):
            raise
        except Exception as exc:
            state, message = sql_error(exc)
            raise AppendError(state, message) from exc

    def _append(self, spark: Any, rows: list[tuple[Any, ...]]) -> None:
        """Spark thread: append ``rows`` in one JDBC write of one partition (one
        transaction)."""
        self._driver(spark)  # the jar is on this session's classpath
        now = dt.datetime.now(dt.UTC)
        schema = spark_schema((*self.columns, *COORDINATES))
        frame = spark.createDataFrame([(*r, now) for r in rows], schema,
                                      verifySchema=False).coalesce(1)
        writer = (frame.write.format("jdbc").mode("append")
                  .option("url", self.url).option("dbtable", _qualified(self.table))
                  .option("driver", self.settings.driver)
                  .option("batchsize", str(self.settings.batch_size)))
        for key, value in self._properties().items():
            writer = writer.option(key, value)
        writer.save()
        logger.debug("jdbc sink: %s: appended %d row(s)", self.table, len(rows))


    def _upsert(self, spark: Any, rows: list[tuple[Any, ...]]) -> None:
        """Spark thread: upsert ``rows`` (one row per key) in one transaction, one
        statement per ``batch_size`` rows (see :mod:`actors.sinks.jdbc_upsert`); with a
        deletions table, the deletions among them are recorded there and delete the
        rows they are newer than, and an upsert lands only if newer than its key's
        deletion."""
        names = [c.name for c in self._all]
        size = self.settings.batch_size
        marked = names.index(DELETED) if self.deletions is not None else None
        qualified = _qualified(self.table)
        conn = self._connect(spark)
        try:
            conn.setAutoCommit(False)
            source = self.source_order
            statements = [conn.prepareStatement(upsert_sql(
                qualified, self._all, self.key,
                None if self.deletions is None else _qualified(self.deletions), source))]
            if self.deletions is not None:
                deletions = _qualified(self.deletions)
                statements += [
                    conn.prepareStatement(record_deletions_sql(
                        deletions, self._deletion_columns, self.key, source)),
                    conn.prepareStatement(delete_sql(qualified, deletions, self.columns,
                                                     self.key, source))]
            for start in range(0, len(rows), size):  # the keys are distinct: no overlap
                chunk = rows[start:start + size]
                gone = [r for r in chunk if marked is not None and r[marked]]
                live = [r for r in chunk if marked is None or not r[marked]]
                # The deletions' JSON serves both their statements (record, delete).
                live_json = rows_json(live, names) if live else ""
                gone_json = rows_json(gone, names) if gone else ""
                for statement, part, payload in zip(
                        statements, (live, gone, gone), (live_json, gone_json, gone_json),
                        strict=False):
                    if part:
                        execute_statement(statement, payload, len(part))
            for statement in statements:
                statement.close()
            conn.commit()
        finally:
            conn.close()  # not committed: rolled back
        logger.debug("jdbc sink: %s: upserted %d row(s)", self.table, len(rows))


def execute_statement(statement: Any, payload: str, rows: int) -> None:
    """Spark thread: one prepared upsert statement over ``payload``, the JSON of its
    ``rows`` rows (its only parameter)."""
    statement.setString(1, payload)
    statement.executeUpdate()


def _driver_loader_add(spark: Any, jar: Path) -> None:
    """Spark thread: put ``jar`` on the class loader the driver reads task failures with.

    ``ADD JAR`` puts it on the session's loader (a child of that one) and ships it to the
    executors, but Spark deserializes a failed task's exception on the driver with the
    application loader: without the driver's classes there, a failed JDBC write arrives as
    ``UnknownReason``, without the PostgreSQL error and its SQLSTATE (a duplicate key would
    look like an outage and be retried forever). Added before ``ADD JAR``, so that the
    session's loader finds every class of the jar in its parent (one loader for all)."""
    loader = spark._jsparkSession.sharedState().jarClassLoader()
    while loader is not None and loader.getClass().getName() != (
            "org.apache.spark.util.MutableURLClassLoader"):
        loader = loader.getParent()
    if loader is None:
        logger.warning("jdbc sink: no Spark application class loader found; a failed write "
                       "may not show its SQLSTATE (put %s in spark.jars)", jar)
        return
    loader.addURL(spark._jvm.java.io.File(str(jar.resolve())).toURI().toURL())


# One writer per (actor, url, user, table): the workers of a process share its batches.
_WRITERS: weakref.WeakKeyDictionary[SparkActor, dict[tuple[str, str, str], JdbcTableWriter]] = (
    weakref.WeakKeyDictionary())


def table_writer(actor: SparkActor, settings: JdbcSinkSettings, table: str,
                 columns: Sequence[Column], key: Sequence[str] = (),
                 deletes: bool = False, source_order: str | None = None) -> JdbcTableWriter:
    """The shared writer of ``table`` at ``settings.url`` (created on first use)."""
    writers = _WRITERS.setdefault(actor, {})
    name = (settings.url, settings.user or "", table)
    writer = writers.get(name)
    if writer is None:
        writer = writers[name] = JdbcTableWriter(actor, settings, table, tuple(columns),
                                                 tuple(key), deletes, source_order)
    elif writer.columns != tuple(columns):
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
                                    stores_offsets=settings.mode == "append")

    def offsets_reset(self, group: str, topic: str, partition: int) -> str:
        """The SQL that forgets the partition's offset in the table's offsets table
        (the group stopped)."""
        # Shown to the operator, never run: the names come from the configuration.
        table = _qualified(offsets_table(self.table))
        return (f"with the group stopped, `DELETE FROM {table} "  # noqa: S608
                f"WHERE group_id = '{group}' AND topic = '{topic}' AND partition = "
                f"{partition}` in the database at {safe_url(self.settings.url)}")

    async def write_at(self, rows: Sequence[Row], position: Position) -> None:
        """``mode: append``: write the rows of one batch with its offsets; rows of
        messages the table already holds (before its offset for the partition) are
        dropped. ``mode: upsert``: :meth:`write`."""
        writer = self._writer
        if writer is None:
            raise SinkError("jdbc sink: write before open")
        if writer.offsets is None:
            await self.write(rows)
            return
        await self._write_after_floor(writer, rows, position)

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
        if self.settings.mode == "upsert" and self.columns:
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
        self._writer = table_writer(self._spark(), self.settings, self.table, self.columns,
                                    self.context.key, self.context.emits_deletes,
                                    self.context.source_order)
        try:
            await self._writer.register()
        except SinkError as exc:  # the database may come back: check again at first write
            logger.warning("%s; the table is created or checked at the first write", exc)
