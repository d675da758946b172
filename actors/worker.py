"""The worker actor: one aiokafka consumer for one (group, topic), end to end.

A worker runs four loops in one ``asyncio.TaskGroup``, talking through mailboxes::

    fetch  --inbox-->  process  --outbox-->  sink  --ack-->  commit
    (getmany)          (decode, transform,    (durable      (contiguous
                        failure policy)        write)         offsets)

* **fetch** owns the consumer's reads. When the pipeline is full (``max_in_flight``
  messages not yet acked, or the inbox full) it pauses every assigned partition and keeps
  polling, so the member keeps heartbeating and never hits ``max_poll_interval_ms``.
* **process** decodes and transforms messages in offset order, applies the failure
  policy, and hands each partition batch to the sink as a :class:`SinkBatch`.
* **sink** (:func:`actors.sinks.run_sink`) writes batches in order and acks them.
* **commit** commits, per commit mode, only offsets whose work the sink acked, only
  contiguous ones, as next-offset (or the consumer position once everything before it
  is done: past a transaction's commit marker); also on partition revoke, after draining.

Revoke: the drain of a revoked partition's work is bounded by half the rebalance timeout,
then what is left is fenced: its batches are cancelled before or during their write
(:class:`actors.sinks.Fence`), batches fetched before the revoke are dropped, and nothing
of the partition is written after the revoke returned.

Stopping: :meth:`Worker.stop_intake` ends the fetch loop; the END sentinel then flows
down the pipeline, every loop finishes its queue, and a final commit follows (phase 1).
Cancelling :meth:`Worker.run` (phase 2) abandons work in progress: only what the sink
had already acked is committed, never the cancelled work.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import json.scanner
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import (
    CommitFailedError,
    ConsumerStoppedError,
    IllegalStateError,
    KafkaError,
    NoOffsetForPartitionError,
)

from actors.deadletter import DeadLetterFile, dead_letter_line
from actors.decoding import DECODERS, KEY_DECODERS
from actors.errors import (
    MessageFailedError,
    NoCommittedOffsetError,
    PermanentSinkError,
)
from actors.failure import FailurePolicy, Outcome, Sleep
from actors.kafka import build_consumer, coordinator_known, rebalance_timeout_ms
from actors.metrics import Metrics
from actors.offsets import Entry, OffsetTracker
from actors.sink_health import SinkHealth
from actors.sinks import END, Fence, SinkBatch, SinkContext, build_sink, run_sink
from processors.avro import AvroDecoder
from processors.base import Message, Processor, Row
from processors.errors import ProcessorError
from processors.schema_registry import SchemaNotFoundYet
from settings.models import CommitMode, GroupSettings, Settings, TopicSettings

logger = logging.getLogger(__name__)

_POLL_MS = 200  # getmany timeout: bounds how late a stop or a drain check is noticed
_INBOX_BATCHES = 2
_DEAD_LETTER_BACKOFF_S = (0.5, 30.0)  # retry waits of a failed dead-letter write


class _DeadLetterAbandoned(Exception):
    """The worker stopped while a dead-letter write was being retried."""


async def _sleep_on(seconds: float) -> bool:
    """A wait no stop interrupts (the sink drains until the stop's abort cancels it)."""
    await asyncio.sleep(seconds)
    return True


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._worker._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._worker._on_assigned(set(assigned))


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The first exception of ``group`` (nested groups searched) that is no
    cancellation."""
    for exc in group.exceptions:
        found = _first_error(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if found is not None and not isinstance(found, asyncio.CancelledError):
            return found
    return None


class Worker:
    """Consumes one topic in one group and lands its messages in one sink.

    Args:
        settings: the whole configuration (for kafka client settings).
        group: the group this worker belongs to.
        topic: the topic this worker consumes.
        processor_cls: the processor class for the topic.
        bootstrap: resolved bootstrap servers.
        drain: report via ``on_drained`` once every assigned partition is processed and
            committed up to its fetch high-water mark.
        on_drained: called once with this worker when drained.
        sleep: interruptible sleep used for retry waits (a fake clock in tests).
        avro: decoder for ``format: avro`` values (and ``key_format: avro`` keys).
        metrics: histograms to observe (batch sizes, sink writes, commits).
    """

    def __init__(
        self,
        *,
        settings: Settings,
        group: GroupSettings,
        topic: TopicSettings,
        processor_cls: type[Processor],
        bootstrap: str,
        drain: bool = False,
        on_drained: Callable[[Worker], None] | None = None,
        sleep: Sleep | None = None,
        incarnation: int = 0,
        avro: AvroDecoder | None = None,
        avro_keys: AvroDecoder | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.group = group
        self.topic = topic
        self.group_id = settings.group_id(group)
        self.label = f"{self.group_id}/{topic.topic}#{incarnation}"
        self._processor_cls = processor_cls
        self._bootstrap = bootstrap
        self._drain = drain
        self._on_drained = on_drained
        self._failure = FailurePolicy(topic.failure or group.failure, sleep or self._sleep)
        self._dead_letters = DeadLetterFile(self._failure.settings.dead_letter_path)
        self._avro = avro if topic.format == "avro" else None
        self._avro_keys = avro_keys if topic.key_format == "avro" else None
        self._decode = self._avro.decode if self._avro else DECODERS[topic.format]
        self._decode_key: Callable[[bytes | None], Any] | None = (
            self._avro_keys.decode if self._avro_keys
            else None if topic.key_format == "bytes" else KEY_DECODERS[topic.key_format])
        self._mode = group.commit.mode
        self._wait_for_ack = group.commit.wait_for_ack
        self._tracker = OffsetTracker(savepoint_only=self._mode is CommitMode.SAVEPOINT)
        self._inbox: asyncio.Queue[Any] = asyncio.Queue(_INBOX_BATCHES)
        self._outbox: asyncio.Queue[Any] = asyncio.Queue(_INBOX_BATCHES)
        self._stop_intake = asyncio.Event()
        self._commit_due = asyncio.Event()
        self._progress = asyncio.Event()
        self._room = asyncio.Event()  # set when the inbox or max_in_flight frees up
        self._sink_done = asyncio.Event()
        self._joined = asyncio.Event()
        self._commit_lock = asyncio.Lock()
        self._assigned: set[TopicPartition] = set()
        self._current_tp: TopicPartition | None = None
        self._in_flight = 0
        self._acked_since_commit = 0
        self._last_commit = time.monotonic()
        self._drained_reported = False
        self._consumer: AIOKafkaConsumer | None = None
        self._processor: Processor | None = None
        self.stats = {"consumed": 0, "processed": 0, "failed": 0, "retried": 0,
                      "dead_lettered": 0, "committed": 0, "paused": 0}
        self.metrics = metrics
        self.restarts = incarnation
        self._sink_open = False
        self._sink_health = SinkHealth(settings.supervisor.sink_unready_after_s)
        self._flush_soon: Callable[[], None] | None = None
        # Why processing waits instead of progressing (e.g. a registry 404 window), for
        # /readyz; None while it progresses.
        self.waiting_for: str | None = None
        self.dead_letter_error: str | None = None  # why the last dead-letter write failed
        self._fence = Fence()
        # Fencing of revoked partitions: every revoke bumps the generation; work fetched
        # in a generation before its partition's last revoke is stale and dropped.
        self._generation = 0
        self._revoked_at: dict[TopicPartition, int] = {}
        self._current_gen = 0
        self._unseeded: set[TopicPartition] = set()  # assigned, committed offset not read
        self._process_ended = False
        # The fetch task while it awaits getmany (see _poll), and whether stop_intake
        # cancelled it there.
        self._poll_task: asyncio.Task[Any] | None = None
        self._poll_given_up = False
        self._fetched_span: dict[TopicPartition, list[int]] = {}  # first, next offset
        self.leaving_group = False  # consumer.stop() in progress (waits out a rebalance)

    def __repr__(self) -> str:
        return f"<Worker {self.label} in_flight={self._in_flight}>"

    def snapshot(self) -> dict[str, Any]:
        """State for metrics and readiness; call on the event loop."""
        consumer = self._consumer
        partitions = []
        for tp in sorted(self._assigned, key=lambda t: t.partition):
            hw = consumer.highwater(tp) if consumer is not None else None
            partitions.append({"partition": tp.partition,
                               "committed": self._tracker.committed(tp),
                               "high_water": hw, "lag": self._lag(tp, hw)})
        return {
            "group": self.group_id, "topic": self.topic.topic, "label": self.label,
            "stats": dict(self.stats), "restarts": self.restarts,
            "in_flight": self._in_flight, "partitions": partitions,
            "paused_partitions": len(consumer.paused()) if consumer is not None else 0,
            "joined": self._joined.is_set(), "sink_open": self._sink_open,
            "coordinator_known": consumer is None or coordinator_known(consumer),
            "waiting_for": self.waiting_for,
            "sink_error": self._sink_health.reason(),
            "dead_letter_error": self.dead_letter_error,
        }

    def status(self) -> dict[str, int]:
        """Counters for the status line: processed, failed, commits, in-flight, lag."""
        lag = 0
        consumer = self._consumer
        if consumer is not None:
            for tp in self._assigned:
                lag += self._lag(tp, consumer.highwater(tp)) or 0
        return {**self.stats, "in_flight": self._in_flight, "lag": lag}

    def _lag(self, tp: TopicPartition, high_water: int | None) -> int | None:
        """The one definition of lag (also ``kstage lag``'s): high-water minus the
        committable offset (everything before it done: the consumer position once a
        partition is drained), else the group's committed offset; None when neither is
        known (never counted from 0)."""
        done = self._tracker.committable(tp)
        if done is None:
            done = self._tracker.committed(tp)
        if high_water is None or done is None:
            return None
        return max(high_water - done, 0)

    def abandoned(self) -> list[str]:
        """The work fetched but not committed, per partition (empty: nothing), for a stop
        that had to cancel this worker; its new owner or next start re-reads it."""
        commits = self._mode not in (CommitMode.NONE, CommitMode.AUTO)
        pending = self._in_flight > 0 or self._tracker.pending_count() > 0
        if not pending and not (commits and self._tracker.to_commit()):
            return []
        parts = []
        spans = sorted(self._fetched_span.items(), key=lambda item: item[0].partition)
        for tp, (first, end) in (spans if commits else ()):
            committed = self._tracker.committed(tp)
            start = first if committed is None else max(committed, first)
            if end > start:
                parts.append(f"{tp.topic}[{tp.partition}] offsets {start}-{end - 1}")
        if self._in_flight > 0:
            parts.append(f"{self._in_flight} message(s) in flight")
        return parts or ["acked work whose commit failed"]

    # -- lifecycle -------------------------------------------------------------------

    def stop_intake(self) -> None:
        """Phase 1 of a stop: fetch no more; drain, commit and return from :meth:`run`."""
        self._stop_intake.set()
        if self._poll_task is not None and not self._poll_given_up:
            self._poll_given_up = True  # _poll takes this cancellation back
            self._poll_task.cancel()

    @property
    def should_stop(self) -> bool:
        return self._stop_intake.is_set()

    async def _sleep(self, seconds: float) -> bool:
        """Sleep that ends early on stop; returns False when interrupted."""
        try:
            await asyncio.wait_for(self._stop_intake.wait(), seconds)
        except TimeoutError:
            return True
        return False

    async def run(self) -> None:
        """Run until stopped (returns) or crashed (raises). Cancel to abort."""
        processor = self._processor = self._processor_cls(self.topic.options)
        sink = build_sink(self.topic.sink)
        sink.bind(SinkContext(
            label=self.label, topic=self.topic.topic, processor=self.topic.processor,
            columns=tuple(self._processor_cls.columns), table=self._processor_cls.table,
            key=tuple(self._processor_cls.key), settings=self.settings,
            health=self._sink_health, refuse=self._sink_dead_letter))
        self._async_transform = inspect.iscoroutinefunction(processor.transform)
        # A micro-batching sink flushes early when this worker cannot send it more rows.
        self._flush_soon = sink.flush_soon
        await processor.start()
        try:
            await sink.open()
            self._sink_open = True
            try:
                consumer = self._consumer = build_consumer(
                    self.settings, self.group, self._bootstrap, self.topic.topic
                )
                await consumer.start()
                try:
                    consumer.subscribe([self.topic.topic], listener=_Listener(self))
                    logger.info("%s: started, joining group %s", self.label, self.group_id)
                    await self._run_loops(sink)
                finally:
                    await asyncio.shield(self._close_consumer())
            finally:
                await sink.close()
        finally:
            await processor.stop()

    async def _run_loops(self, sink: Any) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._fetch_loop(), name=f"{self.label}:fetch")
                tg.create_task(self._process_loop(), name=f"{self.label}:process")
                tg.create_task(self._sink_loop(sink), name=f"{self.label}:sink")
                tg.create_task(self._commit_loop(), name=f"{self.label}:commit")
        except BaseExceptionGroup as group:
            # Surface the first real error to the supervisor, not the group wrapper (nor
            # the sink loop's own: a FatalError from a write must stay a FatalError).
            exc = _first_error(group)
            if exc is not None:
                raise exc from None
            raise

    async def _close_consumer(self) -> None:
        """Commit what the sink acked (never cancelled work), then leave the group."""
        consumer = self._consumer
        if consumer is None:
            return
        try:
            async with asyncio.timeout(10):
                await self._commit()
        except (TimeoutError, KafkaError) as exc:
            logger.warning("%s: final commit failed: %s", self.label, exc)
        self.leaving_group = True
        try:
            async with asyncio.timeout(10):
                await consumer.stop()
        except TimeoutError:
            logger.warning("%s: consumer did not stop within 10s", self.label)
        logger.info("%s: stopped (%s)", self.label, self.stats)

    # -- fetch -----------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        """Fetch batches into the inbox; apply backpressure without risking eviction.

        When the pipeline is full (inbox full or ``max_in_flight`` reached) the loop waits
        for room on an event, holding what it fetched. Short stalls are normal (fetching
        is faster than processing) and cost nothing. Only when the pipeline stays full for
        a good part of ``max_poll_interval_ms`` are the partitions paused; from then on the
        loop calls ``getmany(timeout_ms=0)`` at least every second, which resets the
        consumer's poll timer, so a slow sink never gets the member evicted. (Pausing at
        once would be costly: aiokafka drops a paused partition's prefetched records.)
        """
        consumer = self._consumer
        assert consumer is not None  # noqa: S101
        max_in_flight = self.group.commit.max_in_flight
        max_records = self.group.max_poll_records
        pause_after = min(self.group.max_poll_interval_ms / 4000, 5.0)
        backlog: deque[tuple[TopicPartition, list[Any], int]] = deque()
        inbox = self._inbox
        paused = False
        full_since: float | None = None
        while not self._stop_intake.is_set():
            if self._unseeded:
                await self._seed_committed(consumer)
            while backlog and not inbox.full():
                inbox.put_nowait(backlog.popleft())
            if backlog and self._in_flight < max_in_flight:
                # Keep aiokafka's buffer drained so its next fetch request goes out early
                # (prefetch up to max_in_flight), without blocking: the inbox may free up.
                data = await self._poll(consumer, max_records, 0)
                self._fetched(data, backlog)
                if not data:
                    self._room.clear()
                    try:
                        await asyncio.wait_for(self._room.wait(), 0.005)
                    except TimeoutError:
                        pass
                continue
            if backlog or self._in_flight >= max_in_flight:
                if self._in_flight >= max_in_flight and self._flush_soon is not None:
                    self._flush_soon()  # the rows in flight wait in the sink's next flush
                now = time.monotonic()
                full_since = full_since or now
                if not paused and now - full_since >= pause_after:
                    self.stats["paused"] += 1
                    paused = True
                    logger.info("%s: pipeline full for %.1fs: pausing partitions",
                                self.label, now - full_since)
                if paused:
                    consumer.pause(*consumer.assignment())
                    self._fetched(await self._poll(consumer, max_records, 0), backlog)
                self._room.clear()
                try:
                    await asyncio.wait_for(self._room.wait(), min(pause_after, 1.0))
                except TimeoutError:
                    pass
                continue
            full_since = None
            if paused:
                consumer.resume(*consumer.paused())
                paused = False
            data = await self._poll(consumer, max_records, _POLL_MS)
            if not data:
                await self._advance_to_positions(consumer)
                if self._drain:
                    await self._check_drained()
                continue
            self._fetched(data, backlog)
        for item in backlog:  # fetched, never processed: not committed, re-read later
            self._in_flight -= len(item[1])
        await inbox.put(END)

    def _fetched(self, data: dict[TopicPartition, list[Any]],
                 backlog: deque[tuple[TopicPartition, list[Any], int]]) -> None:
        """Queue fetched batches, tagged with the generation current when their poll
        *returned*: aiokafka's getmany waits out a rebalance and then returns records of
        the new assignment only (records of the old one are discarded), so a poll that
        started before a revoke and returns after the partition came back holds live
        records. Tagged with the generation it started in, they were dropped as stale
        while the position moved past them, and the next commit skipped them: lost
        (seen in the chaos run: ~100-record gaps after a revoke and reassignment)."""
        gen = self._generation
        for tp, records in data.items():
            span = self._fetched_span.setdefault(tp, [records[0].offset, 0])
            span[1] = records[-1].offset + 1
            self._in_flight += len(records)
            self.stats["consumed"] += len(records)
            if self.metrics is not None:
                self.metrics.batch_size.labels(self.group_id, tp.topic).observe(len(records))
            backlog.append((tp, records, gen))

    async def _poll(self, consumer: AIOKafkaConsumer, max_records: int, timeout_ms: int
                    ) -> Any:
        """getmany, given up (empty) on stop: while the group rebalances, aiokafka's
        getmany waits for the new assignment whatever its timeout (up to the rebalance
        timeout of Kafka), and a stop must not wait for a rejoin it does not need.

        :meth:`stop_intake` cancels the fetch task while it awaits here (and only here),
        and the cancellation is taken back: no task or future per poll on the hot path
        (the fetch loop polls with ``timeout_ms=0`` many times a second).
        """
        if self._stop_intake.is_set():
            return {}
        task = asyncio.current_task()
        self._poll_task = task
        try:
            return await consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        except asyncio.CancelledError:
            if not self._poll_given_up or task is None:
                raise
            task.uncancel()  # our own stop, not a cancellation from outside: no data
            return {}
        except NoOffsetForPartitionError as exc:
            parts = ", ".join(str(a) for a in exc.args) or "(unknown)"
            raise NoCommittedOffsetError(
                f"group {self.group_id!r} has no committed offset for {parts} of topic "
                f"{self.topic.topic!r} and auto_offset_reset is 'none': refusing to start"
            ) from exc
        except ConsumerStoppedError:
            self._stop_intake.set()
            return {}
        finally:
            self._poll_task = None
            self._poll_given_up = False

    # -- process ---------------------------------------------------------------------

    async def _process_loop(self) -> None:
        failure: MessageFailedError | None = None
        try:
            while True:
                item = await self._inbox.get()
                self._room.set()
                if item is END:
                    break
                tp, records, gen = item
                if not self._live(tp, gen):  # revoked while queued: the new owner re-reads
                    self._in_flight -= len(records)
                    self._room.set()
                    continue
                if self._wait_for_ack and self._commit_lock.locked():
                    async with self._commit_lock:  # layline's wait_for_ack: no overlap
                        pass
                self._current_tp, self._current_gen = tp, gen
                try:
                    if self._mode is CommitMode.PER_MESSAGE:
                        finished = await self._process_each(tp, records)
                    else:
                        finished = await self._process_batch(tp, records)
                finally:
                    self._current_tp = None
                    self._progress.set()
                if not finished:
                    break
        except MessageFailedError as exc:
            failure = exc
        self._process_ended = True  # no position is committable from now on
        # Normal end, abandon or throw: the sink finishes what it was given first.
        await self._outbox.put(END)
        if failure is not None:
            # throw: commit the work before the failed message, never the message itself.
            await self._sink_done.wait()
            await self._commit()
            raise failure

    def _message(self, rec: Any) -> Message:
        key = rec.key if self._decode_key is None else self._decode_key(rec.key)
        return Message(
            rec.topic, rec.partition, rec.offset, rec.timestamp, key,
            self._decode(rec.value), rec.headers, rec.value,
        )

    async def _fetch_schemas(self, records: list[Any]) -> bool:
        """Load the writer schemas a batch needs before decoding it (the only registry
        I/O). An unreachable registry is not poison, nor is a 404 for an id inside its
        ``not_found_retry_s`` window (issue 11): back off and retry until it answers, the
        window ends or the worker stops (then False: the batch is abandoned, nothing
        committed). Every missing id is asked in each round, so the ids' windows run
        together: a batch of many unknown ids waits one window, not one per id. Meanwhile
        the fetch loop pauses the partitions (no eviction) and :meth:`snapshot` shows why
        in ``waiting_for``."""
        try:
            for decoder, values in ((self._avro, [r.value for r in records]),
                                    (self._avro_keys, [r.key for r in records])):
                if decoder is None:
                    continue
                pending = sorted(decoder.missing(values))
                delay = 0.5
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
                    wait = self._schema_wait(decoder, records, values, waiting, delay)
                    if not await self._sleep(wait):
                        return False
                    pending = [id_bytes for id_bytes, _ in waiting] + untried
                    delay = min(delay * 2, 30.0)
        finally:
            self.waiting_for = None
        return True

    def _schema_wait(self, decoder: AvroDecoder, records: list[Any],
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

    async def _transform(self, rec: Any) -> tuple[Sequence[Row], bool]:
        processor = self._processor
        assert processor is not None  # noqa: S101
        msg = self._message(rec)
        out = processor.transform(msg)
        if self._async_transform:
            out = await out  # type: ignore[misc]
        savepoint = self._mode is CommitMode.SAVEPOINT and processor.wants_savepoint(msg)
        return out, savepoint  # type: ignore[return-value]

    async def _process_batch(self, tp: TopicPartition, records: list[Any]) -> bool:
        """Process one partition batch; False when processing must stop (abandon).

        The rows go to the sink as one entry, split after every message whose processor
        asked for a savepoint (savepoint mode), so a savepoint commits exactly up to it.
        """
        rows: list[Row] = []
        start = 0  # index of the first record not yet shipped
        processor = self._processor
        assert processor is not None  # noqa: S101
        if (self._avro or self._avro_keys) and not await self._fetch_schemas(records):
            self._in_flight -= len(records)
            return False
        sync = (not self._async_transform and self._mode is not CommitMode.SAVEPOINT
                and self._decode_key is None)
        decode = self._decode
        for i, rec in enumerate(records):
            savepoint = False
            try:
                if sync:  # hot path: no coroutine per message
                    rows.extend(processor.transform(Message(  # type: ignore[arg-type]
                        rec.topic, rec.partition, rec.offset, rec.timestamp, rec.key,
                        decode(rec.value), rec.headers, rec.value)))
                else:
                    out, savepoint = await self._transform(rec)
                    rows.extend(out)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - every processor error goes to policy
                try:
                    outcome, result = await self._on_failure(rec, exc)
                except MessageFailedError:
                    await self._ship(tp, rows, rec.offset, i - start, savepoint=False)
                    self._in_flight -= len(records) - i
                    raise
                if outcome is Outcome.ABANDONED:
                    await self._ship(tp, rows, rec.offset, i - start, savepoint=False)
                    self._in_flight -= len(records) - i
                    return False
                if outcome is Outcome.RECOVERED:
                    rows.extend(result[0])
                    savepoint = result[1]
            if savepoint:
                await self._ship(tp, rows, rec.offset + 1, i + 1 - start, savepoint=True)
                rows, start = [], i + 1
        self.stats["processed"] += len(records)
        if start < len(records):
            await self._ship(tp, rows, records[-1].offset + 1, len(records) - start,
                             savepoint=False)
        return True

    async def _process_each(self, tp: TopicPartition, records: list[Any]) -> bool:
        """per_message mode: write, await the ack and commit after every message."""
        if (self._avro or self._avro_keys) and not await self._fetch_schemas(records):
            self._in_flight -= len(records)
            return False
        for i, rec in enumerate(records):
            try:
                out, _ = await self._transform(rec)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001
                try:
                    outcome, result = await self._on_failure(rec, exc)
                except MessageFailedError:
                    self._in_flight -= len(records) - i
                    raise
                if outcome is Outcome.ABANDONED:
                    self._in_flight -= len(records) - i
                    return False
                out = result[0] if outcome is Outcome.RECOVERED else ()
            self.stats["processed"] += 1
            batch = await self._ship(tp, list(out), rec.offset + 1, 1, savepoint=True)
            while not (batch.entry.done or batch.entry.cancelled):
                self._progress.clear()
                await self._progress.wait()
            await self._commit()
        return True

    async def _ship(
        self, tp: TopicPartition, rows: list[Row], next_offset: int, count: int, *,
        savepoint: bool,
    ) -> SinkBatch:
        if self._live(tp, self._current_gen):
            entry = self._tracker.add(tp, next_offset, count, savepoint=savepoint)
        elif self._mode in (CommitMode.NONE, CommitMode.AUTO):
            # Revoked meanwhile, offsets not kstage's (auto-commit may have committed
            # them): the rows are still written, untracked.
            entry = Entry(tp, next_offset, count, savepoint)
        else:
            # Revoked while this batch was processed (e.g. during long retry waits): the
            # partition and its messages belong to its new owner now, which re-reads
            # them: never written here (a late write could overtake newer ones).
            self._in_flight -= count
            self._room.set()
            return SinkBatch(rows, Entry(tp, next_offset, count, savepoint, cancelled=True))
        batch = SinkBatch(rows, entry)
        await self._outbox.put(batch)
        return batch

    def _live(self, tp: TopicPartition, gen: int) -> bool:
        """Work of ``tp`` fetched in generation ``gen`` is still this worker's (in modes
        none/auto, where kstage does not own the offsets, as long as ``tp`` is assigned)."""
        if tp not in self._assigned:
            return False
        return (gen >= self._revoked_at.get(tp, 0)
                or self._mode in (CommitMode.NONE, CommitMode.AUTO))

    async def _on_failure(self, rec: Any, exc: BaseException) -> tuple[Outcome, Any]:
        self.stats["failed"] += 1
        describe = f"{self.group_id}: {rec.topic}[{rec.partition}]@{rec.offset}"

        async def dead_letter(error: BaseException, attempts: int) -> None:
            if not await self._write_dead_letter(dead_letter_line(
                group=self.group_id, topic=rec.topic, partition=rec.partition,
                offset=rec.offset, timestamp=rec.timestamp, key=rec.key, value=rec.value,
                headers=rec.headers, processor=self.topic.processor, exc=error,
                attempts=attempts, extra=getattr(error, "details", None),
            ), self._sleep):
                raise _DeadLetterAbandoned

        retries_before = self._failure.retries
        try:
            return await self._failure.handle(
                exc, lambda: self._transform(rec), dead_letter, describe,
                {"group": self.group_id, "topic": rec.topic, "partition": rec.partition,
                 "offset": rec.offset})
        except _DeadLetterAbandoned:
            return Outcome.ABANDONED, None  # stopped before the line was written
        finally:
            self.stats["retried"] += self._failure.retries - retries_before

    async def _sink_dead_letter(self, rows: list[Row], status: int, body_head: str) -> None:
        """A sink refused rows for good (e.g. HTTP 4xx): dead-letter each, durably, so the
        partition moves on and nothing is lost."""
        what = ("could not send the rows" if status == 0  # e.g. a URL template field missing
                else f"answered {status}")
        error = PermanentSinkError(f"{self.topic.sink.type} sink {what}: {body_head[:200]}")
        for row in rows:
            self.stats["failed"] += 1
            # The batch is not acked until every line is written: retried until then, or
            # until the stop's abort cancels the sink (then nothing of it is committed).
            await self._write_dead_letter(dead_letter_line(
                group=self.group_id, topic=str(row.get("_topic", self.topic.topic)),
                partition=int(row.get("_partition", -1)), offset=int(row.get("_offset", -1)),
                timestamp=int(row.get("_timestamp", 0)), key=None,
                value=json.dumps(row, default=str).encode(), headers=(),
                processor=self.topic.processor, exc=error, attempts=1,
                extra={"sink": self.topic.sink.type, "status": status,
                       "response_body": body_head},
            ), _sleep_on)
        logger.warning("%s: %d row(s) refused by the sink with status %d; dead-lettered to %s",
                       self.label, len(rows), status, self._failure.settings.dead_letter_path)

    async def _write_dead_letter(self, line: str, sleep: Sleep) -> bool:
        """Write one dead-letter line durably; False if ``sleep`` is interrupted first.

        A failed write (a full disk: ENOSPC, EFBIG; EIO) is not a fact about the message:
        it is retried with backoff, never skipped, and shown in :meth:`snapshot` as
        ``dead_letter_error`` until a write succeeds. The message stays uncommitted.
        """
        delay = _DEAD_LETTER_BACKOFF_S[0]
        while True:
            try:
                await self._dead_letters.write(line)
            except OSError as exc:
                self.dead_letter_error = (f"cannot write the dead-letter file "
                                          f"{self._dead_letters.path}: {exc}")
                logger.warning("%s: %s; retrying in %.1fs", self.label,
                               self.dead_letter_error, delay)
                if not await sleep(delay):
                    return False
                delay = min(delay * 2, _DEAD_LETTER_BACKOFF_S[1])
                continue
            if self.dead_letter_error is not None:
                logger.info("%s: the dead-letter file is writable again", self.label)
                self.dead_letter_error = None
            self.stats["dead_lettered"] += 1
            return True

    # -- sink and acks ---------------------------------------------------------------

    async def _sink_loop(self, sink: Any) -> None:
        try:
            observe = None
            if self.metrics is not None:
                observe = self.metrics.sink_write_seconds.labels(
                    self.group_id, self.topic.topic, self.topic.sink.type).observe
            await run_sink(sink, self._outbox, self._on_ack, label=self.label,
                           on_write_seconds=observe, fence=self._fence,
                           health=self._sink_health)
        finally:
            self._sink_done.set()
            self._commit_due.set()

    def _on_ack(self, batch: SinkBatch) -> None:
        entry = batch.entry
        if entry.cancelled:  # fenced on revoke: counted out of flight there
            return
        self._tracker.ack(entry)
        self._in_flight -= entry.count
        self._acked_since_commit += entry.count
        self._room.set()
        if (self._mode is CommitMode.BATCH
                and self._acked_since_commit >= self.group.commit.max_messages) or (
                self._mode is CommitMode.SAVEPOINT and entry.savepoint):
            self._commit_due.set()
        self._progress.set()

    # -- commit ----------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        if self._mode in (CommitMode.NONE, CommitMode.AUTO, CommitMode.PER_MESSAGE):
            return  # nothing periodic: none/auto never, per_message commits inline
        interval = self.group.commit.max_interval_s
        while not self._sink_done.is_set():
            try:
                await asyncio.wait_for(self._commit_due.wait(), interval)
            except TimeoutError:
                pass
            self._commit_due.clear()
            await self._commit()

    async def _commit(self) -> None:
        """Commit every partition's contiguous acked offset (single-flight)."""
        if self._mode in (CommitMode.NONE, CommitMode.AUTO) or self._consumer is None:
            return
        async with self._commit_lock:
            offsets = self._tracker.to_commit()
            if not offsets:
                return
            acked = self._acked_since_commit  # acks arriving during the commit stay counted
            started = time.monotonic()
            try:
                await self._consumer.commit(offsets)
            except (CommitFailedError, IllegalStateError) as exc:
                # A rebalance took partitions away: their new owner replays from the last
                # committed offset (at-least-once); nothing to do here.
                logger.warning("%s: commit of %s rejected: %s", self.label, offsets, exc)
                return
            except KafkaError as exc:
                logger.warning("%s: commit failed, will retry: %s", self.label, exc)
                return
            self._tracker.mark_committed(offsets)
            self._acked_since_commit = max(self._acked_since_commit - acked, 0)
            self._last_commit = time.monotonic()
            self.stats["committed"] += 1
            if self.metrics is not None:
                self.metrics.commit_seconds.labels(self.group_id, self.topic.topic).observe(
                    self._last_commit - started)
            logger.debug("%s: committed %s in %.3fs", self.label,
                         {f"{tp.topic}[{tp.partition}]": o for tp, o in offsets.items()},
                         self._last_commit - started)

    # -- rebalance -------------------------------------------------------------------

    def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        self._assigned = assigned
        self._unseeded = set(assigned)
        self._joined.set()
        parts = sorted(tp.partition for tp in assigned)
        logger.info("%s: assigned partitions %s of %s", self.label, parts, self.topic.topic)

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        """Drain in-flight work of revoked partitions (bounded), commit it, fence the rest.

        The whole callback ends well within the rebalance timeout, so the member is not
        dropped from the group: the drain waits at most half of it, the commit a quarter.
        Work not drained by then is cancelled (never written later, never committed):
        the partitions' new owner re-reads it from the committed offset.
        """
        self._assigned -= revoked
        if not revoked:
            return
        self._generation += 1
        for tp in revoked:
            self._revoked_at[tp] = self._generation
        self._unseeded -= revoked
        parts = sorted(tp.partition for tp in revoked)
        rebalance_s = rebalance_timeout_ms(self.settings, self.group) / 1000
        if self._mode not in (CommitMode.NONE, CommitMode.AUTO):
            timeout = min(self.settings.supervisor.shutdown_grace_s,
                          self.group.max_poll_interval_ms / 2000, rebalance_s / 2)

            def drained() -> bool:
                return self._current_tp not in revoked and all(
                    self._tracker.pending_count(tp) == 0 for tp in revoked)

            try:
                async with asyncio.timeout(timeout):
                    while not drained():
                        self._progress.clear()
                        await self._progress.wait()
            except TimeoutError:
                logger.warning("%s: revoke: in-flight work of %s not drained within %.1fs; "
                               "cancelling it: the new owner re-reads it", self.label, parts,
                               timeout)
            try:
                async with asyncio.timeout(rebalance_s / 4):
                    await self._commit()
            except TimeoutError:
                logger.warning("%s: revoke: commit of %s did not finish within %.1fs",
                               self.label, parts, rebalance_s / 4)
            cancelled = self._tracker.cancel(revoked)
            self._in_flight -= cancelled
            writes = await self._fence.revoke(revoked)
            if cancelled or writes:
                logger.info("%s: revoke: cancelled %d message(s) of partitions %s (%d "
                            "write(s) stopped)", self.label, cancelled, parts, writes)
        else:
            # none/auto: kstage does not own the offsets (auto-commit already committed
            # the position): writes under way finish, or their messages would be lost.
            self._tracker.forget(revoked)
        for tp in revoked:
            self._fetched_span.pop(tp, None)
        self._room.set()
        self._progress.set()
        logger.info("%s: revoked partitions %s", self.label, parts)

    async def _seed_committed(self, consumer: AIOKafkaConsumer) -> None:
        """Read the group's committed offsets of newly assigned partitions: the base of
        their lag until their own work moves it (a restart with nothing to read has lag
        high-water minus committed, as ``kstage lag`` says, not high-water)."""
        gen = self._generation
        for tp in sorted(self._unseeded, key=lambda t: t.partition):
            try:
                offset = await consumer.committed(tp)
            except KafkaError as exc:
                logger.debug("%s: committed offset of %s not read yet: %s", self.label, tp,
                             exc)
                return
            if not self._live(tp, gen) or tp not in self._unseeded:
                continue  # revoked meanwhile
            self._unseeded.discard(tp)
            if offset is not None:
                self._tracker.seed(tp, offset)

    async def _advance_to_positions(self, consumer: AIOKafkaConsumer) -> None:
        """A poll came back empty and nothing is in flight: everything before each
        partition's consumer position is done, so the position is committable (it is past
        a transaction's commit marker, one more than the last record + 1)."""
        if (self._in_flight or self._process_ended or self._stop_intake.is_set()
                or not self._inbox.empty()
                or self._mode in (CommitMode.NONE, CommitMode.AUTO)):
            return
        gen = self._generation
        advanced = False
        for tp in list(self._assigned):
            if self._tracker.pending_count(tp) or self._tracker.committable(tp) is None:
                continue  # work pending, or no offset known yet (advance needs one)
            try:
                async with asyncio.timeout(1):  # a position being reset: try next time
                    position = await consumer.position(tp)
            except (IllegalStateError, KafkaError, TimeoutError):
                continue  # errors of the partition surface from the next poll
            if self._in_flight or not self._live(tp, gen):
                return  # something was fetched or revoked meanwhile
            advanced = self._tracker.advance(tp, position) or advanced
        if advanced and self._mode is CommitMode.PER_MESSAGE:
            await self._commit()  # no commit loop in this mode

    # -- drain -----------------------------------------------------------------------

    async def _check_drained(self) -> None:
        """``--drain``: all assigned partitions processed and committed up to high-water."""
        consumer = self._consumer
        if self._drained_reported or consumer is None or not self._joined.is_set():
            return
        if self._in_flight or not self._inbox.empty():
            if self._flush_soon is not None:
                # A poll came back empty: the rows waiting in the sink's next flush are
                # the last ones for now. --drain ends with them, so flush them now
                # rather than after the sink's interval (flush_max_interval_s).
                self._flush_soon()
            return
        for tp in self._assigned:
            hw = consumer.highwater(tp)
            if hw is None:
                return
            try:
                position = await consumer.position(tp)
            except IllegalStateError:
                return
            if position < hw or self._tracker.pending_count(tp):
                return
            self._tracker.advance(tp, position)  # past a transaction marker: commit it
        await self._commit()
        commits = self._mode not in (CommitMode.NONE, CommitMode.AUTO)
        if commits and self._tracker.to_commit():
            return  # commit failed: try again on the next empty poll
        self._drained_reported = True
        logger.info("%s: drained partitions %s", self.label,
                    sorted(tp.partition for tp in self._assigned))
        if self._on_drained is not None:
            self._on_drained(self)


__all__ = ["Worker"]
