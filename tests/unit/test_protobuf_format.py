"""``format: protobuf``: records written by confluent-kafka's own ``ProtobufSerializer``,
decoded with the writer's ``.proto`` fetched by id from the fake Confluent registry (a
real HTTP server), imports resolved through the schema's references."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from actors.codecs.protobuf import ProtobufDecoder, read_indexes
from actors.codecs.schema_registry import SchemaNotFoundYet, SchemaRegistryClient
from processors.errors import PoisonMessage
from tests.fake_registry import FakeRegistry, kstage_client
from tests.proto_files import MONEY, ORDER, message_classes

TOPIC = "orders"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    with FakeRegistry() as reg:
        reg.register("common/money.proto", MONEY, "PROTOBUF")
        reg.register(f"{TOPIC}-value", ORDER, "PROTOBUF", [
            {"name": "common/money.proto", "subject": "common/money.proto", "version": 1}])
        yield reg


@pytest.fixture
async def client(registry: FakeRegistry) -> AsyncIterator[SchemaRegistryClient]:
    async with kstage_client(registry) as c:
        yield c


CLASSES = message_classes({"common/money.proto": MONEY, "shop/order.proto": ORDER})


def serialize(registry: FakeRegistry, message: Any) -> bytes:
    """The record value confluent-kafka's serializer writes (the schema registered as
    .proto text beforehand, as CI pipelines do; the serializer uses its latest version)."""
    with ConfluentClient({"url": registry.url}) as confluent:
        serializer = ProtobufSerializer(type(message), confluent, {
            "use.latest.version": True, "auto.register.schemas": False,
            "use.deprecated.format": False})
        out = serializer(message, SerializationContext(TOPIC, MessageField.VALUE))
    assert out is not None
    return out


def order() -> Any:
    cls = CLASSES["shop.Order"]
    money = CLASSES["shop.common.Money"]
    msg = cls(id="o-1", status=cls.Status.Value("SHIPPED"), signature=b"\x00\xffsig",
              big=2**63 + 5, tags=["a", "b"], total=money(currency="EUR", units=2**40))
    msg.lines.add(sku="k-1", quantity=3, price=money(currency="EUR", units=7))
    msg.lines.add(sku="k-2")
    msg.labels["x"] = 1
    msg.placed_at.FromJsonString("2024-05-01T12:00:00Z")
    return msg


async def decoder_for(client: SchemaRegistryClient, raws: list[bytes],
                      **kwargs: Any) -> ProtobufDecoder:
    decoder = ProtobufDecoder(client, **kwargs)
    for id_bytes in decoder.missing(raws):
        await decoder.fetch(id_bytes)
    return decoder


async def test_serializer_records_decode_to_dicts(registry: FakeRegistry,
                                                  client: SchemaRegistryClient) -> None:
    raw = serialize(registry, order())
    assert raw[5] == 0, "the first message of the file: the single byte 0"
    refund_cls = CLASSES["shop.Refund"]
    refund = serialize(registry, refund_cls(order_id="o-1"))
    assert refund[5:7] == b"\x02\x02", "index list [1]: count 1, index 1 (zigzag)"
    registry.clear_log()
    decoder = await decoder_for(client, [raw, refund])
    assert decoder.decode(raw) == {
        "id": "o-1", "status": "SHIPPED",
        "lines": [{"sku": "k-1", "quantity": 3, "price": {"currency": "EUR", "units": 7}},
                  {"sku": "k-2", "quantity": 0, "price": None}],
        "labels": {"x": 1}, "total": {"currency": "EUR", "units": 2**40},
        "placed_at": "2024-05-01T12:00:00Z",
        "signature": base64.b64encode(b"\x00\xffsig").decode(), "note": None,
        "big": 2**63 + 5, "tags": ["a", "b"]}
    assert decoder.decode(refund) == {"order_id": "o-1", "amount": None}
    assert decoder.decode(None) is None
    # the reference was fetched by its subject version, the id once
    assert registry.count("GET", "/subjects/common/money.proto/versions/1") == 1
    assert registry.count("GET", f"/schemas/ids/{int.from_bytes(raw[1:5], 'big')}") == 1


async def test_nested_message_index_and_an_unknown_enum_number(
        registry: FakeRegistry, client: SchemaRegistryClient) -> None:
    line = CLASSES["shop.Order.Line"](sku="n", quantity=-2)
    # [0, 0]: the first message nested in the file's first (count 2, zigzag 0, 0)
    sid = registry.register(f"{TOPIC}-value", ORDER, "PROTOBUF", [
        {"name": "common/money.proto", "subject": "common/money.proto", "version": 1}])
    raw = b"\x00" + sid.to_bytes(4, "big") + b"\x04\x00\x00" + line.SerializeToString()
    status_99 = b"\x10\x63"  # field 2 (status), varint 99: no name in the enum
    odd = b"\x00" + sid.to_bytes(4, "big") + b"\x00" + status_99
    decoder = await decoder_for(client, [raw])
    assert decoder.decode(raw) == {"sku": "n", "quantity": -2, "price": None}
    assert decoder.decode(odd)["status"] == 99


def test_index_lists() -> None:
    assert read_indexes(b"\x00", 0) == ([0], 1)
    assert read_indexes(b"\x02\x02x", 0) == ([1], 2)
    assert read_indexes(b"\x04\x02\x04", 0) == ([1, 2], 3)
    for bad in (b"", b"\x02", b"\x80", b"\x03\x00", b"\x7e" + b"\x00" * 63):
        with pytest.raises(ValueError):
            read_indexes(bad, 0)


@pytest.mark.parametrize(("tamper", "match"), [
    (lambda raw: b"\x01" + raw[1:], "wrong magic byte 0x01"),
    (lambda raw: raw[:3], "shorter than the 5-byte wire-format header"),
    (lambda raw: raw[:5] + b"\x02\x0a" + raw[6:], r"unknown message index \[5\]"),
    (lambda raw: raw[:5] + b"\x04\x00\x0c" + raw[6:], r"unknown message index \[0, 6\]"),
    (lambda raw: raw[:5] + b"\x02", "bad message-index list"),
    (lambda raw: raw[:6] + b"\x0a\x20abc", "undecodable Protobuf body"),
    (lambda raw: raw[:6] + b"\xff\xff\xff", "undecodable Protobuf body"),
])
async def test_poison(registry: FakeRegistry, client: SchemaRegistryClient, tamper: Any,
                      match: str) -> None:
    raw = serialize(registry, order())
    decoder = await decoder_for(client, [raw])
    with pytest.raises(PoisonMessage, match=match) as info:
        decoder.decode(tamper(raw))
    if "magic" not in match and "shorter" not in match:
        assert info.value.details["schema_id"] == int.from_bytes(raw[1:5], "big")


async def test_schemas_that_do_not_build_are_poison_naming_the_id(
        registry: FakeRegistry, client: SchemaRegistryClient) -> None:
    broken = registry.register("b-value", 'syntax = "proto3";\nmessage B { nope x = 1; }\n',
                               "PROTOBUF")
    avro = registry.register("a-value", json.dumps({"type": "record", "name": "A",
                                                    "fields": []}))
    raws = [b"\x00" + sid.to_bytes(4, "big") + b"\x00" for sid in (broken, avro)]
    decoder = await decoder_for(client, raws)
    with pytest.raises(PoisonMessage, match=rf"schema id {broken}.*protoc.*nope") as info:
        decoder.decode(raws[0])
    assert info.value.details["schema_id"] == broken
    with pytest.raises(PoisonMessage, match=f"schema id {avro} is a AVRO schema, not PROTOBUF"):
        decoder.decode(raws[1])


async def test_a_404_for_the_id_or_a_reference_is_a_window_then_poison(
        registry: FakeRegistry, client: SchemaRegistryClient) -> None:
    raw = serialize(registry, order())
    clock = Clock()
    decoder = ProtobufDecoder(client, not_found_retry_s=10.0, clock=clock)
    (id_bytes,) = decoder.missing([raw])
    registry.start_reloading()  # 404 for /schemas/ids/N
    with pytest.raises(SchemaNotFoundYet):
        await decoder.fetch(id_bytes)
    registry.finish_reloading()
    # an id whose reference's subject version is missing: 404 too
    dangling = registry.register("d-value", ORDER.replace("Refund", "Refund2"), "PROTOBUF", [
        {"name": "common/money.proto", "subject": "common/money.proto", "version": 1}])
    registry._subjects["common/money.proto"] = []  # deleted since
    bad = b"\x00" + dangling.to_bytes(4, "big") + b"\x00"
    (bad_id,) = decoder.missing([bad])
    with pytest.raises(SchemaNotFoundYet):
        await decoder.fetch(bad_id)
    clock.now += 6
    with pytest.raises(SchemaNotFoundYet):
        await decoder.fetch(bad_id)
    clock.now += 6
    await decoder.fetch(bad_id)
    with pytest.raises(PoisonMessage, match=f"unknown schema id {dangling}") as info:
        decoder.decode(bad)
    assert info.value.details["schema_id"] == dangling


KINDS = """syntax = "proto3";
package kinds;

