"""Where a partition's log starts and ends now: its log start offset and its **fetch**
high-water mark.

The high-water mark comes from a fetch response, as the consumers see it, never from
ListOffsets(latest) (``end_offsets``): some Kafka-compatible brokers answer that one
wrongly for batched produce (see ``kstage lag``, :mod:`service.ops.lag`). A short-lived
consumer outside any group (the worker's connection settings, never its
``group.instance.id``) assigns the partitions, seeks each to its log start and polls
until every one has been in a fetch response (an empty partition too); the records
fetched on the way are discarded.

The worker reads them at assignment for the partitions a table holds up to an offset
(:mod:`actors.worker.sink_offsets`): a table's offset above the high-water mark is not
a table ahead of Kafka but a topic that restarted its offsets.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.kafka import connection_kwargs

TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class Bounds:
    """A partition's log start offset and fetch high-water mark."""

    log_start: int
    high_water: int


class LogBounds(Protocol):
    """Reads partitions' :class:`Bounds` (:class:`FetchedBounds`; a test's fake)."""

    async def log_bounds(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, Bounds]:
        """The bounds of each of ``tps``; raises (a KafkaError, TimeoutError) when the
        brokers cannot tell them now."""


class FetchedBounds:
    """:class:`LogBounds` from a short-lived consumer outside any group (module doc).

    Args:
        bootstrap: the brokers; ``consumer_config``: ``kafka.consumer_config`` (only its
            connection keys are used); ``client_id``: the consumer's client id.
    """

    def __init__(self, bootstrap: str, consumer_config: dict[str, Any], client_id: str,
                 timeout_s: float = TIMEOUT_S) -> None:
        self.bootstrap = bootstrap
        self.consumer_config = consumer_config
        self.client_id = client_id
        self.timeout_s = timeout_s

    @classmethod
    def of(cls, kafka: Any, bootstrap: str, topic: str) -> FetchedBounds:
        """The bounds of a worker of ``topic`` (``kafka``: the ``kafka:`` settings)."""
        return cls(bootstrap, kafka.consumer_config, f"{kafka.client_id}-{topic}-bounds")

    async def log_bounds(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, Bounds]:
        if not tps:
            return {}
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, client_id=self.client_id, group_id=None,
            enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=100,
            max_partition_fetch_bytes=64 * 1024,
            **connection_kwargs(self.consumer_config))
        await consumer.start()
        try:
            consumer.assign(list(tps))
            starts = {tp: int(o) for tp, o in
                      (await consumer.beginning_offsets(list(tps))).items()}
            for tp in tps:
                consumer.seek(tp, starts[tp])
            deadline = time.monotonic() + self.timeout_s
            while True:
                missing = [tp for tp in tps if consumer.highwater(tp) is None]
                if not missing:
                    return {tp: Bounds(starts[tp], int(consumer.highwater(tp))) for tp in tps}
                if time.monotonic() > deadline:
                    names = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in missing)
                    raise TimeoutError(f"no fetch response within {self.timeout_s:g}s for "
                                       f"{names}")
                await consumer.getmany(*missing, timeout_ms=200)
        finally:
            await consumer.stop()


__all__ = ["Bounds", "FetchedBounds", "LogBounds", "TIMEOUT_S"]
