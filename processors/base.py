"""The public processor API: what a plugin implements, and how kstage calls it.

A processor turns one decoded Kafka message into rows (for a staging table) or
requests (for an HTTP API). Lifecycle, as the worker drives it::

    cls(options)          once per worker, with the topic's ``options`` mapping
    await start()         before the first message (open clients here)
    transform(message)    per message, in offset order per partition; pure
    await stop()          after the last message, also after a crash

Guarantees kstage gives a processor:

* messages of one partition reach ``transform`` in offset order, one at a time;
* a message is committed only after the rows returned for it were durably accepted by
  the sink, so a crash replays it (at-least-once): ``transform`` must be deterministic;
* every row automatically carries the Kafka coordinates ``_topic, _partition,
  _offset, _timestamp`` (see :func:`with_coordinates`), which makes rows idempotent.

Failures: raise :class:`~processors.errors.PoisonMessage` for a message that can never
be processed (dead-lettered or thrown per policy), :class:`~processors.errors.Retry` or
any other exception for failures the group's ``failure`` policy should handle.
``transform`` may be ``async def`` when it must await (it can then be cancelled on
shutdown); plain functions are faster.

Processors are found through the entry-point group ``kstage.processors`` (see
:mod:`processors.registry`). This module imports neither aiokafka nor pyspark.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

logger = logging.getLogger(__name__)

Row = dict[str, Any]
"""One output row: column name to value."""

COORDINATE_COLUMNS = ("_topic", "_partition", "_offset", "_timestamp")


@dataclass(slots=True, frozen=True)
class Message:
    """One decoded Kafka message, as handed to :meth:`Processor.transform`.

    Attributes:
        topic, partition, offset: the Kafka coordinates.
        timestamp: the record timestamp in milliseconds since the epoch.
        key: the raw key bytes (or None).
        value: the decoded value (a dict for ``json``, bytes for ``bytes``).
        headers: the record headers as (name, bytes) pairs.
        raw: the undecoded value bytes.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: Any
    headers: Sequence[tuple[str, bytes]]
    raw: bytes | None

    def coordinates(self) -> Row:
        """The Kafka coordinate columns every row carries."""
        return {
            "_topic": self.topic,
            "_partition": self.partition,
            "_offset": self.offset,
            "_timestamp": self.timestamp,
        }


class Processor:
    """Base class of processors. Subclass it and override :meth:`transform`.

    Class attributes:
        name: the registered name (set it to the entry-point name).
        formats: value formats the processor accepts (checked at start).
        description: one line shown by ``kstage processors``.
    """

    name: ClassVar[str] = ""
    formats: ClassVar[tuple[str, ...]] = ("json", "bytes", "avro")
    description: ClassVar[str] = ""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: Mapping[str, Any] = dict(options or {})

    async def start(self) -> None:
        """Open clients or load resources. Called once before the first message."""

    async def stop(self) -> None:
        """Release what :meth:`start` opened. Called once, also after a failure."""

    def transform(self, message: Message) -> Sequence[Row] | Awaitable[Sequence[Row]]:
        """Return the rows for ``message`` (may be empty, to filter it out)."""
        raise NotImplementedError

    def wants_savepoint(self, message: Message) -> bool:
        """In ``commit.mode: savepoint``: commit once this message is durably written."""
        return False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def with_coordinates(row: Row, message: Message) -> Row:
    """Return ``row`` with the Kafka coordinate columns of ``message`` added."""
    row["_topic"] = message.topic
    row["_partition"] = message.partition
    row["_offset"] = message.offset
    row["_timestamp"] = message.timestamp
    return row
