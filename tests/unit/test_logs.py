"""JSON log lines carry the Kafka coordinates of message-level events as fields."""

from __future__ import annotations

import json
import logging

import pytest

from actors.failure import FailurePolicy, Outcome
from service.logs import JsonFormatter
from settings import FailureSettings


async def test_dead_letter_warning_carries_coordinates_into_json(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="actors.failure")
    policy = FailurePolicy(FailureSettings(mode="continue"), sleep=lambda s: None)  # type: ignore[arg-type,return-value]

    async def dead_letter(exc: BaseException, attempts: int) -> None:
        return None

    context = {"group": "g", "topic": "t", "partition": 3, "offset": 42}
    outcome, _ = await policy.handle(ValueError("boom"), lambda: None, dead_letter,  # type: ignore[arg-type,return-value]
                                     "g: t[3]@42", context)
    assert outcome is Outcome.DEAD_LETTERED
    (record,) = [r for r in caplog.records if "dead-lettered" in r.getMessage()]
    line = json.loads(JsonFormatter().format(record))
    assert {k: line[k] for k in context} == context
    assert line["level"] == "WARNING" and "t[3]@42 failed after 1 attempt(s)" in line["message"]


def test_plain_lines_have_no_coordinate_fields() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "started %s", ("w",), None)
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "started w" and "topic" not in line


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_configure_logging_accepts_both_formats(fmt: str) -> None:
    from service.logs import configure_logging

    configure_logging("INFO", fmt)
    root = logging.getLogger()
    try:
        assert isinstance(root.handlers[0].formatter, JsonFormatter) is (fmt == "json")
        assert logging.getLogger("httpx").level == logging.WARNING
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)


def test_repeat_filter_holds_back_repeats_and_counts_them() -> None:
    from service.logs import RepeatFilter

    now = [100.0]
    flt = RepeatFilter(window_s=30, clock=lambda: now[0])

    def rec(msg: str, *args: object, name: str = "aiokafka") -> logging.LogRecord:
        return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)

    assert flt.filter(rec("Unable connect to node with id %s: port %d", "111", 5017))
    for port in range(50):  # differs only in its numbers: the same message
        now[0] += 0.05
        assert not flt.filter(rec("Unable connect to node with id %s: port %d", "111", port))
    assert flt.filter(rec("Marking the coordinator dead (node 111)"))  # another message
    assert flt.filter(rec("Unable connect to node with id %s: port %d", "111", 1,
                          name="aiokafka.consumer"))  # another logger
    now[0] = 131.0
    again = rec("Unable connect to node with id %s: port %d", "111", 7)
    assert flt.filter(again)
    assert again.getMessage() == ("Unable connect to node with id 111: port 7 "
                                  "(50 similar message(s) in the last 31s not shown)")
    now[0] += 1
    assert not flt.filter(rec("Unable connect to node with id %s: port %d", "111", 8))


def test_py4j_lines_on_the_root_logger_follow_the_py4j_level() -> None:
    """py4j logs 'Exception while sending command.' with a traceback through the root
    logger at INFO each time a Spark JVM's connection is lost: held to py4j's WARNING."""
    from service.logs import Py4jRootFilter, configure_logging

    configure_logging("INFO")
    py4j_file = "/venv/site-packages/py4j/java_gateway.py"
    lost = logging.LogRecord("root", logging.INFO, py4j_file, 1056,
                             "Exception while sending command.", (), None)
    failed = logging.LogRecord("root", logging.ERROR, py4j_file, 1059,
                               "Exception while sending command.", (), None)
    ours = logging.LogRecord("root", logging.INFO, __file__, 1, "kept", (), None)
    kept = Py4jRootFilter()
    assert not kept.filter(lost)
    assert kept.filter(failed) and kept.filter(ours)


def test_py4j_tracebacks_of_a_lost_connection_are_dropped_at_any_level() -> None:
    """A Spark JVM killed while py4j sends a command: py4j gives the command up with
    ``logging.exception`` (ERROR, a traceback of its socket read) through the root
    logger. The Spark sink reports the dead JVM in its own line; the traceback is
    dropped (seen in a fresh-clone CI run of test_spark_jvm_death)."""
    from py4j.protocol import Py4JNetworkError  # type: ignore[import-untyped]

    from service.logs import Py4jRootFilter

    py4j_file = "/venv/site-packages/py4j/java_gateway.py"

    def record(exc: Exception, level: int = logging.ERROR) -> logging.LogRecord:
        return logging.LogRecord("root", level, py4j_file, 1038,
                                 "Exception while sending command.", (),
                                 (type(exc), exc, exc.__traceback__))

    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError as reset:
        network = Py4JNetworkError("Error while sending or receiving", reset)
        network.__cause__ = reset
    kept = Py4jRootFilter()
    assert not kept.filter(record(network))
    assert not kept.filter(record(ConnectionResetError(104, "reset"), logging.CRITICAL - 1))
    assert kept.filter(record(ValueError("a py4j bug, not a lost connection")))
