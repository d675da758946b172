"""The screen of a batch before it is decoded: what makes a message poison without
decoding it inline, on the event loop (issue 33).

* A value or key longer than the topic's ``max_message_bytes`` is poison before any
  decoding, naming the cap, its size and its coordinates.
* A record of a compressed batch refused at inflation (a :class:`RefusedRecord`, past
  ``kafka.max_batch_inflated_bytes``: :mod:`actors.worker.refused`) is poison naming the
  batch, its codec and the cap.
* The value decoder's :meth:`~actors.codecs.by_id.SchemaIdDecoder.screen` finds the
  poison whose check costs without bound (JSON Schema validation, in a child process
  within ``validate_budget_s`` a value: :mod:`actors.codecs.sandbox`).

It also says why a batch waits for its writer schemas (:func:`schema_wait`).

A child process that keeps dying is not the messages' fault: the batch waits (backing
off, shown in ``/readyz`` through :attr:`Screen.waiting_for`) and is screened again, until
it passes or the worker stops.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from actors.backoff import backoff_s
from actors.codecs.by_id import SchemaIdDecoder, head_hex
from actors.codecs.sandbox import SandboxUnavailable
from actors.codecs.schema_registry import SchemaNotFoundYet
from actors.failure import Sleep
from actors.worker.records import RecordLike, RefusedRecord
from processors.errors import PoisonMessage, ProcessorError
from settings.models import TopicSettings

logger = logging.getLogger(__name__)

_BACKOFF_S = (0.5, 30.0)


class Screen:
    """Poison verdicts on a batch before its walk (see the module doc).

    Args:
        topic: the topic's settings (``max_message_bytes``).
        decoder: the value decoder of a registry format (None: none to ask).
        label: the owner's name in log lines.
    """

    def __init__(self, topic: TopicSettings, decoder: SchemaIdDecoder | None,
                 label: str) -> None:
        self.cap = topic.max_message_bytes
        self.decoder = decoder
        self.label = label
        self.waiting_for: str | None = None  # why the batch waits (for /readyz)

    def __repr__(self) -> str:
        return f"<Screen cap={self.cap} decoder={type(self.decoder).__name__}>"

    async def verdicts(self, records: Sequence[RecordLike], sleep: Sleep
                       ) -> dict[int, PoisonMessage] | None:
        """The poison of ``records`` by index; None when a stop ended a wait."""
        cap = self.cap
        found: dict[int, PoisonMessage] = {}
        for k in [k for k, r in enumerate(records)  # one cheap pass: the hot path
                  if (r.value is not None and len(r.value) > cap)
                  or (r.key is not None and len(r.key) > cap)
                  or (r.value is None and type(r) is RefusedRecord)]:
            rec = records[k]
            if isinstance(rec, RefusedRecord):
                found[k] = PoisonMessage(rec.reason)
                continue
            what, raw = (("value", rec.value) if rec.value is not None and len(rec.value) > cap
                         else ("key", rec.key))
            exc = PoisonMessage(
                f"{what} of {len(raw or b'')} bytes at {rec.topic}[{rec.partition}]@"
                f"{rec.offset} is over max_message_bytes {cap}: not decoded")
            exc.details = {"value_head_hex": head_hex(rec.value)}
            found[k] = exc
        if self.decoder is None:
            return found
        rest = [k for k in range(len(records)) if k not in found]
        attempt = 0
        while True:
            try:
                screened = await self.decoder.screen(
                    [records[k].value for k in rest],
                    [f"{records[k].topic}[{records[k].partition}]@{records[k].offset}"
                     for k in rest])
                break
            except SandboxUnavailable as exc:
                delay = backoff_s(attempt, *_BACKOFF_S)
                self.waiting_for = f"JSON Schema validation: {exc}"
                logger.warning("%s: %s; retrying in %.1fs", self.label, exc, delay)
                attempt += 1
                if not await sleep(delay):
                    return None
            finally:
                self.waiting_for = None
        found.update((rest[j], exc) for j, exc in screened.items())
        return found


def schema_wait(label: str, decoder: SchemaIdDecoder, records: Sequence[RecordLike],
                values: list[bytes | None], waiting: list[tuple[bytes, ProcessorError]],
                delay: float) -> tuple[float, str]:
    """Log why a batch waits for schema ids (the record pipeline's ``fetch_schemas``):
    the seconds to wait, and the reason for ``/readyz``."""
    id_bytes, exc = next(((i, e) for i, e in waiting if not isinstance(e, SchemaNotFoundYet)),
                         waiting[0])
    sid = decoder.schema_id(id_bytes)
    if not isinstance(exc, SchemaNotFoundYet):
        logger.warning("%s: schema registry unavailable for id %s (%s); retrying in %.1fs",
                       label, sid, exc, delay)
        return delay, f"schema registry unavailable for schema id {sid}"
    remaining = min(e.remaining_s for _, e in waiting if isinstance(e, SchemaNotFoundYet))
    wait = min(delay, remaining)
    rec = next(r for r, v in zip(records, values, strict=True)
               if decoder.header_id(v) == id_bytes)
    where = f"{rec.topic}[{rec.partition}]@{rec.offset}"
    more = f" and {len(waiting) - 1} more id(s)" if len(waiting) > 1 else ""
    logger.warning("%s: schema registry answers 404 for schema id %s of %s%s (for %.1fs); "
                   "retrying in %.1fs, for %.1fs more before it counts as unknown",
                   label, sid, where, more, exc.waited_s, wait, exc.remaining_s)
    return wait, (f"schema registry: 404 for schema id {sid} ({where}){more} for "
                  f"{exc.waited_s:.0f}s; unknown in {exc.remaining_s:.0f}s")


__all__ = ["Screen", "schema_wait"]
