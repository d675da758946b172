"""Exactly-once final tables from at-least-once staging, with real processes:

* SIGKILL ``kstage run`` while a Spark flush is in progress, restart it with ``--drain``
  (its final merge runs at the end): every event is in the final table once, staging
  holds at most the replayed flush twice, nothing is lost;
* two ``kstage run`` processes in one consumer group write the same staging table and
  merge it on an interval (one at a time, the other skips): no corruption, no loss, and
  ``kstage merge`` afterwards changes nothing.

Events are Gobblin CompactionCompleted events (real schema, Confluent wire format) with
one natural key each, so the final table must hold exactly one row per event.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastavro import parse_schema

from actors.sinks.spark.merge import final_name
from actors.sinks.spark.sink import SparkActor
from processors.avro import encode
from processors.base import SCHEMA_DIR
from settings import SparkSettings
from tests.fake_registry import FakeRegistry
from tests.kafkautil import (
    PLUGINS,
    KstageProcess,
    committed,
    create_topic,
    produce,
    unique,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TABLE = "stg_kafka_gobblin_compaction"
FINAL = final_name(TABLE)
SCHEMA = (SCHEMA_DIR / "wherehows/GobblinTrackingEvent.avsc").read_text()
T0 = 1_717_000_000_000


def compaction(i: int) -> dict[str, Any]:
    """Event ``i``: its own event time, so its own key (dataset, cluster, log_event_time)."""
    return {"timestamp": T0 + i * 1000, "namespace": "compaction.tracking.events",
            "name": "CompactionCompleted",
            "metadata": {"clusterIdentifier": "ltx1-holdemrm01.grid.example.com:8032",
                         "datasetUrn": f"/data/tracking/Event{i % 7}",
                         "partition": "2024/05/29/16", "recordCount": str(1000 + i)}}


async def produce_events(broker: str, registry: FakeRegistry, topic: str, start: int,
                         count: int, partitions: int) -> None:
    sid = registry.register(f"{topic}-value", SCHEMA)
    parsed = parse_schema(json.loads(SCHEMA))
    await produce(broker, topic, [encode(parsed, sid, compaction(i))
                                  for i in range(start, start + count)],
                  partition_of=lambda i: i % partitions)


def config(tmp_path: Path, broker: str, group: str, topic: str, registry: FakeRegistry,
           warehouse: Path, *, flush_rows: int, merge_s: float | None) -> Path:
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "gobblin_compaction", "format": "avro",
                         "sink": {"type": "spark"}}])
    data = yaml.safe_load(cfg.read_text())
    data["schema_registry"] = {"url": registry.url}
    data["spark"] = {"master": "local[1]", "warehouse": str(warehouse),
                     "flush_max_rows": flush_rows, "flush_max_interval_s": 0.5}
    for group_settings in data["groups"]:
        group_settings["max_poll_records"] = 100
        # Commit after every durable write: what is replayed is what was being flushed.
        group_settings["commit"] = {"mode": "batch", "max_messages": 1}
    if merge_s is not None:
        data["merge"] = {"interval_s": merge_s}
    cfg.write_text(yaml.safe_dump(data))
    return cfg


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s direct children (the Spark JVM of a kstage process)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def read_tables(warehouse: Path) -> dict[str, Any]:
    """Staging and final tables' coordinates, read by a fresh Spark session."""
    actor = SparkActor(SparkSettings(master="local[1]", warehouse=str(warehouse / "_reader")))

    def read(spark: Any) -> dict[str, Any]:
        staging = spark.read.parquet(str(warehouse / TABLE))
        final = spark.read.parquet(str(warehouse / FINAL))
        return {
            "staging": [(r._partition, r._offset) for r in
                        staging.select("_partition", "_offset").collect()],
            "writers": {r.writer_id for r in staging.select("writer_id").distinct().collect()},
            "final": [(r._partition, r._offset, r.record_count) for r in
                      final.select("_partition", "_offset", "record_count").collect()],
        }

    try:
        return await actor.call(read)
    finally:
        actor.stop()


def last_assignment(proc: KstageProcess) -> set[int]:
    found = re.findall(r"assigned partitions \[([0-9, ]*)\]", proc.output())
    return {int(p) for p in found[-1].split(",") if p.strip()} if found else set()


def split_between(a: KstageProcess, b: KstageProcess, partitions: int) -> bool:
    mine, yours = last_assignment(a), last_assignment(b)
    return bool(mine and yours and not mine & yours
                and mine | yours == set(range(partitions)))


