"""Write a Parquet warehouse with the OLD kstage code (commit 753fb47, before Iceberg).

Run by ``tests/integration/test_tables_migrate.py`` as ``python -P tests/legacy_writer.py
WAREHOUSE OUT.json`` with ``PYTHONPATH`` naming a checkout of that commit's ``actors``,
``processors`` and ``settings`` (``git archive``), then the repository (for
``tests.gobblin_events``), so the tables are written by the old ``SparkTableWriter`` and
merged by the old ``kstage merge``, exactly as a user of that version has them. Writes,
through the old processor ``gobblin_compaction`` and real Gobblin events:

* ``stg_legacy``: offsets 0-5 of partition 0, the same again (a replay after a crash),
  offsets 0-3 of partition 1; merged by the old merge into ``final_legacy`` (partitioned
  by ``log_date``, with ``_merge_state/final_legacy.json``); then offsets 6-9 of
  partition 0, which no merge folded;
* ``stg_legacy_raw``: offsets 0-4 of partition 0 in two appends, never merged.

``OUT.json``: every row of each old directory, read back by the old session
(``{directory: [row, ...]}``, ``_ingested_at`` as Unix microseconds, dates as text).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

TABLES = ("stg_legacy", "stg_legacy_raw")


def plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, dt.date) else value


async def write(warehouse: Path) -> dict[str, list[dict[str, Any]]]:
    import actors  # the old tree's (checked below)  # noqa: I001 (its actors.sinks.spark.merge)
    from actors.sinks.spark.merge import merge
    from actors.sinks.spark.sink import SparkActor
    from settings.models import Settings, SparkSettings
    from tests.gobblin_events import PROCESSOR, TOPIC, events  # with the old processors

    if "/legacy-" not in actors.__file__:
        raise SystemExit(f"not the old code: {actors.__file__}")
    spark_settings = SparkSettings(master="local[1]", warehouse=str(warehouse),
                                   flush_max_interval_s=0.2)
    actor = SparkActor(spark_settings)

    async def stage(table: str, partition: int, start: int, count: int) -> None:
        writer = actor.writer(table, PROCESSOR.columns)
        await writer.register()
        part, refused = writer.convert(events(partition, start, count))
        assert not refused, refused
        await writer.write(part)

    try:
        await stage("stg_legacy", 0, 0, 6)
        await stage("stg_legacy", 0, 0, 6)  # replayed after a crash: in staging twice
        await stage("stg_legacy", 1, 0, 4)
        settings = Settings(spark=spark_settings, groups=[{"topics": [
            {"topic": TOPIC, "processor": "gobblin_compaction",
             "sink": {"type": "spark", "table": "stg_legacy"}}]}])
        [result] = await merge(settings, actor=actor)
        assert result.final_rows > 0 and not result.skipped, result
        await stage("stg_legacy", 0, 6, 4)  # after the merge: not merged
        await stage("stg_legacy_raw", 0, 0, 3)
        await stage("stg_legacy_raw", 0, 3, 2)

        def read(spark: Any) -> dict[str, list[dict[str, Any]]]:
            from pyspark.sql import functions as f

            found = {}
            for name in (*TABLES, "final_legacy"):
                frame = (spark.read.parquet(str(warehouse / name))
                         .drop("ingest_date", "writer_id")
                         .withColumn("_ingested_at", f.unix_micros("_ingested_at")))
                found[name] = [{k: plain(v) for k, v in r.asDict().items()}
                               for r in frame.collect()]
            return found

        return await actor.call(read)
    finally:
        actor.stop()


def main() -> None:
    warehouse, out = Path(sys.argv[1]), Path(sys.argv[2])
    found = asyncio.run(write(warehouse))
    out.write_text(json.dumps(found, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
