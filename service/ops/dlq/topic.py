"""A dead-letter topic (``failure.dead_letter_topic``) read as dead-letter lines: what
``kstage dlq show|replay --from-topic NAME`` read.

The topic is read from its beginning to its end, with a consumer that joins no group
(:func:`topic_consumer`): each record becomes the line it stands for
(:func:`topic_letter`: its ``kstage.error.*`` headers give the line's fields, the other
headers are the message's own). The replay bookkeeping is the committed offset of the
consumer group ``kstage-dlq-replay-NAME`` on the topic (:func:`replay_group`): committed
after each replayed record, so it is shared by every replica and host, survives
ephemeral disks, and a re-commit is idempotent. A record at or past that offset is not
replayed yet.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from pathlib import Path
from typing import Any

from actors.deadletters.topic import HEADER_PREFIX, SINK_HEADER_FIELDS
from service.ops.dlq.letters import DeadLetter, parse_time
from service.ops.lag import (
    OpsError,
    admin_client,
    bootstrap_of,
    connection_kwargs,
    topic_partitions,
)
from settings.models import Settings

logger = logging.getLogger(__name__)

_READ_TIMEOUT_S = 60.0  # reading a dead-letter topic to its end


def replay_group(dlq_topic: str) -> str:
    """The consumer group whose committed offsets mark a dead-letter topic's replays."""
    return f"kstage-dlq-replay-{dlq_topic}"


def topic_letter(dlq_topic: str, msg: Any) -> dict[str, Any] | None:
    """The dead-letter line a record of the dead-letter topic stands for; None when the
    record has no ``kstage.error.topic`` header (not a kstage dead letter)."""
    errors: dict[str, str] = {}
    own: list[list[str | None]] = []
    for key, value in msg.headers or ():
        if key.startswith(HEADER_PREFIX):
            errors[key[len(HEADER_PREFIX):]] = (value or b"").decode("utf-8", "replace")
        else:
            own.append([key, None if value is None else base64.b64encode(value).decode()])
    if not errors.get("topic"):
        return None

    def number(name: str) -> int:
        try:
            return int(errors.get(name, ""))
        except ValueError:
            return -1

    def b64(data: bytes | None) -> str | None:
        return None if data is None else base64.b64encode(data).decode("ascii")

    # a row a sink refused: the sink it goes back to
    sink: dict[str, Any] = {field: errors[name] for name, field in SINK_HEADER_FIELDS
                            if name in errors}
    if "status" in sink:
        sink["status"] = number("status")
    return {**sink, "group": errors.get("group"), "topic": errors["topic"],
            "partition": number("partition"), "offset": number("offset"),
            "timestamp": msg.timestamp, "key": b64(msg.key), "value": b64(msg.value),
            "headers": own, "processor": errors.get("processor"),
            "error_type": errors.get("type"), "error": errors.get("message"),
            "attempts": number("attempts"), "failed_at": errors.get("failed_at"),
            "dead_letter_topic": dlq_topic, "dead_letter_partition": msg.partition,
            "dead_letter_offset": msg.offset}


async def topic_consumer(settings: Settings, dlq_topic: str) -> Any:
    """A consumer of every partition of ``dlq_topic`` that joins no group and commits
    only when told (the replay's bookkeeping), started. Its seek to the beginning
    follows a leader that moved (:class:`~actors.kafka.LeaderFollowingConsumer`)."""
    from actors.kafka import LeaderFollowingConsumer

    consumer = LeaderFollowingConsumer(
        bootstrap_servers=bootstrap_of(settings), client_id=f"{settings.kafka.client_id}-dlq",
        group_id=replay_group(dlq_topic), enable_auto_commit=False,
        auto_offset_reset="earliest", **connection_kwargs(settings))
    await consumer.start()
    try:
        # The partitions from a metadata request of their own: the consumer's metadata
        # knows no topic before it is given one (Apache Kafka 4 answers its bootstrap
        # request, which names none, with none).
        async with admin_client(settings) as admin:
            try:
                tps = (await topic_partitions(admin, [dlq_topic]))[dlq_topic]
            except OpsError:
                raise OpsError(f"dead-letter topic {dlq_topic!r} does not exist on "
                               f"{bootstrap_of(settings)}") from None
        consumer.assign(tps)
        await consumer.seek_to_beginning()
    except BaseException:
        await consumer.stop()
        raise
    return consumer


async def _read_topic(consumer: Any, dlq_topic: str) -> list[Any]:
    """Every record of the assigned partitions, from the beginning to the fetch
    high-water mark seen (``end_offsets`` is not trusted: see ENVIRONMENT notes)."""
    records: list[Any] = []
    tps = consumer.assignment()
    try:
        async with asyncio.timeout(_READ_TIMEOUT_S):
            while True:
                batch = await consumer.getmany(timeout_ms=500)
                for msgs in batch.values():
                    records.extend(msgs)
                behind = 0
                for tp in tps:
                    end = consumer.highwater(tp)
                    behind += end is None or await consumer.position(tp) < end
                if not behind:
                    return records
    except TimeoutError:
        raise OpsError(f"could not read dead-letter topic {dlq_topic!r} to its end within "
                       f"{_READ_TIMEOUT_S:.0f}s") from None


async def load_topic(settings: Settings, dlq_topic: str, *, topic: str | None = None,
                     since: str | None = None, consumer: Any = None
                     ) -> tuple[list[DeadLetter], int]:
    """The records of dead-letter topic ``dlq_topic`` as dead-letter lines (filtered like
    :func:`load`), replayed when below the replay group's committed offset, and the count
    of records that are not kstage dead letters."""
    since_dt = parse_time(since, "--since") if since else None
    own = consumer is None
    if own:
        consumer = await topic_consumer(settings, dlq_topic)
    try:
        records = await _read_topic(consumer, dlq_topic)
        done = {tp.partition: await consumer.committed(tp) for tp in consumer.assignment()}
    finally:
        if own:
            await consumer.stop()
    found: list[DeadLetter] = []
    bad = 0
    for msg in sorted(records, key=lambda m: (m.partition, m.offset)):
        rec = topic_letter(dlq_topic, msg)
        where = f"{dlq_topic}[{msg.partition}]@{msg.offset}"
        if rec is None:
            bad += 1
            logger.warning("%s: not a dead-letter record (no %stopic header); ignored",
                           where, HEADER_PREFIX)
            continue
        if topic is not None and rec["topic"] != topic:
            continue
        if since_dt is not None:
            try:
                if parse_time(str(rec["failed_at"]), "failed_at") < since_dt:
                    continue
            except OpsError:
                pass
        mark = done.get(msg.partition)
        found.append(DeadLetter(Path(f"{dlq_topic}[{msg.partition}]"), msg.offset, rec,
                                mark is not None and msg.offset < mark))
    return found, bad
