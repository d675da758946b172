"""How a JDBC failure is told apart: its PostgreSQL SQLSTATE (:func:`sql_error`), a fact
about rows or not (:func:`is_row_error`), and :class:`AppendError` carrying both; and the
first line of a (Java) error (:func:`short`)."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

# SQLSTATE classes that are facts about the rows written: data exceptions and integrity
# constraint violations. Any other SQLSTATE, or none, is retried.
ROW_ERROR_CLASSES = ("22", "23")
_STATE_NAMES = {
    "22001": "string_data_right_truncation", "22003": "numeric_value_out_of_range",
    "22007": "invalid_datetime_format", "22008": "datetime_field_overflow",
    "22021": "character_not_in_repertoire", "22P02": "invalid_text_representation",
    "22P05": "untranslatable_character", "23502": "not_null_violation",
    "23503": "foreign_key_violation", "23505": "unique_violation",
    "23514": "check_violation", "23P01": "exclusion_violation",
}


def is_row_error(state: str | None) -> bool:
    """Whether a failure with this SQLSTATE is a fact about the rows written (dead-letter
    them) rather than about the database or the connection (retry)."""
    return state is not None and state[:2] in ROW_ERROR_CLASSES


def _java_chain(java: Any) -> Any:
    """``java`` and its causes, each followed by its SQL ``getNextException`` chain."""
    for _ in range(20):
        if java is None:
            return
        yield java
        try:
            following = java.getNextException()
        except Exception:  # noqa: BLE001 - not an SQLException
            following = None
        for _ in range(20):
            if following is None:
                break
            yield following
            following = following.getNextException()
        java = java.getCause()


def sql_error(exc: BaseException) -> tuple[str | None, str]:
    """Spark thread: the SQLSTATE and the message of the JDBC error inside ``exc`` (a Py4J
    error; the SQLException may be the cause of Spark's "Job aborted" exception, a
    ``BatchUpdateException`` holds the server's error as its next exception), or
    ``(None, short text)`` when no SQLException carries a SQLSTATE."""
    java = getattr(exc, "java_exception", None)
    found: list[tuple[str, str, str]] = []
    try:
        for error in _java_chain(java):
            try:
                state = error.getSQLState()
            except Exception:  # noqa: BLE001, S112 - not an SQLException
                continue
            if state:
                found.append((str(state), error.getClass().getName(),
                              " ".join(str(error.getMessage()).split())))
    except Exception:  # noqa: BLE001 - the JVM may be gone: no SQLSTATE then
        logger.debug("jdbc sink: cannot read the SQLSTATE of %s", type(exc).__name__)
    # The server's own error rather than the BatchUpdateException that quotes the batch.
    found.sort(key=lambda f: f[1].endswith("BatchUpdateException"))
    if not found:
        return None, short(exc)
    state, name, message = found[0]
    return state, f"{name}: {message[:500]}"


def state_text(state: str | None) -> str:
    """``SQLSTATE 23505 (unique_violation)``."""
    if state is None:
        return "no SQLSTATE"
    name = _STATE_NAMES.get(state)
    return f"SQLSTATE {state}" + (f" ({name})" if name else "")


class AppendError(Exception):
    """An append of rows failed: its SQLSTATE (None if unknown) and message."""

    def __init__(self, state: str | None, message: str) -> None:
        super().__init__(f"{message} ({state_text(state)})")
        self.state = state
        self.message = message
        self.rows = 0  # how many the failed append held

    @property
    def row_error(self) -> bool:
        return is_row_error(self.state)


def short(exc: BaseException) -> str:
    """The first line of a (Java) error, without the Py4J call noise."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            return f"{java.getClass().getName()}: {str(java.getMessage())[:300]}"
        except Exception:  # noqa: BLE001, S110 - the JVM may be gone: fall back to the text
            pass
    text = [line for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"
