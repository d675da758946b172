"""A topic's sinks, built and bound as every run of a pipeline binds them (the worker,
``dlq replay``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from actors.record_columns import record_column_names, sink_columns
from actors.resources import Resources
from actors.sink_health import SinkHealth
from actors.sinks import RefuseRows, Sink, SinkContext, build_sink
from actors.sinks.routed import RoutedSink
from processors.base import Processor
from settings.models import NamedSink, Settings, SinkSettings, TopicSettings


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
                group: str = "", build: Callable[[SinkSettings], Sink] = build_sink,
                resources: Resources | None = None,
                processor: Processor | None = None) -> list[BoundSink]:
    """The topic's sinks (one for ``sink:``, every one of ``sinks:``), bound as every run
    of a pipeline binds them (the worker, ``dlq replay``): the processor's columns and
    table, the whole settings (e.g. the ``spark:`` section), each sink's health (by its
    name), where the rows it refuses go (``refuse(named)``: dead letters naming it) and
    the consumer ``group`` of the worker and the process's ``resources`` (the SparkActor
    of the spark and jdbc sinks). ``build`` makes each sink from its settings
    (:func:`~actors.sinks.build_sink`; a test passes its own); a routed topic's sink is a
    :class:`~actors.sinks.routed.RoutedSink` of such sinks, one per table. ``processor``:
    the running instance, whose :meth:`~processors.base.Processor.live_columns` the sinks
    follow."""
    bound = []
    sinks = topic.named_sinks()
    for named in sinks:
        sink = (build(named.settings) if topic.route is None
                else RoutedSink(named.settings, build))
        sink.bind(SinkContext(
            label=label if len(sinks) == 1 else f"{label} sink {named.name!r}",
            group=group, topic=topic.topic, processor=topic.processor,
            columns=sink_columns(topic, processor_cls), table=processor_cls.table,
            record_columns=record_column_names(topic), key=tuple(processor_cls.key),
            columns_from_schema=processor_cls.columns_from_schema,
            live=None if processor is None else processor.live_columns(),
            emits_deletes=processor_cls.emits_deletes,
            source_order=processor_cls.source_order, settings=settings, resources=resources,
            health=None if health is None else health(named.name), refuse=refuse(named)))
        bound.append(BoundSink(named, sink))
    return bound


__all__ = ["BoundSink", "bound_sinks"]
