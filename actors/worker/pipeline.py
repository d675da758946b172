"""The record pipeline: decode → transform → failure policy → rows or a dead-letter line.

One walk of a batch (:meth:`RecordPipeline.walk`), called by the worker's process loop,
by ``kstage dlq replay``, by the plugin test kit's runners (:mod:`service.testing`) and
by the benchmarks, so they cannot drift apart. The walk takes a partition batch in offset order
and sends what it made to a :class:`~actors.worker.records.Route`:

* the writer schemas the batch needs are loaded first (:meth:`fetch_schemas`, the
  only registry I/O), waiting out an unreachable registry or a 404 window (worker);
  :meth:`load_schemas` asks once and raises (tools); then the batch is screened
  (:mod:`actors.worker.screen`: the size cap, JSON Schema validation off the loop);
* each record is decoded (key and value, per the topic's ``format``/``key_format``) into
  the :class:`~processors.base.Message` a processor sees, passed through the topic's
  declared filter (:mod:`actors.worker.filters`; a filtered message gives no rows and
  counts in ``filtered``) and transformed (awaited when async). The hot path (sync
  transform, no savepoints, keys as bytes) runs these steps inline, with no coroutine
  per message;
* a record whose processing raised goes to the topic's failure policy
  (:meth:`on_failure`): retried, dead-lettered (durably, retried on a full disk: see
  :mod:`actors.deadletters`), thrown, or abandoned on stop; a failure whose
  retries wait apart parks the rest of the batch (the route's lane);
* rows are shipped as one span per batch, split after every savepoint, or after every
  message when the commit policy says so (``per_message``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from actors.backoff import backoff_s
from actors.codecs.by_id import REGISTRY_FORMATS, SchemaIdDecoder
from actors.codecs.schema_registry import SchemaNotFoundYet
from actors.deadletters.file import dead_letter_line
from actors.deadletters.topic import DeadLetterTopic
from actors.deadletters.writer import DeadLetters
from actors.errors import MessageFailedError
from actors.failure import FailurePolicy, Outcome, Sleep
from actors.record_columns import RecordColumns
from actors.routing import Router
from actors.tracing import Tracing, WalkTrace
from actors.worker.filters import compile_filter
from actors.worker.records import FILTERED, Collect, RecordLike, Route, key_decoder, value_decoder
from actors.worker.screen import Screen, schema_wait
from processors.base import DELETED, Message, Processor, Row
from processors.errors import PoisonMessage, ProcessorError
from settings.models import FailureMode, FailureSettings, FilterSettings, TopicSettings

if TYPE_CHECKING:
    from actors.worker.columns import BatchColumns

logger = logging.getLogger(__name__)

_SCHEMA_BACKOFF_S = (0.5, 30.0)  # retry waits of schemas the registry cannot give yet


class _DeadLetterAbandoned(Exception):
    """The worker stopped while a dead-letter write was being retried."""


async def no_wait(seconds: float) -> bool:
    """For tools: a wait that gives up at once (the caller reports the failure)."""
    return False


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
        avro, avro_keys: decoders of the values' registry format (avro, protobuf,
            json_schema) and of ``key_format: avro`` keys (unless the formats say else).
        savepoints: the commit mode asks processors for savepoints.
        stats: counters to update (``processed``, ``failed``, ``retried``,
            ``dead_lettered`` and ``filtered``).
        dead_letter_topic: also produce dead letters to this topic (after the file, if
            ``dead_letter_path`` names one).
    """

    def __init__(self, *, topic: TopicSettings, processor: Processor,
                 failure: FailurePolicy,
                 group_id: str, label: str = "", sleep: Sleep | None = None,
                 avro: SchemaIdDecoder | None = None, avro_keys: SchemaIdDecoder | None = None,
                 savepoints: bool = False, stats: dict[str, int] | None = None,
                 dead_letter_topic: DeadLetterTopic | None = None) -> None:
        self.topic = topic
        self.failure = failure
        self.group_id = group_id
        self.label = label or group_id
        self.sleep: Sleep = sleep or no_wait
        self.avro = avro if topic.format in REGISTRY_FORMATS else None
        self.avro_keys = avro_keys if topic.key_format == "avro" else None
        self.decode = value_decoder(topic, self.avro)
        self.decode_key = key_decoder(topic, self.avro_keys)
        self.screen = Screen(topic, self.avro, self.label)
        self.record_columns = RecordColumns.of(topic)  # key, headers... added to rows
        self.router = Router(topic.route) if topic.route is not None else None
        self.savepoints = savepoints
        self.decoded = False  # the records are Messages already (the plugin test kit)
        self.filter = compile_filter(topic.filter)
        self.processor = processor
        self.async_transform = inspect.iscoroutinefunction(processor.transform)
        self.deletes = processor.emits_deletes  # each row then says if it is a deletion
        # the writer schema as the value's format gives it (SchemaIdDecoder.writer_and_id)
        self.value_schema: Callable[[bytes], tuple[Any, int | str]] | None = (
            None if self.avro is None or not processor.wants_value_schema
            else self.avro.writer_and_id)
        self.stats = stats if stats is not None else {}
        for name in ("processed", "failed", "retried", "dead_lettered", "filtered"):
            self.stats.setdefault(name, 0)
        self.dead_letters = DeadLetters(
            topic=topic, group_id=group_id, label=self.label, stats=self.stats,
            places=failure.settings.dead_letter_places(),
            path=failure.settings.dead_letter_path, dead_letter_topic=dead_letter_topic)
        # The process's tracer (actors/tracing.py) when tracing is on: the walk then
        # leaves the hot path and spans each message; None costs one check per batch.
        self.tracing: Tracing | None = None
        # Why processing waits instead of progressing (e.g. a registry 404 window), for
        # /readyz; None while it progresses.
        self.waiting_for: str | None = None
        self.columns: BatchColumns | None = None  # see actors.worker.columns.columns_for

    @classmethod
    def for_processor(cls, processor: Processor, *, topic: str = "topic",
                      decode: Callable[[bytes | None], Any] | None = None,
                      filter: FilterSettings | None = None,
                      decoded: bool = False) -> RecordPipeline:
        """A pipeline for ``processor`` alone, outside any configuration (the plugin test
        kit, benchmarks): ``format: json`` values unless ``decode`` is given, keys as
        bytes, the topic's ``filter`` if given, failures thrown (``MessageFailedError``;
        a walk with ``policy=False`` raises them as they are). ``decoded``: the records
        walked are :class:`~processors.base.Message` objects already, walked as is."""
        settings = TopicSettings.model_construct(topic=topic, processor=processor.name,
                                                 filter=filter)
        failure = FailurePolicy(FailureSettings(mode=FailureMode.THROW), no_wait)
        pipeline = cls(topic=settings, processor=processor, failure=failure, group_id="")
        if decode is not None:
            pipeline.decode = decode
        pipeline.decoded = decoded
        return pipeline

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
        keys not decoded, no columns added, no route)."""
        return (not self.async_transform and not self.savepoints and self.decode_key is None
                and not self.decoded and self.record_columns is None and not self.deletes
                and self.value_schema is None and self.router is None)

    # -- decode ----------------------------------------------------------------------

    def message(self, rec: RecordLike) -> Message:
        if self.decoded:
            return rec  # type: ignore[return-value]  # a Message already (for_processor)
        key = rec.key if self.decode_key is None else self.decode_key(rec.key)
        value = self.decode(rec.value)
        schema, schema_id = ((None, None) if self.value_schema is None or rec.value is None
                             else self.value_schema(rec.value))
        return Message(
            rec.topic, rec.partition, rec.offset, rec.timestamp, key,
            value, rec.headers, rec.value, rec.timestamp_type,  # type: ignore[arg-type]
            schema, schema_id,
        )

    async def load_schemas(self, records: Sequence[RecordLike]) -> None:
        """Load the writer schemas ``records`` need, asking once per id; raises what the
        registry answered (tools; the worker waits instead: :meth:`fetch_schemas`)."""
        for decoder, raws in ((self.avro, [r.value for r in records]),
                              (self.avro_keys, [r.key for r in records])):
            if decoder is not None:
                for id_bytes in decoder.missing(raws):
                    await decoder.fetch(id_bytes)

    async def fetch_schemas(self, records: Sequence[RecordLike]) -> bool:
        """Load the writer schemas a batch needs before decoding it (the only registry
        I/O). An unreachable registry is not poison, nor a 404 for an id inside its
        ``not_found_retry_s`` window (issue 11): back off (afresh when the answer changes)
        and retry until it answers, the window ends or the worker stops (then False: the
        batch is abandoned). The ids' windows run together: a batch of many unknown ids
        waits one window. Meanwhile the fetch loop pauses the partitions (no eviction)
        and :attr:`waiting_for` says why."""
        if self.avro is None and self.avro_keys is None:
            return True
        try:
            for decoder, values in ((self.avro, [r.value for r in records]),
                                    (self.avro_keys, [r.key for r in records])):
                if decoder is None:
                    continue
                pending = sorted(decoder.missing(values))
                attempt, unreachable = 0, None  # unreachable: the last round's answer
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
                    if (answer := any(not isinstance(e, SchemaNotFoundYet)
                                      for _, e in waiting)) != unreachable:
                        attempt, unreachable = 0, answer  # outage <-> 404: start afresh
                    wait, self.waiting_for = schema_wait(
                        self.label, decoder, records, values, waiting,
                        backoff_s(attempt, *_SCHEMA_BACKOFF_S))
                    if not await self.sleep(wait):
                        return False
                    pending = [id_bytes for id_bytes, _ in waiting] + untried
                    attempt += 1
        finally:
            self.waiting_for = None
        return True

    # -- the walk --------------------------------------------------------------------

    async def walk(self, records: Sequence[RecordLike], route: Route, *, each: bool = False,
                   failed: Exception | None = None, policy: bool = True) -> bool:
        """Walk one partition batch, in offset order, to ``route`` (see the module doc).

        Args:
            records: the batch (one partition's, in offset order).
            route: where the rows go (:meth:`Route.ship`), how many messages leave
                unshipped (:meth:`Route.drop`), and whether and where a failure waits out
                its retries apart (:meth:`Route.parks`, :meth:`Route.park`).
            each: ship after every message (the ``per_message`` commit policy); else one
                span per batch, split after each savepoint.
            failed: the error of ``records[0]``'s first attempt (a parked batch walked
                again in its lane: its retries wait in place).
            policy: apply the failure policy; False (tools): a failure is raised as it is.

        Returns:
            False when processing must stop: a stop abandoned the batch (the rest was
            dropped); True otherwise (walked to the end, or the rest parked).

        Raises:
            MessageFailedError: the policy says throw (what came before was shipped, the
                rest dropped).
        """
        if (not await self.fetch_schemas(records)
                or (poison := await self.screen.verdicts(records, self.sleep)) is None):
            route.drop(len(records))
            return False
        if self.tracing is None:
            return await self._walk(records, route, each, failed, policy, None, poison)
        with self.tracing.walk(self.group_id, self.topic.processor) as traced:
            return await self._walk(records, route, each, failed, policy, traced, poison)

    async def _walk(self, records: Sequence[RecordLike], route: Route, each: bool,
                    failed: Exception | None, policy: bool, traced: WalkTrace | None,
                    poison: dict[int, PoisonMessage]) -> bool:
        """:meth:`walk`; ``traced``: each message in its span (tracing on); ``poison``:
        the screen's verdicts by index."""
        stats = self.stats
        hot = self.sync and not each and traced is None
        n = len(records)
        rows: list[Row] = []
        start = i = 0  # the first record not shipped; the record at hand
        while i < n:
            savepoint = False
            exc: Exception | None = None
            if traced is not None:
                traced.begin(records[i])
            if failed is not None and i == 0:
                exc = failed
            elif i in poison:
                exc = poison[i]
            elif hot and i == 0 and self.columns is not None and not poison and (
                    mapped := self.columns.rows(records)) is not None:
                stats["processed"] += n
                stats["as_columns"] += n
                await route.ship(mapped, records[-1].offset + 1, n, False)
                return True
            elif hot:
                i, exc = self._rows_into(records, i, rows, poison)
                if exc is None:
                    break
            else:
                try:
                    out, savepoint = await (self.transform(records[i]) if traced is None else
                                            traced.transform(self, records[i]))
                    rows.extend(out)
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # noqa: BLE001 - every processor error goes to policy
                    exc = error
            if exc is not None:
                if not policy:
                    raise exc
                rec = records[i]
                parked = route.parks(exc)
                thrown: MessageFailedError | None = None
                outcome: Outcome | None = None
                result: Any = None
                if not parked:
                    try:
                        outcome, result = await self.on_failure(rec, exc)
                    except MessageFailedError as error:
                        thrown = error
                if parked or thrown is not None or outcome is Outcome.ABANDONED:
                    if not each:  # what came before the failed message
                        stats["processed"] += i - start
                        await route.ship(rows, rec.offset, i - start, False,
                                         trace=traced and traced.shipped(but_last=True))
                    if parked:
                        route.park(records[i:], exc)
                        return True
                    route.drop(n - i)
                    if thrown is not None:
                        raise thrown
                    return False
                if outcome is Outcome.RECOVERED:
                    rows.extend(result[0])
                    savepoint = result[1]
            i += 1
            if traced is not None:
                traced.end()
            if savepoint or each:
                stats["processed"] += i - start
                await route.ship(rows, records[i - 1].offset + 1, i - start, True,
                                 trace=traced and traced.shipped())
                rows, start = [], i
        if start < n:
            stats["processed"] += n - start
            await route.ship(rows, records[-1].offset + 1, n - start, False,
                             trace=traced and traced.shipped())
        return True

    async def rows(self, records: Sequence[RecordLike], *, policy: bool = True) -> list[Row]:
        """The rows of ``records``: one :meth:`walk` to a :class:`Collect` (tools, the
        plugin test kit, the benchmarks)."""
        route = Collect()
        await self.walk(records, route, policy=policy)
        return route.rows

    def _rows_into(self, records: Sequence[RecordLike], i: int, rows: list[Row],
                   poison: dict[int, PoisonMessage]) -> tuple[int, Exception | None]:
        """The hot path: decode, filter and transform ``records[i:]`` into ``rows``,
        inline; stops at the first record that raises or is ``poison``: (its index, the
        error), else (``len(records)``, None)."""
        decode = self.decode
        transform = self.processor.transform
        keeps = self.keeps if self.filter is not None else None
        extend = rows.extend
        n = len(records)
        at = end = min((k for k in poison if k >= i), default=n)
        try:
            for at in range(i, end):
                rec = records[at]
                value = decode(rec.value)
                if keeps is None or keeps(value):
                    extend(transform(Message(  # type: ignore[arg-type]
                        rec.topic, rec.partition, rec.offset, rec.timestamp, rec.key,
                        value, rec.headers, rec.value)))  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - every processor error goes to policy
            return at, exc
        return (n, None) if end == n else (end, poison[end])

    # -- transform -------------------------------------------------------------------

    async def transform_message(self, msg: Message) -> tuple[Sequence[Row], bool]:
        """The processor's rows for ``msg`` (awaited when async), and whether ``msg`` is a
        savepoint (only when the commit mode asks for savepoints); :data:`FILTERED` and
        False when the topic's filter keeps ``msg`` from the processor."""
        if not self.keeps(msg.value):
            return FILTERED, False
        out = self.processor.transform(msg)
        if inspect.isawaitable(out):  # an async transform (or one returning an awaitable)
            out = await out
        if self.router is not None:  # before the columns: the value may be a row
            self.router.tag(out, msg)
        if self.record_columns is not None:
            self.record_columns.add(out, msg)
        for row in out if self.deletes else ():  # not marked: not a deletion
            row.setdefault(DELETED, False)
        savepoint = self.savepoints and self.processor.wants_savepoint(msg)
        return out, savepoint

    async def transform(self, rec: RecordLike) -> tuple[Sequence[Row], bool]:
        """Decode ``rec`` and transform it; see :meth:`transform_message`."""
        return await self.transform_message(self.message(rec))

    # -- failure policy and dead letters ---------------------------------------------

    async def on_failure(self, rec: RecordLike, exc: BaseException) -> tuple[Outcome, Any]:
        """Apply the failure policy to ``rec``, whose processing raised ``exc``.

        Raises:
            MessageFailedError: the policy says throw; the offset must stay uncommitted.
        """
        self.stats["failed"] += 1
        describe = f"{self.group_id}: {rec.topic}[{rec.partition}]@{rec.offset}"

        async def dead_letter(error: BaseException, attempts: int) -> None:
            if self.tracing is not None:
                self.tracing.dead_letter(error, attempts)
            if not await self.dead_letters.write(dead_letter_line(
                group=self.group_id, topic=rec.topic, partition=rec.partition,
                offset=rec.offset, timestamp=rec.timestamp, key=rec.key, value=rec.value,
                headers=rec.headers, processor=self.topic.processor, exc=error,
                attempts=attempts, timestamp_type=rec.timestamp_type,
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

    async def close(self) -> None:
        """Close the dead-letter topic's producer and the decoders' child processes."""
        for decoder in (self.avro, self.avro_keys):
            if decoder is not None:
                await decoder.close()
        if self.dead_letters.dead_letter_topic is not None:
            await self.dead_letters.dead_letter_topic.close()


__all__ = ["RecordPipeline", "no_wait"]
