"""Realistic sample events of the built-in processors' real Avro schemas, for ``kstage demo``.

:data:`SAMPLE_TOPICS`: one topic per event type a built-in processor reads (Metastore has
two). :func:`sample_records`: dicts valid for a topic's writer schema (under
:data:`processors.base.SCHEMA_DIR`, ready for :func:`actors.codecs.avro.encode`) that its
processor turns into rows, imitating WhereHows' Gobblin/Hive Metastore producers,
DataHub and DataHub's SDK emitter (proposals). :func:`poison_values`: wire values the
decoder must dead-letter. Deterministic for a seed (``random.Random``; no clock, no
I/O); 10-30 ms per thousand records.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Record = dict[str, Any]


@dataclass(frozen=True)
class SampleTopic:
    """A demo topic and what lands it."""

    topic: str  # the Kafka topic, named as in production (WhereHows / DataHub)
    processor: str  # entry-point name of the built-in processor that reads it
    schema_file: str  # the writer schema, relative to SCHEMA_DIR
    table: str  # the processor's staging table


SAMPLE_TOPICS: tuple[SampleTopic, ...] = (
    SampleTopic("GobblinTrackingEvent_compaction", "gobblin_compaction",
                "wherehows/GobblinTrackingEvent.avsc", "stg_kafka_gobblin_compaction"),
    SampleTopic("GobblinTrackingEvent_distcp_ng", "gobblin_distcp",
                "wherehows/GobblinTrackingEvent_distcp_ng.avsc", "stg_kafka_gobblin_distcp"),
    SampleTopic("GobblinTrackingEvent_lumos", "gobblin_lumos",
                "wherehows/GobblinTrackingEvent_lumos.avsc", "stg_kafka_gobblin_lumos"),
    SampleTopic("MetastoreTableAudit", "metastore_audit",
                "wherehows/MetastoreTableAuditEvent.avsc", "stg_kafka_metastore_audit"),
    SampleTopic("MetastorePartitionAudit", "metastore_audit",
                "wherehows/MetastorePartitionAuditEvent.avsc", "stg_kafka_metastore_audit"),
    SampleTopic("MetadataChangeLog_Versioned_v1", "datahub_mcl",
                "datahub/MetadataChangeLog.avsc", "stg_datahub_mcl"),
    SampleTopic("PlatformEvent_v1", "datahub_entity_change",
                "datahub/PlatformEvent.avsc", "stg_datahub_entity_change_event"),
    SampleTopic("MetadataChangeProposal_v1", "datahub_mcp",
                "datahub/MetadataChangeProposal.avsc", "stg_datahub_mcp"),
)

T0 = 1_717_000_000_000
"""2024-05-29T16:26:40Z: a batch starts within 30 days after it (epoch ms)."""
_DAY, _HOUR = 86_400_000, 3_600_000

# --------------------------------------------------------------------- vocabulary
_TRACKING = ("PageViewEvent", "AdClickEvent", "SearchQueryEvent", "ProfileEditEvent",
             "MessageSendEvent", "JobApplyEvent", "FeedImpressionEvent")
_CLUSTERS = ("ltx1-holdemrm01.grid.example.com:8032", "lva1-warrm01.grid.example.com:8032",
             "lor1-faroerm01.grid.example.com:8032", "tarock")
_NAMENODES = ("ltx1-holdemnn01.grid.example.com", "lva1-warnn01.grid.example.com",
              "lor1-faronn01.grid.example.com")
_LUMOS = (("Leap", "GroupMemberCounts"), ("Identity", "Profile"), ("Messaging", "Conversation"),
          ("Jobs", "JobPosting"), ("Ads", "Campaign"))
_COLOS = ("prod-lva1", "prod-ltx1", "prod-lor1", "ei-ltx1")
_HIVE = (("tracking", "page_view_event"), ("tracking", "ad_click_event"),
         ("prod_foundation", "member_profile"), ("u_analytics", "daily_active_members"),
         ("metrics", "search_ctr_daily"))
_COLUMNS = (("member_id", "bigint", None), ("page_key", "string", "page identifier"),
            ("time", "bigint", "event time, epoch ms"), ("country", "string", None),
            ("device", "string", "desktop, iphone, android"), ("count", "bigint", None))
_HMS = ("ltx1-hcat01.grid.example.com", "ltx1-hcat02.grid.example.com",
        "lva1-hcat01.grid.example.com")
_ACTORS = ("urn:li:corpuser:datahub", "urn:li:corpuser:jdoe", "urn:li:corpuser:asmith",
           "urn:li:corpuser:mchen")
_DATASETS = (("hive", "tracking.page_view_event"), ("hive", "prod_foundation.member_profile"),
             ("hive", "u_analytics.daily_active_members"), ("kafka", "PageViewEvent"),
             ("kafka", "AdClickEvent"), ("hdfs", "/data/tracking/SearchQueryEvent"))
_TAGS = ("urn:li:tag:PII", "urn:li:tag:Tier1", "urn:li:tag:Deprecated", "urn:li:tag:GDPR")
_OWNER_TYPES = ("TECHNICAL_OWNER", "BUSINESS_OWNER", "DATA_STEWARD")
_DESCRIPTIONS = ("Page views of the member site, one row per view.",
                 "Daily active members by country and device.",
                 "Member profile snapshot, refreshed nightly from Lumos.", "")


def _utc(ms: int, fmt: str) -> str:
    return datetime.fromtimestamp(ms // 1000, tz=UTC).strftime(fmt)


def _azkaban(rng: random.Random, project: str, flow: str, job: str) -> dict[str, str]:
    return {"azkabanProjectName": project, "azkabanFlowId": flow, "azkabanJobId": job,
            "azkabanExecId": str(rng.randrange(1_000_000, 9_000_000))}


# ------------------------------------------------------------------------ Gobblin
def _compaction(rng: random.Random, ts: int) -> Record:
    ds, hour = rng.choice(_TRACKING), ts - rng.randrange(1, 4) * _HOUR
    meta = {**_azkaban(rng, "Gobblin-Kafka", "tracking-hourly", "tracking-hourly-compaction"),
            "clusterIdentifier": rng.choice(_CLUSTERS),
            "dedupeStatus": rng.choice(("DEDUPED", "DEDUPED", "NOT_DEDUPED"))}
    if rng.random() < 0.5:
        name = "CompactionCompleted"
        meta |= {"datasetUrn": f"/data/tracking/{ds}", "partition": _utc(hour, "%Y/%m/%d/%H"),
                 "recordCount": str(rng.randrange(1_000, 50_000_000)),
                 "metricContextName": "GobblinKafkaCompaction",
                 "metricContextID": str(uuid.UUID(int=rng.getrandbits(128), version=4))}
    else:
        name = "CompactionRecordCounts"
        kind = rng.choice(("hourly", "hourly-dedup", "daily"))
        part = _utc(hour, "%Y/%m/%d" if kind == "daily" else "%Y/%m/%d/%H")
        meta |= {"DatasetOutputPath": f"/data/tracking/{ds}/{kind}/{part}",
                 "RegularRecordCount": str(rng.randrange(1_000, 50_000_000)),
                 "LateRecordCount": str(rng.choice((0, 0, rng.randrange(1, 5_000))))}
    return {"timestamp": ts, "namespace": "compaction.tracking.events", "name": name,
            "metadata": meta}


def _distcp(rng: random.Random, ts: int) -> Record:
    ds, origin = rng.choice(_TRACKING), ts - rng.randrange(60_000, 2 * _HOUR)
    hour = origin - rng.randrange(1, 6) * _HOUR
    src, dst = rng.sample(_NAMENODES, 2)
    path = f"/data/tracking/{ds}/hourly/{_utc(hour, '%Y/%m/%d/%H')}"
    meta = {**_azkaban(rng, "distcp-ng", "data-tracking-hive-copy", "data-tracking-hive-copy"),
            "jobName": "DistcpHiveTracking", "clusterIdentifier": dst.split("-")[0],
            "class": "gobblin.data.management.copy.publisher.CopyDataPublisher",
            "datasetUrn": f"tracking@{ds}", "partition": f'["{_utc(hour, "%Y-%m-%d-%H")}"]',
            "upstreamTimestamp": str(hour + rng.randrange(_HOUR // 2, _HOUR)),
            "originTimestamp": str(origin),
            "SourcePath": f"hdfs://{src}:9000{path}", "TargetPath": f"hdfs://{dst}:9000{path}"}
    return {"timestamp": ts, "namespace": "gobblin.copy.CopyDataPublisher",
            "name": "DatasetPublished", "metadata": meta}


def _lumos(rng: random.Random, ts: int) -> Record:
    (db, table), colo = rng.choice(_LUMOS), rng.choice(_COLOS)
    drop = ts - rng.randrange(_HOUR, 12 * _HOUR)
    stamp = f"{drop}-PT-{rng.randrange(100, 99_999)}"
    watermark = f"{drop - rng.randrange(60_000, _HOUR)}-scn-{rng.randrange(100, 10**9)}"
    snapshot = rng.random() < 0.4
    flow = "lumos2-full" if snapshot else "lumos2-incremental"
    meta = {**_azkaban(rng, "Lumos_V2_Prod", flow, "lumos2-virtual-snapshot-builder"),
            "clusterIdentifier": rng.choice(_CLUSTERS),
            "datasetUrn": f"/data/databases/{db}/{table}",
            "TargetDirectory": (f"/data/databases/{db}/{table}/{stamp}" if snapshot
                                else f"/jobs/lumos/{db}/{table}/{stamp}/delta"),
            "partition": watermark, "Dropdate": str(drop), "IsFull": str(snapshot).lower(),
            "recordCount": str(rng.randrange(10, 200_000_000 if snapshot else 500_000)),
            "DatasourceColo": colo, "Database": db, "Table": table}
    return {"timestamp": ts, "namespace": "Lumos",
            "name": "SnapshotPublished" if snapshot else "DeltaPublished", "metadata": meta}


# ----------------------------------------------------------------- Hive Metastore
def _storage(rng: random.Random) -> Record:
    orc = rng.random() < 0.7
    fmt = "org.apache.hadoop.hive.ql.io." + ("orc.Orc" if orc else "avro.AvroContainer")
    return {"inputFormatClassName": fmt + "InputFormat",
            "outputFormatClassName": fmt + "OutputFormat", "isCompressed": False,
            "numBuckets": -1, "serdeName": None,
            "serializationLib": "org.apache.hadoop.hive." + (
                "ql.io.orc.OrcSerde" if orc else "serde2.avro.AvroSerDe"),
            "serdeProperties": {"serialization.format": "1"}, "bucketCols": [], "sortCols": [],
            "storageProperties": None, "isStoredAsSubDirectories": False}


def _fields(rng: random.Random) -> list[Record]:
    cols = _COLUMNS[:rng.randrange(3, len(_COLUMNS) + 1)]
    return [{"name": n, "type": t, "comment": c} for n, t, c in cols]


def _table(rng: random.Random, db: str, name: str, ts: int, *, new: bool = False) -> Record:
    created = ts // 1000 - (0 if new else rng.randrange(1, 900) * 86_400)
    external = db == "tracking"
    return {"tableName": name, "dbName": db, "owner": rng.choice(("etl", "hive", "jdoe")),
            "createTime": created, "lastAccessTime": 0, "retention": 0,
            "schema": _fields(rng), "location": f"hdfs://{rng.choice(_NAMENODES)}:9000/"
            f"{'data/tracking' if external else 'user/hive/warehouse/' + db + '.db'}/{name}",
            "storageDescriptor": _storage(rng), "partitionKeys": ["datepartition"],
            "tblProperties": {"transient_lastDdlTime": str(created)},
            "viewOriginalText": None, "viewExpandedText": None,
            "tableType": "EXTERNAL_TABLE" if external else "MANAGED_TABLE"}


def _partition(rng: random.Random, db: str, name: str, ts: int) -> Record:
    value = _utc(ts - rng.randrange(1, 48) * _HOUR, "%Y-%m-%d-%H")
    created = ts // 1000 - rng.randrange(60, 86_400)
    return {"values": [value], "dbName": db, "tableName": name, "createTime": created,
            "lastAccessTime": 0, "schema": None, "location":
            f"hdfs://{rng.choice(_NAMENODES)}:9000/data/{db}/{name}/datepartition={value}",
            "storageDescriptor": _storage(rng),
            "partitionProperties": {"numFiles": str(rng.randrange(1, 64)),
                                    "totalSize": str(rng.randrange(10**6, 10**11))}}


def _audit(rng: random.Random, ts: int, content_field: str, event_type: str,
           old: Record | None, new: Record | None, deleted: bool) -> Record:
    prefix = "Table" if content_field == "metastoreTableAuditContent" else "Partition"
    return {"auditHeader": {"time": ts + rng.randrange(1, 200), "server": rng.choice(_HMS),
                            "instance": rng.choice(("hms-1", "hms-2", None)),
                            "appName": "hive-metastore", "messageId": rng.randbytes(16)},
            content_field: {"eventType": event_type, "timestamp": ts,
                            "metastoreThriftUri": f"thrift://{rng.choice(_HMS)}:7552",
                            "metastoreVersion": rng.choice(("2.3.9", "1.1.0", None)),
                            "isSuccessful": rng.random() < 0.97, "isDataDeleted": deleted,
                            f"old{prefix}": old, f"new{prefix}": new}}


def _table_audit(rng: random.Random, ts: int) -> Record:
    db, name = rng.choice(_HIVE)
    kind = rng.choice(("CREATE_TABLE", "ALTER_TABLE", "ALTER_TABLE", "DROP_TABLE"))
    old = None if kind == "CREATE_TABLE" else _table(rng, db, name, ts)
    new: Record | None = None
    if kind == "CREATE_TABLE":
        new = _table(rng, db, name, ts, new=True)
    elif kind == "ALTER_TABLE" and old is not None:
        new = old | {"schema": _fields(rng), "tblProperties": {
            "transient_lastDdlTime": str(ts // 1000), "comment": rng.choice(_DESCRIPTIONS)}}
    deleted = kind == "DROP_TABLE" and old is not None and old["tableType"] == "MANAGED_TABLE"
    return _audit(rng, ts, "metastoreTableAuditContent", kind, old, new, deleted)


def _partition_audit(rng: random.Random, ts: int) -> Record:
    db, name = rng.choice(_HIVE)
    kind = rng.choice(("ADD_PARTITION", "ADD_PARTITION", "ALTER_PARTITION", "DROP_PARTITION"))
    part = _partition(rng, db, name, ts)
    old = None if kind == "ADD_PARTITION" else part
    new = None if kind == "DROP_PARTITION" else part
    if kind == "ALTER_PARTITION":
        new = part | {"partitionProperties": {"numFiles": str(rng.randrange(1, 64)),
                                              "totalSize": str(rng.randrange(10**6, 10**11))}}
    return _audit(rng, ts, "metastorePartitionAuditContent", kind, old, new,
                  kind == "DROP_PARTITION" and db != "tracking")


# ------------------------------------------------------------------------ DataHub
def _urn(rng: random.Random) -> tuple[str, str]:
    """(platform, dataset urn)."""
    platform, name = rng.choice(_DATASETS)
    env = "PROD" if rng.random() < 0.85 else "EI"
    return platform, f"urn:li:dataset:(urn:li:dataPlatform:{platform},{name},{env})"


def _generic(value: object) -> Record:
    """A GenericAspect/GenericPayload: compact UTF-8 JSON, as DataHub writes it."""
    data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return {"value": data, "contentType": "application/json"}


def _aspect_value(rng: random.Random, aspect: str, ts: int, actor: str) -> Record:
    if aspect == "ownership":
        owners = rng.sample(_ACTORS[1:], rng.randrange(1, 3))
        return {"owners": [{"owner": o, "type": rng.choice(_OWNER_TYPES)} for o in owners],
                "ownerTypes": {}, "lastModified": {"time": ts, "actor": actor}}
    if aspect == "datasetProperties":
        return {"customProperties": {"retention_days": str(rng.choice((30, 90, 365)))},
                "description": rng.choice(_DESCRIPTIONS), "tags": []}
    if aspect == "status":
        return {"removed": rng.random() < 0.1}
    partition = {"partition": "FULL_TABLE_SNAPSHOT", "type": "FULL_TABLE"}
    if aspect == "datasetProfile":
        return {"timestampMillis": ts, "eventGranularity": {"unit": "DAY", "multiple": 1},
                "partitionSpec": partition, "rowCount": rng.randrange(10**3, 10**10),
                "columnCount": rng.randrange(3, 60)}
    return {"timestampMillis": ts, "partitionSpec": partition, "actor": actor,
            "operationType": rng.choice(("INSERT", "UPDATE", "CREATE", "DELETE")),
            "lastUpdatedTimestamp": ts - rng.randrange(1_000, _HOUR),
            "numAffectedRows": rng.randrange(1, 10**7)}


_VERSIONED = ("ownership", "datasetProperties", "status")
_ASPECTS = (*_VERSIONED, *_VERSIONED, "datasetProfile", "operation")  # + timeseries-style


def _system(rng: random.Random, platform: str, ts: int, version: int | None,
            created: Record | None) -> Record:
    return {"lastObserved": ts, "lastRunId": "no-run-id-provided",
            "runId": f"{platform}-{_utc(ts, '%Y_%m_%d-%H_%M_%S')}-{rng.randrange(16**6):06x}",
            "pipelineName": f"urn:li:dataHubIngestionSource:{platform}-prod",
            "registryName": None, "registryVersion": None,
            "properties": {"clientId": "acryl-datahub", "clientVersion": "1.7.0"},
            "version": None if version is None else str(version), "schemaVersion": None,
            "aspectCreated": created, "aspectModified": None}


def _mcl(rng: random.Random, ts: int) -> Record:
    """An UPSERT of a dataset aspect; versioned ones mostly carry their previous value."""
    (platform, urn), aspect, actor = _urn(rng), rng.choice(_ASPECTS), rng.choice(_ACTORS)
    version = rng.randrange(1, 40) if aspect in _VERSIONED else None
    prev_ts = ts - rng.randrange(_HOUR, 30 * _DAY)
    created = {"time": prev_ts - rng.randrange(_DAY, 400 * _DAY), "actor": actor,
               "impersonator": None, "message": None}
    with_prev = version is not None and version > 1 and rng.random() < 0.8
    return {"auditHeader": None, "entityType": "dataset", "entityUrn": urn,
            "entityKeyAspect": None, "changeType": "UPSERT", "aspectName": aspect,
            "aspect": _generic(_aspect_value(rng, aspect, ts, actor)),
            "systemMetadata": _system(rng, platform, ts, version, created), "headers": None,
            "previousAspectValue": _generic(_aspect_value(rng, aspect, prev_ts, actor))
            if with_prev else None,
            "previousSystemMetadata": _system(rng, platform, prev_ts, (version or 1) - 1,
                                              created) if with_prev else None,
            "created": {"time": ts, "actor": actor, "impersonator": None, "message": None}}


_CHANGES = (("TAG", "ADD"), ("TAG", "ADD"), ("TAG", "REMOVE"), ("OWNER", "ADD"),
            ("OWNER", "REMOVE"), ("DOCUMENTATION", "ADD"), ("DOCUMENTATION", "MODIFY"),
            ("DOCUMENTATION", "REMOVE"))


def _platform_event(rng: random.Random, ts: int) -> Record:
    category, operation = rng.choice(_CHANGES)
    change: Record = {"entityType": "dataset", "entityUrn": _urn(rng)[1],
                      "category": category, "operation": operation}
    if category == "TAG":
        tag = rng.choice(_TAGS)
        change |= {"modifier": tag, "parameters": {"tagUrn": tag}}
    elif category == "OWNER":
        owner = rng.choice(_ACTORS[1:])
        change |= {"modifier": owner,
                   "parameters": {"ownerUrn": owner, "ownerType": rng.choice(_OWNER_TYPES)}}
    else:
        change["parameters"] = {"description": rng.choice(_DESCRIPTIONS[:-1])}
    change |= {"auditStamp": {"time": ts, "actor": rng.choice(_ACTORS)}, "version": 0}
    return {"header": {"timestampMillis": ts + rng.randrange(5, 2_000)},
            "name": "entityChangeEvent", "payload": _generic(change)}


def _sdk_generic(value: object, content_type: str) -> Record:
    """A GenericAspect as DataHub's Python SDK writes it (``json.dumps`` defaults)."""
    return {"value": json.dumps(value).encode("utf-8"), "contentType": content_type}


