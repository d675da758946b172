"""The background fold's thread runs nicer than the appends', and pyiceberg's writes it asks
for run on it (actors/sinks/spark/background_cpu.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading

import pytest

from actors.sinks.spark import background_cpu
from actors.sinks.spark.background_cpu import (
    NICE_STEP,
    lower_this_thread,
    writes_on_this_thread,
)
from actors.sinks.spark.pyiceberg_appends import Lake
from settings.models import SparkSettings

linux = pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice is Linux's")


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@linux
def test_the_lakes_second_thread_is_nicer_than_the_process() -> None:
    lake = Lake(SparkSettings())

    async def main() -> tuple[int, int]:
        return _nice(), await lake.aside(_nice)

    try:
        process, aside = asyncio.run(main())
    finally:
        lake.stop()
    assert aside == min(19, process + NICE_STEP)
    assert _nice() == process  # this thread as it was


def test_a_refused_setpriority_leaves_the_thread_as_it_was_and_says_so(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def refused(*_: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(os, "setpriority", refused)
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    with caplog.at_level(logging.WARNING, logger=background_cpu.__name__):
        assert lower_this_thread() is False
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before
    assert "setpriority refused" in caplog.text
    assert "Operation not permitted" in caplog.text


def test_pyicebergs_pool_runs_the_writes_of_a_thread_inside_on_it() -> None:
    from pyiceberg.utils.concurrent import ExecutorFactory

    here = threading.get_ident()
    with writes_on_this_thread():
        inside = list(ExecutorFactory.get_or_create().map(lambda _: threading.get_ident(),
                                                          range(3)))
    outside = ExecutorFactory.get_or_create().submit(threading.get_ident).result()
    assert inside == [here] * 3
    assert outside != here  # the pool's thread, as for the appends


def test_another_threads_writes_go_to_the_pool_while_one_writes_inline() -> None:
    from pyiceberg.utils.concurrent import ExecutorFactory

    ran_on: list[int] = []
    inside = threading.Event()
    done = threading.Event()

    def other() -> None:
        inside.wait()
        ran_on.append(ExecutorFactory.get_or_create().submit(threading.get_ident).result())
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with writes_on_this_thread():
        inside.set()
        done.wait()
    thread.join()
    assert ran_on[0] not in (threading.get_ident(), thread.ident)


def test_a_write_that_fails_inline_raises_to_its_caller() -> None:
    from pyiceberg.utils.concurrent import ExecutorFactory

    def broken(_: int) -> int:
        raise OSError(28, "No space left on device")

    with writes_on_this_thread(), pytest.raises(OSError, match="No space left"):
        list(ExecutorFactory.get_or_create().map(broken, range(2)))
