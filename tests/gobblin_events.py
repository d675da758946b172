"""Real Gobblin compaction events and their rows (through the processor's own transform),
for the table sinks' tests (Spark staging tables, JDBC)."""

from __future__ import annotations

from typing import Any

from processors.base import Message, Row
from processors.gobblin import GobblinCompactionProcessor

PROCESSOR = GobblinCompactionProcessor
TOPIC = "GobblinTrackingEvent_compaction"
T0 = 1_717_000_000_000


def compaction(i: int) -> dict[str, Any]:
    """CompactionCompleted event ``i``: its own event time, so its own key (dataset,
    cluster, log_event_time), and record count ``1000 + i``."""
    return {"timestamp": T0 + i * 1000, "namespace": "compaction.tracking.events",
            "name": "CompactionCompleted",
            "metadata": {"clusterIdentifier": "ltx1-holdemrm01.grid.example.com:8032",
                         "datasetUrn": f"/data/tracking/Event{i % 7}",
                         "partition": "2024/05/29/16", "recordCount": str(1000 + i)}}


def event(offset: int) -> dict[str, Any]:
    """A real Gobblin compaction event (value): CompactionCompleted at odd offsets,
    CompactionRecordCounts at even ones."""
    ts = 1468368000000 + offset * 1000
    if offset % 2:
        metadata = {"clusterIdentifier": "ltx1-holdem", "datasetUrn": "/data/tracking/PageView",
                    "partition": "2016/07/13/00", "recordCount": str(1000 + offset),
                    "dedupeStatus": "DEDUPED", "azkabanProjectName": "compaction",
                    "azkabanFlowId": "hourly", "azkabanJobId": "compact_pv",
                    "azkabanExecId": str(4242 + offset)}
        name = "CompactionCompleted"
    else:
        metadata = {"clusterIdentifier": "ltx1-holdem",
                    "DatasetOutputPath": "/data/tracking/AdClick/daily/2016/07/13",
                    "RegularRecordCount": str(50 * offset), "LateRecordCount": "3"}
        name = "CompactionRecordCounts"
    return {"timestamp": ts, "namespace": "compaction.tracking.events", "name": name,
            "metadata": metadata}


def events(partition: int, start: int, count: int) -> list[Row]:
    """Rows of real compaction events, through the processor's own transform."""
    processor = PROCESSOR({"clusters": [{"code": "ltx1-holdem", "short_name": "holdem"}]})
    rows: list[Row] = []
    for offset in range(start, start + count):
        value = event(offset)
        message = Message(TOPIC, partition, offset, value["timestamp"] + 5, None, value, (),
                          None)
        rows.extend(processor.transform(message))
    return rows