def _patch_ops(rng: random.Random, aspect: str) -> list[Record]:
    """JSON Patch operations as the SDK's ``DatasetPatchBuilder`` writes them."""
    if aspect == "globalTags":
        tag = rng.choice(_TAGS)
        return [{"op": rng.choice(("add", "add", "remove")), "path": f"/tags/{tag}",
                 "value": {"tag": tag}}]
    if aspect == "ownership":
        owner, kind = rng.choice(_ACTORS[1:]), rng.choice(_OWNER_TYPES)
        return [{"op": "add", "path": f"/owners/{owner}/{kind}",
                 "value": {"owner": owner, "type": kind}}]
    return [{"op": "add", "path": "/description", "value": rng.choice(_DESCRIPTIONS[:-1])},
            {"op": "add", "path": "/customProperties/retention_days",
             "value": str(rng.choice((30, 90, 365)))}]


_PATCHED = ("globalTags", "ownership", "editableDatasetProperties")


def _mcp(rng: random.Random, ts: int) -> Record:
    """A proposal from ``DatahubKafkaEmitter``: mostly UPSERTs of whole aspects, some
    PATCHes (JSON Patch operations), rarely a conditional write (``headers``)."""
    (platform, urn), actor = _urn(rng), rng.choice(_ACTORS)
    if rng.random() < 0.3:
        aspect, change = rng.choice(_PATCHED), "PATCH"
        value = _sdk_generic(_patch_ops(rng, aspect), "application/json-patch+json")
    else:
        aspect, change = rng.choice(_ASPECTS), "UPSERT"
        value = _sdk_generic(_aspect_value(rng, aspect, ts, actor), "application/json")
    system = _system(rng, platform, ts, None, None) | {"properties": None}
    headers = {"If-Version-Match": str(rng.randrange(1, 40))} if rng.random() < 0.05 else None
    return {"auditHeader": None, "entityType": "dataset", "entityUrn": urn,
            "entityKeyAspect": None, "changeType": change, "aspectName": aspect,
            "aspect": value, "systemMetadata": system, "headers": headers}


