"""WhereHows processors: Gobblin compaction/distcp/lumos and Metastore audit.

Every input is built from the real WhereHows Avro schemas (round-tripped through
fastavro, see tests/avro_records.py); the columns are checked against the real staging
DDL ``kafka_tracking.sql``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from processors.base import SCHEMA_DIR, Message, Processor
from processors.errors import PoisonMessage
from processors.gobblin import (
    GobblinCompactionProcessor,
    GobblinDistcpProcessor,
    GobblinEvent,
    parse_long,
)
from processors.gobblin_lumos import GobblinLumosProcessor
from processors.metastore_audit import MetastoreAuditProcessor
from tests.avro_records import TIMESTAMP, assert_row_honest, avro_message, one

TABLE_SCHEMA = "wherehows/MetastoreTableAuditEvent.avsc"
PARTITION_SCHEMA = "wherehows/MetastorePartitionAuditEvent.avsc"
EVENT_TIME = 1_468_135_417_671

# --------------------------------------------------------------------------- builders


def gobblin(proc: type[Processor], namespace: str | None, name: str,
            metadata: dict[str, str], *, offset: int = 7) -> Message:
    """A GobblinTrackingEvent written with the processor's own reader schema."""
    assert proc.reader_schema is not None
    record = {"timestamp": EVENT_TIME, "namespace": namespace, "name": name,
              "metadata": metadata}
    return avro_message(proc.reader_schema, record, topic="GobblinTrackingEvent",
                        partition=3, offset=offset)


AZKABAN = {"azkabanProjectName": "Gobblin-Kafka", "azkabanFlowId": "tracking-hourly",
           "azkabanJobId": "tracking-hourly-compaction", "azkabanExecId": "1512"}

COMPACTION_COMPLETED = {
    **AZKABAN, "partition": "2016/07/13/00", "metricContextID": "dafadfadsfasdfas",
    "recordCount": "157088", "dedupeStatus": "DEDUPED", "clusterIdentifier": "tarock",
    "datasetUrn": "/data/tracking/abc", "metricContextName": "GobblinKafkaCompaction",
}
COMPACTION_COUNTS = {
    **AZKABAN, "clusterIdentifier": "ltx1-holdemrm01.grid.example.com:8032",
    "DatasetOutputPath": "/data/tracking/PageViewEvent/hourly-dedup/2016/07/13/00",
    "RegularRecordCount": "1000", "LateRecordCount": "7", "dedupeStatus": "DEDUPED",
}
DISTCP = {
    "jobName": "DistcpHiveTracking", "azkabanJobId": "data-tracking-hive-copy",
    "upstreamTimestamp": "1467526698875", "originTimestamp": "1468135417671",
    "clusterIdentifier": "ltx1", "azkabanFlowId": "data-tracking-hive-copy",
    "partition": '["2016-07-10-00"]', "azkabanProjectName": "distcp-ng",
    "datasetUrn": "tracking@abc", "azkabanExecId": "679377",
    "SourcePath": "hdfs://src:9000/data/tracking/abc/hourly/2016/07/10/00",
    "TargetPath": "hdfs://dst:9000/data/tracking/abc/hourly/2016/07/10/00",
    "class": "gobblin.data.management.copy.publisher.CopyDataPublisher",
}
LUMOS = {
    "azkabanJobId": "lumos2-virtual-snapshot-builder", "Table": "GroupMemberCounts",
    "Dropdate": "1467526698875", "recordCount": "570", "clusterIdentifier": "tarock",
    "azkabanFlowId": "lumos2-incremental", "TargetDirectory": "/data/abc/1467526698875-PT-1561",
    "partition": "1467507599999-scn-570", "Database": "Leap", "DatasourceColo": "prod-lva1",
    "azkabanProjectName": "Lumos_V2_Prod", "datasetUrn": "/data/abc", "IsFull": "false",
    "azkabanExecId": "1470416",
}


def storage() -> dict[str, Any]:
    return {
        "inputFormatClassName": "org.apache.hadoop.hive.ql.io.orc.OrcInputFormat",
        "outputFormatClassName": "org.apache.hadoop.hive.ql.io.orc.OrcOutputFormat",
        "isCompressed": False, "numBuckets": -1, "serdeName": None,
        "serializationLib": "org.apache.hadoop.hive.ql.io.orc.OrcSerde",
        "serdeProperties": {"serialization.format": "1"}, "bucketCols": [], "sortCols": [],
        "storageProperties": None, "isStoredAsSubDirectories": False,
    }


