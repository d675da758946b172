"""``spark.master: spark://...``: the same staging writes and merge on a standalone cluster.

The test starts a Master and one Worker on 127.0.0.1 (:mod:`tests.spark_cluster`, from the
pip pyspark), produces real-schema Gobblin compaction events (Confluent wire format) to
the session's broker, runs ``kstage run --drain`` and then ``kstage merge`` (child
processes) with ``spark.master`` the cluster's URL, and checks the staging rows, the
committed offsets, the final table, that both applications ran their tasks on the
Worker's executors, and that no cluster process is left. Never skipped: a missing Java or
``spark-class`` fails it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastavro import parse_schema

from actors.sinks.spark.sink import SparkActor
from processors.avro import encode
from processors.base import SCHEMA_DIR
from service.dev.samples import SAMPLE_TOPICS, sample_records
from settings import SparkSettings
from tests.fake_registry import FakeRegistry
from tests.kafkautil import PLUGINS, committed, create_topic, produce, unique, write_config
from tests.spark_cluster import SparkCluster, group_members

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

EVENTS = 30  # one row each, distinct keys (dataset, cluster, log_event_time)
VERSIONS = 4  # newer versions of the first events' keys, produced afterwards
TABLE, FINAL = "stg_kafka_gobblin_compaction", "final_kafka_gobblin_compaction"


def newer_version(record: dict[str, Any], count: int) -> dict[str, Any]:
    """The same event (same key) with another record count."""
    meta = dict(record["metadata"])
    field = "recordCount" if "recordCount" in meta else "RegularRecordCount"
    meta[field] = str(count)
    return {**record, "metadata": meta}


def record_count(record: dict[str, Any]) -> int:
    meta = record["metadata"]
    return int(meta.get("recordCount", meta.get("RegularRecordCount")))


async def test_run_and_merge_on_a_standalone_cluster(broker: str, tmp_path: Path,
                                                     kstage: Any) -> None:
    sample = next(t for t in SAMPLE_TOPICS if t.processor == "gobblin_compaction")
    topic, group = unique("cluster-gobblin"), unique("g-cluster")
    warehouse = tmp_path / "warehouse"
    records = sample_records(sample, EVENTS)
    versions = [newer_version(r, 7_000_000 + i) for i, r in enumerate(records[:VERSIONS])]

    cluster = SparkCluster(tmp_path / "cluster", cores=1, memory="1g")
    with cluster:  # the Worker is ALIVE; both process groups are killed on exit
        assert cluster.state()["aliveworkers"] == 1
        with FakeRegistry() as registry:
            text = (SCHEMA_DIR / sample.schema_file).read_text()
            schema = parse_schema(json.loads(text))
            sid = registry.register(f"{topic}-value", text)
            await create_topic(broker, topic, partitions=2)
            await produce(broker, topic, [encode(schema, sid, r) for r in records],
                          partition_of=lambda i: i % 2)
            await asyncio.sleep(0.05)  # the versions carry a later Kafka timestamp
            await produce(broker, topic, [encode(schema, sid, r) for r in versions],
                          partition_of=lambda i: 0)

            cfg = write_config(tmp_path / "kstage.yml", broker, group,
                               [{"topic": topic, "processor": sample.processor,
                                 "format": "avro", "sink": {"type": "spark"}}])
            data = yaml.safe_load(cfg.read_text())
            data["schema_registry"] = {"url": registry.url}
            data["spark"] = {
                "master": cluster.master_url,
                "warehouse": str(warehouse),  # one machine: the executors see this path
                "flush_max_interval_s": 0.5,
                "conf": {"spark.driver.memory": "512m",
                         "spark.driver.host": "127.0.0.1",  # reachable by the executors
                         "spark.executor.memory": "512m",
                         "spark.executor.cores": "1",
                         "spark.cores.max": "1"},
            }
            cfg.write_text(yaml.safe_dump(data))
            proc = kstage(cfg, "--drain", env=cluster.env)
            assert await proc.wait(timeout=120) == 0, proc.output()

        parts = await committed(broker, group, topic, 2)
        assert parts == {0: EVENTS // 2 + VERSIONS, 1: EVENTS // 2}, proc.output()
        [run_app] = cluster.completed_apps(1)
        assert run_app["name"].startswith("kstage-") and run_app["state"] == "FINISHED"

        merge = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "service", "merge", "-c", str(cfg)],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(PLUGINS), **cluster.env})
        assert merge.returncode == 0, merge.stdout + merge.stderr
        assert merge.stdout.strip().splitlines() == [
            f"{TABLE} -> {FINAL}: {EVENTS + VERSIONS} staging rows, {EVENTS} final rows "
            f"(0 replays dropped, {VERSIONS} superseded; {EVENTS + VERSIONS} new since "
            "last merge)"], merge.stdout + merge.stderr

        # Both applications ran on the cluster: finished there, with executors on the
        # Worker that ran tasks.
        apps = cluster.completed_apps(2)
        assert len(apps) == 2, apps
        assert all(a["name"].startswith("kstage-") and a["state"] == "FINISHED"
                   for a in apps), apps
        app_dirs = cluster.app_dirs()
        assert sorted(d.name for d in app_dirs) == sorted(a["id"] for a in apps)
        for app_dir in app_dirs:
            logs = "".join(p.read_text(errors="replace") for p in app_dir.glob("*/stderr"))
            assert "Finished task" in logs, f"{app_dir}: no task ran on the executor"
        pgids = list(cluster.pgids)
    leftovers = {pgid: group_members(pgid) for pgid in pgids}
    assert not any(leftovers.values()), leftovers

    staging, final = await _read(tmp_path, warehouse)
    assert len(staging) == EVENTS + VERSIONS
    assert sorted((r["_partition"], r["_offset"]) for r in staging) == sorted(
        [(i % 2, i // 2) for i in range(EVENTS)]
        + [(0, EVENTS // 2 + i) for i in range(VERSIONS)])
    assert {r["_topic"] for r in staging} == {topic}
    assert all(r["_timestamp"] > 0 for r in staging)
    # the rows were written by the application the cluster ran first
    assert {r["writer_id"] for r in staging} == {run_app["name"].removeprefix("kstage-")}

    assert len(final) == EVENTS
    keys = [(r["dataset"], r["cluster"], r["log_event_time"]) for r in final]
    assert len(set(keys)) == EVENTS
    assert {r["log_event_time"] for r in final} == {r["timestamp"] for r in records}
    by_time = {r["log_event_time"]: r for r in final}
    for i, record in enumerate(records):
        row = by_time[record["timestamp"]]
        if i < VERSIONS:  # the newer version won
            assert (row["record_count"], row["_partition"], row["_offset"]) == (
                7_000_000 + i, 0, EVENTS // 2 + i)
        else:
            assert row["record_count"] == record_count(record)
            assert (row["_partition"], row["_offset"]) == (i % 2, i // 2)


async def _read(tmp_path: Path, warehouse: Path) -> tuple[list[dict[str, Any]],
                                                           list[dict[str, Any]]]:
    """The staging and final tables' rows, read by path with a local SparkSession."""
    actor = SparkActor(SparkSettings(master="local[1]", warehouse=str(tmp_path / "reader")))

    def read(spark: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return ([r.asDict() for r in spark.read.parquet(str(warehouse / TABLE)).collect()],
                [r.asDict() for r in spark.read.parquet(str(warehouse / FINAL)).collect()])

    try:
        return await actor.call(read)
    finally:
        await actor.astop()
