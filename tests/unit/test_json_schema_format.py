"""``format: json_schema``: records written by confluent-kafka's own ``JSONSerializer``,
decoded and validated with the writer's JSON Schema fetched by id from the fake
Confluent registry (a real HTTP server), ``$ref`` resolved through the references."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from actors.codecs.json_schema import JsonSchemaDecoder
from actors.codecs.schema_registry import SchemaRegistryClient
from processors.errors import PoisonMessage
from tests.fake_registry import FakeRegistry, kstage_client

TOPIC = "payments"
MONEY = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
         "properties": {"currency": {"type": "string", "minLength": 3, "maxLength": 3},
                        "units": {"type": "integer"}},
         "required": ["currency", "units"]}
PAYMENT = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Payment",
           "type": "object",
           "properties": {"id": {"type": "string"}, "amount": {"$ref": "money.json"},
                          "tags": {"type": "array", "items": {"type": "string"}}},
           "required": ["id", "amount"]}
PLAIN = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}},
         "required": ["n"], "additionalProperties": False}


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    with FakeRegistry() as reg:
        yield reg


@pytest.fixture
async def client(registry: FakeRegistry) -> AsyncIterator[SchemaRegistryClient]:
    async with kstage_client(registry) as c:
        yield c


def serialize(registry: FakeRegistry, schema: dict[str, Any] | Schema, value: Any,
              **conf: Any) -> bytes:
    """What confluent-kafka's JSONSerializer writes (it registers the schema itself)."""
    text = schema if isinstance(schema, Schema) else json.dumps(schema)
    with ConfluentClient({"url": registry.url}) as confluent:
        serializer = JSONSerializer(text, confluent, conf=conf or None)
        out = serializer(value, SerializationContext(TOPIC, MessageField.VALUE))
    assert out is not None
    return out


async def decoder_for(client: SchemaRegistryClient, raws: list[bytes],
                      **kwargs: Any) -> JsonSchemaDecoder:
    decoder = JsonSchemaDecoder(client, **kwargs)
    for id_bytes in decoder.missing(raws):
        await decoder.fetch(id_bytes)
    return decoder


def with_references(registry: FakeRegistry) -> int:
    registry.register("money.json", json.dumps(MONEY), "JSON")
    return registry.register(f"{TOPIC}-value", json.dumps(PAYMENT), "JSON", [
        {"name": "money.json", "subject": "money.json", "version": 1}])


async def test_serializer_records_decode_and_validate(registry: FakeRegistry,
                                                      client: SchemaRegistryClient) -> None:
    raw = serialize(registry, PLAIN, {"n": 3})
    assert raw[0] == 0 and registry.count("POST", f"/subjects/{TOPIC}-value/versions") == 1
    sid = int.from_bytes(raw[1:5], "big")
    decoder = await decoder_for(client, [raw])
    assert decoder.decode(raw) == {"n": 3}
    assert decoder.decode(None) is None
    for bad, where in (({"n": -1}, r"\$\.n"), ({"n": 1, "x": 2}, r"\$"), ({}, r"\$")):
        tampered = raw[:5] + json.dumps(bad).encode()
        with pytest.raises(PoisonMessage, match=rf"not valid for its JSON Schema \(schema "
                                                rf"id {sid}\) at {where}") as info:
            decoder.decode(tampered)
        assert info.value.details["schema_id"] == sid
    lax = await decoder_for(client, [raw], validate=False)
    assert lax.decode(raw[:5] + b'{"n": -1}') == {"n": -1}


async def test_references_resolve_by_their_name(registry: FakeRegistry,
                                                client: SchemaRegistryClient) -> None:
    sid = with_references(registry)
    schema = Schema(json.dumps(PAYMENT), "JSON",
                    [SchemaReference("money.json", "money.json", 1)])
    value = {"id": "p-1", "amount": {"currency": "EUR", "units": 12}, "tags": ["x"]}
    raw = serialize(registry, schema, value, **{"auto.register.schemas": False,
                                                "use.latest.version": True})
    assert int.from_bytes(raw[1:5], "big") == sid
    decoder = await decoder_for(client, [raw])
    assert decoder.decode(raw) == value
    wrong = raw[:5] + json.dumps({"id": "p", "amount": {"currency": "EURO",
                                                         "units": 1}}).encode()
    with pytest.raises(PoisonMessage, match=r"at \$\.amount\.currency"):
        decoder.decode(wrong)


@pytest.mark.parametrize(("tamper", "match"), [
    (lambda raw: b"\x01" + raw[1:], "wrong magic byte 0x01"),
    (lambda raw: raw[:4], "shorter than the 5-byte wire-format header"),
    (lambda raw: raw[:5] + b'{"n": ', "the body is not JSON"),
    (lambda raw: raw[:5] + b"\xff\xfe", "the body is not JSON"),
])
async def test_poison(registry: FakeRegistry, client: SchemaRegistryClient, tamper: Any,
                      match: str) -> None:
    raw = serialize(registry, PLAIN, {"n": 3})
    decoder = await decoder_for(client, [raw])
    with pytest.raises(PoisonMessage, match=match):
        decoder.decode(tamper(raw))


async def test_schemas_that_do_not_build_are_poison_naming_the_id(
        registry: FakeRegistry, client: SchemaRegistryClient) -> None:
    bad = registry.register("b-value", json.dumps({"type": "wat"}), "JSON")
    avro = registry.register("a-value", json.dumps({"type": "record", "name": "A",
                                                    "fields": []}))
    raws = [b"\x00" + sid.to_bytes(4, "big") + b"{}" for sid in (bad, avro)]
    decoder = await decoder_for(client, raws)
    with pytest.raises(PoisonMessage, match=rf"schema id {bad} is not a valid JSON Schema"):
        decoder.decode(raws[0])
    with pytest.raises(PoisonMessage, match=f"schema id {avro} is a AVRO schema, not JSON"):
        decoder.decode(raws[1])
