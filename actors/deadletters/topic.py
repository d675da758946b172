"""The dead-letter topic: failed messages produced to a Kafka topic, acknowledged by all
in-sync replicas before the message counts as finished.

A dead-letter record keeps the failed message's key and value unchanged and its headers,
and adds ``kstage.error.group``, ``.topic``, ``.partition``, ``.offset``, ``.processor``,
``.type``, ``.message``, ``.attempts`` and ``.failed_at`` (UTF-8); a row a sink refused
for good also ``.sink`` (the sink's name: ``dlq replay`` offers it to that sink only),
``.sink_type`` and ``.status``. The error message is
scrubbed of the settings' secrets like a dead-letter line's (it is taken from the line).
Shared by every replica of the service, the topic survives pods with ephemeral disks.

Each worker owns one producer (``acks="all"``, the consumer's security settings), started
on the first dead letter and stopped with the worker. A failed send raises
:class:`aiokafka.errors.KafkaError` (or ``OSError``): the pipeline retries it with
backoff and shows it in ``/readyz``, the message stays uncommitted.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaProducer

if TYPE_CHECKING:
    from actors.tracing import Tracing

logger = logging.getLogger(__name__)

HEADER_PREFIX = "kstage.error."
"""Prefix of the headers the dead-letter topic adds to a failed message's own."""

# kstage.error.<name> header <- dead-letter line field
HEADER_FIELDS = (("group", "group"), ("topic", "topic"), ("partition", "partition"),
                 ("offset", "offset"), ("processor", "processor"), ("type", "error_type"),
                 ("message", "error"), ("attempts", "attempts"), ("failed_at", "failed_at"))

# the same, only on the dead letters of rows a sink refused
SINK_HEADER_FIELDS = (("sink", "sink"), ("sink_type", "sink_type"), ("status", "status"))

_SEND_TIMEOUT_S = 60.0  # one send attempt; then the pipeline's backoff retries it


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def topic_record(line: str
                 ) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    """Key, value and headers of the dead-letter record of a dead-letter ``line``."""
    rec: dict[str, Any] = json.loads(line)
    headers = [(str(k), _unb64(v)) for k, v in rec.get("headers") or ()]
    for name, field in HEADER_FIELDS:
        value = rec.get(field)
        headers.append((HEADER_PREFIX + name, b"" if value is None else str(value).encode()))
    for name, field in SINK_HEADER_FIELDS:
        if rec.get(field) is not None:
            headers.append((HEADER_PREFIX + name, str(rec[field]).encode()))
    return _unb64(rec.get("key")), _unb64(rec.get("value")), headers


class DeadLetterTopic:
    """Produces dead-letter records to ``topic`` and waits for ``acks=all``."""

    def __init__(self, topic: str, bootstrap: str, client_id: str,
                 connection: dict[str, Any]) -> None:
        self.topic = topic
        self._bootstrap = bootstrap
        self._client_id = client_id
        self._connection = connection
        self._producer: AIOKafkaProducer | None = None
        # With tracing on, the record carries the failed message's span as its
        # traceparent (instead of the producer's the message had).
        self.tracing: Tracing | None = None
        self._lock = asyncio.Lock()

    async def _started(self) -> AIOKafkaProducer:
        if self._producer is None:
            # Idempotence is not asked for: not every broker supports it; a retried send
            # may duplicate a dead letter, never lose one (replay is idempotent).
            producer = AIOKafkaProducer(bootstrap_servers=self._bootstrap,
                                        client_id=self._client_id, acks="all",
                                        **self._connection)
            try:
                await producer.start()
            except BaseException:
                await producer.stop()
                raise
            self._producer = producer
        return self._producer

    async def write(self, line: str) -> None:
        """Produce the dead-letter record of ``line``; returns once all replicas have it."""
        key, value, headers = topic_record(line)
        if self.tracing is not None:
            headers = self.tracing.record_headers(headers)
        async with self._lock:
            producer = await self._started()
            try:
                async with asyncio.timeout(_SEND_TIMEOUT_S):
                    await producer.send_and_wait(self.topic, value=value, key=key,
                                                 headers=headers)
            except TimeoutError:
                raise OSError(f"no acknowledgement from the broker within "
                              f"{_SEND_TIMEOUT_S:.0f}s") from None

    async def close(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()
