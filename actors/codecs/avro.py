"""Avro values in the Confluent wire format and in WhereHows' variant.

Wire format: byte 0 is the magic byte ``0``; then the writer schema id (4-byte
big-endian int for Confluent, or, in WhereHows' variant, 8-byte long or 16-byte UUID,
chosen per registry with ``schema_registry.id_type``); then the Avro binary body.

Decoding is split so the per-message hot path never awaits:

* :meth:`AvroDecoder.missing` finds the schema ids of a batch that are not cached yet;
* :meth:`AvroDecoder.fetch` loads one id from the registry (the only I/O), parses and
  caches it (ids are immutable: forever). A registry's 404 for an id is retriable
  (:class:`~actors.codecs.schema_registry.SchemaNotFoundYet`) until ``not_found_retry_s``
  have passed since the id's first 404: registries answer 404 for ids that exist while
  they reload them (Karapace after a restart), and an id a producer used is almost never
  truly unknown. Only then is the id unknown (poison), and that verdict is kept for the
  one batch that asked, never longer: the next :meth:`AvroDecoder.missing` forgets it, so
  a later message with the id asks the registry again (issue 11);
* :meth:`AvroDecoder.decode` is synchronous: header check, cached-schema lookup by the
  raw id bytes (no int conversion), then cavro's decode where it gives fastavro's
  results, else ``fastavro.schemaless_reader`` (:mod:`actors.codecs.avro_fast`).

Bad input is classified, never guessed: a wrong magic byte, a short header, an unknown
schema id or a truncated/undecodable body raise :class:`PoisonMessage` carrying the
schema id and the first bytes in hex (they go to the dead-letter line). A registry that
cannot be reached raises the registry's retriable error from :meth:`fetch` instead.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from io import BytesIO
from pathlib import Path
from typing import Any, Protocol

from fastavro import parse_schema, schemaless_reader

from actors.codecs.avro_fast import FastDecode, fast_decoder
from processors.errors import PoisonMessage

logger = logging.getLogger(__name__)

MAGIC = 0
ID_SIZES = {"int": 4, "long": 8, "uuid": 16}
_HEAD_BYTES = 32


class SchemaSource(Protocol):
    """What the decoder needs from a registry: the writer schema text of an id."""

    async def get_schema(self, schema_id: int | str) -> str: ...


def head_hex(raw: bytes | None) -> str:
    """The first bytes of a value in hex, for error messages and dead-letter lines."""
    return "" if raw is None else raw[:_HEAD_BYTES].hex()


def poison(message: str, raw: bytes | None, schema_id: int | str | None = None
           ) -> PoisonMessage:
    exc = PoisonMessage(message)
    exc.details = {"schema_id": schema_id, "value_head_hex": head_hex(raw)}
    return exc


def load_schema(path: str | Path) -> Any:
    """Parse an ``.avsc`` file (named types resolved) for use as a reader schema."""
    with open(path, encoding="utf-8") as fh:
        return parse_schema(json.load(fh))


class AvroDecoder:
    """Decodes wire-format Avro with writer schemas from a registry, cached by id.

    Args:
        source: the registry (Confluent REST, WhereHows, or a ``file://`` directory).
        id_type: ``int`` (4 bytes), ``long`` (8) or ``uuid`` (16).
        reader_schema: parsed reader schema; writer data is resolved against it by the
            Avro resolution rules (schema evolution). None reads with the writer schema.
        not_found_retry_s: how long a registry's 404 for an id is retriable, from the
            id's first 404, before the id counts as unknown (0: at once).
        clock: monotonic seconds (tests inject a fake clock).
    """

    def __init__(self, source: SchemaSource, id_type: str = "int",
                 reader_schema: Any = None, *, not_found_retry_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if id_type not in ID_SIZES:
            raise ValueError(f"id_type must be one of {sorted(ID_SIZES)}, not {id_type!r}")
        self._source = source
        self.id_type = id_type
        self._end = 1 + ID_SIZES[id_type]
        self._reader = reader_schema
        self.not_found_retry_s = not_found_retry_s
        self._clock = clock
        # raw id bytes -> parsed writer schema, or the exception that poisons its messages
        # (a schema that does not parse: forever; an unknown id: see _unknown)
        self._schemas: dict[bytes, Any] = {}
        # raw id bytes -> cavro's decode of the writer schema, where it gives fastavro's
        # results and no reader schema asks for resolution (actors/codecs/avro_fast.py)
        self._fast: dict[bytes, FastDecode] = {}
        # ids whose entry in _schemas is an unknown-id verdict: dropped by the next
        # missing(), so no negative result outlives the batch that asked for it
        self._unknown: set[bytes] = set()
        # raw id bytes -> (first, last) clock time of the id's current run of 404s
        self._not_found: dict[bytes, tuple[float, float]] = {}

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

    async def fetch(self, id_bytes: bytes) -> None:
        """Load, parse and cache one writer schema (registry errors propagate).

        Raises:
            SchemaNotFoundYet: the registry answered 404 for the id, and its first 404
                was less than ``not_found_retry_s`` ago (retriable; nothing cached).
        """
        from actors.codecs.schema_registry import SchemaNotFound  # avoid cycle

        sid = self.schema_id(id_bytes)
        try:
            text = await self._source.get_schema(sid)
        except SchemaNotFound as exc:
            self._not_found_answer(id_bytes, sid, exc)
            # Unknown: poison for the messages of the batch that asked, no longer.
            self._schemas[id_bytes] = exc
            self._unknown.add(id_bytes)
            return
        self._not_found.pop(id_bytes, None)
        try:
            self._schemas[id_bytes] = parse_schema(json.loads(text))
        except Exception as exc:  # noqa: BLE001 - a broken schema poisons its messages
            self._schemas[id_bytes] = PoisonMessage(
                f"writer schema id {sid} from the registry does not parse: {exc}")
        else:
            fast = fast_decoder(json.loads(text)) if self._reader is None else None
            if fast is not None:
                self._fast[id_bytes] = fast
        logger.debug("cached writer schema id %s", sid)

    def _not_found_answer(self, id_bytes: bytes, sid: int | str, exc: Exception) -> None:
        """Record a 404 for an id; raise SchemaNotFoundYet while its window is open.

        Only a registry's HTTP 404 is retried: an impossible id, or one missing from a
        ``file://`` directory's index (read once at start), cannot appear later.
        """
        from actors.codecs.schema_registry import SchemaNotFoundYet  # cycle

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

    def decode(self, raw: bytes | None) -> Any:
        """Decode one value; raises PoisonMessage for every kind of bad input."""
        if raw is None:
            return None
        end = self._end
        fast = self._fast.get(raw[1:end]) if raw[:1] == b"\x00" else None
        if fast is not None:
            try:
                return fast(raw[end:])
            except Exception:  # noqa: BLE001, S110 - fastavro's value or error stands
                pass
        if len(raw) < end:
            raise poison(f"value of {len(raw)} bytes is shorter than the {end}-byte "
                         "wire-format header", raw)
        if raw[0] != MAGIC:
            raise poison(f"wrong magic byte 0x{raw[0]:02x} (expected 0x00): not "
                         "schema-registry Avro", raw)
        id_bytes = raw[1:end]
        writer = self._schemas.get(id_bytes)
        if writer is None:
            raise RuntimeError(f"schema id {self.schema_id(id_bytes)} was not fetched "
                               "before decoding")  # a bug, not bad input
        if isinstance(writer, Exception):
            raise poison(f"unknown schema id {self.schema_id(id_bytes)}: {writer}", raw,
                         self.schema_id(id_bytes)) from writer
        fo = BytesIO(raw)
        fo.seek(end)
        try:
            return schemaless_reader(fo, writer, self._reader)
        except Exception as exc:  # fastavro raises many types on bad bodies
            raise poison(
                f"undecodable Avro body for schema id {self.schema_id(id_bytes)} "
                f"({type(exc).__name__}: {exc})", raw, self.schema_id(id_bytes)) from exc


def encode(schema: Any, schema_id: int | str, record: Any, id_type: str = "int") -> bytes:
    """Encode ``record`` in the wire format (for producers, tools and tests)."""
    from fastavro import schemaless_writer

    if id_type == "uuid":
        header = bytes([MAGIC]) + bytes.fromhex(str(schema_id))
    else:
        header = bytes([MAGIC]) + int(schema_id).to_bytes(ID_SIZES[id_type], "big",
                                                          signed=id_type == "long")
    out = BytesIO()
    out.write(header)
    schemaless_writer(out, schema, record)
    return out.getvalue()
