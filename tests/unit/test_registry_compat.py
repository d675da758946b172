"""The tests' registry enforces compatibility levels as Confluent's does
(:mod:`tests.registry_compat`, :mod:`tests.fake_registry`): versions registered by
confluent-kafka's own serializers and client over HTTP, the level set with its
``set_config``; refusals are ``409`` with the registry's reasons; the config and
``/compatibility`` endpoints answer as documented. The Protobuf and JSON Schema rules
(Confluent's, implemented here) are tested on their own."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from confluent_kafka.schema_registry import (
    ConfigCompatibilityLevel,
    Schema,
    SchemaRegistryClient,
    SchemaRegistryError,
    ServerConfig,
)
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.fake_registry import FakeRegistry
from tests.registry_compat import reader_problems


def record(*fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": "Order", "namespace": "shop",
                       "fields": [{"name": "id", "type": "string"}, *fields]})


V1 = record({"name": "qty", "type": "int"})
WITH_DEFAULT = record({"name": "qty", "type": "int"},
                      {"name": "note", "type": ["null", "string"], "default": None})
NO_DEFAULT = record({"name": "qty", "type": "int"}, {"name": "note", "type": "string"})
DROPPED = record()  # qty removed: it had no default
WIDENED = record({"name": "qty", "type": "long"})


def level_config(level: str) -> ServerConfig:
    return ServerConfig(compatibility=ConfigCompatibilityLevel(level))


@pytest.fixture
def registry() -> Any:
    with FakeRegistry() as reg:
        yield reg


def avro_register(client: SchemaRegistryClient, subject: str, schema: str,
                  value: dict[str, Any]) -> None:
    """What a producer does: confluent-kafka's AvroSerializer registers ``schema``."""
    serializer = AvroSerializer(client, schema, conf={
        "subject.name.strategy": lambda ctx, name: subject})
    assert serializer(value, SerializationContext("t", MessageField.VALUE))


@pytest.mark.parametrize(("level", "new", "value", "accepted"), [
    ("BACKWARD", WITH_DEFAULT, {"id": "a", "qty": 1, "note": None}, True),
    ("BACKWARD", NO_DEFAULT, {"id": "a", "qty": 1, "note": "n"}, False),
    ("BACKWARD", WIDENED, {"id": "a", "qty": 1}, True),
    ("BACKWARD", DROPPED, {"id": "a"}, True),
    ("FORWARD", NO_DEFAULT, {"id": "a", "qty": 1, "note": "n"}, True),
    ("FORWARD", WIDENED, {"id": "a", "qty": 1}, False),
    ("FORWARD", DROPPED, {"id": "a"}, False),
    ("FULL", WITH_DEFAULT, {"id": "a", "qty": 1, "note": None}, True),
    ("FULL", NO_DEFAULT, {"id": "a", "qty": 1, "note": "n"}, False),
    ("NONE", record({"name": "qty", "type": "string"}), {"id": "a", "qty": "x"}, True),
])
def test_avro_serializer_registrations_follow_the_subjects_level(
        registry: FakeRegistry, level: str, new: str, value: dict[str, Any],
        accepted: bool) -> None:
    with SchemaRegistryClient({"url": registry.url}) as client:
        client.set_config("orders-value", level_config(level))
        avro_register(client, "orders-value", V1, {"id": "a", "qty": 1})
        if accepted:
            avro_register(client, "orders-value", new, value)
        else:
            with pytest.raises(SchemaRegistryError) as refused:
                avro_register(client, "orders-value", new, value)
            assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
            assert ('Schema being registered is incompatible with an earlier schema for '
                    'subject "orders-value", details: [{errorType:') in str(refused.value)
        assert len(client.get_versions("orders-value")) == (2 if accepted else 1)


def test_transitive_levels_check_every_earlier_version(registry: FakeRegistry) -> None:
    # v1 qty int; v2 qty removed (BACKWARD: fine); v3 qty back as a string: v3 reads v2's
    # data (no qty), not v1's
    again = record({"name": "qty", "type": "string", "default": ""})
    with SchemaRegistryClient({"url": registry.url}) as client:
        for subject, level in (("plain", "BACKWARD"), ("transitive", "BACKWARD_TRANSITIVE")):
            client.set_config(subject, level_config(level))
            avro_register(client, subject, V1, {"id": "a", "qty": 1})
            avro_register(client, subject, DROPPED, {"id": "a"})
        avro_register(client, "plain", again, {"id": "a", "qty": "x"})
        with pytest.raises(SchemaRegistryError, match="TYPE_MISMATCH"):
            avro_register(client, "transitive", again, {"id": "a", "qty": "x"})


