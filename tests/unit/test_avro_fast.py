"""The fast Avro decoder (cavro) against the reference (fastavro): same values, same verdicts.

Every bundled writer schema (WhereHows and DataHub), random valid records from
``fastavro.utils.generate_many``, and mutated bodies: truncated, extended, bytes replaced,
inserted and deleted. Where fastavro decodes, the decoder must return fastavro's value (key
order included); where fastavro refuses, it must refuse with fastavro's message.
"""

from __future__ import annotations

import asyncio
import json
import random
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.utils import generate_many

from actors.codecs.avro import AvroDecoder, encode
from actors.codecs.avro_fast import fast_decoder
from processors.base import SCHEMA_DIR
from processors.errors import PoisonMessage

SCHEMAS = sorted(SCHEMA_DIR.glob("*/*.avsc"))


class _OneSchema:
    def __init__(self, text: str) -> None:
        self.text = text

    async def get_schema(self, schema_id: int | str) -> str:
        return self.text


def _decoder(text: str) -> AvroDecoder:
    decoder = AvroDecoder(_OneSchema(text))
    asyncio.run(decoder.fetch((1).to_bytes(4, "big")))
    return decoder


def _reference(parsed: Any, body: bytes) -> tuple[str, Any]:
    try:
        return "ok", schemaless_reader(BytesIO(body), parsed, None)
    except Exception as exc:  # noqa: BLE001 - any refusal is a verdict
        return "refused", type(exc).__name__


def _mutations(body: bytes, rng: random.Random, count: int) -> list[bytes]:
    out = [body + b"\x00\x01", body[:-1], body[: len(body) // 2]]
    for _ in range(count):
        m = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(m))
            op = rng.random()
            if op < 0.6:
                m[i] = rng.randrange(256)
            elif op < 0.8:
                m[i:i] = bytes([rng.randrange(256)])
            else:
                del m[i]
        out.append(bytes(m))
    return out


@pytest.mark.parametrize("path", SCHEMAS, ids=lambda p: p.name)
def test_every_bundled_schema_has_a_fast_decoder(path: Path) -> None:
    assert fast_decoder(json.loads(path.read_text())) is not None


@pytest.mark.parametrize("path", SCHEMAS, ids=lambda p: p.name)
def test_fast_decoder_gives_fastavros_values_and_verdicts(path: Path) -> None:
    text = path.read_text()
    parsed = parse_schema(json.loads(text))
    decoder = _decoder(text)
    rng = random.Random(path.name)  # noqa: S311 - reproducible mutations, not crypto
    decoded = refused = 0
    for record in generate_many(parsed, 150):
        out = BytesIO()
        schemaless_writer(out, parsed, record)
        body = out.getvalue()
        for candidate in [body, *_mutations(body, rng, 12)]:
            raw = b"\x00" + (1).to_bytes(4, "big") + candidate
            verdict, value = _reference(parsed, candidate)
            if verdict == "ok":
                got = decoder.decode(raw)
                assert got == value and repr(got) == repr(value), candidate.hex()
                decoded += 1
            else:
                with pytest.raises(PoisonMessage, match=f"undecodable Avro body.*{value}"):
                    decoder.decode(raw)
                refused += 1
    assert decoded > 150 and refused > 150  # both kinds were tried


def test_out_of_range_int_is_returned_as_fastavro_returns_it() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]}
    decoder = _decoder(json.dumps(schema))
    wide = encode(parse_schema({"type": "record", "name": "R",
                                "fields": [{"name": "n", "type": "long"}]}), 1,
                  {"n": 2**40 + 3})
    assert decoder.decode(wide) == {"n": 2**40 + 3}


def test_negative_union_index_is_decoded_as_fastavro_does() -> None:
    """cavro refuses it; fastavro takes the last branch: the reference's value stands."""
    schema = {"type": "record", "name": "R",
              "fields": [{"name": "u", "type": ["null", "string"]}]}
    decoder = _decoder(json.dumps(schema))
    body = bytes([1, 4]) + b"hi"  # union index -1 (zigzag 1): the last branch; "hi"
    fast = fast_decoder(schema)
    assert fast is not None
    with pytest.raises(ValueError, match="not valid for a union"):
        fast(body)
    assert decoder.decode(b"\x00" + (1).to_bytes(4, "big") + body) == {"u": "hi"}


def test_logical_types_are_left_to_fastavro() -> None:
    schema = {"type": "record", "name": "R",
              "fields": [{"name": "t", "type": {"type": "long",
                                                "logicalType": "timestamp-millis"}}]}
    assert fast_decoder(schema) is None
    decoder = _decoder(json.dumps(schema))
    value = decoder.decode(encode(parse_schema(schema), 1, {"t": 1_700_000_000_000}))
    assert value["t"].year == 2023  # a datetime, as fastavro converts it


def test_a_schema_cavro_refuses_is_left_to_fastavro() -> None:
    # a name that breaks Avro's naming rules: fastavro parses it, cavro refuses it
    schema = {"type": "record", "name": "my-rec", "fields": [{"name": "n", "type": "int"}]}
    assert fast_decoder(schema) is None
    decoder = _decoder(json.dumps(schema))
    assert decoder.decode(encode(parse_schema(schema), 1, {"n": 5})) == {"n": 5}
