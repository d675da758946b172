"""``kstage validate`` (and ``run`` at start) checks a spark sink's ``partition_by`` of a
topic whose columns come from writer schemas (``schema_rows``) against the latest schema
of the topic's value subject (``<topic>-value``, as the worker reads it at start: Avro
and JSON Schema; a Protobuf subject names no message type until a record does), fetched
from the configured registry: a column the schema lacks, or a transform its type does not
take, is a problem at ``groups[i].topics[j].sink.partition_by[k]``, with its line.

A registry that cannot answer within :data:`BUDGET_S` (down, or unreachable from where
``validate`` runs) or a subject with no version yet leaves the spec unchecked: a warning
says so (the create checks it in any case, see :mod:`actors.sinks.spark.partitioning`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from actors.codecs.registries import registry_from_settings
from actors.codecs.schema_registry import SchemaNotFound, SchemaRegistryClient
from actors.record_columns import extra_columns
from actors.sinks.spark import iceberg, partitioning
from actors.sinks.spark.sink import SparkSinkSettings
from actors.sinks.table.columns import COORDINATES, INGESTED_AT
from processors import registry as processors
from processors.base import Column
from processors.errors import RegistryError
from processors.json_schema_columns import JsonWriterSchema
from settings.models import SchemaRegistrySettings, Settings, TopicSettings

BUDGET_S = 5.0
"""How long all the fetches of one check may take together."""

Problem = tuple[tuple[str | int, ...], str]


@dataclass(frozen=True, slots=True)
class _Wanted:
    where: tuple[str | int, ...]  # the sink's path in the file
    topic: TopicSettings
    sink: SparkSinkSettings
    processor: str


def _wanted(settings: Settings) -> Iterator[_Wanted]:
    for gi, group in enumerate(settings.groups):
        for ti, topic in enumerate(group.topics):
            if topic.topic_pattern is not None or topic.format not in ("avro", "json_schema"):
                continue
            for si, named in enumerate(topic.named_sinks()):
                sink = named.settings
                if not isinstance(sink, SparkSinkSettings) or not sink.partition_by:
                    continue
                where: tuple[str | int, ...] = ("groups", gi, "topics", ti,
                                                *(("sinks", si) if topic.sinks else ("sink",)))
                yield _Wanted(where, topic, sink, topic.processor)


def problems(settings: Settings, warnings: list[str], source: str) -> list[Problem]:
    """The problems of the spark sinks' ``partition_by`` of ``schema_rows``-like topics
    against their subjects' latest schemas; ``warnings`` gets one line per spec left
    unchecked, naming ``source`` (the file) and the key (see the module doc)."""
    wanted = []
    for item in _wanted(settings):
        try:
            cls = processors.load(item.processor)
        except RegistryError:
            continue  # reported at the topic's processor
        if cls.columns_from_schema:
            wanted.append(item)
    registry = settings.schema_registry
    if not wanted or registry is None:
        return []
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:  # inside a running loop (a caller of its own): the create checks it
        return []
    latest = asyncio.run(_fetch(registry, {w.topic.topic: w.topic.format for w in wanted}))
    found: list[Problem] = []
    for item in wanted:
        got = latest.get(item.topic.topic, "not fetched")
        if isinstance(got, str):
            warnings.append(f"{source}: {_dotted((*item.where, 'partition_by'))}: not "
                            "checked against "
                            f"the writer schema: {got}; the table's create checks it")
            continue
        columns = _columns(item, got)
        if columns is None:
            continue  # a schema the processor refuses: the worker says why at start
        found += [((*item.where, "partition_by", i), f"spark sink: {why} (the latest "
                   f"writer schema of subject {item.topic.topic}-value, id {got[0]})")
                  for i, why in partitioning.problems(item.sink.layout().transforms,
                                                      columns)]
    return found


def _columns(item: _Wanted, latest: tuple[int | str, Any]) -> tuple[Column, ...] | None:
    """The table's columns (Iceberg's names) made with the latest schema, or None."""
    schema_id, schema = latest
    cls = processors.for_options(processors.load(item.processor), item.topic.options)
    try:
        processor = cls(item.topic.options)
        processor.schema_known(schema, schema_id)
    except Exception:  # noqa: BLE001 - refused options or schema: reported elsewhere
        return None
    live = processor.live_columns()
    if live is None:
        return None
    return iceberg.table_columns((*live.columns, *extra_columns(item.topic), *COORDINATES,
                                  INGESTED_AT))


async def _fetch(settings: SchemaRegistrySettings, topics: dict[str, str],
                 ) -> dict[str, tuple[int | str, Any] | str]:
    """Per topic (of ``topics``: topic -> format), ``(id, parsed schema)`` of its
    subject's latest version (parsed as the worker parses it), or why not."""
    from fastavro import parse_schema

    found: dict[str, tuple[int | str, Any] | str] = {}
    registry = registry_from_settings(settings)

    async def fetch_all() -> None:
        async with registry:
            for topic, fmt in topics.items():
                subject = f"{topic}-value"
                try:
                    version = await registry.latest(subject)
                except SchemaNotFound:
                    found[topic] = f"subject {subject} has no version yet"
                    continue
                text = json.loads(version.schema)
                found[topic] = (version.id, parse_schema(text) if fmt == "avro"
                                else JsonWriterSchema(text))

    try:
        await asyncio.wait_for(fetch_all(), BUDGET_S)
    except Exception as exc:  # noqa: BLE001 - down, unreachable, slow: said, not fatal
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        last = (registry.last_problem if isinstance(registry, SchemaRegistryClient)
                else None)
        if isinstance(exc, TimeoutError) and last is not None:
            why = f"the last attempt: {last}"  # what kept it from answering, not the timeout
        for topic in topics:
            found.setdefault(topic, f"the registry did not answer within {BUDGET_S:g}s "
                             f"({why})")
    return found


def _dotted(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


__all__ = ["BUDGET_S", "problems"]
