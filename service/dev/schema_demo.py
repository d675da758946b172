"""The demo's schema-driven topic: Gobblin tracking events land through ``schema_rows``
into a table made from their writer schema, which changes midway.

:data:`SCHEMA_TOPIC` holds ``events`` Gobblin compaction events (the demo's samples): the
first half written with the real ``GobblinTrackingEvent`` schema, the second half with
its next version, which adds an optional field (:data:`NEW_COLUMN`). No processor module
and no column list: the topic's configuration names ``processor: schema_rows`` and a
table. The demo registry's subject of this topic (``<topic>-value``) has no version, so
kstage makes the table from the first message's writer schema and adds the column when
the first message of the second version comes (one table commit, no restart); the table
is staging only (no key, so no final merge). The summary shows the table, its rows and
snapshots, and how many rows fill the new column.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro import parse_schema

from actors.codecs.avro import encode
from actors.sinks.spark.catalog import qualified
from processors.base import SCHEMA_DIR
from service.dev.samples import SAMPLE_TOPICS, sample_records
from settings.models import SparkSettings

SCHEMA_TOPIC = "GobblinTrackingEvent_all"
SCHEMA_TABLE = "stg_gobblin_tracking_event"
NEW_COLUMN = "tracking_version"
V1_FILE = "wherehows/GobblinTrackingEvent.avsc"
V2_FILE = "GobblinTrackingEvent_v2.avsc"


def v2_schema() -> dict[str, Any]:
    """The next version of the Gobblin schema: an optional field added."""
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / V1_FILE).read_text())
    schema["fields"].append({"name": NEW_COLUMN, "type": ["null", "string"], "default": None,
                             "doc": "version of the tracking library (added in version 2)"})
    return schema


def add_v2(directory: Path, index: dict[str, dict[str, str]], schema_id: int) -> None:
    """Write version 2 to the registry ``directory`` as ``schema_id`` (``index``: the
    registry's index, written by the caller), version 2 of the schema's subject."""
    (directory / V2_FILE).write_text(json.dumps(v2_schema()))
    subject = f"{Path(V1_FILE).stem}-value"
    index[str(schema_id)] = {"subject": subject, "file": V2_FILE}


def topic_settings() -> dict[str, Any]:
    """The topic's whole configuration."""
    return {"topic": SCHEMA_TOPIC, "processor": "schema_rows", "format": "avro",
            "sink": {"type": "spark", "table": SCHEMA_TABLE}}


def values(events: int, v1_id: int, v2_id: int) -> list[bytes]:
    """``events`` Gobblin events, the first half of writer schema ``v1_id``, the rest of
    ``v2_id`` with :data:`NEW_COLUMN` set."""
    sample = next(t for t in SAMPLE_TOPICS if t.schema_file == V1_FILE)
    v1, v2 = parse_schema(json.loads((SCHEMA_DIR / V1_FILE).read_text())), parse_schema(
        v2_schema())
    half = events // 2
    return [encode(v1, v1_id, r) if i < half else
            encode(v2, v2_id, {**r, NEW_COLUMN: "2.0"})
            for i, r in enumerate(sample_records(sample, events, seed=34))]


@dataclass(frozen=True)
class SchemaTable:
    """What the summary shows of :data:`SCHEMA_TABLE` (rows 0: not created)."""

    rows: int = 0
    snapshots: int = 0
    columns: tuple[str, ...] = ()
    filled: int = 0  # rows whose NEW_COLUMN is not NULL


def read_table(spark: Any, settings: SparkSettings) -> SchemaTable:
    """Spark thread: the table's rows, snapshots, columns and new column's fill."""
    from service.ops.tables import staging_view

    view = staging_view(spark, settings, SCHEMA_TABLE)
    if not view.exists:
        return SchemaTable()
    name = qualified(settings, SCHEMA_TABLE)
    columns = tuple(spark.table(name).columns)
    filled = 0
    if NEW_COLUMN in columns:
        from pyspark.sql import functions  # the demo needs the spark extra anyway

        counted = spark.table(name).select(functions.count(functions.col(NEW_COLUMN)))
        filled = int(counted.first()[0])
    return SchemaTable(view.rows, view.snapshots, columns, filled)


def summary_rows(table: SchemaTable, events: int) -> list[tuple[str, ...]]:
    """The summary's lines of the table (the demo's five columns)."""
    added = (f"  new column {NEW_COLUMN} (writer schema v2, from event {events // 2}): "
             + ("filled in" if NEW_COLUMN in table.columns else "MISSING; filled in"))
    return [(f"{SCHEMA_TABLE} (schema_rows, staging only)", str(table.rows),
             str(table.snapshots), "", ""),
            (added, str(table.filled), "", "", "")]


__all__ = ["NEW_COLUMN", "SCHEMA_TABLE", "SCHEMA_TOPIC", "SchemaTable", "add_v2",
           "read_table", "summary_rows", "topic_settings", "values"]
