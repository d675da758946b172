"""The worker actor: one aiokafka consumer for one (group, topic), end to end.

A worker runs four tasks in one ``asyncio.TaskGroup``, talking through mailboxes::

    fetch  --inbox-->  process  --outbox-->  sink  --ack-->  commit
    (getmany)          (decode, transform,    (durable      (contiguous
                        failure policy)        write)         offsets)

* **fetch** (:class:`~actors.worker.fetcher.Fetcher`): the consumer's reads, the
  in-flight window and pausing.
* **process** (:class:`~actors.worker.process.ProcessLoop`): batches in offset order
  through the record pipeline (:class:`~actors.worker.pipeline.RecordPipeline`: decode,
  transform, failure policy), each partition batch handed to the sink as a
  :class:`SinkBatch` tracked by the offset tracker; a retry wait parks its partition.
* **sink** (:func:`actors.sinks.run_sink` per sink, fed by
  :func:`actors.sinks.run_fanout`): writes batches in order and acks each once every
  sink acked it.
* **commit** (:class:`~actors.worker.committer.Committer`): per commit mode, only acked,
  contiguous offsets; also on revoke (:class:`~actors.worker.rebalance.Rebalance`).

They share one flow state (:class:`~actors.worker.flow.Flow`: inbox, in-flight window,
room and progress, retry lanes, the assignment's generations and the fence); none of
them gets the worker. They are built once, when what they need exists
(:mod:`actors.worker.parts`: the pipeline with the running processor, the rest once the
consumer started and the sinks are open); before its run the worker holds only what its
status needs.

Revoke: the drain of a revoked partition's work is bounded by half the rebalance timeout,
then what is left is fenced: its batches are cancelled before or during their write
(:class:`actors.sinks.Fence`), batches fetched before the revoke are dropped, and nothing
of the partition is written after the revoke returned. A lost membership (no heartbeat
answered for a session) fences every partition at once, without a drain or a commit, and
rejoins: a fifth task, the membership watch (:meth:`Rebalance.watch`).

Stopping (:mod:`actors.lifecycle`): :meth:`Worker.stop` ends the fetch loop; the END
sentinel then flows down the pipeline, every loop finishes its queue, and a final commit
follows (phase 1).
Cancelling :meth:`Worker.run` (phase 2) abandons work in progress: only what the sink
had already acked is committed, never the cancelled work.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from actors.codecs.avro import AvroDecoder
from actors.codecs.by_id import SchemaIdDecoder
from actors.codecs.schema_registry import SchemaRegistry
from actors.control import TopicControl
from actors.failure import Sleep
from actors.kafka import build_consumer, coordinator_known
from actors.lifecycle import Lifecycle
from actors.log_bounds import FetchedBounds, LogBounds
from actors.metrics import Metrics
from actors.resources import Resources
from actors.sink_health import SinkHealth, sinks_reason
from actors.sinks import FanOutSink, Sink, SinkBatch, build_sink, run_fanout
from actors.tokens import token_errors
from actors.worker import report
from actors.worker.bound import BoundSink, bound_sinks
from actors.worker.commit_policies import commit_policy
from actors.worker.flow import Flow
from actors.worker.known_schema import give_latest_schema
from actors.worker.opening import open_sink, start_consumer
from actors.worker.parts import WorkerParts, assemble, build_pipeline
from actors.worker.pipeline import RecordPipeline
from actors.worker.start_from import StartRegistry
from actors.worker_status import WorkerStatus
from processors.base import Processor
from settings.models import GroupSettings, Settings, SinkSettings, TopicSettings

logger = logging.getLogger(__name__)

ConsumerFactory = Callable[[Settings, GroupSettings, str, str], AIOKafkaConsumer]
"""Builds a worker's unstarted consumer: (settings, group, bootstrap, client suffix)."""


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The first exception of ``group`` (nested groups searched) but cancellations."""
    for exc in group.exceptions:
        found = _first_error(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if found is not None and not isinstance(found, asyncio.CancelledError):
            return found
    return None


class Worker:
    """Consumes one topic in one group and lands its messages in the topic's sinks (one,
    or several for a fan-out: :mod:`actors.sinks.fanout`).

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
        starts: the process run's ``start_from`` registry (the master's, shared by
            every incarnation; a fresh one by default).
        consumer_factory, sink_factory: build the (unstarted) consumer and each sink, as
            :func:`~actors.kafka.build_consumer` and :func:`~actors.sinks.build_sink` do
            (the defaults); a test hands its own.
        resources: the process's shared resources for its sinks (the SparkActor).
        control: the topic's operator state, the master's (survives restarts): while
            paused, nothing more is fetched (:mod:`actors.control`).
        log_bounds: partitions' log start and high-water mark at assignment (default: a
            short-lived consumer of ``bootstrap``; :mod:`actors.worker.sink_offsets`).
        registry: the schema registry that gives ``schema_rows`` its subject's latest
            schema at start (:mod:`actors.worker.known_schema`).
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
        avro: SchemaIdDecoder | None = None,
        avro_keys: AvroDecoder | None = None,
        metrics: Metrics | None = None,
        starts: StartRegistry | None = None,
        consumer_factory: ConsumerFactory = build_consumer,
        sink_factory: Callable[[SinkSettings], Sink] = build_sink,
        resources: Resources | None = None,
        control: TopicControl | None = None,
        log_bounds: LogBounds | None = None,
        registry: SchemaRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.group = group
        self.topic = topic
        self.group_id = settings.group_id(group)
        self.label = f"{self.group_id}/{topic.topic}#{incarnation}"
        self._processor_cls = processor_cls
        self._bootstrap = bootstrap
        self._consumer_factory = consumer_factory
        self._sink_factory = sink_factory
        self._resources = resources
        self._registry = registry
        self._sleep, self._avro, self._avro_keys = sleep, avro, avro_keys
        self._log_bounds = log_bounds
        self._on_drained = (None if not drain else (lambda: None) if on_drained is None
                            else functools.partial(on_drained, self))
        self.drain = drain
        self.stats = {"consumed": 0, "processed": 0, "failed": 0, "retried": 0,
                      "dead_lettered": 0, "filtered": 0, "committed": 0, "paused": 0}
        self.metrics = metrics
        self.starts = starts if starts is not None else StartRegistry()
        self.restarts = incarnation
        self._policy = commit_policy(group.commit)
        self.flow = Flow(owns_offsets=self._policy.owns_offsets, control=control,
                         label=self.label)
        self.lifecycle = Lifecycle(self.label)
        # Each sink's health, by name (a topic's sinks: one, or several for a fan-out).
        self._sink_health = {named.name: SinkHealth(settings.supervisor.sink_unready_after_s)
                             for named in topic.named_sinks()}
        self._parts: WorkerParts | None = None  # built once in run (actors/worker/parts.py)
        # Why the brokers refuse this client while the consumer starts (a restarted
        # worker retries); the rebalance listener's once the parts exist.
        self._start_problem: str | None = None
        self._sink_open = False
        self.leaving_group = False  # consumer.stop() in progress (waits out a rebalance)

    def __repr__(self) -> str:
        flow = self.flow
        return (f"<Worker {self.label} {self.lifecycle} assigned="
                f"{sorted(tp.partition for tp in flow.assigned)} gen={flow.generation} "
                f"in_flight={flow.in_flight} lanes={len(flow.lanes)}>")

    @property
    def parts(self) -> WorkerParts:
        """The running worker's parts (RuntimeError before :meth:`run` built them)."""
        if self._parts is None:
            raise RuntimeError(f"{self.label}: no parts yet: its run has not started its "
                               "consumer")
        return self._parts

    @property
    def in_flight(self) -> int:
        """Messages fetched and not yet acked or dropped (the flow's)."""
        return self.flow.in_flight

    @property
    def task_group(self) -> asyncio.TaskGroup | None:
        """The task group of the worker's loops while they run (None otherwise)."""
        return None if self._parts is None else self._parts.rebalance.tasks

    @property
    def waiting_for(self) -> str | None:
        """Why processing waits instead of progressing (e.g. a registry 404 window)."""
        if self._parts is None:
            return None
        pipeline = self._parts.pipeline
        return pipeline.waiting_for or pipeline.screen.waiting_for

    @property
    def dead_letter_error(self) -> str | None:
        """Why the last dead-letter write failed (None: it did not)."""
        return None if self._parts is None else self._parts.pipeline.dead_letters.error

    def snapshot(self) -> WorkerStatus:
        """State for metrics and readiness; call on the event loop."""
        parts = self._parts
        control = self.flow.control
        consumer = None if parts is None else parts.consumer
        rebalance = None if parts is None else parts.rebalance
        joined = rebalance is not None and rebalance.joined.is_set()
        return {
            "paused": control is not None and control.paused,
            "paused_at": None if control is None else control.paused_at,
            "paused_by": None if control is None else control.paused_by,
            # Not counted before the first assignment: the group join is /readyz's.
            "fetch_idle_s": time.monotonic() - parts.fetcher.turned_at
            if parts is not None and joined else 0.0,
            "group": self.group_id, "topic": self.topic.topic, "label": self.label,
            "stats": dict(self.stats), "restarts": self.restarts,
            "in_flight": self.in_flight,
            "partitions": [] if parts is None else report.partitions(
                self.flow, parts.committer.offsets, parts.consumer,
                parts.fetcher.end_offsets, self._sink_health, self.topic.topic),
            "paused_partitions": len(consumer.paused()) if consumer is not None else 0,
            "joined": joined, "sink_open": self._sink_open,
            "coordinator_known": self.coordinator_reachable(),
            "membership_lost": None if rebalance is None else rebalance.lost,
            "security_problem": self._start_problem if rebalance is None
            else rebalance.security_problem,
            "token_problem": "; ".join(token_errors()) or None,
            "topic_missing": None if rebalance is None else rebalance.topic_missing,
            "refused": self.flow.refusals(),  # partitions a table holds past their end
            "waiting_for": self.waiting_for,
            "sink_error": self.sink_error(),
            "sinks": {name: health.reason() for name, health in self._sink_health.items()},
            "dead_letter_error": self.dead_letter_error,
            # start_from at this process's start: per partition, the messages skipped
            # (latest) or read again (earliest); empty with committed.
            "start_from_counts": self.starts.counts(self.group_id, self.topic.topic),
        }

    def coordinator_reachable(self) -> bool:
        """Whether the consumer knows its group coordinator (see
        :func:`actors.kafka.coordinator_known`)."""
        return self._parts is None or coordinator_known(self._parts.consumer)

    def status(self) -> dict[str, int]:
        """Counters for the status line: processed, failed, commits, in-flight, lag."""
        total = 0
        parts = self._parts
        if parts is not None:  # nothing assigned before
            for tp in self.flow.assigned:
                hw = report.high_water(parts.consumer, parts.fetcher.end_offsets, tp)
                total += report.lag(parts.committer.offsets, tp, hw) or 0
        return {**self.stats, "in_flight": self.in_flight, "lag": total}

    def abandoned(self) -> list[str]:
        """The work fetched but not committed, per partition (empty: nothing), for a stop
        that had to cancel this worker (see :meth:`Flow.abandoned`); nothing before its
        consumer started."""
        parts = self._parts
        return [] if parts is None else self.flow.abandoned(parts.committer.offsets)

    # -- lifecycle -------------------------------------------------------------------

    def stop(self) -> None:
        """Phase 1 of a stop: fetch no more; drain, commit and return from :meth:`run`
        (see :mod:`actors.lifecycle`)."""
        self.lifecycle.stopping()
        self.flow.stop_intake()

    @property
    def should_stop(self) -> bool:
        return self.flow.should_stop

    async def run(self) -> None:
        """Run until stopped (returns) or crashed (raises); cancel it to abort (phase 2
        of a stop). Runs once."""
        with self.lifecycle.running():
            await self._run()

    # -- the parts (actors/worker/parts.py) ------------------------------------------

    def pipeline_for(self, processor: Processor) -> RecordPipeline:
        """The topic's record pipeline with the running ``processor`` (the run's first
        part: the sinks dead-letter the rows they refuse through it)."""
        tracing = None if self._resources is None else self._resources.tracing
        return build_pipeline(
            settings=self.settings, group=self.group, topic=self.topic,
            processor=processor, policy=self._policy, flow=self.flow, stats=self.stats,
            label=self.label, bootstrap=self._bootstrap, sleep=self._sleep,
            avro=self._avro, avro_keys=self._avro_keys, tracing=tracing)

    def assemble(self, consumer: AIOKafkaConsumer, sinks: list[BoundSink],
                 pipeline: RecordPipeline, tasks: asyncio.TaskGroup) -> WorkerParts:
        """Build the parts of this worker, once: its ``consumer`` started, its ``sinks``
        open, ``tasks`` the task group its loops run in."""
        if self._parts is not None:
            raise RuntimeError(f"{self.label}: its parts are built once")
        self._parts = assemble(
            consumer=consumer, sinks=sinks, pipeline=pipeline, tasks=tasks,
            policy=self._policy, flow=self.flow, settings=self.settings, group=self.group,
            topic=self.topic.topic, label=self.label, stats=self.stats, starts=self.starts,
            healths=self._sink_health, metrics=self.metrics, on_drained=self._on_drained,
            bounds=self._log_bounds or FetchedBounds.of(
                self.settings.kafka, self._bootstrap, self.topic.topic))
        return self._parts

    async def _run(self) -> None:
        processor = self._processor_cls(self.topic.options)
        pipeline = self.pipeline_for(processor)
        sinks = bound_sinks(self.settings, self.topic, self._processor_cls, label=self.label,
                            build=self._sink_factory,
                            refuse=pipeline.dead_letters.refuser, health=self._sink_health.get,
                            group=self.group_id, resources=self._resources,
                            processor=processor)
        await processor.start()
        try:
            if processor.columns_from_schema:
                await give_latest_schema(self._registry, self.topic, processor, self.label)
            async with contextlib.AsyncExitStack() as opened:  # closes the sinks it opened
                for bound in sinks:
                    if not await open_sink(bound.sink, self.flow, self.label,
                                           self._starting):
                        return  # stopped before it opened: nothing consumed
                    opened.push_async_callback(bound.sink.close)
                self._sink_open = True
                consumer = await self._start_consumer()
                if consumer is None:
                    return  # stopped while waiting for the brokers
                try:
                    await self._run_loops(consumer, sinks, pipeline)
                finally:
                    await asyncio.shield(self._close_consumer(consumer))
        finally:
            try:
                await processor.stop()
            finally:
                await pipeline.close()  # its dead-letter producer, its child processes

    def _starting(self, problem: str | None) -> None:
        self._start_problem = problem  # in /readyz until the worker joins its group

    async def _start_consumer(self) -> AIOKafkaConsumer | None:
        """A started consumer (:func:`~actors.worker.opening.start_consumer`: the brokers
        out of reach are waited out; a refused login is exit 2 at the process's start);
        None when stopped meanwhile."""
        return await start_consumer(
            lambda: self._consumer_factory(self.settings, self.group, self._bootstrap,
                                           self.topic.topic),
            self.flow, self.label, self._starting, restarted=self.restarts > 0,
            bootstrap=self._bootstrap)

    async def _run_loops(self, consumer: AIOKafkaConsumer, sinks: list[BoundSink],
                         pipeline: RecordPipeline) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                parts = self.assemble(consumer, sinks, pipeline, tg)
                consumer.subscribe([self.topic.topic], listener=parts.rebalance)
                logger.info("%s: started, joining group %s", self.label, self.group_id)
                tg.create_task(parts.fetcher.run(consumer), name=f"{self.label}:fetch")
                tg.create_task(parts.process.run(consumer, tg), name=f"{self.label}:process")
                tg.create_task(self._sink_loop(parts), name=f"{self.label}:sink")
                tg.create_task(parts.committer.run(parts.sink_done),
                               name=f"{self.label}:commit")
                tg.create_task(parts.rebalance.watch(consumer),
                               name=f"{self.label}:membership")
        except BaseExceptionGroup as group:
            # Surface the first real error to the supervisor, not the group wrapper (nor
            # the sink loop's own: a FatalError from a write must stay a FatalError).
            exc = _first_error(group)
            if exc is not None:
                raise exc from None
            raise

    async def _close_consumer(self, consumer: AIOKafkaConsumer) -> None:
        """Commit what the sink acked (never cancelled work), then leave the group."""
        if self._parts is not None:
            try:
                async with asyncio.timeout(10):
                    await self._parts.committer.stopping()
            except (TimeoutError, KafkaError) as exc:
                logger.warning("%s: final commit failed: %s", self.label, exc)
        self.leaving_group = True
        try:
            async with asyncio.timeout(10):
                await consumer.stop()
        except TimeoutError:
            logger.warning("%s: consumer did not stop within 10s", self.label)
        logger.info("%s: stopped (%s)", self.label, self.stats)

    # -- sink and acks ---------------------------------------------------------------

    async def _sink_loop(self, parts: WorkerParts) -> None:
        committer = parts.committer

        def on_ack(batch: SinkBatch) -> None:
            entry = batch.entry
            if entry.cancelled:  # fenced on revoke: counted out of flight there
                return
            committer.acked(entry)
            self.flow.acked(entry.count)

        try:
            metric = None if self.metrics is None else self.metrics.sink_write_seconds
            await run_fanout(
                [FanOutSink(bound.name, bound.sink, self._sink_health[bound.name],
                            None if metric is None else metric.labels(
                                self.group_id, self.topic.topic, bound.name).observe)
                 for bound in parts.sinks],
                parts.outbox, on_ack, label=self.label, fence=self.flow.fence)
        finally:
            parts.sink_done.set()
            committer.sink_finished()

    def sink_error(self) -> str | None:
        """Why the sinks are not ready (None: they are): :func:`sinks_reason`."""
        return sinks_reason(self._sink_health)


__all__ = ["Worker"]
