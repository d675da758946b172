"""``spark.maintenance.every_s`` inside a real ``kstage run``: a maintenance that fails (a
data file of the staging table lost from storage while the service runs: compaction cannot
read it) is logged
with the table, counted in ``kstage_maintenance_failures`` and tried again at the next
interval; the service keeps consuming, and once the file is back, maintenance succeeds
and every row is in the table once."""

from __future__ import annotations

import shutil
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from service.broker import free_port
from tests.iceberg_tables import rows
from tests.kafkautil import create_topic, produce, status_port, unique, wait_until, write_config
from tests.lake import wait_committed

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TABLE = "stg_scheduled"


def metric(text: str, name: str, table: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("table") == table:
                return float(sample.value)
    return None


def config(path: Path, broker: str, group: str, topic: str, **spark: Any) -> Path:
    write_config(path, broker, group, [{"topic": topic, "processor": "test_unkeyed",
                                        "sink": {"type": "spark", "table": TABLE}}],
                 service={"http_port": free_port(), "http_host": "127.0.0.1"})
    data = yaml.safe_load(path.read_text())
    data["spark"] = {"master": "local[1]", "warehouse": str(path.parent / "warehouse"),
                     "flush_max_interval_s": 0.5, **spark}
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.timeout(900)  # kstage starts a JVM; its waits inside add up past 180 s
async def test_a_failed_maintenance_is_counted_and_retried_while_the_service_runs(
        broker: str, tmp_path: Path, kstage: Any) -> None:
    topic, group = unique("sched"), unique("g-sched")
    await create_topic(broker, topic)
    cfg = config(tmp_path / "kstage.yml", broker, group, topic, maintenance={
        "every_s": 3, "snapshot_max_age_s": 0.001, "snapshot_min_keep": 1,
        "min_input_files": 2})
    proc = kstage(cfg)  # one service throughout: its first data file is then lost
    base = f"http://127.0.0.1:{await status_port(proc, timeout=60)}"
    await produce(broker, topic, ({"k": f"a{i}"} for i in range(5)))
    # committed in Kafka once the append's commit is in the table: the file is whole
    await wait_committed(broker, group, topic, 1, 5, [proc], timeout=240)
    data = tmp_path / "warehouse" / "kstage" / TABLE / "data"
    [written] = list(data.rglob("*.parquet"))
    kept = tmp_path / written.name
    shutil.move(written, kept)  # lost from storage: compaction cannot read it
    # (one data file until then: min_input_files 2, nothing of it compacted or read)
    await produce(broker, topic, ({"k": f"b{i}"} for i in range(5)))  # a second data file
    table = f"kstage.kstage.{TABLE}"
    # the log names the table and the root cause: the lost file
    failed = f"maintenance: {table} (staging): FAILED: "
    await proc.wait_for_log(failed, timeout=240)
    [line] = [line for line in proc.output().splitlines() if failed in line][:1]
    assert f"java.io.FileNotFoundException: File {written} does not exist" in line, line
    async with httpx.AsyncClient(timeout=5) as client:
        text = (await client.get(f"{base}/metrics")).text
        ready = (await client.get(f"{base}/readyz")).json()
    failures = metric(text, "kstage_maintenance_failures_total", table)
    assert failures is not None and failures >= 1, text
    assert ready == {"status": "ready"}  # maintenance is no reason to stop taking work
    # the service goes on: new messages still land
    await produce(broker, topic, ({"k": f"c{i}"} for i in range(5)))
    await wait_until(lambda: len(list(data.rglob("*.parquet"))) >= 2, timeout=60,
                     what="the later appends")

    shutil.move(kept, written)  # the storage is back
    restored = time.time()
    await proc.wait_for_log(f"maintenance: {table} (staging): data files ", timeout=120,
                            count=proc.output().count(f"maintenance: {table} (staging): "
                                                      "data files ") + 1)
    async with httpx.AsyncClient(timeout=5) as client:
        text = (await client.get(f"{base}/metrics")).text
    last = metric(text, "kstage_maintenance_last_success_timestamp_seconds", table)
    assert last is not None and last >= restored - 5, text
    proc.signal(signal.SIGTERM)
    assert await proc.wait(timeout=120) == 0, proc.output()
    ids = Counter(r["id"] for r in rows(tmp_path / "warehouse", TABLE))
    # each message once (the processor's id is the JSON value as Python text)
    assert ids == Counter(str({"k": f"{p}{i}"}) for p in "abc" for i in range(5))
