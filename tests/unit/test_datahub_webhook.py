"""DataHub entity change webhook processor: payload shape and include/exclude filters.

Inputs are PlatformEvent records built from the real DataHub schemas (tests/avro_records.py);
the entity change payloads are validated against ``EntityChangeEvent.avsc`` first.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastavro.validation import validate
from pydantic import ValidationError

from processors import registry
from processors.base import Message
from processors.datahub_platform_event import DatahubEntityChangeProcessor
from processors.datahub_webhook import DatahubEntityChangeWebhookProcessor as Webhook
from processors.errors import PoisonMessage
from tests.avro_records import TIMESTAMP, avro_message, schema

URN = "urn:li:dataset:(urn:li:dataPlatform:hive,logging_events,PROD)"
T0 = 1_717_000_000_000


def change(**fields: Any) -> dict[str, Any]:
    """A tag added to a dataset, as DataHub's JSON; a None value drops the field."""
    event: dict[str, Any] = {
        "entityType": "dataset", "entityUrn": URN, "category": "TAG", "operation": "ADD",
        "modifier": "urn:li:tag:PII", "parameters": {"tagUrn": "urn:li:tag:PII"},
        "auditStamp": {"time": T0, "actor": "urn:li:corpuser:jdoe"}, "version": 0,
    }
    event.update(fields)
    return {k: v for k, v in event.items() if v is not None}


def message(event: dict[str, Any], *, name: str = "entityChangeEvent",
            offset: int = 7) -> Message:
    validate(event, schema("datahub/EntityChangeEvent.avsc"), raise_errors=True)
    record = {"header": {"timestampMillis": T0 + 17}, "name": name,
              "payload": {"value": json.dumps(event).encode(), "contentType": "application/json"}}
    return avro_message("datahub/PlatformEvent.avsc", record, topic="PlatformEvent_v1",
                        partition=2, offset=offset)


def passes(options: dict[str, Any], **fields: Any) -> bool:
    return bool(Webhook(options).transform(message(change(**fields))))


def test_payload_shape() -> None:
    [row] = Webhook().transform(message(change()))
    assert row == {
        "entity_urn": URN, "entity_type": "dataset", "category": "TAG", "operation": "ADD",
        "modifier": "urn:li:tag:PII", "parameters": {"tagUrn": "urn:li:tag:PII"},
        "audit_time": T0, "audit_actor": "urn:li:corpuser:jdoe", "version": 0,
        "event_time": T0 + 17,
        "_topic": "PlatformEvent_v1", "_partition": 2, "_offset": 7, "_timestamp": TIMESTAMP,
    }
    # the same parsing as the staging processor; only parameters differ (dict, not text)
    [staged] = DatahubEntityChangeProcessor().transform(message(change()))
    assert {**staged, "parameters": json.loads(staged["parameters"])} == row


def test_payload_without_optionals_and_nested_parameters() -> None:
    [row] = Webhook().transform(message(change(modifier=None, parameters=None)))
    assert (row["modifier"], row["parameters"]) == (None, None)
    nested = {"fieldPath": "a.b", "nested": {"x": [1, 2.5, None, "é"]}}
    [row] = Webhook().transform(message(change(parameters=nested)))
    assert row["parameters"] == nested


def test_class_attributes_and_entry_point() -> None:
    assert (Webhook.name, Webhook.formats, Webhook.table) == (
        "datahub_entity_change_webhook", ("avro",), "")
    assert Webhook.reader_schema == DatahubEntityChangeProcessor.reader_schema
    assert registry.load("datahub_entity_change_webhook") is Webhook


def test_other_platform_events_and_poison_as_the_staging_processor() -> None:
    assert Webhook().transform(message(change(), name="someOtherPlatformEvent")) == []
    bad = avro_message("datahub/PlatformEvent.avsc", {
        "header": {"timestampMillis": T0}, "name": "entityChangeEvent",
        "payload": {"value": b"[1]", "contentType": "application/json"}})
    with pytest.raises(PoisonMessage, match="not a JSON object"):
        Webhook().transform(bad)


@pytest.mark.parametrize(("options", "fields", "expected"), [
    ({}, {}, True),
    ({"entity_types": [], "categories": None}, {}, True),  # empty include = all
    ({"entity_types": ["dataset", "chart"]}, {}, True),
    ({"entity_types": ["chart"]}, {}, False),
    ({"entity_types": "dataset"}, {}, True),  # one string = one-item list
    ({"categories": ["TAG", "OWNER"]}, {"category": "OWNER"}, True),
    ({"categories": ["TAG"]}, {"category": "GLOSSARY_TERM"}, False),
    ({"operations": ["REMOVE"]}, {}, False),
    ({"operations": ["ADD", "REMOVE"]}, {"operation": "REMOVE"}, True),
    ({"exclude_entity_types": ["dataset"]}, {}, False),
    ({"exclude_categories": ["TECHNICAL_SCHEMA"]}, {}, True),
    ({"exclude_categories": ["TAG"]}, {}, False),
    ({"exclude_operations": ["ADD"]}, {"operation": "MODIFY"}, True),
    ({"categories": ["TAG"], "exclude_operations": ["ADD"]}, {}, False),  # exclude wins
    ({"categories": ["TAG"], "operations": ["ADD"], "entity_types": ["dataset"]}, {}, True),
])
def test_include_and_exclude_filters(options: dict[str, Any], fields: dict[str, Any],
                                     expected: bool) -> None:
    assert passes(options, **fields) is expected


@pytest.mark.parametrize(("options", "expected"), [
    ({"categories": ["tag"]}, True),
    ({"categories": ["Tag"], "operations": ["add"]}, True),
    ({"exclude_categories": ["tag"]}, False),
    ({"exclude_operations": ["Add"]}, False),
    ({"entity_types": ["DATASET"]}, False),  # entity types are case-sensitive
])
def test_categories_and_operations_are_case_insensitive(options: dict[str, Any],
                                                        expected: bool) -> None:
    assert passes(options) is expected


def test_unknown_option_key_is_refused() -> None:
    with pytest.raises(ValidationError) as info:
        Webhook({"category": ["TAG"]})
    assert [(e["loc"], e["type"]) for e in info.value.errors()] == [
        (("category",), "extra_forbidden")]
    with pytest.raises(ValidationError) as info:
        Webhook({"operations": ["ADD"], "exclude_urns": [URN]})
    assert [e["loc"] for e in info.value.errors()] == [("exclude_urns",)]


@pytest.mark.parametrize(("value", "loc"), [
    (1, ("categories",)), (["TAG", 2], ("categories", 1)), ({"TAG": True}, ("categories",)),
])
def test_filter_values_must_be_strings(value: Any, loc: tuple[Any, ...]) -> None:
    with pytest.raises(ValidationError) as info:
        Webhook({"categories": value})
    assert [e["loc"] for e in info.value.errors()] == [loc]
