"""Rows ``schema_rows`` makes of wire-format records, decoded as a worker decodes them:
the writer schemas fetched from the registry by the format's decoder, each value given
to the processor with its writer schema (:meth:`SchemaIdDecoder.writer_and_id`)."""

from __future__ import annotations

from typing import Any

from actors.codecs.by_id import SchemaIdDecoder
from processors.base import Message
from processors.schema_rows import SchemaRowsProcessor


async def schema_rows(decoder: SchemaIdDecoder, raws: list[bytes],
                      processor: SchemaRowsProcessor | None = None,
                      ) -> tuple[list[dict[str, Any]], SchemaRowsProcessor]:
    """The rows (without the Kafka coordinate columns) of ``raws`` and the processor
    that made them (its live columns say the table's)."""
    for id_bytes in decoder.missing(raws):
        await decoder.fetch(id_bytes)
    p = processor if processor is not None else SchemaRowsProcessor()
    rows = []
    for offset, raw in enumerate(raws):
        schema, sid = decoder.writer_and_id(raw)
        message = Message("topic", 0, offset, 0, None, decoder.decode(raw), [], raw,
                          value_schema=schema, value_schema_id=sid)
        rows.append({k: v for k, v in p.transform(message)[0].items()
                     if not k.startswith("_")})
    return rows, p
