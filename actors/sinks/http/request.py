"""What the HTTP sink sends: a :class:`Request` (the rows of one partition going to one
URL, or rows refused before sending), its idempotency key (:func:`idempotency_key`) and
the JSON of values JSON has no type for (:func:`json_default`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from processors.base import Row


@dataclass(slots=True)
class Request:
    """One request to send, or (``refused`` set) rows that cannot become one."""

    rows: list[Row]
    url: str = ""
    key: str = ""
    refused: str | None = None
    # per row: its index among its message's rows, and whether it is the message's last
    marks: list[tuple[int, bool]] = dataclasses.field(default_factory=list)

    def halves(self) -> tuple[Request, Request]:
        """The request cut in two (a 413 for a batch), each with its own key."""
        half = len(self.rows) // 2
        parts = (slice(None, half), slice(half, None))
        return tuple(  # type: ignore[return-value]
            Request(self.rows[p], self.url, idempotency_key(self.rows[p], self.marks[p]),
                    marks=self.marks[p]) for p in parts)


def partition_of(row: Row) -> tuple[Any, Any]:
    return row.get("_topic"), row.get("_partition")


def idempotency_key(rows: Sequence[Row], marks: Sequence[tuple[int, bool]]) -> str:
    """The idempotency key of a request of ``rows``: ``{topic}-{partition}-{first}-{last}``,
    the offsets of its first and last row, with each row's index within its message
    appended when the request holds only some of a message's rows (the rules:
    :mod:`actors.sinks.http`)."""
    topic, partition = partition_of(rows[0])
    start, end = rows[0]["_offset"], rows[-1]["_offset"]
    (first_index, _), (last_index, last) = marks[0], marks[-1]
    if first_index == 0 and last:
        return f"{topic}-{partition}-{start}-{end}"
    return f"{topic}-{partition}-{start}.{first_index}-{end}.{last_index}"


def json_default(value: object) -> object:
    """JSON of what a processor may put in a row beyond JSON's types: bytes as text,
    anything else as its str (a Decimal's exact digits, a datetime with its offset)."""
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "backslashreplace")
    return str(value)