def test_config_endpoints_and_the_compatibility_check(registry: FakeRegistry) -> None:
    with SchemaRegistryClient({"url": registry.url}) as client:
        assert client.get_config().compatibility_level == "NONE"
        assert client.set_config(config=level_config("BACKWARD")) == {
            "compatibility": "BACKWARD"}
        assert client.get_config().compatibility_level == "BACKWARD"
        with pytest.raises(SchemaRegistryError) as missing:
            client.get_config("orders-value")
        assert (missing.value.http_status_code, missing.value.error_code) == (404, 40408)
        invalid = httpx.put(f"{registry.url}/config/orders-value",
                            json={"compatibility": "SIDEWAYS"})
        assert (invalid.status_code, invalid.json()["error_code"]) == (422, 42203)
        client.register_schema("orders-value", Schema(V1, "AVRO"))
        assert client.test_compatibility("orders-value", Schema(WITH_DEFAULT, "AVRO"))
        assert not client.test_compatibility("orders-value", Schema(NO_DEFAULT, "AVRO"))
        client.set_config("orders-value", level_config("FORWARD"))
        assert client.get_config("orders-value").compatibility_level == "FORWARD"
        assert client.test_compatibility("orders-value", Schema(NO_DEFAULT, "AVRO"))
        # the same schema again: its id, unchecked (the level changed since)
        client.set_config("orders-value", level_config("FULL"))
        assert client.register_schema("orders-value", Schema(V1, "AVRO")) == 1


def closed(properties: dict[str, Any], *required: str, **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False,
            **({"required": list(required)} if required else {}), **extra}


def test_json_serializer_registrations_follow_the_subjects_level(
        registry: FakeRegistry) -> None:
    v1 = closed({"id": {"type": "string"}})
    v2 = closed({"id": {"type": "string"}, "note": {"type": "string"}})
    with SchemaRegistryClient({"url": registry.url}) as client:
        for subject, level in (("b", "BACKWARD"), ("f", "FORWARD")):
            client.set_config(subject, level_config(level))
            for schema, value in ((v1, {"id": "a"}), (v2, {"id": "a", "note": "n"})):
                serializer = JSONSerializer(json.dumps(schema), client, conf={
                    "subject.name.strategy": lambda ctx, name, s=subject: s})
                try:
                    serializer(value, SerializationContext("t", MessageField.VALUE))
                except SchemaRegistryError as exc:
                    assert "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL" in str(exc)
        assert [len(client.get_versions(s)) for s in ("b", "f")] == [2, 1]


