"""One clear line for a failed Spark call of the table tools (``kstage tables``).

py4j's own message for an error of the JVM names only the Java method called ("An error
occurred while calling o66.sql."); the reason is the root cause of the Java exception
(say, ``FileNotFoundException: File .../00000-3-....parquet does not exist``).
:func:`explained` wraps a function for the Spark thread so that its failures carry that
line (:class:`TableCallError`), chained to the original exception, so the SparkActor still
recognises a dead JVM behind it. pyspark/py4j are imported only inside functions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from actors.sinks.spark.actor import short

T = TypeVar("T")


class TableCallError(Exception):
    """A Spark call of a table tool failed; ``str()`` names the JVM's root cause."""


def root_cause(exc: BaseException) -> str:
    """Spark thread: one line for ``exc``: for an error of the JVM its root cause's class
    and message, else :func:`~actors.sinks.spark.actor.short`."""
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]  # noqa: PLC0415

    if not isinstance(exc, Py4JJavaError):
        return short(exc)
    try:
        cause = exc.java_exception
        for _ in range(20):
            deeper = cause.getCause()
            if deeper is None or deeper.equals(cause):
                break
            cause = deeper
        text = str(cause.getMessage() or "").strip().splitlines()
        return f"{cause.getClass().getSimpleName()}: {text[0][:300] if text else ''}"
    except Exception:  # noqa: BLE001 - the JVM is gone: what py4j said
        return short(exc)


def explained(fn: Callable[[Any], T]) -> Callable[[Any], T]:
    """``fn`` (for the Spark thread) raising TableCallError with the JVM's root cause."""
    def run(spark: Any) -> T:
        try:
            return fn(spark)
        except TableCallError:
            raise
        except Exception as exc:
            raise TableCallError(root_cause(exc)) from exc
    return run


def said(exc: BaseException) -> str:
    """A failure's line: TableCallError's own text, else :func:`short`."""
    return str(exc) if isinstance(exc, TableCallError) else short(exc)


__all__ = ["TableCallError", "explained", "root_cause", "said"]
