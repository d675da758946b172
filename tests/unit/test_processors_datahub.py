"""DataHub processors: MetadataChangeLog and PlatformEvent entity change events.

Every input is built from the real DataHub Avro schemas (round-tripped through fastavro,
see tests/avro_records.py); entity change payloads are checked against
``EntityChangeEvent.avsc`` before they are serialised as JSON, as DataHub does.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from fastavro.validation import validate

from processors.base import COORDINATE_COLUMNS, SCHEMA_DIR, Message, Processor
from processors.datahub_mcl import DatahubMclProcessor, json_text
from processors.datahub_platform_event import DatahubEntityChangeProcessor
from processors.errors import PoisonMessage
from tests.avro_records import TIMESTAMP, assert_row_honest, avro_message, one, schema

MCL = "datahub/MetadataChangeLog.avsc"
PLATFORM_EVENT = "datahub/PlatformEvent.avsc"
URN = "urn:li:dataset:(urn:li:dataPlatform:hive,logging_events,PROD)"
ACTOR = "urn:li:corpuser:datahub"
T0 = 1_717_000_000_000

OWNERSHIP = {"owners": [{"owner": "urn:li:corpuser:jdoe", "type": "TECHNICAL_OWNER"}],
             "lastModified": {"time": T0, "actor": ACTOR}}
OLD_OWNERSHIP = {"owners": [], "lastModified": {"time": T0 - 60_000, "actor": ACTOR}}


def aspect(value: dict[str, Any], content_type: str = "application/json") -> dict[str, Any]:
    return {"value": json.dumps(value, ensure_ascii=False).encode("utf-8"),
            "contentType": content_type}


def system_metadata(run_id: str | None, last_observed: int) -> dict[str, Any]:
    return {"lastObserved": last_observed, "runId": run_id, "lastRunId": "no-run-id-provided",
            "pipelineName": "hive-ingest", "registryName": None, "registryVersion": None,
            "properties": {"clientId": "acryl-datahub", "clientVersion": "1.7.0"},
            "version": "3", "schemaVersion": None,
            "aspectCreated": {"time": T0 - 86_400_000, "actor": ACTOR},
            "aspectModified": None}


def mcl(**fields: Any) -> dict[str, Any]:
    """A versioned ownership UPSERT with its previous value; ``fields`` override."""
    record: dict[str, Any] = {
        "auditHeader": None, "entityType": "dataset", "entityUrn": URN,
        "entityKeyAspect": None, "changeType": "UPSERT", "aspectName": "ownership",
        "aspect": aspect(OWNERSHIP), "systemMetadata": system_metadata("hive-2024_05_29", T0),
        "headers": None, "previousAspectValue": aspect(OLD_OWNERSHIP),
        "previousSystemMetadata": system_metadata("hive-2024_05_28", T0 - 60_000),
        "created": {"time": T0, "actor": ACTOR, "impersonator": None, "message": None},
    }
    record.update(fields)
    return record


def mcl_message(record: dict[str, Any], topic: str = "MetadataChangeLog_Versioned_v1",
                offset: int = 42) -> Message:
    return avro_message(MCL, record, topic=topic, partition=1, offset=offset)


def entity_change(**fields: Any) -> dict[str, Any]:
    """An EntityChangeEvent (tag added to a dataset), as DataHub's JSON; ``fields`` override.

    A value of None removes the field (Pegasus JSON leaves out absent optionals).
    """
    change: dict[str, Any] = {
        "entityType": "dataset", "entityUrn": URN, "category": "TAG", "operation": "ADD",
        "modifier": "urn:li:tag:PII", "parameters": {"tagUrn": "urn:li:tag:PII"},
        "auditStamp": {"time": T0, "actor": "urn:li:corpuser:jdoe"}, "version": 0,
    }
    change.update(fields)
    return {k: v for k, v in change.items() if v is not None}


def platform_event(payload: bytes, *, name: str = "entityChangeEvent",
                   content_type: str = "application/json", offset: int = 5) -> Message:
    record = {"header": {"timestampMillis": T0 + 17}, "name": name,
              "payload": {"value": payload, "contentType": content_type}}
    return avro_message(PLATFORM_EVENT, record, topic="PlatformEvent_v1", offset=offset)


def ece_message(change: dict[str, Any]) -> Message:
    validate(change, schema("datahub/EntityChangeEvent.avsc"), raise_errors=True)
    return platform_event(json.dumps(change).encode("utf-8"))


SAMPLES: dict[type[Processor], list[Callable[[], Message]]] = {
    DatahubMclProcessor: [
        lambda: mcl_message(mcl()),
        lambda: mcl_message(mcl(entityUrn=None, entityKeyAspect=aspect(
            {"platform": "urn:li:dataPlatform:hive", "name": "logging_events",
             "origin": "PROD"}))),
        lambda: mcl_message(mcl(changeType="DELETE", aspect=None, created=None)),
    ],
    DatahubEntityChangeProcessor: [
        lambda: ece_message(entity_change()),
        lambda: ece_message(entity_change(category="LIFECYCLE", operation="CREATE",
                                          modifier=None, parameters=None)),
    ],
}
PROCESSORS = list(SAMPLES)


@pytest.mark.parametrize("proc", PROCESSORS, ids=lambda p: p.name)
def test_class_attributes(proc: type[Processor]) -> None:
    assert proc.name and proc.description and proc.table
    assert proc.formats == ("avro",)
    assert proc.reader_schema is not None and (SCHEMA_DIR / proc.reader_schema).is_file()
    names = [c.name for c in proc.columns]
    assert len(names) == len(set(names))
    assert set(proc.key) <= set(names)
    assert not set(names) & set(COORDINATE_COLUMNS)


@pytest.mark.parametrize("proc", PROCESSORS, ids=lambda p: p.name)
def test_rows_are_honest_about_columns_and_types(proc: type[Processor]) -> None:
    for make in SAMPLES[proc]:
        message = make()
        assert_row_honest(proc, message, one(proc(), message))


def test_mcl_table_and_key() -> None:
    assert (DatahubMclProcessor.name, DatahubMclProcessor.table, DatahubMclProcessor.key) == (
        "datahub_mcl", "stg_datahub_mcl", ("entity_urn", "aspect_name"))
    assert [c.name for c in DatahubMclProcessor.columns] == [
        "entity_urn", "entity_type", "aspect_name", "change_type", "aspect", "previous_aspect",
        "system_metadata", "previous_system_metadata", "created_time", "created_actor",
        "entity_key_aspect", "run_id"]


# --------------------------------------------------------------------------- MCL


def test_mcl_upsert_with_previous_aspect() -> None:
    msg = mcl_message(mcl())
    row = one(DatahubMclProcessor(), msg)
    value = msg.value
    assert {k: row[k] for k in ("entity_urn", "entity_type", "aspect_name", "change_type",
                                "created_time", "created_actor", "entity_key_aspect",
                                "run_id")} == {
        "entity_urn": URN, "entity_type": "dataset", "aspect_name": "ownership",
        "change_type": "UPSERT", "created_time": T0, "created_actor": ACTOR,
        "entity_key_aspect": None, "run_id": "hive-2024_05_29"}
    assert row["aspect"] == value["aspect"]["value"].decode("utf-8")
    assert json.loads(row["aspect"]) == OWNERSHIP
    assert json.loads(row["previous_aspect"]) == OLD_OWNERSHIP
    assert row["system_metadata"] == json_text(value["systemMetadata"])
    assert json.loads(row["system_metadata"])["properties"]["clientId"] == "acryl-datahub"
    assert json.loads(row["previous_system_metadata"])["runId"] == "hive-2024_05_28"
    assert (row["_topic"], row["_partition"], row["_offset"], row["_timestamp"]) == (
        "MetadataChangeLog_Versioned_v1", 1, 42, TIMESTAMP)


def test_mcl_timeseries_aspect() -> None:
    profile = {"timestampMillis": T0, "rowCount": 1_204_331, "columnCount": 12,
               "partitionSpec": {"type": "FULL_TABLE", "partition": "FULL_TABLE_SNAPSHOT"}}
    record = mcl(aspectName="datasetProfile", aspect=aspect(profile),
                 previousAspectValue=None, previousSystemMetadata=None, created=None,
                 systemMetadata=system_metadata("profiling-2024_05_29", T0 + 1))
    row = one(DatahubMclProcessor(),
              mcl_message(record, topic="MetadataChangeLog_Timeseries_v1", offset=9))
    assert (row["aspect_name"], row["change_type"], row["_topic"]) == (
        "datasetProfile", "UPSERT", "MetadataChangeLog_Timeseries_v1")
    assert json.loads(row["aspect"]) == profile
    assert row["previous_aspect"] is None and row["previous_system_metadata"] is None
    assert (row["created_time"], row["created_actor"]) == (None, None)
    assert row["run_id"] == "profiling-2024_05_29"


def test_mcl_identified_by_key_aspect_only() -> None:
    row = one(DatahubMclProcessor(), SAMPLES[DatahubMclProcessor][1]())
    assert row["entity_urn"] is None
    assert json.loads(row["entity_key_aspect"])["name"] == "logging_events"


def test_mcl_without_system_metadata_and_defaults() -> None:
    row = one(DatahubMclProcessor(), mcl_message(mcl(systemMetadata=None)))
    assert (row["system_metadata"], row["run_id"]) == (None, None)
    # runId left out: the schema default is filled in by decoding
    sparse = {"lastObserved": T0}
    row = one(DatahubMclProcessor(), mcl_message(mcl(systemMetadata=sparse)))
    assert row["run_id"] == "no-run-id-provided"


def test_mcl_non_json_aspect_is_base64() -> None:
    raw = b"\x00\x01binary\xff"
    record = mcl(aspect={"value": raw, "contentType": "application/octet-stream"})
    row = one(DatahubMclProcessor(), mcl_message(record))
    assert base64.b64decode(row["aspect"]) == raw
    charset = mcl(aspect={"value": b'{"a": 1}', "contentType": "Application/JSON; charset=utf-8"})
    assert one(DatahubMclProcessor(), mcl_message(charset))["aspect"] == '{"a": 1}'


def test_mcl_missing_urn_is_poison() -> None:
    msg = mcl_message(mcl(entityUrn=None, entityKeyAspect=None))
    with pytest.raises(PoisonMessage, match="neither entityUrn nor entityKeyAspect"):
        DatahubMclProcessor().transform(msg)


@pytest.mark.parametrize(("record", "needle"), [
    (mcl(aspect={"value": b"{not json", "contentType": "application/json"}),
     r"field aspect\.value=b'\{not json' is not UTF-8 JSON"),
    (mcl(previousAspectValue={"value": b"\xff\xfe", "contentType": "application/json"}),
     r"field previousAspectValue\.value=.* is not UTF-8 JSON"),
    (mcl(aspectName=None), "field aspectName=None is missing"),
])
def test_mcl_bad_values_are_poison(record: dict[str, Any], needle: str) -> None:
    with pytest.raises(PoisonMessage, match=needle):
        DatahubMclProcessor().transform(mcl_message(record))


def test_mcl_value_that_is_not_a_record_is_poison() -> None:
    with pytest.raises(PoisonMessage, match="expected a MetadataChangeLog record"):
        DatahubMclProcessor().transform(Message("t", 0, 0, 0, None, b"x", (), b"x"))


# --------------------------------------------------------------------------- PlatformEvent


def test_entity_change_event() -> None:
    assert (DatahubEntityChangeProcessor.name, DatahubEntityChangeProcessor.table) == (
        "datahub_entity_change", "stg_datahub_entity_change_event")
    row = one(DatahubEntityChangeProcessor(), ece_message(entity_change()))
    assert row == {
        "entity_urn": URN, "entity_type": "dataset", "category": "TAG", "operation": "ADD",
        "modifier": "urn:li:tag:PII", "parameters": '{"tagUrn":"urn:li:tag:PII"}',
        "audit_time": T0, "audit_actor": "urn:li:corpuser:jdoe", "version": 0,
        "event_time": T0 + 17,
        "_topic": "PlatformEvent_v1", "_partition": 0, "_offset": 5, "_timestamp": TIMESTAMP,
    }


def test_entity_change_without_optionals() -> None:
    row = one(DatahubEntityChangeProcessor(), SAMPLES[DatahubEntityChangeProcessor][1]())
    assert (row["category"], row["operation"], row["modifier"], row["parameters"]) == (
        "LIFECYCLE", "CREATE", None, None)


def test_other_platform_events_are_filtered_out() -> None:
    msg = platform_event(b'{"whatever": 1}', name="someOtherPlatformEvent")
    assert DatahubEntityChangeProcessor().transform(msg) == []


@pytest.mark.parametrize(("payload", "needle"), [
    (b'{"entityUrn": ', r"field payload\.value=b'\{\"entityUrn\": ' is not UTF-8 JSON"),
    (b"[1, 2]", r"field payload\.value=b'\[1, 2\]' is not a JSON object"),
    (json.dumps(entity_change(category=None)).encode(), "field payload.category=None"),
    (json.dumps(entity_change(auditStamp=None)).encode(), "field payload.auditStamp is missing"),
    (json.dumps(entity_change(auditStamp={"actor": "x"})).encode(),
     "field payload.auditStamp.time=None"),
    (json.dumps(entity_change(version="1")).encode(), "field payload.version='1'"),
    (json.dumps(entity_change(parameters=[1])).encode(), r"field payload\.parameters=\[1\]"),
])
def test_bad_entity_change_payload_is_poison(payload: bytes, needle: str) -> None:
    with pytest.raises(PoisonMessage, match=needle):
        DatahubEntityChangeProcessor().transform(platform_event(payload))


def test_entity_change_payload_must_be_json() -> None:
    msg = platform_event(b"\x01\x02", content_type="application/avro")
    with pytest.raises(PoisonMessage, match=re.escape("payload.contentType='application/avro'")):
        DatahubEntityChangeProcessor().transform(msg)