def expected(count: int, partitions: int) -> list[tuple[int, int]]:
    return sorted((i % partitions, i // partitions) for i in range(count))


async def test_sigkill_mid_flush_then_restart_and_merge_exactly_once(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    events, partitions, flush_rows = 4000, 2, 250
    topic, group = unique("eo-kill"), unique("g-eo-kill")
    warehouse = tmp_path / "warehouse"

    def flushing() -> bool:  # Spark stages a flush in the writer's directory's _temporary
        return any((warehouse / TABLE).glob("ingest_date=*/writer_id=*/_temporary"))

    with FakeRegistry() as registry:
        await create_topic(broker, topic, partitions=partitions)
        await produce_events(broker, registry, topic, 0, events, partitions)
        cfg = config(tmp_path, broker, group, topic, registry, warehouse,
                     flush_rows=flush_rows, merge_s=3600)
        first = kstage(cfg)
        # Wait until some flushes were committed, then kill inside the next one.
        await wait_until(lambda: first.proc.poll() is not None or flushing(),
                         timeout=120, what="a first flush")
        start = time.monotonic()
        while time.monotonic() - start < 120:
            done = sum((await committed(broker, group, topic, partitions)).values())
            if done >= flush_rows or first.proc.poll() is not None:
                break
            await asyncio.sleep(0.05)
        assert first.proc.poll() is None, first.output()
        jvms = children(first.proc.pid)
        deadline = time.monotonic() + 60
        while not flushing():
            assert time.monotonic() < deadline, "no flush in progress within 60s"
            time.sleep(0.002)  # noqa: ASYNC251 - a tight poll, nothing else to run
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
        before = sum((await committed(broker, group, topic, partitions)).values())
        assert 0 < before < events, f"killed too late or too early: {before} committed"
        await wait_until(lambda: not any(alive(pid) for pid in jvms), timeout=60,
                         what="the killed process's Spark JVM to exit")

        second = kstage(cfg, "--drain")
        assert await second.wait(timeout=240) == 0, second.output()
    assert "merge: " in second.output() and FINAL in second.output()
    assert sum((await committed(broker, group, topic, partitions)).values()) == events

    tables = await read_tables(warehouse)
    staging = Counter(tables["staging"])
    assert sorted(staging) == expected(events, partitions)  # nothing lost
    assert max(staging.values()) <= 2  # a replay lands once more, never twice more
    replayed = sum(staging.values()) - events
    assert replayed <= flush_rows + 100, f"{replayed} replayed rows: more than one flush"
    final = tables["final"]
    assert len(final) == events  # exactly once
    assert sorted((p, o) for p, o, _ in final) == expected(events, partitions)
    assert all(count == 1000 + (o * partitions + p) for p, o, count in final)


async def test_two_processes_one_group_same_table_merging_on_an_interval(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    events, partitions = 6000, 4
    topic, group = unique("eo-two"), unique("g-eo-two")
    warehouse = tmp_path / "warehouse"
    state = warehouse / "_merge_state" / f"{FINAL}.json"
    with FakeRegistry() as registry:
        await create_topic(broker, topic, partitions=partitions)
        cfg = config(tmp_path, broker, group, topic, registry, warehouse,
                     flush_rows=500, merge_s=2)
        a, b = kstage(cfg), kstage(cfg)
        try:
            # Both members hold partitions before any event exists: both write.
            await wait_until(lambda: split_between(a, b, partitions), timeout=90,
                             what="the partitions to be split between both processes")
            await a.wait_for_log("registered", timeout=90)
            await b.wait_for_log("registered", timeout=90)
            await produce_events(broker, registry, topic, 0, events, partitions)

            async def all_committed() -> bool:
                return sum((await committed(broker, group, topic, partitions)).values()) \
                    == events

            deadline = time.monotonic() + 180
            while not await all_committed():
                assert time.monotonic() < deadline, a.output() + b.output()
                await asyncio.sleep(0.5)

            def merged_all() -> bool:
                try:
                    return json.loads(state.read_text())["final_rows"] == events
                except (OSError, ValueError):
                    return False

            await wait_until(merged_all, timeout=120, what="a merge holding every event")
            for proc in (a, b):
                proc.signal(signal.SIGTERM)
            assert await a.wait(timeout=90) == 0, a.output()
            assert await b.wait(timeout=90) == 0, b.output()
        finally:
            a.close()
            b.close()

    tables = await read_tables(warehouse)
    assert len(tables["writers"]) == 2, tables["writers"]
    assert sorted(set(tables["staging"])) == expected(events, partitions)
    assert len(tables["final"]) == events
    assert sorted((p, o) for p, o, _ in tables["final"]) == expected(events, partitions)
    logs = a.output() + b.output()
    assert logs.count(f"merge: {TABLE} -> {FINAL}: ") >= 2  # merged, and more than once
    # Neither process disturbed the other's appends (no aborted Spark job, no retry).
    assert "Aborting job" not in logs and "sink write failed" not in logs

    # A merge from the command line afterwards changes nothing.
    out = subprocess.run([sys.executable, "-m", "service", "merge", "-c", str(cfg)],
                         capture_output=True, text=True, timeout=180, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(PLUGINS)}, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{events} final rows" in out.stdout and "0 new since last merge" in out.stdout