def hive_table(location: str, owner: str | None = "etl") -> dict[str, Any]:
    return {
        "tableName": "page_view", "dbName": "tracking", "owner": owner,
        "createTime": 1_467_000_000, "lastAccessTime": 0, "retention": 0,
        "schema": [{"name": "member_id", "type": "bigint", "comment": None},
                   {"name": "page_key", "type": "string", "comment": "página"}],
        "location": location, "storageDescriptor": storage(), "partitionKeys": ["datepartition"],
        "tblProperties": {"transient_lastDdlTime": "1467000000"},
        "viewOriginalText": None, "viewExpandedText": None, "tableType": "EXTERNAL_TABLE",
    }


def hive_partition(values: list[str] | None) -> dict[str, Any]:
    return {
        "values": values, "dbName": "tracking", "tableName": "page_view",
        "createTime": 1_467_100_000, "lastAccessTime": 1_467_200_000, "schema": None,
        "location": "hdfs://nn/data/tracking/page_view/datepartition=2016-07-01-00",
        "storageDescriptor": storage(), "partitionProperties": {"numFiles": "3"},
    }


def header(instance: str | None = "hms-1") -> dict[str, Any]:
    return {"time": EVENT_TIME + 5, "server": "ltx1-hcat01.grid.example.com",
            "instance": instance, "appName": "hive-metastore", "messageId": bytes(range(16))}


def metastore_content(event_type: str, old: Any, new: Any, *, deleted: bool = False,
                      old_field: str = "oldTable", new_field: str = "newTable"
                      ) -> dict[str, Any]:
    return {"eventType": event_type, "timestamp": EVENT_TIME,
            "metastoreThriftUri": "thrift://ltx1-hcat01:7552", "metastoreVersion": None,
            "isSuccessful": True, "isDataDeleted": deleted, old_field: old, new_field: new}


def table_event(event_type: str, old: Any, new: Any, *, instance: str | None = "hms-1",
                deleted: bool = False) -> Message:
    record = {"auditHeader": header(instance),
              "metastoreTableAuditContent": metastore_content(event_type, old, new,
                                                              deleted=deleted)}
    return avro_message(TABLE_SCHEMA, record, topic="MetastoreTableAudit", offset=11)


def partition_event(event_type: str, old: Any, new: Any) -> Message:
    content = metastore_content(event_type, old, new, old_field="oldPartition",
                                new_field="newPartition")
    record = {"auditHeader": header(), "metastorePartitionAuditContent": content}
    return avro_message(PARTITION_SCHEMA, record, topic="MetastorePartitionAudit", offset=12)


# A realistic accepted event of every kind, for the column/type checks below.
SAMPLES: dict[type[Processor], list[Callable[[], Message]]] = {
    GobblinCompactionProcessor: [
        lambda: gobblin(GobblinCompactionProcessor, "compaction.tracking.events",
                        "CompactionCompleted", COMPACTION_COMPLETED),
        lambda: gobblin(GobblinCompactionProcessor, "compaction.tracking.events",
                        "CompactionRecordCounts", COMPACTION_COUNTS),
    ],
    GobblinDistcpProcessor: [
        lambda: gobblin(GobblinDistcpProcessor, "gobblin.copy.CopyDataPublisher",
                        "DatasetPublished", DISTCP),
    ],
    GobblinLumosProcessor: [
        lambda: gobblin(GobblinLumosProcessor, "Lumos", "SnapshotPublished", LUMOS),
        lambda: gobblin(GobblinLumosProcessor, None, "DeltaPublished",
                        {**LUMOS, "TargetDirectory": "/jobs/Leap/1467526698875-PT-1561/delta"}),
    ],
    MetastoreAuditProcessor: [
        lambda: table_event("ALTER_TABLE", hive_table("hdfs://nn/a"), hive_table("hdfs://nn/b")),
        lambda: table_event("DROP_TABLE", hive_table("hdfs://nn/a"), None, deleted=True,
                            instance=None),
        lambda: partition_event("ADD_PARTITION", None, hive_partition(["2016-07-01-00"])),
    ],
}
PROCESSORS = list(SAMPLES)

