"""Process lifecycle: embedded broker, signals, the master, and the exit code.

Exit codes: 0 clean stop; 1 crashed (failure mode throw, escalation, fatal start
error, hard termination); 2 bad configuration (see :mod:`service.cli`; :func:`serve`
also returns it when a processor refuses its topic's options, before any worker
starts); 130 aborted by a second SIGINT.

Signals: the first SIGTERM/SIGINT starts the graceful two-phase stop (repeats are
ignored) and arms a watchdog that hard-terminates the process (exit 1) if the stop has
not finished within ``shutdown_grace_s + abort_grace_s`` plus a margin. Signals are read
by a thread (:class:`_SignalWatch`), not on the event loop, so the watchdog is armed
even while a processor blocks the loop. A second SIGINT aborts at once (exit 130).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Coroutine
from typing import Any

from actors import tracing
from actors.errors import FatalError
from actors.kafka import KafkaSecurityError
from actors.master import Master
from actors.metrics import Metrics
from actors.resources import Resources
from processors.errors import RegistryError
from service.broker import EmbeddedBroker
from service.exits import EXIT_ABORT, EXIT_CONFIG, EXIT_CRASH, EXIT_OK
from service.http import StatusServer, bind_status_server
from settings.models import Settings

logger = logging.getLogger(__name__)

_HARD_STOP_MARGIN_S = 5.0
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_GC_GEN0_THRESHOLD = 50_000


def _noop_handler(signum: int, frame: Any) -> None:
    """Python-level handler of SIGTERM/SIGINT: the C-level handler has already written the
    signal number to the wakeup fd, which :class:`_SignalWatch` reads."""


class _SignalWatch:
    """SIGTERM/SIGINT handled by a thread, so a blocked event loop cannot hide them.

    ``signal.set_wakeup_fd`` makes CPython's C-level signal handler write the signal
    number to a socket, whatever the main thread is doing; this thread reads it, arms the
    watchdog at once, and only then asks the event loop to stop (which it does when it
    next runs). asyncio's ``add_signal_handler`` would run everything on the loop: a
    processor blocking the loop would make the stop, and the watchdog, wait forever.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, settings: Settings,
                 request_stop: Callable[[], None], abort: Callable[[], None]) -> None:
        self._loop = loop
        self._settings = settings
        self._request_stop = request_stop
        self._abort = abort
        self._received = 0
        self.stop_seen = threading.Event()  # set by the loop once it handled the request
        self._read, self._write = socket.socketpair()
        self._write.setblocking(False)
        self._thread = threading.Thread(target=self._watch, name="kstage-signals",
                                        daemon=True)
        self._old_fd = -1
        self._old_handlers: dict[signal.Signals, Any] = {}

    def install(self) -> None:
        self._thread.start()
        self._old_fd = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        for sig in _STOP_SIGNALS:
            self._old_handlers[sig] = signal.signal(sig, _noop_handler)

    def uninstall(self) -> None:
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(self._old_fd)
        with contextlib.suppress(OSError):
            self._write.send(b"\0")  # no signal has number 0: ends the thread
        self._thread.join(1.0)
        self._read.close()
        self._write.close()

    def _watch(self) -> None:
        while True:
            try:
                data = self._read.recv(64)
            except OSError:
                return
            for signum in data:
                if signum == 0:
                    return
                if signum in _STOP_SIGNALS:
                    self._on_signal(signal.Signals(signum))

    def _call_on_loop(self, fn: Callable[[], None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop already closed: nothing to stop
            self._loop.call_soon_threadsafe(fn)

    def _on_signal(self, sig: signal.Signals) -> None:
        self._received += 1
        sup = self._settings.supervisor
        deadline = sup.shutdown_grace_s + sup.abort_grace_s + _HARD_STOP_MARGIN_S
        if self._received == 1:
            logger.info("received %s: stopping (drain up to %gs, then abort up to %gs; "
                        "terminating hard after %gs)", sig.name, sup.shutdown_grace_s,
                        sup.abort_grace_s, deadline)
            _start_timer(deadline, self._hard_stop, deadline)
            self._call_on_loop(self._request_stop)
        elif sig is signal.SIGINT:
            logger.warning("second SIGINT: aborting now")
            _start_timer(_HARD_STOP_MARGIN_S, _exit_now, EXIT_ABORT)
            self._call_on_loop(self._abort)
        else:
            logger.info("received %s again: already stopping", sig.name)

    def _hard_stop(self, deadline: float) -> None:
        if self.stop_seen.is_set():
            why = "the stop hangs"
        else:
            why = ("the event loop never ran the stop: something blocks it, e.g. a processor "
                   "doing blocking work")
        frame = sys._current_frames().get(threading.main_thread().ident or -1)
        where = ""
        if frame is not None:
            last = traceback.extract_stack(frame)[-1]
            where = f"; the main thread is at {last.filename}:{last.lineno} in {last.name}"
        logger.critical("stop did not finish within %gs (%s%s): terminating hard",
                        deadline, why, where)
        _exit_now(EXIT_CRASH)


def _start_timer(seconds: float, fn: Callable[..., None], *args: Any) -> None:
    timer = threading.Timer(seconds, fn, args)
    timer.daemon = True
    timer.start()


def _exit_now(code: int) -> None:
    logging.shutdown()
    os._exit(code)


async def serve(settings: Settings, bootstrap: str, *, drain: bool = False,
                progress: Callable[[Master], Coroutine[Any, Any, None]] | None = None) -> int:
    """Run the master (and the status server) until it stops; map the outcome to an exit
    code. ``progress(master)`` runs beside it (the demo's progress display).

    The process's resources (the SparkActor) are made here and closed when the service
    stops: they outlive the master, whose workers' sinks use them, for the final merge."""
    metrics = Metrics()
    resources = Resources(settings.spark, metrics)
    if tracing.enabled(settings.observability):
        try:
            resources.tracing = tracing.Tracing.start(settings.observability, settings.name)
        except (ImportError, ValueError) as exc:
            logger.critical("observability: tracing is on but cannot start: %s (tracing "
                            "needs the otel extra: pip install 'kstage[otel]')", exc)
            return EXIT_CONFIG
    try:
        return await _serve(settings, bootstrap, metrics, resources, drain, progress)
    finally:
        if resources.tracing is not None:
            # flushes the spans still buffered (a blocking export, bounded by the
            # exporter's timeout), after everything that makes spans has stopped
            resources.tracing.shutdown()


async def _serve(settings: Settings, bootstrap: str, metrics: Metrics, resources: Resources,
                 drain: bool,
                 progress: Callable[[Master], Coroutine[Any, Any, None]] | None) -> int:
    try:  # builds every processor with its options: what it refuses is configuration
        master = Master(settings, bootstrap, drain=drain, metrics=metrics,
                        resources=resources)
    except RegistryError as exc:
        for problem in str(exc).splitlines():
            logger.critical("configuration: %s", problem)
        return EXIT_CONFIG
    oauth2 = settings.spark.catalog.oauth2
    if oauth2 is not None:  # the REST catalog's login: refused credentials are configuration
        from actors.sinks.spark.catalog_auth import refused_at_start  # only if set

        refused = await asyncio.to_thread(refused_at_start, oauth2)
        if refused is not None:
            logger.critical("spark.catalog.oauth2: %s: check client_id and client_secret",
                            refused)
            return EXIT_CONFIG
    loop = asyncio.get_running_loop()
    status: StatusServer | None = None
    if settings.service.http_port:
        try:
            status = bind_status_server(master, metrics, loop, settings.service)
        except OSError as exc:
            logger.critical("service.http_port: cannot serve on %s:%d: %s",
                            settings.service.http_host, settings.service.http_port, exc)
            return EXIT_CRASH
        status.start()
        beat = asyncio.create_task(status.beat(), name="heartbeat")
    main = asyncio.current_task()
    assert main is not None  # noqa: S101
    aborted = False

    def abort() -> None:
        nonlocal aborted
        aborted = True
        main.cancel()

    def request_stop() -> None:
        signals.stop_seen.set()
        master.stop()

    signals = _SignalWatch(loop, settings, request_stop, abort)

    merging: asyncio.Task[None] | None = None
    if settings.merge.interval_s is not None:
        from actors.tables import merge_all, merge_periodically, plan  # the merge only if used
        from settings.errors import SettingsError

        try:
            plan(settings, master.processors)
        except SettingsError as exc:
            logger.critical("merge: %s", exc)
            if status is not None:
                beat.cancel()
                status.stop()
            return EXIT_CONFIG
        merging = asyncio.create_task(merge_periodically(
            settings, master.processors, resources.spark(), metrics), name="merge")
    maintaining = _start_maintenance(master, metrics)
    signals.install()
    shown = asyncio.create_task(progress(master), name="progress") if progress else None
    try:
        await master.run()
        if merging is not None and master.drained:
            merging.cancel()
            await asyncio.gather(merging, return_exceptions=True)
            _, failed = await merge_all(settings, master.processors,
                                        resources.spark(), metrics)
            if failed:
                logger.critical("stopping: the final merge after --drain failed for %d "
                                "table(s)", failed)
                return EXIT_CRASH
    except asyncio.CancelledError:
        if aborted:
            return EXIT_ABORT
        raise
    except FatalError as exc:
        logger.critical("stopping: %s", exc)
        # A refused login or certificate is the configuration's fault: exit 2, like validate.
        return EXIT_CONFIG if isinstance(exc, KafkaSecurityError) else EXIT_CRASH
    finally:
        signals.uninstall()
        if status is not None:
            beat.cancel()
            status.stop()
        if shown is not None:
            shown.cancel()
        for task in (merging, maintaining):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await resources.close()  # the SparkActor, if one was made
    return EXIT_OK


def _start_maintenance(master: Master, metrics: Metrics) -> asyncio.Task[None] | None:
    """The table maintenance of ``spark.maintenance.every_s`` (only with spark sinks;
    each table by the process holding partition 0 of its topic)."""
    settings = master.settings
    every = settings.spark.maintenance_every_s()
    if not settings.uses_sink("spark"):
        return None
    if every is None:
        return _start_pyiceberg_maintenance(master, metrics)

    async def maintaining() -> None:
        await asyncio.sleep(1)  # its modules load after the start, not before the first fetch
        from actors.tables import maintain_periodically
        from service.ops.tables import kafka_committed

        await maintain_periodically(
            settings, master.processors, kafka_committed(settings, master.bootstrap),
            master.resources.spark(), metrics, master.snapshot)

    return asyncio.create_task(maintaining(), name="maintenance")


def _start_pyiceberg_maintenance(master: Master, metrics: Metrics) -> asyncio.Task[None] | None:
    """With ``appends: pyiceberg`` and no ``maintenance.every_s`` set (no JVM), the staging
    tables' snapshots still expire, through pyiceberg (:mod:`actors.tables.pyiceberg_expiry`,
    :meth:`SparkSettings.pyiceberg_expiry`), and their small files are folded beside the
    appends (:mod:`actors.tables.pyiceberg_fold`, ``maintenance.fold_files``)."""
    settings = master.settings
    expiry = settings.spark.pyiceberg_expiry()
    folds = settings.spark.pyiceberg_fold_files() is not None
    if expiry is None and not folds:
        return None

    async def maintaining() -> None:
        await asyncio.sleep(1)  # its modules load after the start, not before the first fetch
        from actors.tables import expire_pyiceberg_snapshots, fold_pyiceberg_tables

        lake = master.resources.spark().lake()
        jobs = []
        if expiry is not None:
            every, max_age_s = expiry
            jobs.append(expire_pyiceberg_snapshots(settings, master.processors, lake, every,
                                                   max_age_s, metrics, master.snapshot))
        if folds:
            jobs.append(fold_pyiceberg_tables(settings, master.processors, lake, metrics,
                                              master.snapshot))
        await asyncio.gather(*jobs)

    return asyncio.create_task(maintaining(), name="maintenance")


def tune_gc() -> None:
    """Make the collector cheap for a streaming workload.

    Every message allocates short-lived dicts that live until their batch is written; with
    CPython's default gen-0 threshold (700) the collector runs thousands of times per
    second and repeatedly walks the batches in flight. Freezing the start-up heap and
    raising the gen-0 threshold cuts that cost without changing what gets freed
    (reference counting frees almost everything; the collector only breaks cycles). No
    full collection runs first: it walked the whole start-up heap (~70 ms of CPU at
    every start, before the first fetch) to free a few dozen objects, which the freeze
    keeps instead.
    """
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(_GC_GEN0_THRESHOLD, gen1, gen2)


def run(settings: Settings, *, drain: bool = False) -> int:
    """Start the embedded broker if asked, serve, and stop the broker on the way out."""
    tune_gc()
    broker = None
    bootstrap = settings.kafka.bootstrap
    if settings.kafka.embedded:
        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap
    try:
        return asyncio.run(serve(settings, bootstrap, drain=drain))
    finally:
        if broker is not None:
            broker.stop()
