"""Process lifecycle: embedded broker, signals, the master, and the exit code.

Exit codes: 0 clean stop; 1 crashed (failure mode throw, escalation, fatal start
error, hard termination); 2 bad configuration (see :mod:`service.cli`); 130 aborted by
a second SIGINT.

Signals: the first SIGTERM/SIGINT starts the graceful two-phase stop (repeats are
ignored) and arms a watchdog thread that hard-terminates the process if the stop has
not finished within ``shutdown_grace_s + abort_grace_s`` plus a margin, e.g. because a
processor blocks the event loop. A second SIGINT aborts at once.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from actors.errors import FatalError
from actors.master import Master
from actors.metrics import Metrics
from service.broker import EmbeddedBroker
from service.http import StatusServer, bind_status_server
from settings.models import Settings

logger = logging.getLogger(__name__)

EXIT_OK, EXIT_CRASH, EXIT_CONFIG, EXIT_ABORT = 0, 1, 2, 130
_HARD_STOP_MARGIN_S = 5.0
_GC_GEN0_THRESHOLD = 50_000


def _arm_watchdog(seconds: float) -> None:
    def hard_stop() -> None:
        logger.critical("stop did not finish within %.0fs: terminating hard", seconds)
        logging.shutdown()
        os._exit(EXIT_CRASH)

    timer = threading.Timer(seconds, hard_stop)
    timer.daemon = True
    timer.start()


async def serve(settings: Settings, bootstrap: str, *, drain: bool = False,
                progress: Callable[[Master], Coroutine[Any, Any, None]] | None = None) -> int:
    """Run the master (and the status server) until it stops; map the outcome to an exit
    code. ``progress(master)`` runs beside it (the demo's progress display)."""
    metrics = Metrics()
    master = Master(settings, bootstrap, drain=drain, metrics=metrics)
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
    state = {"signals": 0, "aborted": False}
    grace = settings.supervisor.shutdown_grace_s + settings.supervisor.abort_grace_s

    def on_signal(sig: signal.Signals) -> None:
        state["signals"] += 1
        if state["signals"] == 1:
            logger.info("received %s: stopping (drain up to %gs, then abort up to %gs)",
                        sig.name, settings.supervisor.shutdown_grace_s,
                        settings.supervisor.abort_grace_s)
            master.request_stop()
            _arm_watchdog(grace + _HARD_STOP_MARGIN_S)
        elif sig is signal.SIGINT:
            logger.warning("second SIGINT: aborting now")
            state["aborted"] = True
            main.cancel()

    merging: asyncio.Task[None] | None = None
    if settings.merge.interval_s is not None:
        from service import merge_loop  # noqa: PLC0415 - loads the merge only if used
        from service.merge import plan  # noqa: PLC0415
        from settings.errors import SettingsError  # noqa: PLC0415

        try:
            plan(settings)
        except SettingsError as exc:
            logger.critical("merge: %s", exc)
            if status is not None:
                beat.cancel()
                status.stop()
            return EXIT_CONFIG
        merging = asyncio.create_task(merge_loop.merge_periodically(settings, metrics),
                                      name="merge")
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    shown = asyncio.create_task(progress(master), name="progress") if progress else None
    try:
        await master.run()
        if merging is not None and master.drained:
            merging.cancel()
            await asyncio.gather(merging, return_exceptions=True)
            _, failed = await merge_loop.merge_all(settings, metrics)
            if failed:
                logger.critical("stopping: the final merge after --drain failed for %d "
                                "table(s)", failed)
                return EXIT_CRASH
    except asyncio.CancelledError:
        if state["aborted"]:
            return EXIT_ABORT
        raise
    except FatalError as exc:
        logger.critical("stopping: %s", exc)
        return EXIT_CRASH
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if status is not None:
            beat.cancel()
            status.stop()
        if shown is not None:
            shown.cancel()
        if merging is not None:
            merging.cancel()
            await asyncio.gather(merging, return_exceptions=True)
        if "actors.spark_sink" in sys.modules:  # only if a spark sink was used
            await sys.modules["actors.spark_sink"].stop_spark_actors()
    return EXIT_OK


def tune_gc() -> None:
    """Make the collector cheap for a streaming workload.

    Every message allocates short-lived dicts that live until their batch is written; with
    CPython's default gen-0 threshold (700) the collector runs thousands of times per
    second and repeatedly walks the batches in flight. Freezing the start-up heap and
    raising the gen-0 threshold cuts that cost without changing what gets freed
    (reference counting frees almost everything; the collector only breaks cycles).
    """
    gc.collect()
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
