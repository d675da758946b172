"""DataHub MetadataChangeProposal processor (``datahub_mcp``).

Every input is built from the real ``MetadataChangeProposal.avsc`` (round-tripped through
fastavro, see tests/avro_records.py); PATCH aspects are JSON Patch operations as DataHub's
``MetadataPatchProposal`` writes them (contentType ``application/json-patch+json``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pydantic import ValidationError

from processors import registry
from processors.base import COORDINATE_COLUMNS, SCHEMA_DIR, Message
from processors.datahub_mcl import json_text
from processors.datahub_mcp import DatahubMcpProcessor
from processors.errors import PoisonMessage
from tests.avro_records import TIMESTAMP, assert_row_honest, avro_message, one
from tests.unit.test_processors_datahub import ACTOR, OWNERSHIP, T0, URN, aspect, system_metadata

MCP = "datahub/MetadataChangeProposal.avsc"
TOPIC = "MetadataChangeProposal_v1"
TAG_PATCH = [{"op": "add", "path": "/tags/urn:li:tag:PII", "value": {"tag": "urn:li:tag:PII"}}]


def mcp(**fields: Any) -> dict[str, Any]:
    """An ownership UPSERT proposal as the SDK emitter sends it; ``fields`` override."""
    record: dict[str, Any] = {
        "auditHeader": None, "entityType": "dataset", "entityUrn": URN,
        "entityKeyAspect": None, "changeType": "UPSERT", "aspectName": "ownership",
        "aspect": aspect(OWNERSHIP), "systemMetadata": system_metadata("hive-2024_05_29", T0),
        "headers": None,
    }
    record.update(fields)
    return record


def patch(ops: object) -> dict[str, Any]:
    return {"value": json.dumps(ops).encode("utf-8"),
            "contentType": "application/json-patch+json"}


def mcp_message(record: dict[str, Any], offset: int = 7) -> Message:
    return avro_message(MCP, record, topic=TOPIC, partition=2, offset=offset,
                        key=URN.encode("utf-8"))


def test_class_attributes_and_registration() -> None:
    proc = DatahubMcpProcessor
    assert registry.load("datahub_mcp") is proc
    assert (proc.name, proc.table, proc.key, proc.formats) == (
        "datahub_mcp", "stg_datahub_mcp", ("entity_urn", "aspect_name"), ("avro",))
    assert proc.reader_schema is not None and (SCHEMA_DIR / proc.reader_schema).is_file()
    assert [c.name for c in proc.columns] == [
        "entity_urn", "entity_type", "aspect_name", "change_type", "aspect",
        "system_metadata", "entity_key_aspect", "run_id", "last_observed", "headers"]
    assert not {c.name for c in proc.columns} & set(COORDINATE_COLUMNS)
    with pytest.raises(ValidationError, match="extra"):
        DatahubMcpProcessor({"aspects": ["ownership"]})  # takes no options


def test_upsert_proposal() -> None:
    msg = mcp_message(mcp(headers={"If-Version-Match": "3"}))
    row = one(DatahubMcpProcessor(), msg)
    assert_row_honest(DatahubMcpProcessor, msg, row)
    assert row == {
        "entity_urn": URN, "entity_type": "dataset", "aspect_name": "ownership",
        "change_type": "UPSERT", "aspect": msg.value["aspect"]["value"].decode("utf-8"),
        "system_metadata": json_text(msg.value["systemMetadata"]),
        "entity_key_aspect": None, "run_id": "hive-2024_05_29", "last_observed": T0,
        "headers": '{"If-Version-Match":"3"}',
        "_topic": TOPIC, "_partition": 2, "_offset": 7, "_timestamp": TIMESTAMP,
    }
    assert json.loads(row["aspect"]) == OWNERSHIP
    assert json.loads(row["system_metadata"])["aspectCreated"]["actor"] == ACTOR


def test_patch_proposal_keeps_the_json_patch() -> None:
    record = mcp(changeType="PATCH", aspectName="globalTags", aspect=patch(TAG_PATCH),
                 systemMetadata=None)
    row = one(DatahubMcpProcessor(), mcp_message(record))
    assert (row["change_type"], row["aspect_name"]) == ("PATCH", "globalTags")
    assert json.loads(row["aspect"]) == TAG_PATCH  # the operations, verbatim
    assert row["aspect"] == json.dumps(TAG_PATCH)
    assert (row["system_metadata"], row["run_id"], row["last_observed"]) == (None, None, None)


def test_proposal_without_aspect() -> None:
    row = one(DatahubMcpProcessor(), mcp_message(mcp(changeType="DELETE", aspect=None)))
    assert (row["change_type"], row["aspect"]) == ("DELETE", None)
    # an UPSERT without aspect is staged as proposed: DataHub, not kstage, refuses it
    assert one(DatahubMcpProcessor(), mcp_message(mcp(aspect=None)))["aspect"] is None


def test_proposal_identified_by_key_aspect_only() -> None:
    key = {"platform": "urn:li:dataPlatform:hive", "name": "logging_events", "origin": "PROD"}
    row = one(DatahubMcpProcessor(), mcp_message(mcp(entityUrn=None, entityKeyAspect=aspect(key))))
    assert row["entity_urn"] is None and json.loads(row["entity_key_aspect"]) == key


def test_system_metadata_defaults_are_decoded() -> None:
    row = one(DatahubMcpProcessor(), mcp_message(mcp(systemMetadata={"runId": "r1"})))
    assert (row["run_id"], row["last_observed"]) == ("r1", 0)  # lastObserved defaults to 0
    row = one(DatahubMcpProcessor(), mcp_message(mcp(systemMetadata={"lastObserved": None})))
    assert (row["run_id"], row["last_observed"]) == ("no-run-id-provided", None)


@pytest.mark.parametrize(("record", "needle"), [
    (mcp(aspect={"value": b"\x02\x04", "contentType": "application/avro"}),
     "field aspect.contentType='application/avro' cannot be decoded: kstage reads only "
     "application/json, application/json-patch+json here (2 bytes of value)"),
    (mcp(entityKeyAspect={"value": b"k", "contentType": "text/plain"}),
     "field entityKeyAspect.contentType='text/plain' cannot be decoded"),
    (mcp(changeType="PATCH", aspect={"value": b"[{\"op\": ", "contentType":
                                     "application/json-patch+json"}),
     "field aspect.value=b'[{\"op\": ' is not UTF-8 JSON"),
    (mcp(aspect={"value": b"\xff{}", "contentType": "application/json"}),
     "field aspect.value=b'\\xff{}' is not UTF-8 JSON"),
    (mcp(aspectName=None), "field aspectName=None is missing or not a string"),
    (mcp(entityUrn=None), "MetadataChangeProposal has neither entityUrn nor entityKeyAspect "
                          "(entityType='dataset', aspectName='ownership')"),
])
def test_bad_proposals_are_poison_with_a_clear_reason(record: dict[str, Any],
                                                      needle: str) -> None:
    with pytest.raises(PoisonMessage, match=re.escape(needle)):
        DatahubMcpProcessor().transform(mcp_message(record))


def test_value_that_is_not_a_record_is_poison() -> None:
    with pytest.raises(PoisonMessage, match="expected a MetadataChangeProposal record, got bytes"):
        DatahubMcpProcessor().transform(Message(TOPIC, 0, 0, 0, None, b"x", (), b"x"))


def test_content_type_parameters_and_case_are_ignored() -> None:
    record = mcp(aspect={"value": b'{"removed": false}',
                         "contentType": "Application/JSON; charset=utf-8"},
                 aspectName="status")
    assert one(DatahubMcpProcessor(), mcp_message(record))["aspect"] == '{"removed": false}'