_MAKERS: dict[tuple[str, str], Callable[[random.Random, int], Record]] = dict(zip(
    ((t.processor, t.schema_file) for t in SAMPLE_TOPICS),
    (_compaction, _distcp, _lumos, _table_audit, _partition_audit, _mcl, _platform_event,
     _mcp),
    strict=True))
"""Record makers by (processor, schema_file), in the order of SAMPLE_TOPICS."""


def sample_records(topic: SampleTopic, count: int, seed: int = 0) -> list[Record]:
    """``count`` realistic records for ``topic``, valid for its writer schema.

    Each is a dict for ``fastavro``/:func:`actors.codecs.avro.encode` (bytes for ``bytes``
    and ``fixed`` fields) that ``topic.processor`` turns into at least one row. Event
    timestamps start at a seed-dependent time within 30 days after :data:`T0` and
    increase by 1-120 s per record. The same (topic, count, seed) gives the same records.

    Records are chosen by (processor, schema_file), so a topic of another name with the
    pair of one of :data:`SAMPLE_TOPICS` works too; the topic name is part of the seed.

    Raises:
        ValueError: ``count`` is negative, or no sample maker has the topic's pair.
    """
    make = _MAKERS.get((topic.processor, topic.schema_file))
    if make is None:
        raise ValueError(f"no samples for processor {topic.processor!r} with schema "
                         f"{topic.schema_file!r} (topic {topic.topic!r})")
    if count < 0:
        raise ValueError(f"count must be >= 0, not {count}")
    rng = random.Random(f"{topic.topic}/{seed}")  # noqa: S311 - sample data, not security
    ts = T0 + rng.randrange(30 * _DAY)
    records = []
    for _ in range(count):
        ts += rng.randrange(1_000, 120_000)
        records.append(make(rng, ts))
    return records


