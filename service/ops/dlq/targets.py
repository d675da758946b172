"""A configured topic's record pipeline and sinks, as ``kstage dlq replay`` runs them.

A replay rebuilds each message (key, value and headers from base64), decodes it
through the worker's own record pipeline (:mod:`actors.worker.pipeline`: the topic's
``format``/``key_format``, Avro through the configured schema registry), runs the
processor the **given** configuration names for the topic (so a fixed processor or a
fixed config replays the failures) and writes the rows to the topic's sinks (every one
of a fan-out), bound as the worker binds them (the processor's columns and table for the
spark and jdbc sinks; rows a sink refuses are dead-lettered again); the line is marked
once the writes are durable (:class:`Handed`). Lines of a sink's permanent refusal (they
carry ``sink``, the sink's name; their value is the refused row) are written again as
they are to that sink only (the topic's other sinks had the row); a sink the topic no
longer has skips the line. The topic's ``filter`` applies, as in the worker: a line
whose message the filter now keeps from the processor gives no rows and is marked
replayed (done, as the worker would commit it), counted as filtered; replay means "do
what the service would do with this message now", and the filter is part of that.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from actors.codecs.avro import AvroDecoder, load_schema
from actors.codecs.by_id import REGISTRY_FORMATS
from actors.codecs.registries import decoder_for
from actors.deadletters.topic import DeadLetterTopic
from actors.failure import FailurePolicy
from actors.resources import Resources
from actors.worker.bound import BoundSink, bound_sinks
from actors.worker.pipeline import RecordPipeline, no_wait
from actors.worker.records import Collect, Record
from processors.base import Processor
from service.ops.lag import bootstrap_of, connection_kwargs
from settings.models import GroupSettings, Settings, TopicSettings


def from_b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


@dataclass(slots=True)
class Handed:
    """One letter handed to its sinks: why it was skipped (None: replayed once its
    writes are durable), and its writes."""

    skipped: str | None = None
    writes: list[asyncio.Task[None]] = field(default_factory=list)

    async def durable(self, flush_soon: Callable[[], None]) -> str | None:
        """Wait until every write is durable (raises a write's error); ``flush_soon``
        is called while waiting, as the worker does when its pipeline is full, so a
        micro-batching sink (spark, jdbc) writes now rather than after its
        ``flush_max_interval_s``."""
        for write in self.writes:
            while not write.done():
                flush_soon()
                await asyncio.wait([write], timeout=0.05)
        for write in self.writes:
            await write
        return self.skipped


class Target:
    """A configured topic's record pipeline and sink (bound as the worker binds it: the
    processor's columns and table, the settings, refused rows dead-lettered), started on
    first use."""

    def __init__(self, settings: Settings, group: GroupSettings, topic: TopicSettings,
                 cls: type[Processor], registry: Any, id_type: str,
                 resources: Resources) -> None:
        self._started = self._open = False
        reader = load_schema(topic.reader_schema) if topic.reader_schema else None
        label = f"dlq replay {settings.group_id(group)}/{topic.topic}"
        # Failures are not retried here (a walk without the policy raises them): a line
        # that fails again stays unreplayed.
        failure = topic.failure or group.failure
        self.pipeline = RecordPipeline(
            topic=topic, processor=cls(topic.options), group_id=settings.group_id(group),
            label=label, failure=FailurePolicy(failure, no_wait),
            avro=None if registry is None or topic.format not in REGISTRY_FORMATS else
            decoder_for(topic.format, registry, settings.schema_registry,  # type: ignore[arg-type]
                        reader_schema=reader, validate=topic.validate_schema,
                        budget_s=topic.validate_budget_s),
            avro_keys=AvroDecoder(registry, id_type) if registry is not None else None,
            # rows the sinks refuse again go to the dead-letter topic too
            dead_letter_topic=None if failure.dead_letter_topic is None else DeadLetterTopic(
                failure.dead_letter_topic, bootstrap_of(settings),
                f"{settings.kafka.client_id}-dlq", connection_kwargs(settings)))
        self.processor = self.pipeline.processor
        self.sinks: dict[str, BoundSink] = {
            bound.name: bound for bound in bound_sinks(settings, topic, cls, label=label,
                                                       refuse=self.pipeline.dead_letters.refuser,
                                                       group=settings.group_id(group),
                                                       resources=resources)}
        self._opened: set[str] = set()
        self._stack: AsyncExitStack | None = None
        self.holding = False  # the sinks gather every row handed over (hold_flushes)

    async def start(self, stack: AsyncExitStack) -> None:
        """Start the processor (once; stopped by ``stack``, which closes the sinks opened
        on first use too)."""
        self._stack = stack
        if not self._started:
            await self.processor.start()
            self._started = True
            stack.push_async_callback(self.processor.stop)
            stack.push_async_callback(self.pipeline.close)  # dead-letter topic, children

    async def _sink(self, name: str) -> BoundSink:
        """The sink ``name``, opened on first use (closed by the stack of :meth:`start`)."""
        bound = self.sinks[name]
        if name not in self._opened:
            await bound.sink.open()
            self._opened.add(name)
            assert self._stack is not None  # noqa: S101 - start() comes first
            self._stack.push_async_callback(bound.sink.close)
            if self.holding:
                bound.sink.hold_flushes()
        return bound

    def hold(self) -> None:
        """The replay hands over letters without waiting: the sinks gather them into one
        write (one append per table) until :meth:`release`."""
        if not self.holding:
            self.holding = True
            for name in self._opened:
                self.sinks[name].sink.hold_flushes()

    def release(self) -> None:
        """Every letter was handed over: the sinks write what they gathered now."""
        if self.holding:
            self.holding = False
            for name in self._opened:
                self.sinks[name].sink.release_flushes()

    def flush_soon(self) -> None:
        for name in self._opened:
            self.sinks[name].sink.flush_soon()

    async def replay(self, rec: dict[str, Any]) -> Handed:
        """Decode, transform and hand one dead-lettered message to every sink of its
        topic (raises on failure; the writes' errors come from :meth:`Handed.durable`); a
        row one sink refused goes to that sink only, as it is (the others had it)."""
        key, value = from_b64(rec.get("key")), from_b64(rec.get("value"))
        if "sink" in rec:  # the sink refused this row for good: offer it again as it is
            name = str(rec["sink"])
            if name not in self.sinks:
                return Handed(f"refused by sink {name!r}, which topic {rec.get('topic')!r} "
                              f"no longer has (its sinks: {', '.join(self.sinks)})")
            return Handed(writes=[await self._write(await self._sink(name),
                                                    [json.loads(value or b"null")])])
        record = Record(str(rec["topic"]), int(rec["partition"]), int(rec["offset"]),
                        int(rec.get("timestamp") or 0), key, value,
                        tuple((str(k), from_b64(v)) for k, v in rec.get("headers") or ()),
                        int(rec.get("timestamp_type", -1)))
        await self.pipeline.load_schemas([record])  # raises what the registry answered
        stats = self.pipeline.stats
        filtered = stats["filtered"]
        route = Collect()
        await self.pipeline.walk([record], route, policy=False)
        if stats["filtered"] > filtered:  # the topic's filter keeps it out: no write
            return Handed()
        # each its own list: a sink may empty the one it gets
        return Handed(writes=[await self._write(await self._sink(name), list(route.rows))
                              for name in self.sinks])

    async def _write(self, bound: BoundSink, rows: list[Any]) -> asyncio.Task[None]:
        """Hand ``rows`` to the sink: the write, durable once it is done. A pipelined
        sink (:attr:`SinkCapabilities.pipelined`: it keeps concurrent writes in order and
        a held one gathers them into one append) gets it at once; any other sink gets one
        write at a time, as the worker's sink loop drives it (a jsonl sink's two writes
        at once land in either order), so the letters of a partition land in order."""
        write = asyncio.ensure_future(bound.sink.write(rows))
        if bound.sink.capabilities.pipelined:
            await asyncio.sleep(0)  # the write reaches its sink before the next letter
        else:
            await asyncio.wait([write])  # its error is raised by Handed.durable
        return write
