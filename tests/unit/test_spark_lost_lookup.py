"""A killed Spark JVM whose socket closed before the process could be reaped: py4j turns
the network error of a JVM name lookup into ``Py4JError("... does not exist in the
JVM")`` (it logs the error and returns its error answer). The actor must take that for a
lost connection too: wait for the exit, drop the session, run the call again in a new
one; before, the call failed as an ordinary error (seen in CI: "SparkSession does not
exist in the JVM" after a SIGKILL). No JVM here: the session and the process are fakes."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from py4j.protocol import Py4JError, Py4JJavaError  # type: ignore[import-untyped]

from actors.sinks.spark.actor import SparkActor, SparkJvmDiedError
from actors.sinks.spark.session import connection_lost
from settings import SparkSettings


class DyingProcess:
    """A Popen whose process is reapable only ``after_s`` from now (a JVM's threads
    being torn down after SIGKILL)."""

    def __init__(self, after_s: float) -> None:
        self.pid = 4242
        self.returncode: int | None = None
        self._at = time.monotonic() + after_s

    def poll(self) -> int | None:
        if self.returncode is None and time.monotonic() >= self._at:
            self.returncode = -9
        return self.returncode


def lost_lookup(_spark: Any) -> None:
    raise Py4JError("org.apache.spark.sql.classic.SparkSession does not exist in the JVM")


def test_a_lookup_lost_with_the_connection_is_a_lost_connection() -> None:
    assert connection_lost(Py4JError("org.x.Y does not exist in the JVM"))
    assert not connection_lost(Py4JError("An error occurred while calling o1.count"))
    wrapped = RuntimeError("append failed")
    wrapped.__cause__ = Py4JError("org.x.Y does not exist in the JVM")
    assert connection_lost(wrapped)


def test_a_java_exception_mentioning_it_is_not_one() -> None:
    java = Py4JJavaError.__new__(Py4JJavaError)
    Exception.__init__(java, "x does not exist in the JVM")
    assert not connection_lost(java)


def test_the_call_waits_for_the_exit_and_reports_the_death() -> None:
    actor = SparkActor(SparkSettings(max_session_restarts=2))
    actor._spark = SimpleNamespace(sparkContext=SimpleNamespace(), _jvm=object())
    actor._proc = dying = DyingProcess(after_s=0.3)
    started = time.monotonic()
    with pytest.raises(SparkJvmDiedError, match=r"Spark JVM \(pid 4242\) died during the "
                                                r"call; the next call starts a new session"):
        actor._attempt(lost_lookup)
    # It waited for the exit (a death is only reported once seen: had the wait run out,
    # the lookup's error would have been raised as itself, as in the test below).
    assert time.monotonic() - started >= 0.25 and dying.returncode == -9
    assert actor._spark is None and actor._lost_pid == 4242  # replaced on the next call


def test_a_real_missing_name_fails_as_itself_after_the_wait() -> None:
    actor = SparkActor(SparkSettings())
    actor._spark = SimpleNamespace(sparkContext=SimpleNamespace(), _jvm=object())
    actor._proc = DyingProcess(after_s=3600)  # alive
    with pytest.raises(Py4JError, match="does not exist in the JVM"):
        actor._attempt(lost_lookup)
    assert actor._spark is not None