# ------------------------------------------------------------------------- poison
POISON_SCHEMA_ID = 1
"""The schema id the poison values name (a MetadataChangeLog writer schema)."""
UNKNOWN_SCHEMA_ID = 999
"""A schema id no registry of the demo knows."""


def _avro_str(text: str) -> bytes:
    """An Avro string: the zig-zag varint of the byte length, then the UTF-8 bytes."""
    data = text.encode("utf-8")
    n, head = len(data) << 1, bytearray()  # the zig-zag code of a length n >= 0 is 2n
    while n > 0x7F:
        head.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(head) + bytes([n]) + data


_STATUS_URN = "urn:li:dataset:(urn:li:dataPlatform:hive,tracking.page_view_event,PROD)"
_MCL_BODY = b"".join((
    b"\x00",  # auditHeader: null
    _avro_str("dataset"),  # entityType
    b"\x02" + _avro_str(_STATUS_URN),  # entityUrn: string branch
    b"\x00",  # entityKeyAspect: null
    b"\x00",  # changeType: UPSERT (enum index 0)
    b"\x02" + _avro_str("status"),  # aspectName
    b"\x02" + _avro_str('{"removed":false}') + _avro_str("application/json"),  # aspect
    b"\x00" * 5,  # systemMetadata, headers, previousAspectValue, previousSystemMetadata, created
))
"""Avro binary of a valid MetadataChangeLog (a ``status`` UPSERT), hand-encoded so that
this module reads no schema file."""