# --------------------------------------------------------------------------- DDL checks

DDL_TYPES = {"VARCHAR": "string", "MEDIUMTEXT": "string", "BIGINT": "long", "INT": "int"}


def ddl_tables() -> dict[str, tuple[list[tuple[str, str, bool]], tuple[str, ...]]]:
    """CREATE TABLE blocks of kafka_tracking.sql: [(column, type, nullable)], primary key."""
    ddl = (SCHEMA_DIR / "wherehows" / "kafka_tracking.sql").read_text(encoding="utf-8")
    tables = {}
    for block in re.finditer(r"CREATE TABLE `(\w+)` \((.*?)\n\)", ddl, re.S):
        cols = [(m.group(1), DDL_TYPES[m.group(2).upper()], "NOT NULL" not in m.group(3))
                for m in re.finditer(r"^\s*`(\w+)`\s+(\w+)(.*)$", block.group(2), re.M)]
        pk = re.search(r"PRIMARY KEY \(([^)]*)\)", block.group(2))
        assert pk is not None
        tables[block.group(1)] = (cols, tuple(c.strip(" `") for c in pk.group(1).split(",")))
    return tables


@pytest.mark.parametrize("proc", PROCESSORS, ids=lambda p: p.name)
def test_columns_match_the_ddl(proc: type[Processor]) -> None:
    cols, pk = ddl_tables()[proc.table]
    assert [(c.name, c.type, c.nullable) for c in proc.columns] == cols
    assert proc.key == pk
    assert set(proc.key) <= {c.name for c in proc.columns}


@pytest.mark.parametrize("proc", PROCESSORS, ids=lambda p: p.name)
def test_class_attributes(proc: type[Processor]) -> None:
    assert proc.name and proc.description and proc.table
    assert "avro" in proc.formats
    if proc.reader_schema is not None:
        assert (SCHEMA_DIR / proc.reader_schema).is_file()




@pytest.mark.parametrize("proc", PROCESSORS, ids=lambda p: p.name)
def test_rows_are_honest_about_columns_and_types(proc: type[Processor]) -> None:
    for make in SAMPLES[proc]:
        message = make()
        assert_row_honest(proc, message, one(proc(), message))


# --------------------------------------------------------------------------- compaction


def test_compaction_completed() -> None:
    msg = SAMPLES[GobblinCompactionProcessor][0]()
    assert one(GobblinCompactionProcessor(), msg) == {
        "cluster": "tarock", "dataset": "/data/tracking/abc", "partition_type": None,
        "partition_name": "2016/07/13/00", "record_count": 157088, "late_record_count": None,
        "dedupe_status": "DEDUPED", "job_context": "Gobblin:CompactionCompleted",
        "project_name": "Gobblin-Kafka", "flow_name": "tracking-hourly",
        "job_name": "tracking-hourly-compaction", "flow_exec_id": 1512,
        "log_event_time": EVENT_TIME,
        "_topic": "GobblinTrackingEvent", "_partition": 3, "_offset": 7, "_timestamp": TIMESTAMP,
    }


def test_compaction_record_counts_cuts_the_output_path() -> None:
    proc = GobblinCompactionProcessor({"clusters": [{"code": "ltx1-holdem",
                                                     "short_name": "holdem"}]})
    row = one(proc, SAMPLES[GobblinCompactionProcessor][1]())
    assert (row["cluster"], row["dataset"], row["partition_type"], row["partition_name"]) == (
        "ltx1-holdem", "/data/tracking/PageViewEvent", "hourly-dedup", "2016/07/13/00")
    assert (row["record_count"], row["late_record_count"]) == (1000, 7)
    assert row["job_context"] == "Gobblin:CompactionRecordCounts"


def test_cluster_code_matches_short_name_then_keeps_identifier() -> None:
    clusters = {"clusters": [{"code": "ltx1-war", "short_name": "war"},
                             {"code": "lva1-tarock", "short_name": "tarock"}]}
    row = one(GobblinCompactionProcessor(clusters), SAMPLES[GobblinCompactionProcessor][0]())
    assert row["cluster"] == "lva1-tarock"
    plain = {**COMPACTION_COMPLETED, "clusterIdentifier": "elsewhere"}
    msg = gobblin(GobblinCompactionProcessor, "compaction.tracking.events",
                  "CompactionCompleted", plain)
    assert one(GobblinCompactionProcessor(clusters), msg)["cluster"] == "elsewhere"


