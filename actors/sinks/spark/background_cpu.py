"""The background fold's CPU behind the appends': its thread at a lower scheduling
priority, and pyiceberg's Parquet writes of that thread done on it.

On the 2-core machine a fold of half a million rows (:mod:`actors.tables.pyiceberg_fold`)
takes a core for several seconds; at the same priority as the event loop, the appends'
thread, the broker and the producer, the scheduler gives it its share of both cores and
the consumer falls behind for as long (a lag that turns the appends into a backlog's big
ones: a freshness p99 of many seconds). The fold has no deadline: its thread runs
:data:`NICE_STEP` nicer than the process (Linux schedules each thread by its own nice
value), so that it takes the CPU the rest leaves and little beyond.

Its Parquet writes would escape that: pyiceberg writes data files on its process-wide
thread pool (``pyiceberg.utils.concurrent.ExecutorFactory``), which the appends share.
:func:`writes_on_this_thread` makes pyiceberg's pool run what the calling thread submits on
that thread, inline, while the appends' submissions go to the pool as before. Arrow's
own thread pools are shared too (created at the appends' priority): the fold reads its
files with ``ParquetFile.read`` on its thread (``pq.read_table`` scans through them).

A thread that cannot be made nicer (another OS than Linux, a seccomp profile refusing
``setpriority``) runs at the process's priority, logged once: the fold still works, only
with the appends' share of the CPU.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)

NICE_STEP = 10
"""How much nicer than the process the fold's thread runs (Linux's weights: about a
tenth of a nice-0 thread's CPU while they compete, all of it while nothing else runs)."""

_local = threading.local()


def lower_this_thread() -> bool:
    """Make the calling thread :data:`NICE_STEP` nicer (Linux only: elsewhere
    ``setpriority`` of a thread id would renice the whole process); whether it is now."""
    if sys.platform != "linux":
        return False
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid,
                       min(19, os.getpriority(os.PRIO_PROCESS, tid) + NICE_STEP))
    except OSError as exc:
        logger.warning("maintenance: the fold's thread runs at the process's CPU priority "
                       "(setpriority refused: %s)", exc)
        return False
    return True


class _Inline(concurrent.futures.Executor):
    """pyiceberg's pool as seen by everyone: what a thread inside
    :func:`writes_on_this_thread` submits runs at once on that thread, the rest on the
    ``pool``."""

    def __init__(self, pool: concurrent.futures.Executor) -> None:
        self.pool = pool

    def submit(self, fn: Callable[..., Any], /, *args: Any,
               **kwargs: Any) -> concurrent.futures.Future[Any]:
        if not getattr(_local, "inline", False):
            return self.pool.submit(fn, *args, **kwargs)
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 -- the caller's future holds it
            done.set_exception(exc)
        return done

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=cancel_futures)


_install = threading.Lock()


@contextmanager
def writes_on_this_thread() -> Iterator[None]:
    """While inside, pyiceberg's writes of data files that this thread asks for run on
    it (the module doc); other threads' go to pyiceberg's pool."""
    from pyiceberg.utils.concurrent import ExecutorFactory  # only with appends: pyiceberg

    with _install:
        pool = ExecutorFactory.get_or_create()
        if not isinstance(pool, _Inline):
            ExecutorFactory._instance = _Inline(pool)
    _local.inline = True
    try:
        yield
    finally:
        _local.inline = False


__all__ = ["NICE_STEP", "lower_this_thread", "writes_on_this_thread"]