def poison_values(count: int) -> list[bytes]:
    """``count`` wire values (Confluent framing, 4-byte ids) that must be dead-lettered.

    They cycle through three defects, each value having exactly one:

    1. wrong magic byte: ``0x01`` instead of ``0x00`` in front of a valid id-1 frame;
    2. unknown schema id: a valid frame naming :data:`UNKNOWN_SCHEMA_ID` (999);
    3. truncated body: a frame for id :data:`POISON_SCHEMA_ID` whose MCL body is cut
       short (the cut varies: the first 127 truncated values all differ).

    With a registry that serves the MetadataChangeLog schema as id 1 and nothing as 999,
    :meth:`actors.codecs.avro.AvroDecoder.decode` raises PoisonMessage for each; fixing the
    one defect (magic byte, id) gives a value that decodes to a valid MCL.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, not {count}")
    good_id, last = POISON_SCHEMA_ID.to_bytes(4, "big"), len(_MCL_BODY) - 1
    wrong_magic = b"\x01" + good_id + _MCL_BODY
    unknown_id = b"\x00" + UNKNOWN_SCHEMA_ID.to_bytes(4, "big") + _MCL_BODY
    values = []
    for i in range(count):
        if i % 3 < 2:
            values.append(unknown_id if i % 3 else wrong_magic)
        else:  # keep 1 .. len-1 bytes of the body, a different cut each time
            values.append(b"\x00" + good_id + _MCL_BODY[:1 + (i // 3 * 37) % last])
    return values
