"""Test records built from the real Avro schemas under ``processors/schemas``.

:func:`avro_message` validates a Python dict against a schema (strictly: no unknown
fields), encodes it with ``fastavro.schemaless_writer`` and decodes it again with
``schemaless_reader``, so the value a processor sees is exactly what decoding yields
(bytes stay bytes, enums become str, defaults are filled in). The result is wrapped in a
:class:`processors.base.Message` with the encoded bytes as ``raw``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from io import BytesIO
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.validation import validate

from processors.base import COORDINATE_COLUMNS, SCHEMA_DIR, Message, Processor, Row

TIMESTAMP = 1_700_000_000_000


@cache
def schema(path: str) -> Any:
    """The parsed schema at ``path`` (relative to SCHEMA_DIR)."""
    return parse_schema(json.loads((SCHEMA_DIR / path).read_text(encoding="utf-8")))


def roundtrip(path: str, record: dict[str, Any]) -> tuple[Any, bytes]:
    """Validate ``record`` against the schema at ``path``, encode and decode it.

    Returns:
        (the decoded value, the encoded bytes).
    """
    parsed = schema(path)
    validate(record, parsed, raise_errors=True, strict=True)
    out = BytesIO()
    schemaless_writer(out, parsed, record)
    raw = out.getvalue()
    return schemaless_reader(BytesIO(raw), parsed, parsed), raw


def avro_message(
    path: str,
    record: dict[str, Any],
    *,
    topic: str = "topic",
    partition: int = 0,
    offset: int = 0,
    timestamp: int = TIMESTAMP,
    key: bytes | None = None,
    headers: Sequence[tuple[str, bytes]] = (),
) -> Message:
    """A Message whose value is ``record`` round-tripped through the schema at ``path``."""
    value, raw = roundtrip(path, record)
    return Message(topic=topic, partition=partition, offset=offset, timestamp=timestamp,
                   key=key, value=value, headers=tuple(headers), raw=raw)


PY_TYPES: dict[str, type] = {"string": str, "long": int, "int": int, "boolean": bool}


def assert_row_honest(proc: type[Processor], message: Message, row: Row) -> None:
    """The row has exactly the declared columns plus the coordinates, with their types."""
    assert set(row) == {c.name for c in proc.columns} | set(COORDINATE_COLUMNS)
    assert {k: row[k] for k in COORDINATE_COLUMNS} == message.coordinates()
    for col in proc.columns:
        value = row[col.name]
        if value is None:
            assert col.nullable, f"{col.name} is NOT NULL but None"
            continue
        assert type(value) is PY_TYPES[col.type], (col.name, value)
        if col.type == "int":
            assert isinstance(value, int) and -(2**31) <= value < 2**31


def one(proc: Processor, message: Message) -> Row:
    """The single row ``proc`` makes of ``message`` (asserting there is exactly one)."""
    rows = proc.transform(message)
    assert isinstance(rows, list) and len(rows) == 1
    row: Row = rows[0]
    return row
