"""A running worker's parts, built once, when what they need exists.

A :class:`~actors.worker.worker.Worker` before its run holds only what its status needs
(the flow, its counters, its sinks' health). :meth:`Worker.run` builds the rest in two
steps, each when its dependencies exist:

* :func:`build_pipeline` once the processor is built (first thing in the run): the topic's
  record pipeline, whose dead letters the sinks are bound with;
* :func:`assemble` once the consumer started and the sinks are open, inside the task
  group of the loops: the :class:`WorkerParts` (committer, rebalance listener, fetcher,
  process loop), each given its collaborators in its constructor; none fills one in later.

A test that drives a part without running the worker builds the parts the same way, with
:meth:`Worker.pipeline_for <actors.worker.worker.Worker.pipeline_for>` and
:meth:`Worker.assemble <actors.worker.worker.Worker.assemble>`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer

from actors.codecs.avro import AvroDecoder
from actors.codecs.by_id import SchemaIdDecoder
from actors.deadletters.topic import DeadLetterTopic
from actors.failure import FailurePolicy, Sleep
from actors.kafka import connection_kwargs, rebalance_timeout_ms
from actors.log_bounds import LogBounds
from actors.metrics import Metrics
from actors.sink_health import SinkHealth
from actors.tracing import Tracing
from actors.worker.bound import BoundSink
from actors.worker.columns import columns_for
from actors.worker.commit_policies import CommitPolicy
from actors.worker.committer import Committer
from actors.worker.fetcher import Fetcher
from actors.worker.flow import Flow
from actors.worker.pipeline import RecordPipeline
from actors.worker.process import ProcessLoop
from actors.worker.rebalance import Rebalance
from actors.worker.start_from import StartRegistry
from processors.base import Processor
from settings.models import GroupSettings, Settings, TopicSettings

_OUTBOX_BATCHES = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerParts:
    """The parts of one running worker (see the module doc)."""

    consumer: AIOKafkaConsumer
    sinks: list[BoundSink]
    pipeline: RecordPipeline
    committer: Committer
    rebalance: Rebalance
    fetcher: Fetcher
    process: ProcessLoop
    outbox: asyncio.Queue[Any]  # shipped batches to the sink task (END last)
    sink_done: asyncio.Event  # set once the sink task finished its queue


def build_pipeline(*, settings: Settings, group: GroupSettings, topic: TopicSettings,
             processor: Processor, policy: CommitPolicy, flow: Flow, stats: dict[str, int],
             label: str, bootstrap: str, sleep: Sleep | None = None,
             avro: SchemaIdDecoder | None = None, avro_keys: AvroDecoder | None = None,
             tracing: Tracing | None = None) -> RecordPipeline:
    """The topic's record pipeline with the running ``processor``: its failure policy
    (retry waits on ``sleep``, default the flow's), the decoders, savepoints if the
    commit mode asks for them, and its dead-letter topic, if the failure settings name
    one."""
    failure = topic.failure or group.failure
    dead_letter_topic = None if failure.dead_letter_topic is None else DeadLetterTopic(
        failure.dead_letter_topic, bootstrap, f"{settings.kafka.client_id}-dlq",
        connection_kwargs(settings.kafka.consumer_config))
    built = RecordPipeline(
        topic=topic, processor=processor, group_id=settings.group_id(group), label=label,
        failure=FailurePolicy(failure, sleep or flow.sleep), sleep=flow.sleep, avro=avro,
        avro_keys=avro_keys, savepoints=policy.savepoints, stats=stats,
        dead_letter_topic=dead_letter_topic)
    if tracing is not None:
        built.tracing = tracing
        if dead_letter_topic is not None:
            dead_letter_topic.tracing = tracing
    return built


def _flush_all(sinks: list[BoundSink]) -> None:
    """Every sink of a fan-out flushes soon (see :meth:`Sink.flush_soon`)."""
    for bound in sinks:
        bound.sink.flush_soon()


def assemble(*, consumer: AIOKafkaConsumer, sinks: list[BoundSink],
             pipeline: RecordPipeline, tasks: asyncio.TaskGroup, policy: CommitPolicy,
             flow: Flow, settings: Settings, group: GroupSettings, topic: str, label: str,
             stats: dict[str, int], starts: StartRegistry,
             healths: Mapping[str, SinkHealth], bounds: LogBounds,
             metrics: Metrics | None = None,
             on_drained: Callable[[], None] | None = None) -> WorkerParts:
    """The parts of a worker whose ``consumer`` started and whose ``sinks`` are open
    (``tasks``: the task group its loops run in). ``on_drained``: ``--drain``, called
    once every assigned partition is processed and committed to its high-water mark."""
    group_id = settings.group_id(group)
    # whole batches as columns, where the topic and its sinks allow them
    pipeline.columns = columns_for(
        pipeline, all(bound.sink.capabilities.arrow_rows for bound in sinks))
    committer = Committer(policy, consumer, label=label, stats=stats, metrics=metrics,
                          metric_labels=(group_id, topic))
    rebalance = Rebalance(
        consumer=consumer, flow=flow, committer=committer, group=group, topic=topic,
        group_id=group_id, starts=starts, label=label,
        rebalance_s=rebalance_timeout_ms(settings, group) / 1000,
        grace_s=settings.supervisor.shutdown_grace_s, healths=list(healths.values()),
        bounds=bounds, sinks=[bound.sink for bound in sinks], tasks=tasks)
    # A micro-batching sink flushes early when this worker cannot send it more rows.
    flush_soon = (sinks[0].sink.flush_soon if len(sinks) == 1
                  else functools.partial(_flush_all, sinks))
    fetcher = Fetcher(
        flow=flow, rebalance=rebalance, committer=committer, flush_soon=flush_soon,
        group=group, topic=topic, group_id=group_id, stats=stats,
        observe_batch=None if metrics is None
        else metrics.batch_size.labels(group_id, topic).observe,
        on_drained=on_drained, label=label)
    outbox: asyncio.Queue[Any] = asyncio.Queue(_OUTBOX_BATCHES)
    sink_done = asyncio.Event()
    process = ProcessLoop(
        flow=flow, pipeline=pipeline, committer=committer, outbox=outbox,
        sink_done=sink_done, stats=stats, wait_for_ack=group.commit.wait_for_ack,
        label=label)
    return WorkerParts(consumer=consumer, sinks=sinks, pipeline=pipeline,
                       committer=committer, rebalance=rebalance, fetcher=fetcher,
                       process=process, outbox=outbox, sink_done=sink_done)


__all__ = ["WorkerParts", "assemble", "build_pipeline"]
