"""How ``kstage dlq replay`` hands a dead-letter line over (:class:`Handler`): through
its topic's processor and sinks (:func:`processor_handler`: the line's topic found in the
given configuration, its :class:`~service.ops.dlq.targets.Target` made on first use),
or, with ``--to-kafka`` (:func:`kafka_handler`), re-producing the original key, value
and headers to the original topic and partition (``send_and_wait`` each), for the
running service to consume.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

from actors.resources import Resources
from actors.topic_patterns import pattern_entry
from processors.registry import for_options
from service.ops.dlq.result import ReplayResult
from service.ops.dlq.targets import Handed, Target, from_b64
from service.ops.lag import bootstrap_of, connection_kwargs
from settings.models import GroupSettings, Settings, TopicSettings


class Handler(abc.ABC):
    """Replays dead-letter records: hands each over (``__call__``), while the sinks
    gather them (:meth:`hold`) until :meth:`release`."""

    @abc.abstractmethod
    async def __call__(self, rec: dict[str, Any]) -> Handed:
        """Hand one dead-letter record over (raises when it cannot be)."""

    def hold(self) -> None:  # noqa: B027 - optional hook
        """Gather what is handed over from now on into as few writes as possible."""

    def release(self) -> None:  # noqa: B027 - optional hook
        """Write what was gathered now."""

    def flush_soon(self) -> None:  # noqa: B027 - optional hook
        """Write now what waits in a micro-batching sink."""


class _Processors(Handler):
    """Replays through each letter's topic's processor and sinks (:class:`Target`)."""

    def __init__(self, handle: Callable[[dict[str, Any]], Awaitable[Handed]],
                 targets: dict[tuple[str, str], Target]) -> None:
        self._handle, self._targets = handle, targets
        self._holding = False

    async def __call__(self, rec: dict[str, Any]) -> Handed:
        return await self._handle(rec)

    def hold(self) -> None:
        self._holding = True
        for target in self._targets.values():
            target.hold()

    def release(self) -> None:
        self._holding = False
        for target in self._targets.values():
            target.release()

    @property
    def holding(self) -> bool:
        return self._holding

    def flush_soon(self) -> None:
        for target in self._targets.values():
            target.flush_soon()


class _ToKafka(Handler):
    def __init__(self, handle: Callable[[dict[str, Any]], Awaitable[str | None]]) -> None:
        self._handle = handle

    async def __call__(self, rec: dict[str, Any]) -> Handed:
        return Handed(await self._handle(rec))


async def processor_handler(settings: Settings, stack: AsyncExitStack,
                             result: ReplayResult | None = None) -> Handler:
    from actors.master import resolve_processors  # loads plugins

    classes = resolve_processors(settings)
    # The replay's SparkActor (spark and jdbc sinks), stopped after the sinks are closed.
    resources = Resources(settings.spark)
    stack.push_async_callback(resources.close)
    registry: Any = None
    if settings.schema_registry is not None:
        from actors.codecs.registries import registry_from_settings

        registry = await stack.enter_async_context(
            registry_from_settings(settings.schema_registry))
    id_type = settings.schema_registry.id_type if settings.schema_registry else "int"
    exact = {(settings.group_id(g), t.topic): (g, t) for g in settings.groups for t in g.topics}
    by_topic: dict[str, list[tuple[GroupSettings, TopicSettings]]] = {}
    for g, t in exact.values():
        by_topic.setdefault(t.topic, []).append((g, t))
    targets: dict[tuple[str, str], Target] = {}

    async def handle(rec: dict[str, Any]) -> Handed:
        # the line's (group, topic); else its topic, when one configured group reads it;
        # else the entry the line's group's topic_pattern makes for it
        found = exact.get((str(rec.get("group")), str(rec.get("topic"))))
        candidates = by_topic.get(str(rec.get("topic")), [])
        found = found or (candidates[0] if len(candidates) == 1 else None)
        found = found or _by_pattern(settings, str(rec.get("group")), str(rec.get("topic")))
        if found is None:
            return Handed("topic not in the configuration")
        group, topic = found
        key = (settings.group_id(group), topic.topic)
        if key not in targets:
            targets[key] = Target(settings, group, topic,
                                   for_options(classes[topic.processor], topic.options),
                                   registry, id_type, resources)
            if handler.holding:
                targets[key].hold()
        target = targets[key]
        await target.start(stack)
        filtered = target.pipeline.stats["filtered"]
        handed = await target.replay(rec)
        if result is not None:
            result.filtered += target.pipeline.stats["filtered"] - filtered
        return handed
    handler = _Processors(handle, targets)
    return handler


def _by_pattern(settings: Settings, group_id: str, topic: str
                ) -> tuple[GroupSettings, TopicSettings] | None:
    """The entry a ``topic_pattern`` of group ``group_id`` makes for ``topic``, if any."""
    for group in settings.groups:
        if settings.group_id(group) == group_id:
            entry = pattern_entry(group, topic)
            if entry is not None:
                return group, entry
    return None


async def kafka_handler(settings: Settings, stack: AsyncExitStack) -> Handler:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_of(settings),
                                client_id=f"{settings.kafka.client_id}-replay",
                                acks="all", **connection_kwargs(settings))
    await producer.start()
    stack.push_async_callback(producer.stop)

    async def handle(rec: dict[str, Any]) -> str | None:
        if "sink" in rec:
            return "a row refused by the sink, not a Kafka message: replay it without --to-kafka"
        partition = rec.get("partition")
        await producer.send_and_wait(
            str(rec["topic"]), value=from_b64(rec.get("value")), key=from_b64(rec.get("key")),
            headers=[(str(k), from_b64(v)) for k, v in rec.get("headers") or ()],
            partition=partition if isinstance(partition, int) and partition >= 0 else None)
        return None
    return _ToKafka(handle)
