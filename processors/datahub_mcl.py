"""DataHub ``MetadataChangeLog_v1`` -> ``stg_datahub_mcl``, one row per aspect change.

DataHub (the successor of WhereHows) writes a MetadataChangeLog (MCL) for every aspect
it persists: versioned aspects on ``MetadataChangeLog_Versioned_v1`` and timeseries
aspects on ``MetadataChangeLog_Timeseries_v1``, both with the schema
``schemas/datahub/MetadataChangeLog.avsc`` (acryl-datahub 1.7.0.17). DataHub publishes no
staging DDL; the table layout is kstage's, one column per top-level MCL field, with
aspects and system metadata kept as JSON text. Helpers here are shared with
:mod:`processors.datahub_platform_event` and :mod:`processors.datahub_mcp` (a
MetadataChangeProposal has the fields an MCL shares with it: :func:`change_row`).
"""

from __future__ import annotations

import base64
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from processors.base import Column, Message, Processor, Row, with_coordinates
from processors.errors import PoisonMessage
from processors.jsonfast import bytes_as_base64, check, dumps_canonical

JSON_CONTENT_TYPE = "application/json"
JSON_PATCH_CONTENT_TYPE = "application/json-patch+json"
"""The content type of a PATCH proposal's aspect (DataHub's ``MetadataPatchProposal``)."""