def test_bad_clusters_option_is_refused() -> None:
    with pytest.raises(ValidationError) as info:
        GobblinCompactionProcessor({"clusters": ["ltx1"]})
    assert [e["loc"] for e in info.value.errors()] == [("clusters", 0)]
    with pytest.raises(ValidationError) as info:
        MetastoreAuditProcessor({"clusters": [{"code": "x"}], "cluster": []})
    assert sorted(e["loc"] for e in info.value.errors()) == [
        ("cluster",), ("clusters", 0, "short_name")]


@pytest.mark.parametrize(("namespace", "name"), [
    ("compaction.tracking.events", "CompactionFailed"),
    ("gobblin.copy.CopyDataPublisher", "CompactionCompleted"),
    (None, "CompactionCompleted"),
])
def test_compaction_filters_other_events(namespace: str | None, name: str) -> None:
    msg = gobblin(GobblinCompactionProcessor, namespace, name, COMPACTION_COMPLETED)
    assert GobblinCompactionProcessor().transform(msg) == []


@pytest.mark.parametrize(("key", "bad"), [
    ("recordCount", "abc"), ("recordCount", ""), ("recordCount", " 12"),
    ("recordCount", "99999999999999999999"), ("azkabanExecId", "3000000000"),
    ("azkabanExecId", "1.5"),
])
def test_compaction_bad_number_is_poison_naming_key_and_value(key: str, bad: str) -> None:
    msg = gobblin(GobblinCompactionProcessor, "compaction.tracking.events",
                  "CompactionCompleted", {**COMPACTION_COMPLETED, key: bad})
    with pytest.raises(PoisonMessage, match=re.escape(f"{key}'={bad!r}")):
        GobblinCompactionProcessor().transform(msg)


@pytest.mark.parametrize(("text", "bits", "want"), [
    ("0", 64, 0), ("007", 64, 7), ("+12", 64, 12), ("-12", 64, -12),
    ("999999999999999999", 64, 999999999999999999),  # 18 digits: the fast path
    ("9223372036854775807", 64, 2**63 - 1), ("-9223372036854775808", 64, -(2**63)),
    ("9223372036854775808", 64, None), ("99999999999999999999", 64, None),
    ("999999999", 32, 999999999), ("2147483647", 32, 2**31 - 1), ("2147483648", 32, None),
    ("-2147483648", 32, -(2**31)),
    ("\uff11\uff12", 64, None),  # full-width digits: str.isdigit, but not Java's
    ("\u00b2", 64, None), ("1_000", 64, None), (" 1", 64, None), ("1 ", 64, None),
    ("", 64, None), ("-", 64, None),
])
def test_parse_long_is_javas_parse_long(text: str, bits: int, want: int | None) -> None:
    """The digits-only fast path and the exact check agree with Java's parseLong/parseInt:
    ASCII digits with an optional sign, within the bits; anything else is poison."""
    if want is None:
        with pytest.raises(PoisonMessage, match=re.escape(f"x={text!r}")):
            parse_long(text, "x", bits=bits)
    else:
        assert parse_long(text, "x", bits=bits) == want


class _Text(str):
    """A str subclass: a string all the same."""


@pytest.mark.parametrize(("value", "needle"), [
    ({"timestamp": True, "name": "n", "metadata": {}}, "timestamp=True is not a long"),
    ({"timestamp": 1.0, "name": "n", "metadata": {}}, "timestamp=1.0 is not a long"),
    ({"timestamp": 1, "namespace": 3, "name": "n", "metadata": {}}, "namespace=3"),
    ({"timestamp": 1, "name": None, "metadata": {}}, "name=None is missing"),
    ({"timestamp": 1, "name": "n", "metadata": {"a": "x", "b": 1}}, "not a map of strings"),
    ({"timestamp": 1, "name": "n", "metadata": ["a"]}, "not a map of strings"),
    (["timestamp"], "got list"),
])
def test_gobblin_event_shape_is_checked_on_both_paths(value: Any, needle: str) -> None:
    with pytest.raises(PoisonMessage, match=re.escape(needle)):
        GobblinEvent.of(value)


