"""The record pipeline: decode → transform → failure policy → rows or a dead-letter line.

One walk, used by the worker, by ``kstage dlq replay``, by the plugin test kit
(:mod:`processors.testing`) and by the benchmarks, so they cannot drift apart:

* :meth:`RecordPipeline.fetch_schemas` loads the Avro writer schemas a batch needs (the
  only registry I/O), waiting out an unreachable registry or a 404 window (worker);
  :meth:`RecordPipeline.load_schemas` asks once and raises (replay, tools).
* :meth:`RecordPipeline.message` decodes a record (key and value, per the topic's
  ``format``/``key_format``) into the :class:`~processors.base.Message` a processor sees.
* :meth:`RecordPipeline.transform` runs the topic's declared filter on it
  (:mod:`actors.worker.filters`; a filtered message gives no rows, :data:`FILTERED`, and
  counts in ``filtered``), then the processor (awaited when async), and says whether the
  message is a savepoint.
* :meth:`RecordPipeline.on_failure` applies the topic's failure policy to a record whose
  processing raised: retried, dead-lettered (durably, retried on a full disk), thrown, or
  abandoned on stop. :meth:`RecordPipeline.refuse` dead-letters rows a sink refused.
* :meth:`RecordPipeline.process` walks a batch and returns what became of each record:
  pure enough to test without Kafka (records in, rows and outcomes out).

Records are anything with the attributes of aiokafka's ``ConsumerRecord`` (``topic,
partition, offset, timestamp, key, value, headers``); :class:`Record` is a plain one.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka.errors import KafkaError

from actors.dead_letter_topic import DeadLetterTopic
from actors.deadletter import DeadLetterFile, dead_letter_line
from actors.decoding import DECODERS, KEY_DECODERS
from actors.errors import PermanentSinkError
from actors.failure import FailurePolicy, Outcome, Sleep
from actors.sink_health import SinkHealth
from actors.sinks import RefuseRows, Sink, SinkContext, build_sink
from actors.worker.filters import EventFilter
from processors.avro import AvroDecoder
from processors.backoff import backoff_s
from processors.base import Message, Processor, Row
from processors.errors import PoisonMessage, ProcessorError
from processors.schema_registry import SchemaNotFoundYet
from settings.models import (
    FailureMode,
    FailureSettings,
    FilterSettings,
    NamedSink,
    Settings,
    TopicSettings,
)

logger = logging.getLogger(__name__)

_DEAD_LETTER_BACKOFF_S = (0.5, 30.0)  # retry waits of a failed dead-letter write
_SCHEMA_BACKOFF_S = (0.5, 30.0)  # retry waits of schemas the registry cannot give yet


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


class _Filtered(tuple[Row, ...]):
    """The type of :data:`FILTERED`."""

    __slots__ = ()


FILTERED: Sequence[Row] = _Filtered()
"""The rows of a message the topic's filter kept from the processor (empty; tell it
apart from a processor's ``[]`` with ``is``)."""


@dataclass(slots=True)
class Processed:
    """What became of one record: its rows (none when dead-lettered or filtered), the
    failure policy's outcome (None: transformed at the first attempt), whether it is a
    savepoint, whether the topic's filter kept it from the processor."""

    offset: int
    rows: Sequence[Row] = ()
    outcome: Outcome | None = None
    savepoint: bool = False
    filtered: bool = False


class _DeadLetterAbandoned(Exception):
    """The worker stopped while a dead-letter write was being retried."""


async def _sleep_on(seconds: float) -> bool:
    """A wait no stop interrupts (the sink drains until the stop's abort cancels it)."""
    await asyncio.sleep(seconds)
    return True


async def no_wait(seconds: float) -> bool:
    """For tools: a wait that gives up at once (the caller reports the failure)."""
    return False


@dataclass(frozen=True, slots=True)
class BoundSink:
    """One of a topic's sinks, built and bound (not opened): its name and settings
    (:class:`~settings.models.NamedSink`) and the sink."""

    named: NamedSink
    sink: Sink

    @property
    def name(self) -> str:
        return self.named.name


