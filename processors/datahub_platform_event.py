"""DataHub ``PlatformEvent_v1`` entity change events -> ``stg_datahub_entity_change_event``.

DataHub publishes platform events on ``PlatformEvent_v1`` with the schema
``schemas/datahub/PlatformEvent.avsc``: a header (``timestampMillis``), an event ``name``
and a ``GenericPayload`` (bytes + contentType). Events named ``entityChangeEvent`` carry
an ``EntityChangeEvent`` (``schemas/datahub/EntityChangeEvent.avsc``) serialised as JSON
(Pegasus JSON: optional fields are simply absent, ``parameters`` is a free-form object).
The table layout is kstage's (DataHub has no staging DDL): one row per entity change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from processors import jsonfast
from processors.base import Column, Message, Processor, Row, with_coordinates
from processors.datahub_mcl import is_json, json_text, record, req_int, req_str, shown
from processors.errors import PoisonMessage

ENTITY_CHANGE_EVENT = "entityChangeEvent"


def parse_entity_change(payload: Mapping[str, Any]) -> Mapping[str, Any]:
    """The EntityChangeEvent JSON object of a PlatformEvent payload.

    Raises:
        PoisonMessage: the content type is not JSON, or the bytes are not a UTF-8 JSON
            object.
    """
    value, content_type = payload.get("value"), payload.get("contentType")
    if not isinstance(content_type, str) or not is_json(content_type):
        raise PoisonMessage(
            f"field payload.contentType={shown(content_type)}: "
            "an entityChangeEvent payload must be application/json"
        )
    if not isinstance(value, bytes):
        raise PoisonMessage(f"field payload.value={shown(value)} is missing or not bytes")
    try:
        event = jsonfast.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise PoisonMessage(
            f"field payload.value={shown(value)} is not UTF-8 JSON ({type(exc).__name__}: {exc})"
        ) from exc
    if not isinstance(event, dict):
        raise PoisonMessage(f"field payload.value={shown(value)} is not a JSON object")
    return event


class DatahubEntityChangeProcessor(Processor):
    """DataHub entity change events -> ``stg_datahub_entity_change_event``.

    Only PlatformEvents named ``entityChangeEvent`` are kept; any other name gives
    ``[]``. The payload must be an ``application/json`` EntityChangeEvent; bad JSON or a
    missing required field is a PoisonMessage naming the field.

    Mapping (EntityChangeEvent field -> column):

    * ``entityUrn`` -> entity_urn, ``entityType`` -> entity_type, ``category`` ->
      category (e.g. ``TAG``), ``operation`` -> operation (e.g. ``ADD``): required
    * ``modifier`` -> modifier (e.g. the tag urn; None when absent)
    * ``parameters`` -> parameters as canonical JSON text (None when absent)
    * ``auditStamp.time`` / ``auditStamp.actor`` -> audit_time / audit_actor: required
    * ``version`` -> version (32-bit int): required
    * PlatformEvent ``header.timestampMillis`` -> event_time

    Key (kstage's choice): (entity_urn, category, operation, modifier, audit_time): one
    change of one entity at one audit time; the modifier tells apart changes made together
    (two tags added at once). modifier may be None, so a merge on the key has to compare
    it null-safely (Spark ``<=>``).
    """

    name = "datahub_entity_change"
    formats = ("avro",)
    description = "DataHub PlatformEvent entityChangeEvent -> stg_datahub_entity_change_event"
    table = "stg_datahub_entity_change_event"
    reader_schema = "datahub/PlatformEvent.avsc"
    key = ("entity_urn", "category", "operation", "modifier", "audit_time")
    final_partition = ("audit_date", "to_date(timestamp_millis(audit_time))")
    columns = (
        Column("entity_urn", nullable=False, doc="entityUrn"),
        Column("entity_type", nullable=False, doc="entityType, e.g. dataset"),
        Column("category", nullable=False, doc="category, e.g. TAG, TECHNICAL_SCHEMA"),
        Column("operation", nullable=False, doc="operation, e.g. ADD, REMOVE, MODIFY"),
        Column("modifier", doc="modifier, e.g. the tag or field urn"),
        Column("parameters", doc="parameters as JSON text"),
        Column("audit_time", "long", nullable=False, doc="auditStamp.time (epoch ms)"),
        Column("audit_actor", nullable=False, doc="auditStamp.actor"),
        Column("version", "int", nullable=False, doc="version of the event format"),
        Column("event_time", "long", nullable=False, doc="header.timestampMillis"),
    )

    def transform(self, message: Message) -> Sequence[Row]:
        event = message.value
        if not isinstance(event, Mapping):
            raise PoisonMessage(f"expected a PlatformEvent record, got {type(event).__name__}")
        if req_str(event, "name") != ENTITY_CHANGE_EVENT:
            return []
        header = record(event, "header")
        payload = record(event, "payload")
        if header is None or payload is None:
            raise PoisonMessage("PlatformEvent: field header or payload is missing")
        change = parse_entity_change(payload)
        audit = record(change, "auditStamp", "payload.")
        if audit is None:
            raise PoisonMessage("field payload.auditStamp is missing")
        parameters = change.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise PoisonMessage(f"field payload.parameters={shown(parameters)} is not an object")
        modifier = change.get("modifier")
        row: Row = {
            "entity_urn": req_str(change, "entityUrn", "payload."),
            "entity_type": req_str(change, "entityType", "payload."),
            "category": req_str(change, "category", "payload."),
            "operation": req_str(change, "operation", "payload."),
            "modifier": None if modifier is None else req_str(change, "modifier", "payload."),
            "parameters": json_text(parameters),
            "audit_time": req_int(audit, "time", "payload.auditStamp."),
            "audit_actor": req_str(audit, "actor", "payload.auditStamp."),
            "version": req_int(change, "version", "payload.", bits=32),
            "event_time": req_int(header, "timestampMillis", "header."),
        }
        return [with_coordinates(row, message)]