def test_gobblin_event_accepts_string_subclasses_and_no_namespace() -> None:
    event = GobblinEvent.of({"timestamp": 5, "namespace": None, "name": _Text("n"),
                             "metadata": {"k": _Text("v")}})
    assert (event.timestamp, event.namespace, event.name, event.get("k")) == (5, None, "n", "v")
    assert GobblinEvent.of({"timestamp": 5, "name": "n"}).metadata == {}


def test_compaction_missing_optional_values_are_none() -> None:
    sparse = {"clusterIdentifier": "tarock", "datasetUrn": "/data/tracking/abc"}
    msg = gobblin(GobblinCompactionProcessor, "compaction.tracking.events",
                  "CompactionCompleted", sparse)
    row = one(GobblinCompactionProcessor(), msg)
    assert [row[c] for c in ("partition_name", "record_count", "dedupe_status",
                             "project_name", "flow_name", "job_name", "flow_exec_id")] == \
        [None] * 7


@pytest.mark.parametrize(("name", "drop", "needle"), [
    ("CompactionCompleted", "datasetUrn", "'datasetUrn' is missing"),
    ("CompactionCompleted", "clusterIdentifier", "'clusterIdentifier' is missing"),
    ("CompactionRecordCounts", "DatasetOutputPath", "'DatasetOutputPath' is missing"),
])
def test_compaction_missing_required_value_is_poison(name: str, drop: str, needle: str) -> None:
    base = COMPACTION_COMPLETED if name == "CompactionCompleted" else COMPACTION_COUNTS
    metadata = {k: v for k, v in base.items() if k != drop}
    msg = gobblin(GobblinCompactionProcessor, "compaction.tracking.events", name, metadata)
    with pytest.raises(PoisonMessage, match=needle):
        GobblinCompactionProcessor().transform(msg)


def test_compaction_output_path_that_does_not_cut_is_poison() -> None:
    metadata = {**COMPACTION_COUNTS, "DatasetOutputPath": "/tmp/x"}
    msg = gobblin(GobblinCompactionProcessor, "compaction.tracking.events",
                  "CompactionRecordCounts", metadata)
    with pytest.raises(PoisonMessage, match="DatasetOutputPath'='/tmp/x'"):
        GobblinCompactionProcessor().transform(msg)


def test_json_value_of_the_same_shape_is_accepted() -> None:
    msg = Message("t", 0, 1, TIMESTAMP, None,
                  {"timestamp": EVENT_TIME, "namespace": "compaction.tracking.events",
                   "name": "CompactionCompleted", "metadata": COMPACTION_COMPLETED}, (), b"{}")
    assert one(GobblinCompactionProcessor(), msg)["record_count"] == 157088
    with pytest.raises(PoisonMessage, match="timestamp"):
        GobblinCompactionProcessor().transform(
            Message("t", 0, 1, TIMESTAMP, None, {"timestamp": "x", "name": "n"}, (), None))


# --------------------------------------------------------------------------- distcp


def test_distcp_dataset_published() -> None:
    row = one(GobblinDistcpProcessor(), SAMPLES[GobblinDistcpProcessor][0]())
    assert {k: v for k, v in row.items() if not k.startswith("_")} == {
        "cluster": "ltx1", "dataset": "tracking@abc", "partition_type": None,
        "partition_name": '["2016-07-10-00"]', "upsteam_timestamp": 1467526698875,
        "origin_timestamp": 1468135417671, "source_path": DISTCP["SourcePath"],
        "target_path": DISTCP["TargetPath"], "job_context": "DistcpNG:DatasetPublished",
        "project_name": "distcp-ng", "flow_name": "data-tracking-hive-copy",
        "job_name": "data-tracking-hive-copy", "flow_exec_id": 679377,
        "log_event_time": EVENT_TIME,
    }


@pytest.mark.parametrize(("namespace", "name"), [
    ("gobblin.copy.CopyDataPublisher", "FilePublished"),
    ("compaction.tracking.events", "DatasetPublished"),
])
def test_distcp_filters_other_events(namespace: str, name: str) -> None:
    msg = gobblin(GobblinDistcpProcessor, namespace, name, DISTCP)
    assert GobblinDistcpProcessor().transform(msg) == []


