"""Logging configuration: the only place that configures logging (dictConfig)."""

from __future__ import annotations

import json
import logging
import logging.config
import os
import re
import time
from collections.abc import Callable

from settings.secrets import redact_known

_CONTEXT = ("group", "topic", "partition", "offset")
_NUMBERS = re.compile(r"\d+")


class RepeatFilter(logging.Filter):
    """Logs a repeated message once per window, then says how many were held back.

    aiokafka logs an ERROR for every failed connect, fetch, heartbeat and metadata
    request, about 60 lines a second while a broker is down: an outage of a minute would
    bury everything else. Messages that differ only in their numbers (ports, node ids,
    pids) count as the same. The first of them passes; repeats within ``window_s`` are
    counted and dropped; the first one after the window passes with the count appended.

    Args:
        window_s: how long repeats of one message are held back.
        clock: monotonic time source (a fake one in tests).
    """

    def __init__(self, window_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, _NUMBERS.sub("#", record.getMessage()))
        now = self._clock()
        first, held = self._seen.get(key, (None, 0))
        if first is not None and now - first < self.window_s:
            self._seen[key] = (first, held + 1)
            return False
        if len(self._seen) > 1000:  # bounded: forget windows that are over
            self._seen = {k: v for k, v in self._seen.items()
                          if now - v[0] < self.window_s}
        self._seen[key] = (now, 0)
        if held:
            record.msg = f"{record.getMessage()} ({held} similar message(s) in the last " \
                         f"{now - first:.0f}s not shown)"  # type: ignore[operator]
            record.args = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and for message-level
    lines group/topic/partition/offset (+ exception)."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": redact_known(record.getMessage()),  # the process's secrets masked
        }
        for key in _CONTEXT:  # message-level lines: Kafka coordinates as fields
            if key in record.__dict__:
                data[key] = record.__dict__[key]
        if record.exc_info:
            data["exc"] = redact_known(self.formatException(record.exc_info))
        return json.dumps(data, ensure_ascii=False)


class Py4jRootFilter(logging.Filter):
    """py4j logs some lines through the root logger (``logging.info`` with a traceback
    each time a Spark JVM's connection is lost, ``logging.exception`` when it gives the
    command up): hold them to the ``py4j`` logger's level, like its other lines, and
    drop those about a lost connection at any level: the Spark sink detects the lost
    JVM and says so in its own line (``Spark JVM (pid N) died``), and a traceback of
    py4j's socket read is no clearer error."""

    _PATH = f"{os.sep}py4j{os.sep}"

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "root" and self._PATH in record.pathname:
            if record.exc_info and record.exc_info[1] is not None:
                from actors.sinks.spark.session import connection_lost

                if connection_lost(record.exc_info[1]):
                    return False
            return record.levelno >= logging.getLogger("py4j").getEffectiveLevel()
        return True


class TextFormatter(logging.Formatter):
    """``time level logger: message`` (+ traceback), the process's secret values masked
    (:func:`settings.secrets.redact_known`), like :class:`JsonFormatter`'s lines."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return redact_known(super().format(record))


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    formatter = {"()": JsonFormatter if fmt == "json" else TextFormatter}
    logging.config.dictConfig({
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "filters": {"py4j_root": {"()": Py4jRootFilter}, "repeats": {"()": RepeatFilter}},
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "formatter": "default",
                       "stream": "ext://sys.stderr", "filters": ["py4j_root"]},
            "stderr_repeats": {"class": "logging.StreamHandler", "formatter": "default",
                               "stream": "ext://sys.stderr", "filters": ["repeats"]},
        },
        "root": {"level": level, "handlers": ["stderr"]},
        # httpx logs every request URL at INFO (query strings included): keep it quiet.
        # py4j logs every Spark call at DEBUG and its connections at INFO.
        # aiokafka repeats its connection errors many times a second during an outage.
        # pyiceberg.io says which FileIO it picked at every table load (INFO).
        "loggers": {"aiokafka": {"level": "WARNING", "handlers": ["stderr_repeats"],
                                 "propagate": False},
                    "httpx": {"level": "WARNING"},
                    "py4j": {"level": "WARNING"},
                    "pyiceberg.io": {"level": "WARNING"},
                    "httpcore": {"level": "WARNING"}},
    })
