"""Logging configuration: the only place that configures logging (dictConfig)."""

from __future__ import annotations

import json
import logging
import logging.config
import os
import time

_CONTEXT = ("group", "topic", "partition", "offset")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and for message-level
    lines group/topic/partition/offset (+ exception)."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in _CONTEXT:  # message-level lines: Kafka coordinates as fields
            if key in record.__dict__:
                data[key] = record.__dict__[key]
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False)


class Py4jRootFilter(logging.Filter):
    """py4j logs some lines through the root logger (``logging.info`` with a traceback
    each time a Spark JVM's connection is lost): hold them to the ``py4j`` logger's
    level, like its other lines."""

    _PATH = f"{os.sep}py4j{os.sep}"

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "root" and self._PATH in record.pathname:
            return record.levelno >= logging.getLogger("py4j").getEffectiveLevel()
        return True


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    formatter = (
        {"()": JsonFormatter}
        if fmt == "json"
        else {"format": "%(asctime)s %(levelname)-7s %(name)s: %(message)s"}
    )
    logging.config.dictConfig({
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "filters": {"py4j_root": {"()": Py4jRootFilter}},
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "formatter": "default",
                       "stream": "ext://sys.stderr", "filters": ["py4j_root"]},
        },
        "root": {"level": level, "handlers": ["stderr"]},
        # httpx logs every request URL at INFO (query strings included): keep it quiet.
        # py4j logs every Spark call at DEBUG and its connections at INFO.
        "loggers": {"aiokafka": {"level": "WARNING"}, "httpx": {"level": "WARNING"},
                    "py4j": {"level": "WARNING"},
                    "httpcore": {"level": "WARNING"}},
    })