def test_distcp_bad_timestamp_and_missing_partition_are_poison() -> None:
    bad = gobblin(GobblinDistcpProcessor, "gobblin.copy.CopyDataPublisher", "DatasetPublished",
                  {**DISTCP, "upstreamTimestamp": "yesterday"})
    with pytest.raises(PoisonMessage, match="upstreamTimestamp'='yesterday'"):
        GobblinDistcpProcessor().transform(bad)
    no_partition = {k: v for k, v in DISTCP.items() if k != "partition"}
    missing = gobblin(GobblinDistcpProcessor, "gobblin.copy.CopyDataPublisher",
                      "DatasetPublished", no_partition)
    with pytest.raises(PoisonMessage, match="'partition' is missing"):
        GobblinDistcpProcessor().transform(missing)


# --------------------------------------------------------------------------- lumos


def test_lumos_snapshot_published() -> None:
    row = one(GobblinLumosProcessor(), SAMPLES[GobblinLumosProcessor][0]())
    assert {k: v for k, v in row.items() if not k.startswith("_")} == {
        "cluster": "tarock", "dataset": "/data/abc", "location": "/data/abc/1467526698875-PT-1561",
        "partition_type": "snapshot", "partition_name": "1467507599999-scn-570",
        "subpartition_type": None, "subpartition_name": None,
        "max_data_date_epoch3": 1467526698875, "max_data_key": None, "record_count": 570,
        "source_datacenter": "lva1", "source_deployment_env": "prod",
        "source_database": "Leap", "source_table": "GroupMemberCounts",
        "job_context": "Lumos:SnapshotPublished", "project_name": "Lumos_V2_Prod",
        "flow_name": "lumos2-incremental", "job_name": "lumos2-virtual-snapshot-builder",
        "flow_exec_id": 1470416, "log_event_time": EVENT_TIME,
    }


def test_lumos_delta_published_with_untrusted_dropdate() -> None:
    metadata = {**LUMOS, "TargetDirectory": "/jobs/Leap/1467526698875-PT-1561/delta",
                "Dropdate": "1467526698", "DatasourceColo": "lva1"}
    row = one(GobblinLumosProcessor(), gobblin(GobblinLumosProcessor, None, "DeltaPublished",
                                               metadata))
    assert (row["partition_name"], row["subpartition_type"], row["subpartition_name"]) == (
        "1467526698875-PT-1561", "_delta", "1467507599999-scn-570")
    assert row["max_data_date_epoch3"] == 1467507599999  # from the partition
    assert (row["source_datacenter"], row["source_deployment_env"]) == ("lva1", None)


def test_lumos_snapshot_without_dropdate_and_with_a_data_key() -> None:
    metadata = {k: v for k, v in LUMOS.items() if k not in ("Dropdate", "DatasourceColo")}
    metadata["partition"] = "4711-scn-570"
    row = one(GobblinLumosProcessor(), gobblin(GobblinLumosProcessor, "Lumos",
                                               "SnapshotPublished", metadata))
    assert row["max_data_date_epoch3"] == 1467526698875  # from TargetDirectory
    assert row["max_data_key"] == 4711
    assert (row["source_datacenter"], row["source_deployment_env"]) == (None, None)


@pytest.mark.parametrize(("partition", "key"), [
    ("1717171717171-scn-5", None),  # epoch ms after 2016: not a data key
    ("1717171717-scn-5", None),     # epoch seconds
    ("20160701-scn-5", 20160701),
    ("no-number-here", None),
])
def test_lumos_max_data_key(partition: str, key: int | None) -> None:
    msg = gobblin(GobblinLumosProcessor, "Lumos", "SnapshotPublished",
                  {**LUMOS, "partition": partition})
    assert one(GobblinLumosProcessor(), msg)["max_data_key"] == key


def test_lumos_filters_and_poison() -> None:
    assert GobblinLumosProcessor().transform(
        gobblin(GobblinLumosProcessor, "Lumos", "SnapshotFailed", LUMOS)) == []
    bad = gobblin(GobblinLumosProcessor, "Lumos", "SnapshotPublished",
                  {**LUMOS, "Dropdate": "2016-07-03"})
    with pytest.raises(PoisonMessage, match="Dropdate'='2016-07-03'"):
        GobblinLumosProcessor().transform(bad)
    no_dir = {k: v for k, v in LUMOS.items() if k != "TargetDirectory"}
    with pytest.raises(PoisonMessage, match="'TargetDirectory' is missing"):
        GobblinLumosProcessor().transform(
            gobblin(GobblinLumosProcessor, "Lumos", "SnapshotPublished", no_dir))


