"""What the record pipeline reads and makes: records, their decoders, and where a walk
sends the rows of a batch.

Records are anything with the attributes of aiokafka's ``ConsumerRecord`` (``topic,
partition, offset, timestamp, key, value, headers``): :class:`RecordLike`; a
:class:`Record` is a plain one (a dead-letter line, a test, a benchmark). A walk of a
batch (:meth:`RecordPipeline.walk <actors.worker.pipeline.RecordPipeline.walk>`) sends
what it made to a :class:`Route`: the worker's ships spans to its sinks, a
:class:`Collect` keeps the rows (``dlq replay``, the plugin test kit, the benchmarks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from actors.codecs.by_id import SchemaIdDecoder
from actors.decoding import DECODERS, KEY_DECODERS
from processors.base import Row
from processors.errors import PoisonMessage
from settings.models import TopicSettings


class RecordLike(Protocol):
    """What the pipeline reads of a record (aiokafka's ``ConsumerRecord`` has it)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...
    @property
    def timestamp_type(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Record:
    """A record not read from Kafka (a dead-letter line, a test, a benchmark)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp_type: int = -1  # 0 CreateTime, 1 LogAppendTime, -1 none or unknown


@dataclass(frozen=True, slots=True)
class RefusedRecord(Record):
    """A record of a compressed batch that was not inflated (past
    ``kafka.max_batch_inflated_bytes``, :mod:`actors.inflate`): only its coordinates are
    known; the screen makes it poison with ``reason``."""

    reason: str = ""


class _Filtered(tuple[Row, ...]):
    """The type of :data:`FILTERED`."""

    __slots__ = ()


FILTERED: Sequence[Row] = _Filtered()
"""The rows of a message the topic's filter kept from the processor (empty; tell it
apart from a processor's ``[]`` with ``is``)."""


class Route(Protocol):
    """Where a walk of a batch sends what it made (see
    :meth:`RecordPipeline.walk <actors.worker.pipeline.RecordPipeline.walk>`)."""

    async def ship(self, rows: Sequence[Row], next_offset: int, count: int,
                   savepoint: bool, *, trace: Any = None) -> None:
        """The rows of ``count`` messages, up to ``next_offset``, are done: write them
        (``savepoint``: commit exactly up to ``next_offset`` once written; ``trace``:
        the messages' spans, a :class:`~actors.tracing.BatchTrace`, when tracing)."""

    def drop(self, count: int) -> None:
        """``count`` messages leave the walk unshipped (abandoned, thrown)."""

    def parks(self, exc: Exception) -> bool:
        """Whether a message that failed with ``exc`` waits out its retries apart (the
        walk ships what came before and hands the rest to :meth:`park`)."""

    def park(self, rest: Sequence[Any], exc: Exception) -> None:
        """Take ``rest`` (its first failed with ``exc``) out of the walk."""


class Collect:
    """A :class:`Route` that keeps the rows in ``rows`` and each shipped span in
    ``spans`` as (next offset, messages, savepoint); it never parks."""

    __slots__ = ("dropped", "rows", "shipped", "spans")

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.spans: list[tuple[int, int, bool]] = []
        self.shipped = 0  # messages
        self.dropped = 0

    def __repr__(self) -> str:
        return f"<Collect rows={len(self.rows)} messages={self.shipped}>"

    async def ship(self, rows: Sequence[Row], next_offset: int, count: int,
                   savepoint: bool, *, trace: Any = None) -> None:
        self.rows.extend(rows)
        self.spans.append((next_offset, count, savepoint))
        self.shipped += count

    def drop(self, count: int) -> None:
        self.dropped += count

    def parks(self, exc: Exception) -> bool:
        return False

    def park(self, rest: Sequence[Any], exc: Exception) -> None:
        raise AssertionError("Collect never parks")


def value_decoder(topic: TopicSettings, avro: SchemaIdDecoder | None
                  ) -> Callable[[bytes | None], Any]:
    """The decoder of the topic's ``format`` (Avro: ``avro``, which needs a registry)."""
    return avro.decode if avro is not None else DECODERS[topic.format]


def key_decoder(topic: TopicSettings, avro_keys: SchemaIdDecoder | None
                ) -> Callable[[bytes | None], Any] | None:
    """The decoder of the topic's ``key_format``; None: keys stay bytes. A key that does
    not decode is poison naming the format (``key (key_format avro): ...``)."""
    if avro_keys is None and topic.key_format == "bytes":
        return None
    decode = avro_keys.decode if avro_keys is not None else KEY_DECODERS[topic.key_format]
    what = f"key (key_format {topic.key_format})"

    def decode_key(raw: bytes | None) -> Any:
        try:
            return decode(raw)
        except PoisonMessage as exc:
            poison = PoisonMessage(f"{what}: {exc}")
            poison.details = exc.details
            raise poison from exc

    return decode_key


__all__ = ["FILTERED", "Collect", "Record", "RecordLike", "RefusedRecord", "Route", "key_decoder",
           "value_decoder"]
