"""DataHub ``MetadataChangeProposal_v1`` -> ``stg_datahub_mcp``, one row per proposal.

A MetadataChangeProposal (MCP) is what a writer asks DataHub to change: DataHub's own
SDK emitter (``DatahubKafkaEmitter``, acryl-datahub) produces one per aspect on
``MetadataChangeProposal_v1``, Avro in the Confluent wire format, keyed by the entity
urn; DataHub's metadata service consumes it and, once the change is persisted, writes a
MetadataChangeLog (see :mod:`processors.datahub_mcl`). The schema is
``schemas/datahub/MetadataChangeProposal.avsc`` (acryl-datahub 1.7.0.17). An MCP carries
the fields an MCL shares with it (:func:`processors.datahub_mcl.change_row`), without
previous values or ``created``; the table layout is kstage's, as for the MCL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from processors.base import Column, Message, Processor, Row, with_coordinates
from processors.datahub_mcl import (
    JSON_PATCH_CONTENT_TYPE,
    DatahubMclProcessor,
    change_row,
    generic_aspect_text,
    json_text,
    record,
    req_int,
)

_SHARED = {c.name: c for c in DatahubMclProcessor.columns}


def proposal_aspect_text(aspect: Mapping[str, Any] | None, where: str) -> str | None:
    """A proposal's GenericAspect as JSON text: ``application/json`` (a whole aspect) or
    ``application/json-patch+json`` (a PATCH's operations), kept verbatim.

    Any other content type is a PoisonMessage naming it: DataHub's metadata service
    refuses such proposals too, so there is no aspect to stage.
    """
    return generic_aspect_text(aspect, where, json_types=(JSON_PATCH_CONTENT_TYPE,))


class DatahubMcpProcessor(Processor):
    """DataHub MetadataChangeProposal -> ``stg_datahub_mcp``.

    Mapping (MCP field -> column), as for :class:`~processors.datahub_mcl.DatahubMclProcessor`:

    * ``entityUrn`` -> entity_urn (None when the proposal names its entity by
      ``entityKeyAspect`` only; neither is a PoisonMessage), ``entityType`` ->
      entity_type, ``aspectName`` -> aspect_name (required: it is in the key),
      ``changeType`` -> change_type (``UPSERT``, ``PATCH``, ``DELETE``, ...).
    * ``aspect`` / ``entityKeyAspect`` (GenericAspect) -> aspect / entity_key_aspect:
      the UTF-8 JSON text, verbatim, for contentType ``application/json`` and, for PATCH
      proposals, ``application/json-patch+json`` (the JSON Patch operations, not the
      patched aspect). Any other content type, bytes that are not UTF-8 JSON: a
      PoisonMessage naming the field. A proposal without ``aspect`` (a DELETE) has aspect
      None.
    * ``systemMetadata`` -> system_metadata (canonical JSON text), its ``runId`` ->
      run_id, its ``lastObserved`` -> last_observed (epoch ms; the emitter's time).
    * ``headers`` (a string map, e.g. DataHub's conditional-write ``If-Version-Match``)
      -> headers, canonical JSON text.

    ``auditHeader`` is not kept.

    Key: (entity_urn, aspect_name): a merge keeps the latest proposal per aspect, which
    for a PATCH is the patch, not the resulting aspect (that state is the MCL's).
    """

    name = "datahub_mcp"
    description = "DataHub MetadataChangeProposal (SDK emitter) -> stg_datahub_mcp"
    table = "stg_datahub_mcp"
    reader_schema = "datahub/MetadataChangeProposal.avsc"
    formats = DatahubMclProcessor.formats
    key = DatahubMclProcessor.key  # (entity_urn, aspect_name), as for change logs
    columns = (
        _SHARED["entity_urn"],
        _SHARED["entity_type"],
        _SHARED["aspect_name"],
        Column("change_type", nullable=False, doc="changeType, e.g. UPSERT, PATCH"),
        Column("aspect", doc="aspect: JSON text, or JSON Patch text for PATCH"),
        _SHARED["system_metadata"],
        Column("entity_key_aspect", doc="entityKeyAspect, like aspect"),
        _SHARED["run_id"],
        Column("last_observed", "long", doc="systemMetadata.lastObserved (epoch ms)"),
        Column("headers", doc="headers (string map) as JSON text"),
    )

    def transform(self, message: Message) -> Sequence[Row]:
        mcp = message.value
        row = change_row(mcp, "MetadataChangeProposal", proposal_aspect_text)
        system = record(mcp, "systemMetadata")
        row["last_observed"] = (
            None
            if system is None or system.get("lastObserved") is None
            else req_int(system, "lastObserved", "systemMetadata.")
        )
        row["headers"] = json_text(record(mcp, "headers"))
        return [with_coordinates(row, message)]
