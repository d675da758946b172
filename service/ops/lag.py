"""``kstage lag``: committed offset, high-water mark and lag of every partition.

For every (group, topic) of the configuration: the partitions come from the cluster
metadata, the group's committed offsets from the admin client, and the high-water mark
from a **fetch**: a short-lived consumer without a group assigns the partitions, seeks
to the committed offset (or the log start), and polls once; every fetch response
carries the partition's high-water mark, also for an empty partition. ListOffsets
(latest), i.e. ``end_offsets``, is not used: some Kafka-compatible brokers answer it
wrongly for batched produce (see ENVIRONMENT.md), while the fetch high-water mark is
what consumers themselves see.

Lag is ``high_water - committed``, the definition ``/metrics`` and the status line
share (a drained worker commits its consumer position, past a transaction's commit
marker, so a drained partition has lag 0). Without a committed offset it is what the
group reads when it starts: ``high_water - log_start`` (``auto_offset_reset`` earliest
or none), 0 for ``latest``; ``committed`` is then ``None``.

This module also holds the Kafka plumbing the other ops tools (:mod:`service.ops.offsets`,
:mod:`service.ops.dlq`) share: connection arguments, topic partitions, committed offsets,
high-water marks and the group-membership check.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from actors.errors import FatalError
from actors.kafka import CONNECTION_KEYS as _CONNECTION_KEYS
from actors.kafka import client_kwargs
from actors.topic_patterns import PatternWatch
from service.errors import ServiceError
from settings.models import Settings

logger = logging.getLogger(__name__)

HIGHWATER_TIMEOUT_S = 15.0


class OpsError(ServiceError):
    """An ops command cannot do what was asked; ``str()`` is the message (exit 1)."""


def bootstrap_of(settings: Settings) -> str:
    """The broker address of the configuration; the embedded broker has nothing to inspect."""
    if settings.kafka.embedded:
        raise OpsError("kafka.bootstrap is 'embedded': the embedded broker lives only inside "
                       "`kstage run` (memory storage); point kafka.bootstrap at a running "
                       "broker (for example the one of `kstage broker --port N`)")
    return settings.kafka.bootstrap


def connection_kwargs(settings: Settings) -> dict[str, Any]:
    """aiokafka connection keywords (security, timeouts) from ``kafka.consumer_config``."""
    try:
        kwargs = client_kwargs(settings.kafka.consumer_config)
    except FatalError as exc:
        raise OpsError(str(exc)) from exc
    return {k: v for k, v in kwargs.items() if k in _CONNECTION_KEYS}


@asynccontextmanager
async def admin_client(settings: Settings) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_of(settings),
                                client_id=f"{settings.kafka.client_id}-ops",
                                **connection_kwargs(settings))
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


@asynccontextmanager
async def plain_consumer(settings: Settings, **extra: Any) -> AsyncIterator[AIOKafkaConsumer]:
    """A started consumer outside any group (unless ``extra`` names one), no auto-commit."""
    kwargs: dict[str, Any] = {
        "bootstrap_servers": bootstrap_of(settings),
        "client_id": f"{settings.kafka.client_id}-ops",
        "group_id": None,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "fetch_max_wait_ms": 100,
        "max_partition_fetch_bytes": 64 * 1024,
        **connection_kwargs(settings),
        **extra,
    }
    consumer = AIOKafkaConsumer(**kwargs)
    await consumer.start()
    try:
        yield consumer
    finally:
        await consumer.stop()


async def topic_partitions(admin: AIOKafkaAdminClient,
                           topics: Sequence[str]) -> dict[str, list[TopicPartition]]:
    """Partitions of each topic, from one all-topics metadata request.

    Asking for named topics could auto-create a misspelled one on brokers with
    ``auto.create.topics.enable``; a missing topic is an error instead.
    """
    known = {t["topic"]: t for t in await admin.describe_topics()}
    missing = sorted(set(topics) - set(known))
    if missing:
        raise OpsError(f"topic(s) not found on the broker: {', '.join(missing)}")
    return {
        topic: [TopicPartition(topic, p["partition"])
                for p in sorted(known[topic]["partitions"], key=lambda p: p["partition"])]
        for topic in topics
    }


async def committed_offsets(admin: AIOKafkaAdminClient, group: str,
                            tps: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
    """The group's committed next-offsets (None: nothing committed)."""
    # partitions= is required: some brokers drop the connection for "all partitions".
    found = await admin.list_consumer_group_offsets(group, partitions=list(tps))
    result: dict[TopicPartition, int | None] = {}
    for tp in tps:
        meta = found.get(tp)
        result[tp] = meta.offset if meta is not None and meta.offset >= 0 else None
    return result


