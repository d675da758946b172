"""``spark.master: spark://...``: the Iceberg staging appends and the merge into the final
table on a standalone cluster whose warehouse is in object storage.

The test starts a Master and one Worker on 127.0.0.1 (:mod:`tests.spark_cluster`, from the
pip pyspark) and a moto S3 server, produces real-schema Gobblin compaction events
(Confluent wire format) to the session's broker, and runs ``kstage run --drain`` then
``kstage merge`` (child processes) with ``spark.master`` the cluster's URL and the
warehouse an ``s3://`` bucket.
Driver and executors share no file system: the executors write the data files to S3
(the jars reach them through ``spark.jars``), only the driver commits, to its SQLite
catalog. It checks the staging and final rows (read by pyiceberg), the offsets in the
table and in Kafka, that the applications ran their tasks on the Worker's executors, that
nothing of the tables was written on local disk, and that no cluster process is left. Never skipped:
a missing Java or ``spark-class`` fails it.
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

from actors.codecs.avro import encode
from processors.base import SCHEMA_DIR
from service.dev.samples import SAMPLE_TOPICS, sample_records
from tests.fake_registry import FakeRegistry
from tests.kafkautil import CHILD_PATH, committed, create_topic, produce, unique, write_config
from tests.lake import IcebergReader
from tests.s3_server import S3Server
from tests.spark_cluster import SparkCluster, group_members
from tests.spark_jvm import FAST_START

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

EVENTS = 30  # one row each, distinct keys (dataset, cluster, log_event_time)
VERSIONS = 4  # newer versions of the first events' keys, produced afterwards
TABLE = "stg_kafka_gobblin_compaction"
FINAL = "final_kafka_gobblin_compaction"


def newer_version(record: dict[str, Any], count: int) -> dict[str, Any]:
    """The same event (same key) with another record count."""
    meta = dict(record["metadata"])
    field = "recordCount" if "recordCount" in meta else "RegularRecordCount"
    meta[field] = str(count)
    return {**record, "metadata": meta}


@pytest.mark.timeout(600)  # a Master, a Worker, an executor and the driver: four JVMs
async def test_run_on_a_standalone_cluster_with_an_s3_warehouse(
        broker: str, tmp_path: Path, kstage: Any) -> None:
    sample = next(t for t in SAMPLE_TOPICS if t.processor == "gobblin_compaction")
    topic, group = unique("cluster-gobblin"), unique("g-cluster")
    records = sample_records(sample, EVENTS)
    versions = [newer_version(r, 7_000_000 + i) for i, r in enumerate(records[:VERSIONS])]
    driver = tmp_path / "driver"  # the driver's directory; the Worker's is elsewhere
    driver.mkdir()

    with (S3Server(tmp_path / "moto.log") as s3,
          SparkCluster(tmp_path / "cluster", cores=1, memory="1g") as cluster,
          FakeRegistry() as registry):
        assert cluster.state()["aliveworkers"] == 1
        text = (SCHEMA_DIR / sample.schema_file).read_text()
        schema = parse_schema(json.loads(text))
        sid = registry.register(f"{topic}-value", text)
        await create_topic(broker, topic, partitions=2)
        await produce(broker, topic, [encode(schema, sid, r) for r in records],
                      partition_of=lambda i: i % 2)
        await asyncio.sleep(0.05)  # the versions carry a later Kafka timestamp
        await produce(broker, topic, [encode(schema, sid, r) for r in versions],
                      partition_of=lambda i: 0)

        cfg = write_config(driver / "kstage.yml", broker, group,
                           [{"topic": topic, "processor": sample.processor,
                             "format": "avro", "sink": {"type": "spark"}}])
        data = yaml.safe_load(cfg.read_text())
        data["schema_registry"] = {"url": registry.url}
        catalog = {"uri": f"jdbc:sqlite:{driver / 'catalog.db'}",  # the driver's alone
                   "warehouse": f"s3://{s3.new_bucket()}/warehouse", "s3": s3.catalog_s3()}
        data["spark"] = {
            "master": cluster.master_url,
            "catalog": catalog,
            "flush_max_interval_s": 0.5,
            "conf": {"spark.driver.memory": "512m",
                     "spark.driver.host": "127.0.0.1",  # reachable by the executors
                     "spark.executor.memory": "512m",
                     "spark.executor.cores": "1",
                     "spark.cores.max": "1",
                     # the suite's JVM options (tests/spark_jvm.py) for the executors too:
                     # short-lived, they start faster at less CPU with C1 and SerialGC
                     "spark.executor.extraJavaOptions": " ".join(FAST_START)},
        }
        cfg.write_text(yaml.safe_dump(data))
        proc = kstage(cfg, "--drain", env=cluster.env)
        assert await proc.wait(timeout=180) == 0, proc.output()

        parts = await committed(broker, group, topic, 2)
        assert parts == {0: EVENTS // 2 + VERSIONS, 1: EVENTS // 2}, proc.output()
        [run_app] = cluster.completed_apps(1)
        assert run_app["name"].startswith("kstage-") and run_app["state"] == "FINISHED"
        # The application ran on the cluster: executors on the Worker fetched the jars
        # from the driver and ran its tasks.
        [app_dir] = cluster.app_dirs()
        assert app_dir.name == run_app["id"]
        logs = "".join(p.read_text(errors="replace") for p in app_dir.glob("*/stderr"))
        assert "Finished task" in logs, f"{app_dir}: no task ran on the executor"
        assert "iceberg-spark-runtime" in logs and "iceberg-aws-bundle" in logs, logs[-3000:]
        # ... and no Python task: a flush reaches the executors as Arrow data, so the
        # cluster's Spark need not have the driver's Python (docker-compose relies on it)
        assert "PythonRunner" not in logs and "pyspark.daemon" not in logs

        merge = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "service", "merge", "-c", str(cfg)],
            capture_output=True, text=True, timeout=300, cwd=driver,
            env={**os.environ, "PYTHONPATH": CHILD_PATH, **cluster.env})
        assert merge.returncode == 0, merge.stdout + merge.stderr
        assert merge.stdout.strip().splitlines() == [
            f"{TABLE} -> {FINAL}: {EVENTS + VERSIONS} staging rows, {EVENTS} final rows "
            f"(0 replays dropped, {VERSIONS} superseded; {EVENTS + VERSIONS} new since "
            "last merge)"], merge.stdout + merge.stderr
        apps = cluster.completed_apps(2)
        assert len(apps) == 2 and all(a["state"] == "FINISHED" for a in apps), apps

        reader = IcebergReader({"catalog": catalog})
        staging, offsets = reader.rows(TABLE), reader.offsets(TABLE)
        final = reader.rows(FINAL)
        keys = s3.objects(catalog["warehouse"].removeprefix("s3://").split("/")[0])
        pgids = list(cluster.pgids)
    leftovers = {pgid: group_members(pgid) for pgid in pgids}
    assert not any(leftovers.values()), leftovers

    assert len(staging) == EVENTS + VERSIONS
    assert sorted((r["_kafka_partition"], r["_offset"]) for r in staging) == sorted(
        [(i % 2, i // 2) for i in range(EVENTS)]
        + [(0, EVENTS // 2 + i) for i in range(VERSIONS)])
    assert {r["_topic"] for r in staging} == {topic}
    assert all(r["_timestamp"] > 0 for r in staging)
    assert offsets == {(group, topic, 0): EVENTS // 2 + VERSIONS,
                       (group, topic, 1): EVENTS // 2}
    by_time: dict[int, list[int]] = {}
    for row in staging:
        by_time.setdefault(row["log_event_time"], []).append(row["record_count"])
    assert all(7_000_000 + i in by_time[r["timestamp"]] for i, r in enumerate(versions))
    # The final table: one row per key, the newer version where one came.
    assert len(final) == EVENTS
    counts = {row["log_event_time"]: row["record_count"] for row in final}
    assert all(counts[r["timestamp"]] == 7_000_000 + i for i, r in enumerate(versions))
    # The data files are in the bucket; none on the driver's or the Worker's disk.
    assert any(k.endswith(".parquet") and f"/{TABLE}/data/" in k for k in keys), keys
    assert any(k.endswith(".parquet") and f"/{FINAL}/data/" in k for k in keys), keys
    assert not list(tmp_path.rglob("*.parquet")), list(tmp_path.rglob("*.parquet"))
