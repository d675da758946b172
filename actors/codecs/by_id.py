"""The part every registry format shares: writer schemas by the id in a value's header.

Wire format (Confluent's): byte 0 is the magic byte ``0``; then the writer schema id
(4-byte big-endian int, or, in WhereHows' variant, 8-byte long or 16-byte UUID, chosen
per registry with ``schema_registry.id_type``); then the body in the schema's format
(:mod:`~actors.codecs.avro`, :mod:`~actors.codecs.protobuf`,
:mod:`~actors.codecs.json_schema`).

Decoding is split so the per-message hot path never awaits:

* :meth:`SchemaIdDecoder.missing` finds the schema ids of a batch that are not cached yet;
* :meth:`SchemaIdDecoder.fetch` loads one id from the registry (the only I/O), builds
  what the format decodes with (:meth:`SchemaIdDecoder.build`) and caches it (ids are
  immutable: forever). A registry's 404 for an id is retriable
  (:class:`~actors.codecs.schema_registry.SchemaNotFoundYet`) until ``not_found_retry_s``
  have passed since the id's first 404: registries answer 404 for ids that exist while
  they reload them (Karapace after a restart), and an id a producer used is almost never
  truly unknown. Only then is the id unknown (poison), and that verdict is kept for the
  one batch that asked, never longer: the next :meth:`SchemaIdDecoder.missing` forgets
  it, so a later message with the id asks the registry again (issue 11). A schema that
  does not build (bad text, a wrong ``schemaType``) poisons its messages, forever;
* :meth:`SchemaIdDecoder.screen` checks a batch's values where checking them may cost
  without bound (JSON Schema validation: in a child process, within a budget) and gives
  the poison among them; the record pipeline awaits it before decoding the batch;
* ``decode`` is synchronous (each format's own).

Bad input is classified, never guessed: a wrong magic byte, a short header, an unknown
schema id or an undecodable body raise :class:`PoisonMessage` carrying the schema id and
the first bytes in hex (they go to the dead-letter line). A registry that cannot be
reached raises the registry's retriable error from :meth:`SchemaIdDecoder.fetch` instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from actors.codecs.schema_registry import SchemaNotFound, SchemaNotFoundYet
from processors.errors import PoisonMessage

logger = logging.getLogger(__name__)

MAGIC = 0
REGISTRY_FORMATS = ("avro", "protobuf", "json_schema")
"""The value formats read in the registry's wire format, with the writer's schema by id."""
ID_SIZES = {"int": 4, "long": 8, "uuid": 16}
_HEAD_BYTES = 32


class SchemaSource(Protocol):
    """What the Avro decoder needs from a registry: the writer schema text of an id."""

    async def get_schema(self, schema_id: int | str) -> str: ...


def head_hex(raw: bytes | None) -> str:
    """The first bytes of a value in hex, for error messages and dead-letter lines."""
    return "" if raw is None else raw[:_HEAD_BYTES].hex()


def poison(message: str, raw: bytes | None, schema_id: int | str | None = None
           ) -> PoisonMessage:
    exc = PoisonMessage(message)
    exc.details = {"schema_id": schema_id, "value_head_hex": head_hex(raw)}
    return exc


class SchemaIdDecoder:
    """Caches what a format decodes with, by the raw id bytes of the header.

    Args:
        source: the registry (the format's subclass says what it needs of it).
        id_type: ``int`` (4 bytes), ``long`` (8) or ``uuid`` (16).
        not_found_retry_s: how long a registry's 404 for an id is retriable, from the
            id's first 404, before the id counts as unknown (0: at once).
        clock: monotonic seconds (tests inject a fake clock).
    """

    format_name = ""  # in error messages: "not schema-registry <format_name>"

    def __init__(self, source: Any, id_type: str = "int", *, not_found_retry_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if id_type not in ID_SIZES:
            raise ValueError(f"id_type must be one of {sorted(ID_SIZES)}, not {id_type!r}")
        self._source = source
        self.id_type = id_type
        self._end = 1 + ID_SIZES[id_type]
        self.not_found_retry_s = not_found_retry_s
        self._clock = clock
        # raw id bytes -> what the format decodes with, or the exception that poisons its
        # messages (a schema that does not build: forever; an unknown id: see _unknown)
        self._schemas: dict[bytes, Any] = {}
        # ids whose entry in _schemas is an unknown-id verdict: dropped by the next
        # missing(), so no negative result outlives the batch that asked for it
        self._unknown: set[bytes] = set()
        # raw id bytes -> (first, last) clock time of the id's current run of 404s
        self._not_found: dict[bytes, tuple[float, float]] = {}

    @property
    def header_size(self) -> int:
        """The wire-format header's bytes: the magic byte and the id."""
        return self._end

    def schema_id(self, id_bytes: bytes) -> int | str:
        """The registry id for the raw id bytes of a header."""
        if self.id_type == "uuid":
            return id_bytes.hex()
        return int.from_bytes(id_bytes, "big", signed=self.id_type == "long")

    def header_id(self, raw: bytes | None) -> bytes | None:
        """The raw id bytes of a well-formed header, else None."""
        end = self._end
        if raw is None or len(raw) < end or raw[0] != MAGIC:
            return None
        return raw[1:end]

    def missing(self, values: Iterable[bytes | None]) -> set[bytes]:
        """Raw ids of well-formed headers in ``values`` whose schema is not cached.

        Unknown-id verdicts of the previous call are forgotten first: their ids are
        missing again, so the registry is asked again (it may know them by now).
        """
        if self._unknown:
            for id_bytes in self._unknown:
                del self._schemas[id_bytes]
            self._unknown.clear()
        end, schemas = self._end, self._schemas
        return {
            raw[1:end] for raw in values
            if raw is not None and len(raw) >= end and raw[0] == MAGIC
            and raw[1:end] not in schemas
        }

    async def build(self, id_bytes: bytes, schema_id: int | str) -> Any:
        """Fetch the writer schema of an id and build what its messages decode with.

        Registry errors propagate (a 404 as SchemaNotFound); a schema that does not build
        raises PoisonMessage."""
        raise NotImplementedError

    def decode(self, raw: bytes | None) -> Any:
        """Decode one value (None stays None); PoisonMessage for every bad input.
        Values of a batch go through :meth:`screen` first."""
        raise NotImplementedError

    async def screen(self, raws: Sequence[bytes | None], where: Sequence[str]
                     ) -> dict[int, PoisonMessage]:
        """The poison among a batch's values (schemas fetched) by index, found off the
        event loop (``where``: each value's coordinates, for errors); what :meth:`decode`
        may then skip. Here: none (decoding is bounded by the body's size)."""
        return {}

    async def close(self) -> None:
        """Release what :meth:`screen` holds (a child process)."""

    async def fetch(self, id_bytes: bytes) -> None:
        """Load, build and cache one writer schema (registry errors propagate).

        Raises:
            SchemaNotFoundYet: the registry answered 404 for the id (or a schema it
                references), and its first 404 was less than ``not_found_retry_s`` ago
                (retriable; nothing cached).
        """
        sid = self.schema_id(id_bytes)
        try:
            built = await self.build(id_bytes, sid)
        except SchemaNotFound as exc:
            self._not_found_answer(id_bytes, sid, exc)
            # Unknown: poison for the messages of the batch that asked, no longer.
            self._schemas[id_bytes] = exc
            self._unknown.add(id_bytes)
            return
        except PoisonMessage as exc:  # a schema that does not build poisons its messages
            self._not_found.pop(id_bytes, None)
            self._schemas[id_bytes] = exc
            return
        self._not_found.pop(id_bytes, None)
        self._schemas[id_bytes] = built
        logger.debug("cached writer schema id %s", sid)

    def _not_found_answer(self, id_bytes: bytes, sid: int | str, exc: Exception) -> None:
        """Record a 404 for an id; raise SchemaNotFoundYet while its window is open.

        Only a registry's HTTP 404 is retried: an impossible id, or one missing from a
        ``file://`` directory's index (read once at start), cannot appear later.
        """
        window = self.not_found_retry_s
        if getattr(exc, "status_code", None) != 404 or window <= 0:
            return
        now = self._clock()
        # A run of 404s that went quiet for a whole window is over: the id's next 404
        # opens a new window (and ids seen once do not pile up here).
        for key in [k for k, (_, last) in self._not_found.items() if now - last > window]:
            del self._not_found[key]
        first = self._not_found.get(id_bytes, (now, now))[0]
        self._not_found[id_bytes] = (first, now)
        waited = now - first
        if waited < window:
            raise SchemaNotFoundYet(
                f"schema id {sid} not found (yet) for {waited:.1f}s: {exc}",
                schema_id=sid, waited_s=waited, remaining_s=window - waited,
                status_code=404, error_code=getattr(exc, "error_code", None)) from exc
        logger.warning("schema id %s: the registry answered 404 for %.1fs "
                       "(schema_registry.not_found_retry_s %s): unknown id", sid, waited,
                       window)

    def writer(self, raw: bytes) -> tuple[bytes, Any]:
        """``(id bytes, what the body decodes with)`` of a value; PoisonMessage for a
        short header, a wrong magic byte, an unknown id or a schema that did not build."""
        end = self._end
        if len(raw) < end:
            raise poison(f"value of {len(raw)} bytes is shorter than the {end}-byte "
                         "wire-format header", raw)
        if raw[0] != MAGIC:
            raise poison(f"wrong magic byte 0x{raw[0]:02x} (expected 0x00): not "
                         f"schema-registry {self.format_name}", raw)
        id_bytes = raw[1:end]
        built = self._schemas.get(id_bytes)
        if built is None:
            raise RuntimeError(f"schema id {self.schema_id(id_bytes)} was not fetched "
                               "before decoding")  # a bug, not bad input
        if isinstance(built, Exception):
            sid = self.schema_id(id_bytes)
            text = (f"unknown schema id {sid}: {built}" if isinstance(built, SchemaNotFound)
                    else str(built))  # a schema that does not build names its id
            raise poison(text, raw, sid) from built
        return id_bytes, built

    def writer_and_id(self, raw: bytes) -> tuple[Any, int | str]:
        """``(writer schema, its registry id)`` of a value, as a processor with
        :attr:`~processors.base.Processor.wants_value_schema` reads it
        (:attr:`Message.value_schema <processors.base.Message.value_schema>`): what the
        body decodes with (see :meth:`writer`), unless the format says otherwise."""
        id_bytes, built = self.writer(raw)
        return built, self.schema_id(id_bytes)
