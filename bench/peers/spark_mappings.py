"""The mappings a Spark Structured Streaming user writes for kstage's processors, over the
Kafka source's rows (``value`` binary, ``topic``, ``partition``, ``offset``,
``timestamp``).

Gobblin compaction (kstage's ``gobblin_compaction``, processors/gobblin.py) is all Spark
SQL, Spark's best case: ``from_avro`` of the value after the Confluent header (magic byte
and 4-byte schema id: ``substr(value, 6)``, the one writer schema given), then
expressions. Same columns, same values for well-formed events; where kstage sends an event
to its dead letters (a NOT NULL value missing, a number that does not parse, a path
that does not cut) Spark writes NULL or an empty string, or fails the batch on a NOT NULL
column (the session runs with ``spark.sql.iceberg.check-nullability=false``, so the check
is the writer's at run time). No cluster-code list: kstage's default keeps the identifier.
"""

from __future__ import annotations

import json
from typing import Any

# The path cut is processors/gobblin.py's _COMPACTION_OUTPUT (Java's regex syntax is the
# same here), each backslash doubled for Spark SQL's string literals.
GOBBLIN_COMPACTION = r"""
SELECT
  e.metadata['clusterIdentifier'] AS cluster,
  IF(completed, e.metadata['datasetUrn'],
     regexp_extract(path, '^(/\\w+/\\w+/[\\w-]+)/([\\w-]+)/(\\d.*)$', 1))
    AS dataset,
  IF(completed, CAST(NULL AS STRING),
     regexp_extract(path, '^(/\\w+/\\w+/[\\w-]+)/([\\w-]+)/(\\d.*)$', 2))
    AS partition_type,
  IF(completed, e.metadata['partition'],
     regexp_extract(path, '^(/\\w+/\\w+/[\\w-]+)/([\\w-]+)/(\\d.*)$', 3))
    AS partition_name,
  CAST(IF(completed, e.metadata['recordCount'], e.metadata['RegularRecordCount']) AS BIGINT)
    AS record_count,
  CAST(IF(completed, NULL, e.metadata['LateRecordCount']) AS BIGINT) AS late_record_count,
  e.metadata['dedupeStatus'] AS dedupe_status,
  concat('Gobblin:', e.name) AS job_context,
  e.metadata['azkabanProjectName'] AS project_name,
  e.metadata['azkabanFlowId'] AS flow_name,
  e.metadata['azkabanJobId'] AS job_name,
  CAST(e.metadata['azkabanExecId'] AS INT) AS flow_exec_id,
  e.timestamp AS log_event_time,
  topic AS _topic,
  partition AS _kafka_partition,
  offset AS _offset,
  unix_millis(timestamp) AS _timestamp,
  current_timestamp() AS _ingested_at
FROM (SELECT *, e.name = 'CompactionCompleted' AS completed,
             e.metadata['DatasetOutputPath'] AS path FROM decoded)
WHERE e.namespace = 'compaction.tracking.events'
  AND e.name IN ('CompactionCompleted', 'CompactionRecordCounts')
"""
"""The Gobblin compaction mapping over the view ``decoded``: the Kafka columns and ``e``,
the decoded event."""


# -- DataHub MetadataChangeLog (kstage's datahub_mcl, processors/datahub_mcl.py) -----------
#
# All Spark SQL too: no part of the mapping needs a Python UDF. kstage writes the system
# metadata as canonical JSON (keys sorted at every level, nulls kept, compact); Spark's
# to_json writes a struct's fields in their order and a map's keys in theirs, so the
# mapping rebuilds each struct with its fields in name order and sorts each map, an
# expression generated from the Avro schema (:func:`canonical`), the way a Spark user
# would write it once for a schema instead of shipping rows to Python. Not done in
# Spark, in its favour: kstage checks that an application/json aspect parses as JSON
# (its dead letters take one that does not).


