"""``kstage dlq show|replay``: the commands' entry points and the replay loops.

:func:`replay_async` replays the dead-letter files' lines not yet replayed
(:mod:`service.ops.dlq.letters`): handed over in chunks (a table sink writes them in one
append per table, not one per line), each marked in its file's sidecar only once its
work is durable. :func:`replay_topic_async` replays a dead-letter topic
(:mod:`service.ops.dlq.topic`) past the replay group's committed offset, committing it
after each replayed record. Records of a partition are replayed in order and the offset
never moves past a record that failed again: the rest of that partition waits for the
next replay (reported as skipped), so no record is replayed twice. For the same reason
``--topic`` and ``--since`` select what ``show`` prints, not what ``replay --from-topic``
replays.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path
from typing import IO

from service.ops.dlq.handlers import kafka_handler, processor_handler
from service.ops.dlq.letters import DeadLetter, Marker, load
from service.ops.dlq.render import Progress
from service.ops.dlq.result import ReplayResult
from service.ops.dlq.targets import Handed
from service.ops.dlq.topic import load_topic, topic_consumer
from service.ops.lag import OpsError
from settings.models import Settings

_REPLAY_CHUNK = 10_000  # letters handed over before the replay waits for their writes


async def replay_async(settings: Settings, *, topic: str | None = None,
                       since: str | None = None, to_kafka: bool = False,
                       progress_stream: IO[str] | None = None) -> ReplayResult:
    """Replay every not-yet-replayed dead-letter line (filtered); see the module doc and
    :mod:`service.ops.dlq.letters` (the sidecar)."""
    letters, unreadable = load(settings, topic=topic, since=since)
    result = ReplayResult(already=sum(d.replayed for d in letters), unreadable=unreadable)
    todo = [d for d in letters if not d.replayed]
    if not todo:
        return result
    progress = Progress(len(todo), progress_stream)
    markers: dict[Path, Marker] = {}
    async with AsyncExitStack() as stack:
        stack.callback(progress.close)
        for path in dict.fromkeys(d.path for d in todo):
            markers[path] = Marker(path)
            stack.callback(markers[path].close)
        via = "kafka" if to_kafka else "processor"
        handle = await (kafka_handler(settings, stack) if to_kafka
                        else processor_handler(settings, stack, result))
        for start in range(0, len(todo), _REPLAY_CHUNK):
            # The letters are handed over first, then waited for: a table sink writes
            # them in one append per table, not one per letter.
            handed: list[tuple[DeadLetter, Handed]] = []
            handle.hold()
            for letter in todo[start:start + _REPLAY_CHUNK]:
                progress.advance()
                try:
                    handed.append((letter, await handle(letter.record)))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the line stays unreplayed
                    result.failed.append((letter, f"{type(exc).__name__}: {exc}"))
            handle.release()
            for letter, one in handed:
                try:
                    skipped = await one.durable(handle.flush_soon)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the line stays unreplayed
                    result.failed.append((letter, f"{type(exc).__name__}: {exc}"))
                    continue
                if skipped is not None:
                    result.skipped.append((letter, skipped))
                    continue
                markers[letter.path].mark(letter, via)  # only after the work is durable
                result.replayed.append(letter)
    return result


async def replay_topic_async(settings: Settings, dlq_topic: str, *, to_kafka: bool = False,
                             progress_stream: IO[str] | None = None) -> ReplayResult:
    """Replay every record of dead-letter topic ``dlq_topic`` past the replay group's
    committed offset, in order per partition; see the module doc and
    :mod:`service.ops.dlq.topic`."""
    from aiokafka import TopicPartition

    consumer = await topic_consumer(settings, dlq_topic)
    try:
        letters, unreadable = await load_topic(settings, dlq_topic, consumer=consumer)
        result = ReplayResult(already=sum(d.replayed for d in letters), unreadable=unreadable)
        todo = [d for d in letters if not d.replayed]
        if not todo:
            return result
        progress = Progress(len(todo), progress_stream)
        held: dict[int, str] = {}  # partition -> the record the others wait behind
        async with AsyncExitStack() as stack:
            stack.callback(progress.close)
            handle = await (kafka_handler(settings, stack) if to_kafka
                            else processor_handler(settings, stack, result))
            for letter in todo:
                progress.advance()
                partition = int(letter.record["dead_letter_partition"])
                if partition in held:
                    result.skipped.append((letter, f"waits behind {held[partition]}, "
                                                   "which was not replayed"))
                    continue
                try:
                    # one at a time: a letter that fails holds its partition's next ones
                    skipped = await (await handle(letter.record)).durable(handle.flush_soon)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the record stays unreplayed
                    result.failed.append((letter, f"{type(exc).__name__}: {exc}"))
                    held[partition] = f"{dlq_topic}[{partition}]@{letter.line}"
                    continue
                if skipped is not None:
                    result.skipped.append((letter, skipped))
                    held[partition] = f"{dlq_topic}[{partition}]@{letter.line}"
                    continue
                # only after the work is durable; committing it again is harmless
                await consumer.commit({TopicPartition(dlq_topic, partition): letter.line + 1})
                letter.replayed = True
                result.replayed.append(letter)
        return result
    finally:
        await consumer.stop()


def show(settings: Settings, topic: str | None = None, since: str | None = None,
         from_topic: str | None = None) -> tuple[list[DeadLetter], int]:
    """Synchronous entry point of ``dlq show``."""
    if from_topic is not None:
        return asyncio.run(load_topic(settings, from_topic, topic=topic, since=since))
    return load(settings, topic=topic, since=since)


def replay(settings: Settings, topic: str | None = None, since: str | None = None,
           to_kafka: bool = False, from_topic: str | None = None) -> ReplayResult:
    """Synchronous entry point of ``dlq replay``."""
    if from_topic is not None:
        if topic is not None or since is not None:
            raise OpsError("--topic and --since do not apply to replay --from-topic: it "
                           "replays each partition of the dead-letter topic in order, "
                           "marking progress with the replay group's committed offset")
        return asyncio.run(replay_topic_async(settings, from_topic, to_kafka=to_kafka))
    return asyncio.run(replay_async(settings, topic=topic, since=since, to_kafka=to_kafka))
