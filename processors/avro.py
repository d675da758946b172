"""Avro values in the Confluent wire format and in WhereHows' variant.

Wire format: byte 0 is the magic byte ``0``; then the writer schema id (4-byte
big-endian int for Confluent, or, in WhereHows' variant, 8-byte long or 16-byte UUID,
chosen per registry with ``schema_registry.id_type``); then the Avro binary body.

Decoding is split so the per-message hot path never awaits:

* :meth:`AvroDecoder.missing` finds the schema ids of a batch that are not cached yet;
* :meth:`AvroDecoder.fetch` loads one id from the registry (the only I/O), parses and
  caches it; an unknown id (404) is remembered as poison for that id;
* :meth:`AvroDecoder.decode` is synchronous: header check, cached-schema lookup by the
  raw id bytes (no int conversion), ``fastavro.schemaless_reader``.

Bad input is classified, never guessed: a wrong magic byte, a short header, an unknown
schema id or a truncated/undecodable body raise :class:`PoisonMessage` carrying the
schema id and the first bytes in hex (they go to the dead-letter line). A registry that
cannot be reached raises the registry's retriable error from :meth:`fetch` instead.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from io import BytesIO
from pathlib import Path
from typing import Any, Protocol

from fastavro import parse_schema, schemaless_reader

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
    """

    def __init__(self, source: SchemaSource, id_type: str = "int",
                 reader_schema: Any = None) -> None:
        if id_type not in ID_SIZES:
            raise ValueError(f"id_type must be one of {sorted(ID_SIZES)}, not {id_type!r}")
        self._source = source
        self.id_type = id_type
        self._end = 1 + ID_SIZES[id_type]
        self._reader = reader_schema
        # raw id bytes -> parsed writer schema, or the PoisonMessage for an unknown id
        self._schemas: dict[bytes, Any] = {}

    def schema_id(self, id_bytes: bytes) -> int | str:
        """The registry id for the raw id bytes of a header."""
        if self.id_type == "uuid":
            return id_bytes.hex()
        return int.from_bytes(id_bytes, "big", signed=self.id_type == "long")

    def missing(self, values: Iterable[bytes | None]) -> set[bytes]:
        """Raw ids of well-formed headers in ``values`` whose schema is not cached."""
        end, schemas = self._end, self._schemas
        return {
            raw[1:end] for raw in values
            if raw is not None and len(raw) >= end and raw[0] == MAGIC
            and raw[1:end] not in schemas
        }

    async def fetch(self, id_bytes: bytes) -> None:
        """Load, parse and cache one writer schema (registry errors propagate)."""
        from processors.schema_registry import SchemaNotFound  # noqa: PLC0415 - avoid cycle

        sid = self.schema_id(id_bytes)
        try:
            text = await self._source.get_schema(sid)
        except SchemaNotFound as exc:
            self._schemas[id_bytes] = exc  # poison for every message with this id
            return
        try:
            self._schemas[id_bytes] = parse_schema(json.loads(text))
        except Exception as exc:  # noqa: BLE001 - a broken schema poisons its messages
            self._schemas[id_bytes] = PoisonMessage(
                f"writer schema id {sid} from the registry does not parse: {exc}")
        logger.debug("cached writer schema id %s", sid)

    def decode(self, raw: bytes | None) -> Any:
        """Decode one value; raises PoisonMessage for every kind of bad input."""
        if raw is None:
            return None
        end = self._end
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
        except Exception as exc:  # noqa: BLE001 - fastavro raises many types on bad bodies
            raise poison(
                f"undecodable Avro body for schema id {self.schema_id(id_bytes)} "
                f"({type(exc).__name__}: {exc})", raw, self.schema_id(id_bytes)) from exc


def encode(schema: Any, schema_id: int | str, record: Any, id_type: str = "int") -> bytes:
    """Encode ``record`` in the wire format (for producers, tools and tests)."""
    from fastavro import schemaless_writer  # noqa: PLC0415

    if id_type == "uuid":
        header = bytes([MAGIC]) + bytes.fromhex(str(schema_id))
    else:
        header = bytes([MAGIC]) + int(schema_id).to_bytes(ID_SIZES[id_type], "big",
                                                          signed=id_type == "long")
    out = BytesIO()
    out.write(header)
    schemaless_writer(out, schema, record)
    return out.getvalue()