# --------------------------------------------------------------------------- metastore


def test_metastore_alter_table() -> None:
    old, new = hive_table("hdfs://nn/a"), hive_table("hdfs://nn/b")
    msg = table_event("ALTER_TABLE", old, new)
    row = one(MetastoreAuditProcessor(), msg)
    assert {k: v for k, v in row.items() if not k.endswith("_info")} == {
        "server": "ltx1-hcat01.grid.example.com", "instance": "hms-1",
        "app_name": "hive-metastore", "event_name": "MetastoreTableAuditEvent",
        "event_type": "ALTER_TABLE", "log_event_time": EVENT_TIME,
        "metastore_thrift_uri": "thrift://ltx1-hcat01:7552", "metastore_version": None,
        "is_successful": "true", "is_data_deleted": "false", "db_name": "tracking",
        "table_name": "page_view", "time_partition": "?", "location": "hdfs://nn/b",
        "owner": "etl", "create_time": 1_467_000_000, "last_access_time": 0,
        "_topic": "MetastoreTableAudit", "_partition": 0, "_offset": 11,
        "_timestamp": TIMESTAMP,
    }
    content = msg.value["metastoreTableAuditContent"]
    assert json.loads(row["old_info"]) == content["oldTable"]
    assert json.loads(row["new_info"]) == content["newTable"]
    assert row["new_info"] == json.dumps(content["newTable"], sort_keys=True,
                                         separators=(",", ":"), ensure_ascii=False)
    assert "página" in row["new_info"]


def test_metastore_drop_table_uses_the_old_table() -> None:
    row = one(MetastoreAuditProcessor(), SAMPLES[MetastoreAuditProcessor][1]())
    assert (row["event_type"], row["location"], row["is_data_deleted"]) == (
        "DROP_TABLE", "hdfs://nn/a", "true")
    assert row["instance"] == "?"
    assert row["new_info"] is None and json.loads(row["old_info"])["location"] == "hdfs://nn/a"


def test_metastore_add_partition() -> None:
    proc = MetastoreAuditProcessor({"clusters": [{"code": "ltx1-hcat", "short_name": "hcat"}]})
    msg = partition_event("ADD_PARTITION", None, hive_partition(["2016-07-01", "00"]))
    row = one(proc, msg)
    assert (row["server"], row["event_name"], row["event_type"]) == (
        "ltx1-hcat", "MetastorePartitionAuditEvent", "ADD_PARTITION")
    assert row["time_partition"] == "[2016-07-01, 00]"
    assert (row["owner"], row["create_time"], row["last_access_time"]) == (
        None, 1_467_100_000, 1_467_200_000)
    assert row["old_info"] is None
    assert json.loads(row["new_info"])["values"] == ["2016-07-01", "00"]
    assert (row["_topic"], row["_offset"]) == ("MetastorePartitionAudit", 12)


def test_metastore_partition_without_values() -> None:
    msg = partition_event("ALTER_PARTITION", hive_partition(None), hive_partition(None))
    assert one(MetastoreAuditProcessor(), msg)["time_partition"] == "?"


def test_metastore_poison() -> None:
    with pytest.raises(PoisonMessage, match="both .*oldTable and newTable are null"):
        MetastoreAuditProcessor().transform(table_event("CREATE_TABLE", None, None))
    with pytest.raises(PoisonMessage, match="neither metastoreTableAuditContent"):
        MetastoreAuditProcessor().transform(
            Message("t", 0, 0, TIMESTAMP, None, {"auditHeader": header()}, (), None))
    msg = table_event("CREATE_TABLE", None, hive_table("hdfs://nn/a"))
    broken = dict(msg.value)
    broken["metastoreTableAuditContent"] = {**broken["metastoreTableAuditContent"],
                                            "timestamp": "noon"}
    with pytest.raises(PoisonMessage, match=r"metastoreTableAuditContent\.timestamp='noon'"):
        MetastoreAuditProcessor().transform(
            Message("t", 0, 0, TIMESTAMP, None, broken, (), None))
