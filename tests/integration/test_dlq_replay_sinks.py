"""``kstage dlq replay`` into the table sinks: a real local SparkSession (spark sink, Parquet
staging table) and a real PostgreSQL server (jdbc sink through Spark JDBC).

Both sinks need what the worker binds them with (the processor's columns and table, the
``spark:`` section, where refused rows go); a replay that only built the sink failed
every line ("declares no columns"). A replay hands every line over, then waits for them:
it asks the micro-batching sinks to flush at once (the interval here is 300 s), in one
append per table.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from actors.deadletters.file import dead_letter_line
from processors.gobblin import GobblinCompactionProcessor
from service.ops.dlq import replay_async
from settings.models import Settings
from tests import iceberg_tables
from tests.gobblin_events import event
from tests.postgres import JAR, USER, Postgres

pytestmark = pytest.mark.slow

PROCESSOR = GobblinCompactionProcessor
TOPIC = "GobblinTrackingEvent_compaction"
CLUSTERS = [{"code": "ltx1-holdem", "short_name": "holdem"}]


def dead_letters(path: Path, offsets: list[int], bad: int | None = None) -> None:
    """Dead-letter lines of real compaction events (``bad``: a value that is no JSON)."""
    lines = [dead_letter_line(
        group="g", topic=TOPIC, partition=3, offset=o, timestamp=event(o)["timestamp"],
        key=None, value=b"{not json" if o == bad else json.dumps(event(o)).encode(),
        headers=[], processor=PROCESSOR.name, exc=RuntimeError("sink down"), attempts=1)
        for o in offsets]
    path.write_text("\n".join(lines) + "\n")


def config(tmp_path: Path, sink: dict[str, Any], **spark: Any) -> Settings:
    return Settings.model_validate({
        "kafka": {"bootstrap": "embedded"},
        # A replay waits for each line's write: it must not wait out the interval
        # (the idle flush is off: the replay's own flush_soon is what is tested).
        "spark": {"master": "local[1]", "warehouse": str(tmp_path / "warehouse"),
                  "flush_max_interval_s": 300, "flush_idle_s": 300, **spark},
        "groups": [{"group_id": "g", "failure": {
            "dead_letter_path": str(tmp_path / "dead.jsonl")}, "topics": [
            {"topic": TOPIC, "processor": PROCESSOR.name, "format": "json",
             "options": {"clusters": CLUSTERS}, "sink": sink}]}],
    })


async def test_replay_into_a_spark_sink(tmp_path: Path) -> None:
    dead_letters(tmp_path / "dead.jsonl", [1, 2, 3, 4], bad=3)
    settings = config(tmp_path, {"type": "spark"})
    async with asyncio.timeout(120):
        result = await replay_async(settings)
    assert [why.split(":")[0] for _, why in result.failed] == ["PoisonMessage"]
    assert [d.record["offset"] for d in result.replayed] == [1, 2, 4]
    table = iceberg_tables.rows(tmp_path / "warehouse", PROCESSOR.table)
    assert sorted((r["_topic"], r["_kafka_partition"], r["_offset"]) for r in table) == [
        (TOPIC, 3, 1), (TOPIC, 3, 2), (TOPIC, 3, 4)]
    # A replay is not a worker's batch: it records no offsets in the table.
    assert all("kstage.offsets" not in s
               for s in iceberg_tables.summaries(tmp_path / "warehouse", PROCESSOR.table))
    assert {r["cluster"] for r in table} == {"ltx1-holdem"}
    marks = (tmp_path / "dead.jsonl.replayed").read_text().splitlines()
    assert [json.loads(m)["offset"] for m in marks] == [1, 2, 4]


async def test_a_replay_of_twenty_letters_is_one_append_per_table(tmp_path: Path) -> None:
    """The replay hands every letter over before it waits for any (the sink holds its
    flushes): 20 letters land in one Iceberg append, and each is marked replayed
    (through pyiceberg: the same writer as Spark's appends, without a JVM to start)."""
    offsets = list(range(100, 120))
    dead_letters(tmp_path / "dead.jsonl", offsets)
    settings = config(tmp_path, {"type": "spark"}, appends="pyiceberg")
    async with asyncio.timeout(120):
        result = await replay_async(settings)
    assert (result.failed, [d.record["offset"] for d in result.replayed]) == ([], offsets)
    warehouse = tmp_path / "warehouse"
    assert sorted(o for _, o in iceberg_tables.coordinates(warehouse, PROCESSOR.table)) == \
        offsets
    assert len(iceberg_tables.summaries(warehouse, PROCESSOR.table)) == 1
    marks = (tmp_path / "dead.jsonl.replayed").read_text().splitlines()
    assert [json.loads(m)["offset"] for m in marks] == offsets


async def test_replay_into_a_jdbc_sink(tmp_path: Path, pg: Postgres) -> None:
    dead_letters(tmp_path / "dead.jsonl", [5, 6, 7])
    settings = config(tmp_path, {"type": "jdbc", "table": "stg_dlq_replay", "url": pg.url,
                                 "user": USER, "password": "secret", "jar": JAR})
    async with asyncio.timeout(120):
        result = await replay_async(settings)
    assert (len(result.replayed), result.failed) == (3, [])
    assert pg.psql('SELECT _topic, _partition, _offset, "cluster" FROM "stg_dlq_replay" '
                   "ORDER BY _offset") == [[TOPIC, "3", str(o), "ltx1-holdem"] for o in (5, 6, 7)]
