"""The process's one SparkSession, owned by one actor: :class:`SparkActor`.

Every Spark call runs on the actor's single background thread (a one-thread executor),
never on the event loop; the session is created lazily on that thread (with the Iceberg
catalog and the jars, :mod:`actors.sinks.spark.session`). One actor per process, held
by the process's :class:`~actors.resources.Resources` (its owner stops it at shutdown); a
second actor's session is refused while one runs.

A dead JVM (killed, out of memory) is seen by its process having exited, before a call or
when a call fails: the session is dropped without calling into it, a new session (new
JVM) starts, every table registered so far is registered again (:class:`Registered`),
and a call made with ``retry=True`` runs again. What the dead JVM wrote and did not
commit is not part of any table (an Iceberg commit is one catalog update); its files are
orphans that ``kstage tables maintain`` removes. More than ``spark.max_session_restarts``
new sessions within ``spark.session_restart_window_s`` (a replacement that fails to
start counts too): FatalError, the process exits 1 for its orchestrator to restart it.

pyspark is imported only inside functions: importing this module does not load it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime as dt
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from actors.errors import FatalError, SinkError
from actors.sinks.spark import catalog_auth
from actors.sinks.spark.pyiceberg_appends import Lake
from actors.sinks.spark.session import (
    EXIT_WAIT_S,
    connection_lost,
    discard_session,
    other_session,
    start_session,
)
from actors.sinks.table.columns import COORDINATES
from actors.sinks.table.rows import arrow_table, record_batch
from processors.base import Column
from settings.models import SparkSettings

if TYPE_CHECKING:
    from actors.metrics import Metrics

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Registered(Protocol):
    """A table the actor registers again in a new session (after its JVM died)."""

    table: str

    @property
    def registered(self) -> bool: ...

    def register_in(self, spark: Any) -> None:
        """Spark thread: create or check the table in ``spark``'s catalog."""


def _writer_id() -> str:
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


_PY4J_CALL = "An error occurred while calling"


class CommitPropertiesGate:
    """While session configuration gives the next commits their snapshot properties (a
    merge's: :func:`actors.tables.final_deletions.snapshot_properties`), no job of
    :meth:`SparkActor.call_aside` runs, so its commits never take them: merges hold the
    gate :meth:`shared` (several at once, as in two sessions), a job beside the appends
    :meth:`alone` (it waits for the merges in flight, and they for it)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._shared = 0
        self._alone = False

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._changed:
            self._changed.wait_for(lambda: not self._alone)
            self._shared += 1
        try:
            yield
        finally:
            with self._changed:
                self._shared -= 1
                self._changed.notify_all()

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        with self._changed:
            self._changed.wait_for(lambda: not self._alone and not self._shared)
            self._alone = True
        try:
            yield
        finally:
            with self._changed:
                self._alone = False
                self._changed.notify_all()


COMMIT_PROPERTIES = CommitPropertiesGate()
"""The process's one gate (one Spark session per process)."""


def short(exc: BaseException) -> str:
    """An exception as one short line (its type and its first line). For an error of a
    call into the JVM, whose first line only names the call, the Java exception and its
    root cause instead (e.g. the catalog's or the object store's refused connection)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith(_PY4J_CALL):
        java = lines[1].removeprefix(": ")
        causes = [line.removeprefix("Caused by: ") for line in lines
                  if line.startswith("Caused by: ")]
        text = java[:300] + (f" (caused by {causes[-1][:300]})"
                             if causes and causes[-1] not in java else "")
        return f"{type(exc).__name__}: {text}"
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


class SparkJvmDiedError(SinkError):
    """The session's JVM died during a Spark call (retriable: a new session starts)."""