def _named_types(schema: Any, namespace: str = "", found: dict[str, Any] | None = None
                 ) -> dict[str, Any]:
    """Every named Avro type of ``schema`` by its full name (and by its short name)."""
    found = {} if found is None else found
    if isinstance(schema, list):
        for branch in schema:
            _named_types(branch, namespace, found)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "enum", "fixed"):
            namespace = schema.get("namespace", namespace)
            name = schema["name"]
            full = name if "." in name else f"{namespace}.{name}" if namespace else name
            found[full] = found[full.rsplit(".", 1)[-1]] = schema
            for field in schema.get("fields", ()):
                _named_types(field["type"], namespace, found)
        elif kind in ("array", "map"):
            _named_types(schema.get("items", schema.get("values")), namespace, found)
        else:
            _named_types(kind, namespace, found)
    return found


def canonical(expr: str, avro: Any, named: dict[str, Any]) -> str:
    """A Spark SQL expression of ``expr`` (of Avro type ``avro``) whose structs have their
    fields in name order and whose maps have their keys sorted: ``to_json`` of it is
    canonical JSON (with ``ignoreNullFields`` false)."""
    if isinstance(avro, list):  # a union with null: Spark's nullable type
        (branch,) = [b for b in avro if b != "null"]
        inner = canonical(expr, branch, named)
        return inner if inner == expr else f"IF({expr} IS NULL, NULL, {inner})"
    if isinstance(avro, str):
        avro = named.get(avro, avro)
    if not isinstance(avro, dict):
        return expr  # a primitive
    kind = avro["type"]
    if kind == "record":
        parts = []
        for field in sorted(avro["fields"], key=lambda f: str(f["name"])):
            name = field["name"]
            parts.append(f"'{name}', " + canonical(f"{expr}.`{name}`", field["type"], named))
        return "named_struct(" + ", ".join(parts) + ")"
    if kind == "map":
        values = canonical("entry.value", avro["values"], named)
        sort = f"array_sort(map_entries({expr}))"
        if values != "entry.value":
            sort = f"transform({sort}, entry -> struct(entry.key, {values}))"
        return f"map_from_entries({sort})"
    if kind == "array":
        items = canonical("item", avro["items"], named)
        return expr if items == "item" else f"transform({expr}, item -> {items})"
    return canonical(expr, kind, named) if isinstance(kind, dict | list) else expr


def _aspect_text(expr: str) -> str:
    """processors/datahub_mcl.generic_aspect_text: the UTF-8 text of an application/json
    aspect (any case, parameters ignored), else the bytes in base64."""
    return (f"CASE WHEN {expr} IS NULL THEN NULL "
            f"WHEN lower(trim(split({expr}.contentType, ';')[0])) = 'application/json' "
            f"THEN CAST({expr}.value AS STRING) ELSE base64({expr}.value) END")


def datahub_mcl(schema_text: str) -> str:
    """The MCL mapping over the view ``decoded`` (``e``: the decoded MCL), for the MCL
    schema ``schema_text``."""
    schema = json.loads(schema_text)
    named = _named_types(schema)
    types = {f["name"]: f["type"] for f in schema["fields"]}
    keep_nulls = "map('ignoreNullFields', 'false')"
    system = canonical("e.systemMetadata", types["systemMetadata"], named)
    previous = canonical("e.previousSystemMetadata", types["previousSystemMetadata"], named)
    return f"""
SELECT
  e.entityUrn AS entity_urn,
  e.entityType AS entity_type,
  e.aspectName AS aspect_name,
  e.changeType AS change_type,
  {_aspect_text("e.aspect")} AS aspect,
  {_aspect_text("e.previousAspectValue")} AS previous_aspect,
  to_json({system}, {keep_nulls}) AS system_metadata,
  to_json({previous}, {keep_nulls}) AS previous_system_metadata,
  e.created.time AS created_time,
  e.created.actor AS created_actor,
  {_aspect_text("e.entityKeyAspect")} AS entity_key_aspect,
  e.systemMetadata.runId AS run_id,
  topic AS _topic,
  partition AS _kafka_partition,
  offset AS _offset,
  unix_millis(timestamp) AS _timestamp,
  current_timestamp() AS _ingested_at
FROM decoded
WHERE e.entityUrn IS NOT NULL OR e.entityKeyAspect IS NOT NULL
"""  # noqa: S608 - generated from the schema file, no outside input
