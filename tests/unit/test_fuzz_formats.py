"""Fuzzing of the Protobuf and JSON Schema decoders: any value, framed or not, valid,
mutated or random, decodes or raises PoisonMessage, never anything else."""

from __future__ import annotations

import asyncio
import functools
import json

from hypothesis import example, given
from hypothesis import strategies as st

from actors.codecs.by_id import SchemaIdDecoder
from actors.codecs.json_schema import JsonSchemaDecoder
from actors.codecs.protobuf import ProtobufDecoder
from actors.codecs.schema_registry import Reference, RegisteredSchema
from processors.errors import PoisonMessage
from tests.proto_files import MONEY, ORDER
from tests.unit.test_fuzz import FUZZ
from tests.unit.test_json_schema_format import PLAIN
from tests.unit.test_protobuf_format import order

HEADER = b"\x00" + (1).to_bytes(4, "big")


class _Source:
    """Schema id 1, of the given type; the Money import as subject ``money`` version 1."""

    def __init__(self, schema: str, schema_type: str, refs: tuple[Reference, ...]) -> None:
        self.answer = RegisteredSchema(schema, schema_type, refs)

    async def get_registered(self, schema_id: int | str) -> RegisteredSchema:
        assert schema_id == 1
        return self.answer

    async def get_version(self, subject: str, version: int) -> RegisteredSchema:
        return RegisteredSchema(MONEY, "PROTOBUF", ())


@functools.cache
def _decoder(fmt: str) -> SchemaIdDecoder:
    decoder: SchemaIdDecoder
    if fmt == "protobuf":
        refs = (Reference("common/money.proto", "money", 1),)
        decoder = ProtobufDecoder(_Source(ORDER, "PROTOBUF", refs))
    else:
        decoder = JsonSchemaDecoder(_Source(json.dumps(PLAIN), "JSON", ()))
    asyncio.run(decoder.fetch(HEADER[1:]))
    return decoder


def _mutated(valid: bytes) -> st.SearchStrategy[bytes]:
    return (st.binary(max_size=40)
            | st.binary(max_size=80).map(lambda b: HEADER + b)
            | st.integers(0, len(valid)).map(lambda cut: valid[:cut])
            | st.tuples(st.integers(0, len(valid) - 1), st.integers(0, 255)).map(
                lambda m: valid[:m[0]] + bytes([m[1]]) + valid[m[0] + 1:]))


def _classify(fmt: str, raw: bytes) -> None:
    decoder = _decoder(fmt)
    if decoder.missing([raw]):  # another id: nothing to decode it with
        return
    try:
        decoder.decode(raw)
    except PoisonMessage:
        pass


PROTO_VALID = HEADER + b"\x00" + order().SerializeToString()


@FUZZ
@given(_mutated(PROTO_VALID))
@example(HEADER + b"\x7e" + b"\x01" * 70)  # a long index list
@example(HEADER + b"\x00\x1a\x02\x1a\x00")  # a nested message cut short
def test_protobuf_classifies_every_input(raw: bytes) -> None:
    _classify("protobuf", raw)


@FUZZ
@given(_mutated(HEADER + b'{"n": 12}') | st.text(max_size=30).map(
    lambda t: HEADER + t.encode("utf-8", "surrogatepass")))
@example(HEADER + b"[" * 100_000)
def test_json_schema_classifies_every_input(raw: bytes) -> None:
    _classify("json_schema", raw)