class SparkActor:
    """Owns one SparkSession; runs every Spark call on its single thread.

    Attributes:
        settings: the ``spark:`` section.
        writer_id: this process's name in the tables' commits (``host-pid-uuid8``).
        metrics: the process's metrics, when it has them (set by its owner).
    """

    def __init__(self, settings: SparkSettings | None = None) -> None:
        self.settings = settings or SparkSettings()
        self.writer_id = _writer_id()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="spark")
        # The thread of the table jobs that run beside the appends (:meth:`call_aside`).
        self._aside = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="spark-aside")
        self._aside_job: str | None = None  # what runs there now, when it writes
        self._spark: Any = None
        self._proc: Any = None  # the session's JVM (a Popen), when pyspark launched it
        self._tables: dict[str, Registered] = {}
        self._stopped = False
        self._warm = False
        self._lost_pid: int | None = None  # the JVM that died, until a new session runs
        self._restarts: list[float] = []  # monotonic times of the new sessions started
        self._reregister = False  # a new session replaced a dead one: register the tables
        self._fatal: FatalError | None = None  # gave up on the session: every call fails
        self._lake: Lake | None = None  # pyiceberg's catalog (spark.appends: pyiceberg)
        # The process's metrics (its staging writers count fenced appends there).
        self.metrics: Metrics | None = None

    def __repr__(self) -> str:
        state = ("stopped" if self._stopped else "gave up" if self._fatal is not None
                 else "running" if self._spark is not None else "idle")
        return (f"<SparkActor {self.writer_id} {state} master={self.settings.master} "
                f"jvm={self.jvm_pid} tables={sorted(self._tables)}>")

    def lake(self) -> Lake:
        """The process's pyiceberg catalog and its thread (``spark.appends: pyiceberg``;
        created on first use, stopped with the actor)."""
        if self._lake is None:
            self._lake = Lake(self.settings)
        return self._lake

    def track(self, table: Registered) -> Registered:
        """Register ``table`` again whenever a new session replaces a dead one; the one
        already tracked under its name if any."""
        return self._tables.setdefault(table.table, table)

    def tracked(self, name: str) -> Registered | None:
        return self._tables.get(name)

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
            tables = [t for t in self._tables.values() if t.registered]
            for table in tables:
                table.register_in(self._spark)
            self._reregister, self._lost_pid = False, None
            logger.warning("spark: new session running; %d table(s) registered again%s",
                           len(tables), f" ({', '.join(t.table for t in tables)})"
                           if tables else "")
        return self._spark

    def _start_session(self) -> None:
        """Spark thread: start the SparkSession (a new JVM); FatalError when another
        actor's session runs in this process: pyspark would hand that one out, with this
        actor's catalog, jars and memory settings silently ignored, and a death of its JVM
        seen by both actors, each replacing it under the other."""
        other = other_session()
        if other is not None:
            raise FatalError(
                f"spark: a Spark session already runs in this process ({other}) and is not "
                f"this actor's ({self.writer_id}, master {self.settings.master}): pyspark "
                "allows one per process, so kstage has one SparkActor per process (one "
                "spark: section); stop the other actor first")
        self._spark = start_session(self.settings, self.writer_id)
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
        """Spark thread: the JVM ``pid`` died: drop the session without calling into it.
        What it wrote and did not commit belongs to no table (its files are orphans)."""
        logger.warning("spark: Spark JVM (pid %d) died (exit code %s)%s", pid,
                       self._proc.returncode,
                       "; starting a new session" if self._restarts_left() else "")
        self._discard_session()
        self._lost_pid = pid
        self._warm = False
        self._reregister = self._reregister or any(
            t.registered for t in self._tables.values())

    def _discard_session(self) -> None:
        """Spark thread: forget the session of a dead JVM (see :func:`discard_session`)."""
        discard_session(self._spark, self._proc)
        self._spark = None
        self._proc = None

    def warm_up(self, spark: Any) -> None:
        """Spark thread, once per session of a ``local`` master: write one row to a
        scratch Parquet directory and delete it, so the JVM loads the Parquet writer
        before the first flush rather than during it (measured: the first append after
        assignment fell from ~5 s to ~1 s)."""
        if self._warm or not self.settings.local_master:
            return
        self._warm = True
        columns = (Column("warmup", "string", True), *COORDINATES)
        row = {"warmup": "x", "_topic": "t", "_partition": 0, "_offset": 0, "_timestamp": 0}
        started = time.monotonic()
        scratch = tempfile.mkdtemp(prefix=f"kstage-warmup-{self.writer_id}-")
        try:
            batch, _ = record_batch([row], columns, "spark warm-up")
            spark.createDataFrame(arrow_table([batch], dt.datetime.now(dt.UTC))
                                  ).write.mode("overwrite").parquet(f"{scratch}/t")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        logger.debug("spark: Parquet writer warmed up in %.1fs", time.monotonic() - started)

    def _attempt(self, fn: Callable[[Any], T]) -> T:
        """Spark thread: ``fn(spark)`` in a live session (a new one if the JVM died
        since the last call); SparkJvmDiedError if the JVM dies meanwhile."""
        pid = self._dead_jvm(None)
        if pid is not None:  # died while idle
            self._lose(pid)
        try:
            return fn(self._session())
        except FatalError:
            raise
        except Exception as exc:
            pid = self._dead_jvm(exc)
            if pid is None:
                self._relogin(exc)
                raise
            self._lose(pid)
            raise SparkJvmDiedError(f"spark: Spark JVM (pid {pid}) died during the call; "
                                    "the next call starts a new session") from exc

    def _relogin(self, exc: BaseException) -> None:
        """Spark thread: after the REST catalog refused the session's token, the catalog
        is built again by the next call, with a new token (catalog_auth)."""
        if (self.settings.catalog.oauth2 is None or self._spark is None
                or not catalog_auth.login_refused(exc)):
            return
        try:
            catalog_auth.forget_catalog(self._spark, self.settings)
        except Exception as error:  # noqa: BLE001 - the call's own error is what counts
            logger.warning("spark: cannot drop the REST catalog to log in again: %s",
                           short(error))

    def _run(self, fn: Callable[[Any], T], retry: Callable[[Any], T] | None) -> T:
        try:
            return self._attempt(fn)
        except SparkJvmDiedError:
            if retry is None:
                raise
        return self._attempt(retry)  # in a new session

    async def call(self, fn: Callable[[Any], T], *, retry: bool | Callable[[Any], T] = False,
                   ) -> T:
        """Run ``fn(spark)`` on the Spark thread and return its result.

        When the session's JVM died (before or during the call), a new session is
        started with the tables registered again; then, if ``retry`` (True: ``fn`` again;
        a function: that one, e.g. one that first checks whether the dead JVM had
        committed), it runs in the new session, else the call fails with SinkError.
        FatalError once ``max_session_restarts`` new sessions were started within
        ``session_restart_window_s``."""
        if self._fatal is not None:
            raise self._fatal
        if self._stopped:
            raise SinkError("spark actor is stopped")
        again = fn if retry is True else (retry or None)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._run, fn, again)

    async def call_aside(self, fn: Callable[[Any], T], what: str | None = None) -> T:
        """Run ``fn(spark)`` on a second thread, in the running session (started first if
        needed), while :meth:`call` goes on: a table job that must not hold up the
        appends (the maintenance and its background fold). Spark runs the jobs of both
        threads at once, and Iceberg's optimistic commits order theirs. ``fn`` runs
        holding :data:`COMMIT_PROPERTIES`: the merge's commit properties are session-wide,
        and its commits wait. A dead JVM fails the call; the next :meth:`call` starts a
        new session, so a call here is never retried. ``what``: the job, when it writes
        (named in the warning of a stop that abandons it; None: a read)."""
        spark = await self.call(lambda session: session)

        def held() -> T:
            with COMMIT_PROPERTIES.alone():
                self._aside_job = what
                try:
                    return fn(spark)
                finally:
                    self._aside_job = None

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._aside, held)

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
            # pyspark keeps the session, its context and gateway in class attributes:
            # left set, the next session of this process (a restarted worker, another
            # actor) would reuse them and fail on a JVM that is gone or half stopped.
            proc = self._proc
            logger.warning("spark: the session did not stop cleanly (%s); its JVM (pid %s) "
                           "is killed and the session forgotten", short(exc),
                           getattr(proc, "pid", None))
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
            self._discard_session()
        self._spark = None
        self._proc = None
        logger.info("spark: session stopped")

    def stop(self) -> None:
        """Stop the session and the thread (blocking; idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        if self._lake is not None:
            self._lake.stop()
        # a job beside the appends is not waited for: stopping the session cancels it
        # (uncommitted, its files are orphans)
        abandoned = self._aside_job
        if abandoned is not None:
            logger.warning("spark: stopping the session while a table job runs beside the "
                           "appends (%s): it is abandoned with nothing of it committed "
                           "(Spark logs its cancellation; the files it wrote are orphans "
                           "the maintenance removes)", abandoned)
        self._aside.shutdown(wait=False, cancel_futures=True)
        self._executor.submit(self._stop_session).result()
        self._executor.shutdown()

    async def astop(self) -> None:
        """:meth:`stop` off the event loop."""
        await asyncio.to_thread(self.stop)


__all__ = ["COMMIT_PROPERTIES", "CommitPropertiesGate", "Registered", "SparkActor",
           "SparkJvmDiedError", "short"]
