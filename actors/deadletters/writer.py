"""Dead letters of one topic: each written durably to the dead-letter file and, when
configured, produced to the dead-letter topic; a failed write is retried, never skipped.

The record pipeline writes a line for each message its failure policy dead-letters; a
sink writes one for each row it refuses for good (:meth:`DeadLetters.refuse`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from aiokafka.errors import KafkaError

from actors.backoff import backoff_s
from actors.deadletters.file import DeadLetterFile, dead_letter_line
from actors.deadletters.topic import DeadLetterTopic
from actors.errors import PermanentSinkError
from actors.failure import Sleep
from actors.sinks import RefuseRows
from processors.base import Row
from settings.models import NamedSink, TopicSettings

logger = logging.getLogger(__name__)

_DEAD_LETTER_BACKOFF_S = (0.5, 30.0)  # retry waits of a failed dead-letter write


async def _sleep_on(seconds: float) -> bool:
    """A wait no stop interrupts (the sink drains until the stop's abort cancels it)."""
    await asyncio.sleep(seconds)
    return True


class DeadLetters:
    """Where one topic's dead letters go.

    Args:
        topic: the topic's settings (its sinks, processor and failure settings).
        group_id: for the lines.
        label: the owner's name in log lines.
        stats: counters (``failed`` for refused rows, ``dead_lettered``).
        places: where the lines go, for log lines (``FailureSettings.dead_letter_places``).
        path: the dead-letter file (``dead_letter_path``; None: no file).
        dead_letter_topic: also produce the lines to this topic (after the file, if
            ``dead_letter_path`` names one).
    """

    def __init__(self, *, topic: TopicSettings, group_id: str, label: str,
                 stats: dict[str, int], places: str,
                 path: str | None, dead_letter_topic: DeadLetterTopic | None = None) -> None:
        self.topic = topic
        self.group_id = group_id
        self.label = label
        self.stats = stats
        self._places = places
        self.file = DeadLetterFile(path) if path is not None else None
        self.dead_letter_topic = dead_letter_topic
        self.error: str | None = None  # why the last write failed (None: it did not)

    def __repr__(self) -> str:
        return f"<DeadLetters {self._places} error={self.error!r}>"

    def refuser(self, sink: NamedSink) -> RefuseRows:
        """The dead-letter handler of the rows ``sink`` refuses for good (see
        :meth:`refuse`)."""
        async def refuse(rows: list[Row], status: int, body_head: str) -> None:
            await self.refuse(rows, status, body_head, sink=sink)
        return refuse

    async def refuse(self, rows: list[Row], status: int, body_head: str, *,
                     sink: NamedSink | None = None) -> None:
        """A sink refused rows for good (e.g. HTTP 4xx): dead-letter each, durably, so the
        partition moves on and nothing is lost. Each dead letter names the sink
        (``sink``: its name, ``sink_type``): ``dlq replay`` offers the row to that sink
        only, the topic's other sinks had it already. ``sink``: the topic's only sink
        when not given."""
        if sink is None:
            sink = self.topic.named_sinks()[0]
        kind = sink.settings.type
        what = ("could not send the rows" if status == 0  # e.g. a URL template field missing
                else f"answered {status}")
        named = f"{kind} sink" if sink.name == kind else f"{kind} sink {sink.name!r}"
        error = PermanentSinkError(f"{named} {what}: {body_head[:200]}")
        for row in rows:
            self.stats["failed"] += 1
            # The batch is not acked until every line is written: retried until then, or
            # until the stop's abort cancels the sink (then nothing of it is committed).
            await self.write(dead_letter_line(
                group=self.group_id, topic=str(row.get("_topic", self.topic.topic)),
                partition=int(row.get("_partition", -1)), offset=int(row.get("_offset", -1)),
                timestamp=int(row.get("_timestamp", 0)), key=None,
                value=json.dumps(row, default=str).encode(), headers=(),
                processor=self.topic.processor, exc=error, attempts=1,
                extra={"sink": sink.name, "sink_type": kind, "status": status,
                       "response_body": body_head},
            ), _sleep_on)
        logger.warning("%s: %d row(s) refused by sink %r with status %d; dead-lettered to %s",
                       self.label, len(rows), sink.name, status,
                       self._places)

    async def write(self, line: str, sleep: Sleep) -> bool:
        """Write one dead-letter line durably, then (when configured) produce it to the
        dead-letter topic and wait for ``acks=all``; False if ``sleep`` is interrupted
        first.

        A failed write (a full disk: ENOSPC, EFBIG; EIO; a broker outage) is not a fact
        about the message: it is retried with backoff, never skipped, and shown as
        :attr:`error` until a write succeeds. The message stays uncommitted.
        The file goes first: it is local, and an operator sees the failure with ``kstage
        dlq show`` while the broker is out; the topic is retried alone after that.
        """
        if self.file is not None and not await self._retried(
                self.file.write, line, sleep,
                f"the dead-letter file {self.file.path}"):
            return False
        if self.dead_letter_topic is not None and not await self._retried(
                self.dead_letter_topic.write, line, sleep,
                f"the dead-letter topic {self.dead_letter_topic.topic}"):
            return False
        self.stats["dead_lettered"] += 1
        return True

    async def _retried(self, write: Callable[[str], Any], line: str, sleep: Sleep,
                       where: str) -> bool:
        """``await write(line)`` until it succeeds (True) or ``sleep`` is interrupted."""
        attempt = 0
        while True:
            try:
                await write(line)
            except (OSError, KafkaError) as exc:
                delay = backoff_s(attempt, *_DEAD_LETTER_BACKOFF_S)
                why = exc if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
                self.error = f"cannot write {where}: {why}"
                logger.warning("%s: %s; retrying in %.1fs", self.label,
                               self.error, delay)
                if not await sleep(delay):
                    return False
                attempt += 1
                continue
            if self.error is not None:
                logger.info("%s: %s is writable again", self.label, where)
                self.error = None
            return True


__all__ = ["DeadLetters"]
