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
