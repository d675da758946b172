"""Testing helpers for processor authors: the messages kstage hands to ``transform``.

Only the plugin API and fastavro: importable without pytest, aiokafka, pyspark or the
actors. The runners that drive a processor through kstage's own walk
(:func:`service.testing.run_processor`, :func:`~service.testing.arun_processor`) and the
whole pipeline on a broker (:func:`service.testing.run_pipeline`) are in
:mod:`service.testing`.

* :func:`message` builds the :class:`~processors.base.Message` kstage would hand to
  ``transform`` for a JSON-like value (or raw bytes); :func:`messages` numbers a list.
* :func:`avro_message` does the same for an Avro record: it validates the record
  against the schema (strictly: unknown fields are errors), encodes it in the
  schema-registry wire format and decodes it again, so the value is exactly what
  kstage's decoding yields (bytes stay bytes, enums are str, defaults are filled in).

:mod:`service.testing` shows them with a runner; docs/plugins.md "Test" has a whole test
module.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from io import BytesIO
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.validation import ValidationError, validate

from processors.base import SCHEMA_DIR, Message

__all__ = [
    "DEFAULT_TIMESTAMP",
    "SchemaLike",
    "avro_message",
    "message",
    "messages",
]

DEFAULT_TIMESTAMP = 1_700_000_000_000
"""Record timestamp (ms since the epoch) of built messages unless one is given."""

SchemaLike = str | Path | Mapping[str, Any] | Sequence[Any]
"""An Avro schema: a parsed JSON object/array, JSON text, or an ``.avsc`` path (a ``str``
path that does not exist as given is looked up under :data:`processors.base.SCHEMA_DIR`,
like ``Processor.reader_schema``)."""


def message(value: Any, *, topic: str = "topic", partition: int = 0, offset: int = 0,
            timestamp: int = DEFAULT_TIMESTAMP, key: Any = None,
            headers: Iterable[tuple[str, bytes]] = ()) -> Message:
    """The Message kstage hands to ``transform`` for ``value`` (``format: json``/``bytes``).

    Args:
        value: a JSON-compatible value, round-tripped through JSON so the processor sees
            what kstage's json decoding yields (a fresh dict, lists not tuples); or
            ``bytes``, passed as is (``format: bytes``); or None (a tombstone).
        topic, partition, offset, timestamp, key, headers: the Kafka coordinates and
            metadata (``key`` as the topic's ``key_format`` would decode it).

    Raises:
        TypeError: ``value`` is not JSON-serialisable.
    """
    if value is None or isinstance(value, bytes):
        decoded, raw = value, value
    else:
        raw = json.dumps(value).encode("utf-8")
        decoded = json.loads(raw)
    return Message(topic, partition, offset, timestamp, key, decoded, tuple(headers), raw)


def messages(values: Iterable[Any], *, offset: int = 0, **coords: Any) -> list[Message]:
    """:func:`message` for each value, with consecutive offsets from ``offset``."""
    return [message(v, offset=offset + i, **coords) for i, v in enumerate(values)]


def _schema_json(schema: SchemaLike) -> Any:
    if isinstance(schema, Path):
        return json.loads(schema.read_text(encoding="utf-8"))
    if isinstance(schema, str):
        if schema.lstrip()[:1] in ("{", "[", '"'):
            return json.loads(schema)
        for path in (Path(schema), SCHEMA_DIR / schema):
            if path.is_file():
                return json.loads(path.read_text(encoding="utf-8"))
        raise FileNotFoundError(f"no Avro schema file {schema!r} (nor {SCHEMA_DIR / schema})")
    return schema


@lru_cache(maxsize=64)
def _parsed(text: str) -> Any:
    return parse_schema(json.loads(text))


def _parse(schema: SchemaLike) -> tuple[Any, str]:
    """(parsed schema, canonical JSON text) of ``schema``; parsing is cached."""
    text = json.dumps(_schema_json(schema), sort_keys=True)
    return _parsed(text), text


def _unknown_fields(sent: Any, decoded: Any, path: str = "") -> list[str]:
    """Paths of dict keys in ``sent`` that did not survive encoding (not in the schema)."""
    if isinstance(sent, tuple) and len(sent) == 2 and isinstance(sent[0], str) \
            and not isinstance(decoded, tuple):
        sent = sent[1]  # fastavro's (type name, value) union notation
    if isinstance(sent, Mapping) and isinstance(decoded, Mapping):
        return [p for key, value in sent.items()
                for p in ([f"{path}{key}"] if key not in decoded
                          else _unknown_fields(value, decoded[key], f"{path}{key}."))]
    if isinstance(sent, list) and isinstance(decoded, list):
        return [p for i, (a, b) in enumerate(zip(sent, decoded, strict=False))
                for p in _unknown_fields(a, b, f"{path}{i}.")]
    return []


def _encode_avro(schema: Any, record: Any, schema_id: int) -> bytes:
    """Validate ``record`` strictly, then encode it in the Confluent wire format (what
    :func:`actors.codecs.avro.encode` writes for an ``int`` id, written here so the kit
    needs no actors).

    fastavro's ``strict`` catches missing fields, but its writer silently drops unknown
    ones; a typo in a test record must be an error, not a row that quietly lacks a field.
    """
    validate(record, schema, raise_errors=True, strict=True)
    out = BytesIO()
    out.write(b"\x00" + schema_id.to_bytes(4, "big"))  # magic byte, 4-byte schema id
    schemaless_writer(out, schema, record)
    raw = out.getvalue()
    unknown = _unknown_fields(record, _decode_avro(raw, schema, schema))
    if unknown:
        raise ValidationError(  # type: ignore[no-untyped-call]  # fastavro is untyped
            f"field(s) not in the schema: {', '.join(unknown)}")
    return raw


def _decode_avro(raw: bytes, writer: Any, reader: Any) -> Any:
    body = BytesIO(raw)
    body.seek(5)  # magic byte + 4-byte schema id
    return schemaless_reader(body, writer, reader)


def avro_message(schema: SchemaLike, record: Any, *, reader_schema: SchemaLike | None = None,
                 schema_id: int = 1, topic: str = "topic", partition: int = 0, offset: int = 0,
                 timestamp: int = DEFAULT_TIMESTAMP, key: Any = None,
                 headers: Iterable[tuple[str, bytes]] = ()) -> Message:
    """The Message kstage hands to ``transform`` for an Avro ``record`` (``format: avro``).

    Args:
        schema: the writer schema (see :data:`SchemaLike`).
        record: the record as a Python dict, validated strictly against ``schema``.
        reader_schema: resolve the written data to this schema (Avro evolution rules),
            as kstage does with a topic's ``reader_schema``; default: the writer schema.
        schema_id: the id written in the wire-format header (``raw``).
        topic, partition, offset, timestamp, key, headers: as in :func:`message`.

    Raises:
        fastavro.validation.ValidationError: ``record`` does not match ``schema``.
    """
    writer, _ = _parse(schema)
    reader = writer if reader_schema is None else _parse(reader_schema)[0]
    raw = _encode_avro(writer, record, schema_id)
    value = _decode_avro(raw, writer, reader)
    # the writer schema, as kstage gives it to a processor with wants_value_schema
    return Message(topic, partition, offset, timestamp, key, value, tuple(headers), raw,
                   value_schema=writer, value_schema_id=schema_id)