def bound_sinks(settings: Settings, topic: TopicSettings, processor_cls: type[Processor], *,
                label: str, refuse: Callable[[NamedSink], RefuseRows],
                health: Callable[[str], SinkHealth | None] | None = None,
                group: str = "") -> list[BoundSink]:
    """The topic's sinks (one for ``sink:``, every one of ``sinks:``), bound as every run
    of a pipeline binds them (the worker, ``dlq replay``): the processor's columns and
    table, the whole settings (e.g. the ``spark:`` section), each sink's health (by its
    name), where the rows it refuses go (``refuse(named)``: dead letters naming it) and
    the consumer ``group`` of the worker."""
    bound = []
    sinks = topic.named_sinks()
    for named in sinks:
        sink = build_sink(named.settings)
        sink.bind(SinkContext(
            label=label if len(sinks) == 1 else f"{label} sink {named.name!r}",
            group=group, topic=topic.topic, processor=topic.processor,
            columns=tuple(processor_cls.columns), table=processor_cls.table,
            key=tuple(processor_cls.key), settings=settings,
            health=None if health is None else health(named.name), refuse=refuse(named)))
        bound.append(BoundSink(named, sink))
    return bound


def value_decoder(topic: TopicSettings, avro: AvroDecoder | None
                  ) -> Callable[[bytes | None], Any]:
    """The decoder of the topic's ``format`` (Avro: ``avro``, which needs a registry)."""
    return avro.decode if avro is not None else DECODERS[topic.format]


def key_decoder(topic: TopicSettings, avro_keys: AvroDecoder | None
                ) -> Callable[[bytes | None], Any] | None:
    """The decoder of the topic's ``key_format``; None: keys stay bytes."""
    if avro_keys is not None:
        return avro_keys.decode
    return None if topic.key_format == "bytes" else KEY_DECODERS[topic.key_format]