async def high_waters(consumer: AIOKafkaConsumer, tps: Sequence[TopicPartition],
                      start: dict[TopicPartition, int | None] | None = None,
                      timeout_s: float = HIGHWATER_TIMEOUT_S) -> dict[TopicPartition, int]:
    """The fetch high-water mark of each partition.

    Assigns ``tps`` to ``consumer`` (a consumer outside any group), seeks each to its
    ``start`` offset (log start when None) and polls until every partition has been in a
    fetch response. Records fetched on the way are discarded.
    """
    if not tps:
        return {}
    consumer.assign(list(tps))
    for tp in tps:
        offset = (start or {}).get(tp)
        if offset is None:
            await consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, offset)
    deadline = time.monotonic() + timeout_s
    while True:
        missing = [tp for tp in tps if consumer.highwater(tp) is None]
        if not missing:
            return {tp: int(consumer.highwater(tp)) for tp in tps}
        if time.monotonic() > deadline:
            names = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in missing)
            raise OpsError(f"no fetch response within {timeout_s:g}s for {names}")
        await consumer.getmany(*missing, timeout_ms=200)


@dataclass(frozen=True, slots=True)
class GroupState:
    """What the group coordinator says about a group."""

    group: str
    state: str
    members: tuple[str, ...]


async def describe_group(admin: AIOKafkaAdminClient, group: str) -> GroupState:
    """State and member ids of one group (DescribeGroups).

    One group per request: aiokafka 0.14 decodes the v3 answer with the v2 schema (no
    per-group ``authorized_operations``), which misreads every group after the first.
    """
    responses = await admin.describe_consumer_groups([group])
    for response in responses:
        for error_code, name, state, _ptype, _protocol, members, *_ in response.groups:
            if name != group:
                continue
            if error_code:
                raise OpsError(f"describing group {group!r} failed with Kafka error "
                               f"code {error_code}")
            return GroupState(group, state, tuple(m[0] for m in members))
    raise OpsError(f"the broker did not describe group {group!r}")


@dataclass(frozen=True, slots=True)
class PartitionLag:
    group: str
    topic: str
    partition: int
    committed: int | None
    high_water: int
    lag: int


async def topics_of(admin: AIOKafkaAdminClient, settings: Settings) -> dict[str, list[str]]:
    """Each group's topics: its ``topic`` entries, and the topics of the cluster its
    ``topic_pattern`` entries match now (as the running process would claim them)."""
    named = {settings.group_id(g): [t.topic for t in g.topics if t.topic_pattern is None]
             for g in settings.groups}
    watch = PatternWatch([(settings.group_id(g), g) for g in settings.groups])
    if watch:
        for group, entry in watch.update(set(await admin.list_topics())).started:
            named[settings.group_id(group)].append(entry.topic)
    return named


async def collect(settings: Settings) -> list[PartitionLag]:
    """Lag of every partition of every (group, topic) of the configuration."""
    rows: list[PartitionLag] = []
    async with admin_client(settings) as admin, plain_consumer(settings) as consumer:
        named = await topics_of(admin, settings)
        topics = sorted({t for names in named.values() for t in names})
        partitions = await topic_partitions(admin, topics)
        for group in settings.groups:
            gid = settings.group_id(group)
            tps = [tp for t in named[gid] for tp in partitions[t]]
            committed = await committed_offsets(admin, gid, tps)
            hws = await high_waters(consumer, tps, committed)
            uncommitted = [tp for tp in tps if committed[tp] is None]
            starts = await consumer.beginning_offsets(uncommitted) if uncommitted else {}
            for tp in tps:
                done = committed[tp]
                if done is not None:
                    base = done
                elif group.auto_offset_reset == "latest":
                    base = hws[tp]  # the group starts at the end: nothing to catch up
                else:
                    base = starts[tp]
                rows.append(PartitionLag(gid, tp.topic, tp.partition, done, hws[tp],
                                         max(hws[tp] - base, 0)))
    return rows


def render_table(rows: Sequence[PartitionLag]) -> str:
    """A text table, one line per partition, and a total line."""
    head = ("GROUP", "TOPIC", "PARTITION", "COMMITTED", "HIGH-WATER", "LAG")
    body = [(r.group, r.topic, str(r.partition),
             "none" if r.committed is None else str(r.committed), str(r.high_water),
             str(r.lag)) for r in rows]
    widths = [max(len(cells[i]) for cells in (head, *body)) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
             for cells in (head, *body)]
    lines.append(f"total lag: {sum(r.lag for r in rows)}")
    return "\n".join(lines)


def render_json(rows: Sequence[PartitionLag]) -> str:
    """A JSON list of {group, topic, partition, committed, high_water, lag}."""
    return json.dumps([asdict(r) for r in rows], indent=2)


def lag(settings: Settings) -> list[PartitionLag]:
    """Synchronous entry point for the CLI."""
    return asyncio.run(collect(settings))