def kinds(problems: list[str]) -> list[str]:
    return [p.split("'")[1] for p in problems]


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    # a property added: refused when the writer's object is open (old data may hold it)
    ({"type": "object", "properties": {"id": {"type": "string"}}},
     {"type": "object", "properties": {"id": {"type": "string"}, "n": {"type": "string"}}},
     ["PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]),
    (closed({"id": {"type": "string"}}),
     closed({"id": {"type": "string"}, "n": {"type": "string"}}), []),
    (closed({"id": {"type": "string"}}),
     closed({"id": {"type": "string"}, "n": {"type": "string"}}, "n"),
     ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"]),
    # a property dropped: refused when the reader's object is closed
    (closed({"id": {"type": "string"}, "n": {"type": "string"}}),
     closed({"id": {"type": "string"}}), ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"]),
    ({"type": "object", "properties": {"id": {"type": "string"}, "n": {"type": "string"}}},
     {"type": "object", "properties": {"id": {"type": "string"}}}, []),
    # types: widened (integer within number, null added) or not
    (closed({"q": {"type": "integer"}}), closed({"q": {"type": "number"}}), []),
    (closed({"q": {"type": "string"}}), closed({"q": {"type": ["null", "string"]}}), []),
    (closed({"q": {"type": "number"}}), closed({"q": {"type": "integer"}}),
     ["TYPE_NARROWED"]),
    (closed({"q": {"type": "string"}}), closed({"q": {"type": "integer"}}),
     ["TYPE_CHANGED"]),
    # required: added refused, removed fine; nested objects by the same rules
    (closed({"q": {"type": "string"}}), closed({"q": {"type": "string"}}, "q"),
     ["REQUIRED_ATTRIBUTE_ADDED"]),
    (closed({"q": {"type": "string"}}, "q"), closed({"q": {"type": "string"}}), []),
    (closed({"o": closed({"a": {"type": "string"}})}),
     closed({"o": closed({"a": {"type": "string"}, "b": {"type": "string"}})}), []),
    (closed({"o": {"type": "object", "properties": {"a": {"type": "string"}}}}),
     closed({"o": {"type": "object", "properties": {"a": {"type": "string"},
                                                    "b": {"type": "string"}}}}),
     ["PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]),
])
def test_json_schema_rules(writer: dict[str, Any], reader: dict[str, Any],
                           expected: list[str]) -> None:
    assert kinds(reader_problems("JSON", reader=json.dumps(reader),
                                 writer=json.dumps(writer))) == expected


def proto(body: str, syntax: str = "proto3") -> str:
    return (f'syntax = "{syntax}";\npackage shop;\nmessage Item {{ optional string sku = 1; }}\n'
            f"message Order {{\n{body}\n}}\n")


@pytest.mark.parametrize(("writer", "reader", "expected"), [
    ("string id = 1;", "string id = 1; int32 qty = 2;", []),  # added
    ("string id = 1; int32 qty = 2;", "string id = 1;", []),  # removed
    ("int32 qty = 1;", "int64 qty = 1;", []),  # one wire group
    ("int64 qty = 1;", "int32 qty = 1;", []),
    ("int32 qty = 1;", "optional int32 qty = 1;", []),  # presence: no difference
    ("string id = 1;", "bytes id = 1;", []),
    ("float x = 1;", "double x = 1;", ["FIELD_SCALAR_KIND_CHANGED"]),
    ("string id = 1;", "int32 id = 1;", ["FIELD_SCALAR_KIND_CHANGED"]),
    ("int32 qty = 1;", "sint32 qty = 1;", ["FIELD_SCALAR_KIND_CHANGED"]),
    ("Item item = 1;", "int32 item = 1;", ["FIELD_KIND_CHANGED"]),
    ("Item item = 1;", "Order item = 1;", ["FIELD_NAMED_TYPE_CHANGED"]),
    ("int32 qty = 1;", "repeated int32 qty = 1;", ["FIELD_NUMERIC_LABEL_CHANGED"]),
])
def test_protobuf_rules(writer: str, reader: str, expected: list[str]) -> None:
    assert kinds(reader_problems("PROTOBUF", reader=proto(reader),
                                 writer=proto(writer))) == expected


def test_protobuf_required_fields_and_removed_messages() -> None:
    v1 = proto("optional string id = 1;", "proto2")
    v2 = proto("optional string id = 1; required int32 qty = 2;", "proto2")
    assert kinds(reader_problems("PROTOBUF", reader=v2, writer=v1)) == [
        "REQUIRED_FIELD_ADDED"]
    assert kinds(reader_problems("PROTOBUF", reader=v1, writer=v2)) == [
        "REQUIRED_FIELD_REMOVED"]
    alone = 'syntax = "proto3";\npackage shop;\nmessage Order { string id = 1; }\n'
    assert kinds(reader_problems("PROTOBUF", reader=alone, writer=proto("string id = 1;"))
                 ) == ["MESSAGE_REMOVED"]


def test_protobuf_registrations_through_the_client_follow_the_level(
        registry: FakeRegistry) -> None:
    with SchemaRegistryClient({"url": registry.url}) as client:
        client.set_config("p-value", level_config("BACKWARD"))
        client.register_schema("p-value", Schema(proto("float x = 1;"), "PROTOBUF"))
        with pytest.raises(SchemaRegistryError, match="FIELD_SCALAR_KIND_CHANGED"):
            client.register_schema("p-value", Schema(proto("double x = 1;"), "PROTOBUF"))
        client.register_schema("p-value", Schema(proto("float x = 1; int32 y = 2;"),
                                                 "PROTOBUF"))
        assert client.get_versions("p-value") == [1, 2]