class RecordPipeline:
    """Decode, transform and apply the failure policy for one topic's records.

    Args:
        topic: the topic's settings (formats, processor name, sink type).
        processor: the started processor instance.
        failure: the topic's failure policy (its sleep is the retry wait).
        group_id: for dead-letter lines and log context.
        label: the owner's name in log lines.
        sleep: a wait that ends early on stop (returns False), for registry waits and
            retries of a failed dead-letter write; default: give up at once.
        avro, avro_keys: decoders of ``format: avro`` values and ``key_format: avro`` keys
            (ignored unless the topic's format says avro).
        savepoints: the commit mode asks processors for savepoints.
        stats: counters to update (``processed`` is the caller's; ``failed``,
            ``retried``, ``dead_lettered`` and ``filtered`` are counted here).
        dead_letter_topic: also produce dead letters to this topic (after the file, if
            ``dead_letter_path`` names one).
    """

    def __init__(self, *, topic: TopicSettings, processor: Processor | None,
                 failure: FailurePolicy,
                 group_id: str, label: str = "", sleep: Sleep | None = None,
                 avro: AvroDecoder | None = None, avro_keys: AvroDecoder | None = None,
                 savepoints: bool = False, stats: dict[str, int] | None = None,
                 dead_letter_topic: DeadLetterTopic | None = None) -> None:
        self.topic = topic
        self.failure = failure
        self.group_id = group_id
        self.label = label or group_id
        self.sleep: Sleep = sleep or no_wait
        self.avro = avro if topic.format == "avro" else None
        self.avro_keys = avro_keys if topic.key_format == "avro" else None
        self.decode = value_decoder(topic, self.avro)
        self.decode_key = key_decoder(topic, self.avro_keys)
        self.savepoints = savepoints
        self.filter = self.compile_filter(topic.filter)
        self.processor: Processor = None  # type: ignore[assignment]  # set by use()
        self.async_transform = False
        if processor is not None:
            self.use(processor)
        path = failure.settings.dead_letter_path
        self.dead_letters = DeadLetterFile(path) if path is not None else None
        self.dead_letter_topic = dead_letter_topic
        self.stats = stats if stats is not None else {}
        for name in ("failed", "retried", "dead_lettered", "filtered"):
            self.stats.setdefault(name, 0)
        # Why processing waits instead of progressing (e.g. a registry 404 window), for
        # /readyz; None while it progresses.
        self.waiting_for: str | None = None
        self.dead_letter_error: str | None = None  # why the last dead-letter write failed

    @staticmethod
    def compile_filter(settings: FilterSettings | None) -> EventFilter | None:
        """The matcher of a topic's ``filter:`` (None: every message passes)."""
        if settings is None or not (settings.include or settings.exclude):
            return None
        return EventFilter(settings.include, settings.exclude)

    @classmethod
    def for_processor(cls, processor: Processor, *, topic: str = "topic",
                      decode: Callable[[bytes | None], Any] | None = None,
                      filter: FilterSettings | None = None) -> RecordPipeline:  # noqa: A002
        """A pipeline for ``processor`` alone, outside any configuration (the plugin test
        kit, benchmarks): ``format: json`` values unless ``decode`` is given, keys as
        bytes, the topic's ``filter`` if given, failures thrown (:meth:`handle` raises
        ``MessageFailedError``)."""
        settings = TopicSettings.model_construct(topic=topic, processor=processor.name,
                                                 filter=filter)
        failure = FailurePolicy(FailureSettings(mode=FailureMode.THROW), no_wait)
        pipeline = cls(topic=settings, processor=processor, failure=failure, group_id="")
        if decode is not None:
            pipeline.decode = decode
        return pipeline

    def use(self, processor: Processor) -> None:
        """Transform with ``processor`` (the worker builds it when it runs)."""
        self.processor = processor
        self.async_transform = inspect.iscoroutinefunction(processor.transform)

    def keeps(self, value: Any) -> bool:
        """Whether the topic's filter lets a decoded ``value`` reach the processor; a
        value it keeps out is counted in ``filtered``."""
        if self.filter is None or self.filter.passes(value):
            return True
        self.stats["filtered"] += 1
        return False

    @property
    def sync(self) -> bool:
        """The hot path applies: no coroutine per message (sync transform, no savepoints,
        keys not decoded; the worker applies :meth:`keeps` itself)."""
        return not self.async_transform and not self.savepoints and self.decode_key is None

    # -- decode ----------------------------------------------------------------------

    def message(self, rec: RecordLike) -> Message:
        key = rec.key if self.decode_key is None else self.decode_key(rec.key)
        return Message(
            rec.topic, rec.partition, rec.offset, rec.timestamp, key,
            self.decode(rec.value), rec.headers, rec.value,  # type: ignore[arg-type]
        )

    async def load_schemas(self, records: Sequence[RecordLike]) -> None:
        """Load the writer schemas ``records`` need, asking the registry once per id;
        raises what the registry answered (a tool reports it; the worker waits instead,
        see :meth:`fetch_schemas`)."""
        for decoder, raws in ((self.avro, [r.value for r in records]),
                              (self.avro_keys, [r.key for r in records])):
            if decoder is not None:
                for id_bytes in decoder.missing(raws):
                    await decoder.fetch(id_bytes)

    async def fetch_schemas(self, records: Sequence[RecordLike]) -> bool:
        """Load the writer schemas a batch needs before decoding it (the only registry
        I/O). An unreachable registry is not poison, nor is a 404 for an id inside its
        ``not_found_retry_s`` window (issue 11): back off and retry until it answers, the
        window ends or the worker stops (then False: the batch is abandoned, nothing
        committed). Every missing id is asked in each round, so the ids' windows run
        together: a batch of many unknown ids waits one window, not one per id. Meanwhile
        the fetch loop pauses the partitions (no eviction) and :attr:`waiting_for` says
        why."""
        if self.avro is None and self.avro_keys is None:
            return True
        try:
            for decoder, values in ((self.avro, [r.value for r in records]),
                                    (self.avro_keys, [r.key for r in records])):
                if decoder is None:
                    continue
                pending = sorted(decoder.missing(values))
                attempt = 0
                while pending:
                    waiting: list[tuple[bytes, ProcessorError]] = []
                    untried: list[bytes] = []
                    for n, id_bytes in enumerate(pending):
                        try:
                            await decoder.fetch(id_bytes)
                        except ProcessorError as exc:
                            if not exc.retriable:
                                raise
                            waiting.append((id_bytes, exc))
                            if not isinstance(exc, SchemaNotFoundYet):
                                # unreachable: asking for the other ids is no use now
                                untried = pending[n + 1:]
                                break
                    if not waiting:
                        break
                    wait = self._schema_wait(decoder, records, values, waiting,
                                             backoff_s(attempt, *_SCHEMA_BACKOFF_S))
                    if not await self.sleep(wait):
                        return False
                    pending = [id_bytes for id_bytes, _ in waiting] + untried
                    attempt += 1
        finally:
            self.waiting_for = None
        return True

    def _schema_wait(self, decoder: AvroDecoder, records: Sequence[RecordLike],
                     values: list[bytes | None], waiting: list[tuple[bytes, ProcessorError]],
                     delay: float) -> float:
        """Log and show why the batch waits for schema ids; the seconds to wait."""
        id_bytes, exc = next(((i, e) for i, e in waiting if not isinstance(e, SchemaNotFoundYet)),
                             waiting[0])
        sid = decoder.schema_id(id_bytes)
        if not isinstance(exc, SchemaNotFoundYet):
            self.waiting_for = f"schema registry unavailable for schema id {sid}"
            logger.warning("%s: schema registry unavailable for id %s (%s); retrying in %.1fs",
                           self.label, sid, exc, delay)
            return delay
        remaining = min(e.remaining_s for _, e in waiting if isinstance(e, SchemaNotFoundYet))
        wait = min(delay, remaining)
        rec = next(r for r, v in zip(records, values, strict=True)
                   if decoder.header_id(v) == id_bytes)
        where = f"{rec.topic}[{rec.partition}]@{rec.offset}"
        more = f" and {len(waiting) - 1} more id(s)" if len(waiting) > 1 else ""
        self.waiting_for = (f"schema registry: 404 for schema id {sid} ({where}){more} for "
                            f"{exc.waited_s:.0f}s; unknown in {exc.remaining_s:.0f}s")
        logger.warning("%s: schema registry answers 404 for schema id %s of %s%s (for %.1fs); "
                       "retrying in %.1fs, for %.1fs more before it counts as unknown",
                       self.label, sid, where, more, exc.waited_s, wait, exc.remaining_s)
        return wait

    # -- transform -------------------------------------------------------------------

    def rows_of(self, rec: RecordLike) -> Sequence[Row]:
        """Decode, filter and transform ``rec`` synchronously: the hot path, only for a
        pipeline that is :attr:`sync` (the worker inlines the same calls per record)."""
        msg = self.message(rec)
        if not self.keeps(msg.value):
            return FILTERED
        return self.processor.transform(msg)  # type: ignore[return-value]

    async def transform_message(self, msg: Message) -> tuple[Sequence[Row], bool]:
        """The processor's rows for ``msg`` (awaited when async), and whether ``msg`` is a
        savepoint (only when the commit mode asks for savepoints); :data:`FILTERED` and
        False when the topic's filter keeps ``msg`` from the processor."""
        if not self.keeps(msg.value):
            return FILTERED, False
        out = self.processor.transform(msg)
        if inspect.isawaitable(out):  # an async transform (or one returning an awaitable)
            out = await out
        savepoint = self.savepoints and self.processor.wants_savepoint(msg)
        return out, savepoint

    async def transform(self, rec: RecordLike) -> tuple[Sequence[Row], bool]:
        """Decode ``rec`` and transform it; see :meth:`transform_message`."""
        return await self.transform_message(self.message(rec))

    async def handle(self, rec: RecordLike) -> Processed:
        """Transform ``rec``; when that raises, apply the failure policy.

        Raises:
            MessageFailedError: the policy says throw.
        """
        try:
            out, savepoint = await self.transform(rec)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every processor error goes to policy
            outcome, result = await self.on_failure(rec, exc)
            if outcome is Outcome.RECOVERED:
                return Processed(rec.offset, result[0], outcome, result[1])
            return Processed(rec.offset, (), outcome)
        return Processed(rec.offset, out, None, savepoint, filtered=out is FILTERED)

    async def process(self, records: Sequence[RecordLike]) -> list[Processed]:
        """Schemas, then :meth:`handle` for each record in order, until one is abandoned
        (its entry is the last). Returns [] when a stop ended the schema wait."""
        if not await self.fetch_schemas(records):
            return []
        done: list[Processed] = []
        for rec in records:
            done.append(await self.handle(rec))
            if done[-1].outcome is Outcome.ABANDONED:
                break
        return done

    # -- failure policy and dead letters ---------------------------------------------

    async def on_failure(self, rec: RecordLike, exc: BaseException) -> tuple[Outcome, Any]:
        """Apply the failure policy to ``rec``, whose processing raised ``exc``.

        Raises:
            MessageFailedError: the policy says throw; the offset must stay uncommitted.
        """
        self.stats["failed"] += 1
        describe = f"{self.group_id}: {rec.topic}[{rec.partition}]@{rec.offset}"

        async def dead_letter(error: BaseException, attempts: int) -> None:
            if not await self.write_dead_letter(dead_letter_line(
                group=self.group_id, topic=rec.topic, partition=rec.partition,
                offset=rec.offset, timestamp=rec.timestamp, key=rec.key, value=rec.value,
                headers=rec.headers, processor=self.topic.processor, exc=error,
                attempts=attempts,
                extra=error.details if isinstance(error, PoisonMessage) else None,
            ), self.sleep):
                raise _DeadLetterAbandoned

        retries_before = self.failure.retries
        try:
            return await self.failure.handle(
                exc, lambda: self.transform(rec), dead_letter, describe,
                {"group": self.group_id, "topic": rec.topic, "partition": rec.partition,
                 "offset": rec.offset})
        except _DeadLetterAbandoned:
            return Outcome.ABANDONED, None  # stopped before the line was written
        finally:
            self.stats["retried"] += self.failure.retries - retries_before

    def refuser(self, sink: NamedSink) -> RefuseRows:
        """The dead-letter handler of the rows ``sink`` refuses for good (see
        :meth:`refuse`)."""
        async def refuse(rows: list[Row], status: int, body_head: str) -> None:
            await self.refuse(rows, status, body_head, sink=sink)
        return refuse

    async def refuse(self, rows: list[Row], status: int, body_head: str, *,
                     sink: NamedSink | None = None) -> None:
        """A sink refused rows for good (e.g. HTTP 4xx): dead-letter each, durably, so the
        partition moves on and nothing is lost. Each dead letter names the sink
        (``sink``: its name, ``sink_type``): ``dlq replay`` offers the row to that sink
        only, the topic's other sinks had it already. ``sink``: the topic's only sink
        when not given."""
        if sink is None:
            sink = self.topic.named_sinks()[0]
        kind = sink.settings.type
        what = ("could not send the rows" if status == 0  # e.g. a URL template field missing
                else f"answered {status}")
        named = f"{kind} sink" if sink.name == kind else f"{kind} sink {sink.name!r}"
        error = PermanentSinkError(f"{named} {what}: {body_head[:200]}")
        for row in rows:
            self.stats["failed"] += 1
            # The batch is not acked until every line is written: retried until then, or
            # until the stop's abort cancels the sink (then nothing of it is committed).
            await self.write_dead_letter(dead_letter_line(
                group=self.group_id, topic=str(row.get("_topic", self.topic.topic)),
                partition=int(row.get("_partition", -1)), offset=int(row.get("_offset", -1)),
                timestamp=int(row.get("_timestamp", 0)), key=None,
                value=json.dumps(row, default=str).encode(), headers=(),
                processor=self.topic.processor, exc=error, attempts=1,
                extra={"sink": sink.name, "sink_type": kind, "status": status,
                       "response_body": body_head},
            ), _sleep_on)
        logger.warning("%s: %d row(s) refused by sink %r with status %d; dead-lettered to %s",
                       self.label, len(rows), sink.name, status,
                       self.failure.settings.dead_letter_places())

    async def write_dead_letter(self, line: str, sleep: Sleep) -> bool:
        """Write one dead-letter line durably, then (when configured) produce it to the
        dead-letter topic and wait for ``acks=all``; False if ``sleep`` is interrupted
        first.

        A failed write (a full disk: ENOSPC, EFBIG; EIO; a broker outage) is not a fact
        about the message: it is retried with backoff, never skipped, and shown as
        :attr:`dead_letter_error` until a write succeeds. The message stays uncommitted.
        The file goes first: it is local, and an operator sees the failure with ``kstage
        dlq show`` while the broker is out; the topic is retried alone after that.
        """
        if self.dead_letters is not None and not await self._retried(
                self.dead_letters.write, line, sleep,
                f"the dead-letter file {self.dead_letters.path}"):
            return False
        if self.dead_letter_topic is not None and not await self._retried(
                self.dead_letter_topic.write, line, sleep,
                f"the dead-letter topic {self.dead_letter_topic.topic}"):
            return False
        self.stats["dead_lettered"] += 1
        return True

    async def _retried(self, write: Callable[[str], Any], line: str, sleep: Sleep,
                       where: str) -> bool:
        """``await write(line)`` until it succeeds (True) or ``sleep`` is interrupted."""
        attempt = 0
        while True:
            try:
                await write(line)
            except (OSError, KafkaError) as exc:
                delay = backoff_s(attempt, *_DEAD_LETTER_BACKOFF_S)
                why = exc if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
                self.dead_letter_error = f"cannot write {where}: {why}"
                logger.warning("%s: %s; retrying in %.1fs", self.label,
                               self.dead_letter_error, delay)
                if not await sleep(delay):
                    return False
                attempt += 1
                continue
            if self.dead_letter_error is not None:
                logger.info("%s: %s is writable again", self.label, where)
                self.dead_letter_error = None
            return True


__all__ = ["FILTERED", "BoundSink", "Processed", "Record", "RecordLike", "RecordPipeline",
           "bound_sinks",
           "key_decoder", "no_wait", "value_decoder"]