import "google/protobuf/duration.proto";
import "google/protobuf/field_mask.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/empty.proto";

message Tree {
  string name = 1;
  repeated Tree children = 2;
  oneof pick { int32 number = 3; string word = 4; }
  google.protobuf.Duration took = 5;
  google.protobuf.Struct extra = 6;
  google.protobuf.Int64Value count = 7;
  google.protobuf.StringValue label = 8;
  google.protobuf.FieldMask mask = 9;
  google.protobuf.Empty nothing = 10;
  map<int64, bool> flags = 11;
  map<bool, bytes> blobs = 12;
  repeated bytes chunks = 13;
  repeated Kind kinds = 14;
  sint64 delta = 15;
  double ratio = 16;
}

enum Kind { KIND_NONE = 0; LEAF = 1; }
"""


def test_kinds_of_fields_follow_the_documented_mapping() -> None:
    from actors.codecs.protobuf_dict import message_dict

    tree_cls = message_classes({"kinds.proto": KINDS})["kinds.Tree"]
    tree = tree_cls(name="root", word="w", delta=-2**40, ratio=0.25, chunks=[b"\x01"],
                    kinds=[1, 7])
    tree.children.add(name="leaf", number=0)
    tree.took.FromJsonString("1.500s")
    tree.extra.update({"a": [1, "b", None], "c": {"d": True}})
    tree.count.value = 2**40
    tree.mask.FromJsonString("a.b,c")
    tree.nothing.SetInParent()
    tree.flags[-3] = True
    tree.blobs[False] = b"\xff"
    got = message_dict(tree_cls.FromString(tree.SerializeToString()))
    assert got == {
        "name": "root", "word": "w", "number": None, "delta": -2**40, "ratio": 0.25,
        "children": [{"name": "leaf", "children": [], "number": 0, "word": None,
                      "took": None, "extra": None, "count": None, "label": None,
                      "mask": None, "nothing": None, "flags": {}, "blobs": {},
                      "chunks": [], "kinds": [], "delta": 0, "ratio": 0.0}],
        "took": "1.500s", "extra": {"a": [1.0, "b", None], "c": {"d": True}},
        "count": str(2**40), "label": None, "mask": "a.b,c", "nothing": {},
        "flags": {"-3": True}, "blobs": {"false": "/w=="}, "chunks": ["AQ=="],
        "kinds": ["LEAF", 7]}
