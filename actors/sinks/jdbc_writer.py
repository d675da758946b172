"""The writer of one JDBC staging table: micro-batched appends through Spark's JDBC writer
(one transaction each), or upserts by natural key (``mode: upsert``, one statement per
``batch_size`` rows, :mod:`actors.sinks.jdbc_upsert`), on the Spark thread; rows
PostgreSQL refuses are found by halving (see :mod:`actors.sinks.jdbc`).

pyspark is imported only inside functions."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actors.errors import FatalError, SinkError
from actors.sinks.jdbc_errors import AppendError, short, sql_error, state_text
from actors.sinks.jdbc_offsets import (
    create_offsets_sql,
    insert_rows_sql,
    offsets_table,
)
from actors.sinks.jdbc_settings import JdbcSinkSettings, safe_url
from actors.sinks.jdbc_tables import (
    create_table_sql,
    evolution_sql,
    pg_check,
    qualified,
    table_mismatches,
)
from actors.sinks.jdbc_upsert import (
    UNIQUE_INDEXES_SQL,
    add_source_sql,
    delete_sql,
    deletions_columns,
    deletions_table,
    missing_key_index,
    newest_per_key,
    record_deletions_sql,
    rows_json,
    upsert_sql,
)
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.staging import flush_limits
from actors.sinks.table.batching import Pending, TableWriter
from actors.sinks.table.columns import COORDINATES, INGESTED_AT, column_kind, spark_schema
from actors.sinks.table.rows import check_rows
from processors.base import DELETED, Column, Row

logger = logging.getLogger(__name__)

# Connection properties kstage sets unless the sink's ``properties`` say otherwise: fail
# fast when the server is away (the Spark thread is shared by every sink) and send the
# batched INSERTs as multi-row statements.
_DEFAULT_PROPERTIES = {"connectTimeout": "10", "socketTimeout": "120", "loginTimeout": "10",
                       "reWriteBatchedInserts": "true"}


class JdbcPart:
    """One sink write's rows in a flush: those not written yet (a flush takes the rows
    it wrote or refused off the list), and those PostgreSQL refused, not yet reported."""

    __slots__ = ("refused", "rows")

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows
        self.refused: list[tuple[Row, str]] = []

    def __len__(self) -> int:
        return len(self.rows)


class JdbcWriter(TableWriter):
    """Micro-batches one table's rows (see :class:`TableWriter`) and appends each batch
    with Spark's JDBC writer, in one transaction; with ``mode: upsert``, upserts it by
    ``key`` in one statement (:mod:`actors.sinks.jdbc_upsert`). ``mode: append`` with
    the offsets: :class:`~actors.sinks.jdbc_append.JdbcTableWriter`."""

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
        good, rejected = check_rows(rows, self._all, f"jdbc sink {self.table}", pg_check)
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
                                 f"(sink.driver): {short(exc)}") from None
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

    def _ensure_table(self, spark: Any, evolve: tuple[Column, ...] | None = None,
                      ) -> tuple[bool, list[str]]:
        """Create the table (and its deletions table) if missing, else check its columns;
        whether the table was created, and what changed in it. ``evolve``: the columns of
        a processor whose columns come from writer schemas: an existing table is evolved
        to them first (:func:`~actors.sinks.jdbc_tables.evolution_sql`)."""
        columns = self.columns if evolve is None else evolve
        deletion_columns = deletions_columns(self.key, columns, self.source_order)
        conn = self._connect(spark)
        try:
            made = [] if evolve is None else self._evolve_one(conn, evolve)
            created = self._ensure_one(conn, self.table, columns)
            if self.offsets is not None:
                statement = conn.createStatement()
                statement.execute(create_offsets_sql(qualified(self.offsets)))
                statement.close()
            if self.deletions is not None:
                if self.source_order is not None:  # a deletions table made before it
                    statement = conn.createStatement()
                    statement.execute(add_source_sql(qualified(self.deletions),
                                                     deletion_columns[-1]))
                    statement.close()
                self._ensure_one(conn, self.deletions, deletion_columns)
        finally:
            conn.close()
        return created, made

    @staticmethod
    def _existing(conn: Any, table: str) -> list[tuple[str, str, bool, bool]]:
        """Spark thread: (name, format_type, NOT NULL, has default) of ``table``'s
        columns, none when it does not exist."""
        query = conn.prepareStatement(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
            "a.atthasdef FROM pg_attribute a WHERE a.attrelid = to_regclass(?) "
            "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum")
        query.setString(1, qualified(table))
        result = query.executeQuery()
        existing = []
        while result.next():
            existing.append((result.getString(1), result.getString(2),
                             result.getBoolean(3), result.getBoolean(4)))
        query.close()
        return existing

    def _evolve_one(self, conn: Any, columns: tuple[Column, ...]) -> list[str]:
        """Spark thread: the existing table given ``columns`` it lacks or must widen, in
        one transaction; what changed (none for a table that does not exist yet)."""
        existing = self._existing(conn, self.table)
        changes = evolution_sql(self.table, existing, columns) if existing else []
        if changes:
            conn.setAutoCommit(False)
            try:
                statement = conn.createStatement()
                for sql, _ in changes:
                    statement.execute(sql)
                statement.close()
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
            finally:
                conn.setAutoCommit(True)
        return [what for _, what in changes]

    def _ensure_one(self, conn: Any, table: str, columns: tuple[Column, ...]) -> bool:
        """Spark thread: create ``table`` with ``columns`` (then the coordinates) if
        missing, else check it; True if created."""
        existing = self._existing(conn, table)
        if not existing:
            statement = conn.createStatement()
            statement.execute(create_table_sql(table, columns, self.key))
            statement.close()
            return True
        indexes: list[tuple[str, bool]] = []
        if self.key:
            query = conn.prepareStatement(UNIQUE_INDEXES_SQL)
            query.setString(1, qualified(table))
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
            created, _ = await self.actor.call(self._ensure_table)
        except (SinkError, FatalError):
            raise
        except Exception as exc:  # connection/SQL failures are retriable
            raise SinkError(f"{self.where}: cannot create or check the table: "
                            f"{short(exc)}") from exc
        self._registered = True
        logger.info("jdbc sink: table %s %s at %s", self.table,
                    "created" if created else "checked", safe_url(self.url))

    async def evolve(self, columns: tuple[Column, ...]) -> None:
        """Evolve the table to ``columns`` (a processor whose columns come from writer
        schemas: new nullable columns, widened types; created on first sight) and write
        with them from now on: the rows already converted are written first, then the
        table's change is committed, then the columns change."""
        if self._registered and columns == self.columns:
            return
        waits = [item.future for item in self._pending] + list(self._tasks)
        if waits:
            self.flush_soon()
            await asyncio.gather(*waits, return_exceptions=True)  # their writers see errors
        try:
            created, made = await self.actor.call(
                lambda spark: self._ensure_table(spark, columns))
        except (SinkError, FatalError):
            raise
        except Exception as exc:  # connection/SQL failures are retriable
            raise SinkError(f"{self.where}: cannot create or evolve the table: "
                            f"{short(exc)}") from exc
        self.columns = columns
        self._all = (*columns, *COORDINATES)
        self._deletion_columns = deletions_columns(self.key, columns, self.source_order)
        self._registered = True
        if created:
            logger.info("jdbc sink: table %s created at %s", self.table, safe_url(self.url))
        if made:
            logger.warning("jdbc sink: table %s evolved with the event schema: %s (rows "
                           "written before read new columns as NULL)", self.table,
                           ", ".join(made))

    async def _flush(self, batch: list[Pending]) -> None:
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
                              f"failed: {short(exc)}")
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
        if any(column_kind(c.type).node is not None for c in self.columns):
            self._insert_json(spark, rows)
            return
        now = dt.datetime.now(dt.UTC)
        schema = spark_schema((*self.columns, *COORDINATES))
        frame = spark.createDataFrame([(*r, now) for r in rows], schema,
                                      verifySchema=False).coalesce(1)
        writer = (frame.write.format("jdbc").mode("append")
                  .option("url", self.url).option("dbtable", qualified(self.table))
                  .option("driver", self.settings.driver)
                  .option("batchsize", str(self.settings.batch_size)))
        for key, value in self._properties().items():
            writer = writer.option(key, value)
        writer.save()
        logger.debug("jdbc sink: %s: appended %d row(s)", self.table, len(rows))


    def _insert_json(self, spark: Any, rows: list[tuple[Any, ...]]) -> None:
        """Spark thread: append ``rows`` through the driver as one JSON array, in one
        transaction: Spark's JDBC writer has no ``jsonb``, which a nested column is."""
        names = [c.name for c in self._all]
        conn = self._connect(spark)
        try:
            conn.setAutoCommit(False)
            insert = conn.prepareStatement(insert_rows_sql(qualified(self.table), names))
            execute_statement(insert, rows_json(rows, names), len(rows))
            insert.close()
            conn.commit()
        finally:
            conn.close()  # not committed: rolled back
        logger.debug("jdbc sink: %s: appended %d row(s) as JSON", self.table, len(rows))

    def _upsert(self, spark: Any, rows: list[tuple[Any, ...]]) -> None:
        """Spark thread: upsert ``rows`` (one row per key) in one transaction, one
        statement per ``batch_size`` rows (see :mod:`actors.sinks.jdbc_upsert`); with a
        deletions table, the deletions among them are recorded there and delete the
        rows they are newer than, and an upsert lands only if newer than its key's
        deletion."""
        names = [c.name for c in self._all]
        size = self.settings.batch_size
        marked = names.index(DELETED) if self.deletions is not None else None
        table = qualified(self.table)
        conn = self._connect(spark)
        try:
            conn.setAutoCommit(False)
            source = self.source_order
            statements = [conn.prepareStatement(upsert_sql(
                table, self._all, self.key,
                None if self.deletions is None else qualified(self.deletions), source))]
            if self.deletions is not None:
                deletions = qualified(self.deletions)
                statements += [
                    conn.prepareStatement(record_deletions_sql(
                        deletions, self._deletion_columns, self.key, source)),
                    conn.prepareStatement(delete_sql(table, deletions, self.columns,
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
