"""Avro values in the Confluent wire format and in WhereHows' variant.

The header, the cache of writer schemas by id, the registry's 404 window and the poison
verdicts are :mod:`~actors.codecs.by_id`'s; the body is Avro binary.
:meth:`AvroDecoder.decode` is synchronous: header check, cached-schema lookup by the raw
id bytes (no int conversion), then cavro's decode where it gives fastavro's results,
else ``fastavro.schemaless_reader`` (:mod:`actors.codecs.avro_fast`). A truncated or
undecodable body raises :class:`PoisonMessage` carrying the schema id and the first bytes
in hex. Hostile bodies stay bounded (:mod:`actors.codecs.avro_shape`): a recursive writer
schema's bodies are decoded by fastavro's pure-Python reader (depth bounded by the
interpreter's recursion limit: the C decoders would crash the process), and a schema
with an array of items encoded in no bytes poisons its messages.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import Any

from actors.codecs.avro_fast import FastDecode, fast_decoder
from actors.codecs.avro_shape import shape
from actors.codecs.by_id import ID_SIZES, MAGIC, SchemaIdDecoder, SchemaSource, head_hex, poison
from processors.errors import PoisonMessage

logger = logging.getLogger(__name__)

__all__ = ["ID_SIZES", "MAGIC", "AvroDecoder", "SchemaSource", "encode", "head_hex",
           "load_schema", "poison"]


def load_schema(path: str | Path) -> Any:
    """Parse an ``.avsc`` file (named types resolved) for use as a reader schema."""
    from fastavro import parse_schema  # fastavro only where Avro is read

    with open(path, encoding="utf-8") as fh:
        return parse_schema(json.load(fh))


class AvroDecoder(SchemaIdDecoder):
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

    format_name = "Avro"

    def __init__(self, source: SchemaSource, id_type: str = "int",
                 reader_schema: Any = None, *, not_found_retry_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(source, id_type, not_found_retry_s=not_found_retry_s, clock=clock)
        # fastavro is imported by a decoder, not by this module: a process whose topics
        # read JSON never loads it (issue 36, a quick start)
        from fastavro import parse_schema, schemaless_reader
        from fastavro._read_py import schemaless_reader as py_schemaless_reader

        self._parse_schema = parse_schema
        self._read_c, self._read_py = schemaless_reader, py_schemaless_reader
        self._reader = reader_schema
        # raw id bytes -> cavro's decode of the writer schema, where it gives fastavro's
        # results and no reader schema asks for resolution (actors/codecs/avro_fast.py)
        self._fast: dict[bytes, FastDecode] = {}
        self._recursive: set[bytes] = set()  # ids of recursive writer schemas
        # raw id bytes -> the writer schema's text, for the ids read without resolution
        # whose shape is bounded (what a batch may be decoded at once with: plain_writer)
        self._plain: dict[bytes, str] = {}

    async def build(self, id_bytes: bytes, schema_id: int | str) -> Any:
        text = await self._source.get_schema(schema_id)
        try:
            parsed = self._parse_schema(json.loads(text))
        except Exception as exc:  # a broken schema poisons its messages
            raise PoisonMessage(
                f"writer schema id {schema_id} from the registry does not parse: {exc}"
            ) from exc
        found = shape(json.loads(text))
        if found["zero_items"]:
            raise PoisonMessage(
                f"writer schema id {schema_id} has an array of items encoded in no bytes "
                "(null, a record without fields, a fixed of size 0): a message could declare "
                "any number of them in a few bytes, its messages are not decoded")
        if found["recursive"]:
            self._recursive.add(id_bytes)
        fast = (fast_decoder(json.loads(text))
                if self._reader is None and not found["recursive"] else None)
        if fast is not None:
            self._fast[id_bytes] = fast
        if self._reader is None and not found["recursive"]:
            self._plain[id_bytes] = text
        return parsed

    def plain_writer(self, id_bytes: bytes) -> str | None:
        """The writer schema text of an id whose bodies are read as written (no reader
        schema to resolve against, not recursive), else None: what a whole batch of its
        bodies may be decoded with at once (:mod:`actors.codecs.avro_block`)."""
        return self._plain.get(id_bytes)

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
        id_bytes, writer = self.writer(raw)
        fo = BytesIO(raw)
        fo.seek(end)
        read = self._read_py if id_bytes in self._recursive else self._read_c
        try:
            return read(fo, writer, self._reader)
        except RecursionError:
            sid = self.schema_id(id_bytes)
            raise poison(f"Avro body for schema id {sid} nested too deeply (deeper than the "
                         "interpreter's recursion limit)", raw, sid) from None
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