def shown(value: object, limit: int = 80) -> str:
    """``repr`` of a bad value for an error message, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def json_text(value: object) -> str | None:
    """Canonical JSON text (sorted keys, compact, UTF-8 kept, bytes as base64); None -> None."""
    return None if value is None else dumps_canonical(value, bytes_as_base64)


def media_type(content_type: str) -> str:
    """``content_type`` without parameters such as charset, lower case."""
    return content_type.split(";", 1)[0].strip().lower()


def is_json(content_type: str) -> bool:
    """True for ``application/json``, ignoring case and parameters such as charset."""
    return content_type == JSON_CONTENT_TYPE or media_type(content_type) == JSON_CONTENT_TYPE


def record(parent: Mapping[str, Any], key: str, where: str = "") -> Mapping[str, Any] | None:
    """The nested record ``parent[key]`` (None when null); PoisonMessage if not a record."""
    value = parent.get(key)
    if value is not None and type(value) is not dict and not isinstance(value, Mapping):
        raise PoisonMessage(f"field {where}{key}={shown(value)} is not a record")
    return value


def req_str(rec: Mapping[str, Any], key: str, where: str = "") -> str:
    """The required string ``rec[key]``; PoisonMessage naming the field otherwise."""
    value = rec.get(key)
    if not isinstance(value, str):
        raise PoisonMessage(f"field {where}{key}={shown(value)} is missing or not a string")
    return value


def opt_str(rec: Mapping[str, Any], key: str, where: str = "") -> str | None:
    """The optional string ``rec[key]`` (None when absent or null)."""
    return None if rec.get(key) is None else req_str(rec, key, where)


def req_int(rec: Mapping[str, Any], key: str, where: str = "", *, bits: int = 64) -> int:
    """The required integer ``rec[key]`` (``bits`` wide); PoisonMessage otherwise."""
    value = rec.get(key)
    limit = 2 ** (bits - 1)
    if not isinstance(value, int) or isinstance(value, bool) or not -limit <= value < limit:
        raise PoisonMessage(
            f"field {where}{key}={shown(value)} is missing or not a {bits}-bit integer"
        )
    return value


def generic_aspect_text(
    aspect: Mapping[str, Any] | None, where: str, *, json_types: Sequence[str] = ()
) -> str | None:
    """A ``GenericAspect`` (value bytes + contentType) as text.

    ``application/json`` (and the media types in ``json_types``): the value decoded as
    UTF-8, checked to be JSON, kept verbatim. Any other content type: standard base64 of
    the bytes when ``json_types`` is empty (DataHub itself only writes JSON aspects), else
    PoisonMessage naming the content type. Undecodable UTF-8 or invalid JSON raise
    PoisonMessage naming ``where``.
    """
    if aspect is None:
        return None
    value, content_type = aspect.get("value"), aspect.get("contentType")
    if not isinstance(value, bytes):
        raise PoisonMessage(f"field {where}.value={shown(value)} is missing or not bytes")
    if not isinstance(content_type, str):
        raise PoisonMessage(
            f"field {where}.contentType={shown(content_type)} is missing or not a string"
        )
    if not is_json(content_type) and media_type(content_type) not in json_types:
        if not json_types:
            return base64.b64encode(value).decode("ascii")
        accepted = ", ".join((JSON_CONTENT_TYPE, *json_types))
        raise PoisonMessage(
            f"field {where}.contentType={shown(content_type)} cannot be decoded: "
            f"kstage reads only {accepted} here ({len(value)} bytes of value)"
        )
    try:
        text = value.decode("utf-8")
        check(value, text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise PoisonMessage(
            f"field {where}.value={shown(value)} is not UTF-8 JSON ({type(exc).__name__}: {exc})"
        ) from exc
    return text


AspectText = Callable[[Mapping[str, Any] | None, str], str | None]
"""Turns a GenericAspect (or None) into column text; the second argument names the field."""


def change_row(event: object, kind: str, aspect_text: AspectText) -> Row:
    """The columns an MCL and an MCP share, from the decoded ``event`` (a ``kind`` record).

    entity_urn, entity_type, aspect_name, change_type, aspect, system_metadata,
    entity_key_aspect, run_id (see :class:`DatahubMclProcessor`); ``aspect_text``
    decodes ``aspect`` and ``entityKeyAspect``. PoisonMessage when ``event`` is not a
    record, names its entity by neither entityUrn nor entityKeyAspect, or has a bad field.
    """
    if type(event) is not dict and not isinstance(event, Mapping):
        raise PoisonMessage(f"expected a {kind} record, got {type(event).__name__}")
    urn = opt_str(event, "entityUrn")
    key_aspect = aspect_text(record(event, "entityKeyAspect"), "entityKeyAspect")
    if urn is None and key_aspect is None:
        raise PoisonMessage(
            f"{kind} has neither entityUrn nor entityKeyAspect "
            f"(entityType={shown(event.get('entityType'))}, "
            f"aspectName={shown(event.get('aspectName'))})"
        )
    system = record(event, "systemMetadata")
    return {
        "entity_urn": urn,
        "entity_type": req_str(event, "entityType"),
        "aspect_name": req_str(event, "aspectName"),
        "change_type": req_str(event, "changeType"),
        "aspect": aspect_text(record(event, "aspect"), "aspect"),
        "system_metadata": json_text(system),
        "entity_key_aspect": key_aspect,
        "run_id": None if system is None else opt_str(system, "runId", "systemMetadata."),
    }


class DatahubMclProcessor(Processor):
    """DataHub MetadataChangeLog -> ``stg_datahub_mcl`` (versioned and timeseries topics).

    Mapping (MCL field -> column); every choice here is kstage's (DataHub has no DDL):

    * ``entityUrn`` -> entity_urn. It is optional in the schema: an MCL may name its
      entity by ``entityKeyAspect`` only, and then entity_urn is None. An MCL with
      neither is a PoisonMessage.
    * ``entityType`` -> entity_type, ``changeType`` -> change_type (``UPSERT``,
      ``DELETE``, ...), ``aspectName`` -> aspect_name (required here, since it is in the
      key: DataHub always sets it on an MCL).
    * ``aspect`` / ``previousAspectValue`` / ``entityKeyAspect`` (GenericAspect) ->
      aspect / previous_aspect / entity_key_aspect: the UTF-8 JSON text when
      contentType is ``application/json``, else base64 (see :func:`generic_aspect_text`).
    * ``systemMetadata`` / ``previousSystemMetadata`` -> system_metadata /
      previous_system_metadata as canonical JSON text (:func:`json_text`);
      ``systemMetadata.runId`` -> run_id.
    * ``created.time`` / ``created.actor`` -> created_time / created_actor (None when
      ``created`` is absent).

    ``auditHeader`` and ``headers`` are not kept.

    Key: (entity_urn, aspect_name), the latest state of an aspect. A merge on it keeps one
    row per aspect, which for timeseries aspects means the latest data point only; rows
    with a null entity_urn (key-aspect-only MCLs) never match one another.
    """

    name = "datahub_mcl"
    formats = ("avro",)
    description = "DataHub MetadataChangeLog (versioned/timeseries) -> stg_datahub_mcl"
    table = "stg_datahub_mcl"
    reader_schema = "datahub/MetadataChangeLog.avsc"
    key = ("entity_urn", "aspect_name")
    columns = (
        Column("entity_urn", doc="entityUrn; None when only entityKeyAspect is given"),
        Column("entity_type", nullable=False, doc="entityType, e.g. dataset"),
        Column("aspect_name", nullable=False, doc="aspectName, e.g. ownership"),
        Column("change_type", nullable=False, doc="changeType, e.g. UPSERT"),
        Column("aspect", doc="aspect: JSON text (application/json) else base64"),
        Column("previous_aspect", doc="previousAspectValue, like aspect"),
        Column("system_metadata", doc="systemMetadata as JSON text"),
        Column("previous_system_metadata", doc="previousSystemMetadata as JSON text"),
        Column("created_time", "long", doc="created.time (epoch ms)"),
        Column("created_actor", doc="created.actor"),
        Column("entity_key_aspect", doc="entityKeyAspect, like aspect"),
        Column("run_id", doc="systemMetadata.runId"),
    )

    def transform(self, message: Message) -> Sequence[Row]:
        mcl = message.value
        row = _usual_row(mcl)
        if row is None:  # anything unusual: the checks below say what, as they always did
            row = _checked_row(mcl)
        return [with_coordinates(row, message)]


def _checked_row(mcl: Any) -> Row:
    """The MCL row through the field checks (:func:`change_row`), which name the field
    of a PoisonMessage."""
    row = change_row(mcl, "MetadataChangeLog", generic_aspect_text)
    created = record(mcl, "created")
    row["previous_aspect"] = generic_aspect_text(
        record(mcl, "previousAspectValue"), "previousAspectValue"
    )
    row["previous_system_metadata"] = json_text(record(mcl, "previousSystemMetadata"))
    row["created_time"] = None if created is None else req_int(created, "time", "created.")
    row["created_actor"] = None if created is None else req_str(created, "actor", "created.")
    return row


_UNUSUAL = object()


def _usual_aspect(aspect: object) -> object:
    """:func:`generic_aspect_text` of a null or application/json aspect with UTF-8 JSON
    bytes, else ``_UNUSUAL`` (other content types, bad values: the checked path)."""
    if aspect is None:
        return None
    if type(aspect) is not dict or aspect.get("contentType") != JSON_CONTENT_TYPE:
        return _UNUSUAL
    value = aspect.get("value")
    if type(value) is not bytes:
        return _UNUSUAL
    try:
        orjson.loads(value)  # accepts UTF-8 JSON only, a subset of what json.loads does
    except orjson.JSONDecodeError:
        return _UNUSUAL  # json.loads may accept it (NaN...) or gives the error message
    return value.decode("utf-8")


_MCL_FIELDS = operator.itemgetter(
    "entityUrn", "entityType", "aspectName", "changeType", "entityKeyAspect", "aspect",
    "previousAspectValue", "systemMetadata", "previousSystemMetadata", "created")
_LONG = range(-(2**63), 2**63)


def _usual_row(mcl: Any) -> Row | None:
    """:func:`_checked_row` for the usual MCL, in fewer steps (the MCL topics carry
    thousands per second); None when anything is unusual: a missing or mistyped field,
    an entity named by its key aspect only, a non-JSON aspect, a bad ``created``.
    The canonical JSON text is computed in the order the checked path does."""
    if type(mcl) is not dict:
        return None
    try:
        (urn, entity_type, aspect_name, change_type, key_aspect, aspect, previous,
         system, previous_system, created) = _MCL_FIELDS(mcl)
    except KeyError:  # a decoded Avro MCL has every field
        return None
    if (type(urn) is not str or type(entity_type) is not str or type(aspect_name) is not str
            or type(change_type) is not str or key_aspect is not None
            or (system is not None and type(system) is not dict)
            or (previous_system is not None and type(previous_system) is not dict)):
        return None
    run_id = None if system is None else system.get("runId")
    if run_id is not None and type(run_id) is not str:
        return None
    created_time = created_actor = None
    if created is not None:
        if type(created) is not dict:
            return None
        created_time, created_actor = created.get("time"), created.get("actor")
        if (type(created_time) is not int or created_time not in _LONG
                or type(created_actor) is not str):
            return None
    if aspect is not None and (aspect := _usual_aspect(aspect)) is _UNUSUAL:
        return None
    if previous is not None and (previous := _usual_aspect(previous)) is _UNUSUAL:
        return None
    return {
        "entity_urn": urn,
        "entity_type": entity_type,
        "aspect_name": aspect_name,
        "change_type": change_type,
        "aspect": aspect,
        "system_metadata": None if system is None else dumps_canonical(system, bytes_as_base64),
        "entity_key_aspect": None,
        "run_id": run_id,
        "previous_aspect": previous,
        "previous_system_metadata": None if previous_system is None else dumps_canonical(
            previous_system, bytes_as_base64),
        "created_time": created_time,
        "created_actor": created_actor,
    }
