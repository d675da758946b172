"""Exactly once in the Iceberg staging table, with real processes and SIGKILL:

* ``kstage run`` SIGKILLed after its table commits and before its Kafka commit (Kafka
  commits only at its interval, an hour): restarted with ``--drain``, it resumes where
  the table holds each partition, so nothing is written twice and the Kafka offsets
  catch up;
* SIGKILLed again and again while it appends, then drained with its final merge: every
  event once in staging and in the final table;
* two ``kstage run`` processes in one consumer group append to one table at once
  (optimistic commits retried): every event once, both writers in its commits.

The staging table is read with pyiceberg through the same catalog (tests/iceberg_tables.py).
Events are Gobblin CompactionCompleted events (real schema, Confluent wire format) with
one natural key each.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastavro import parse_schema

from actors.codecs.avro import encode
from processors.base import SCHEMA_DIR
from tests import iceberg_tables
from tests.fake_registry import FakeRegistry
from tests.gobblin_events import compaction
from tests.kafkautil import (
    KstageProcess,
    committed,
    create_topic,
    produce,
    split_between,
    unique,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

TABLE = "stg_kafka_gobblin_compaction"
FINAL = "final_kafka_gobblin_compaction"
SCHEMA = (SCHEMA_DIR / "wherehows/GobblinTrackingEvent.avsc").read_text()


async def produce_events(broker: str, registry: FakeRegistry, topic: str, start: int,
                         count: int, partitions: int) -> None:
    sid = registry.register(f"{topic}-value", SCHEMA)
    parsed = parse_schema(json.loads(SCHEMA))
    await produce(broker, topic, [encode(parsed, sid, compaction(i))
                                  for i in range(start, start + count)],
                  partition_of=lambda i: i % partitions)


def config(tmp_path: Path, broker: str, group: str, topic: str, registry: FakeRegistry,
           warehouse: Path, *, flush_rows: int, merge_s: float | None,
           commit: dict[str, Any] | None = None) -> Path:
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "gobblin_compaction", "format": "avro",
                         "sink": {"type": "spark"}}])
    data = yaml.safe_load(cfg.read_text())
    data["schema_registry"] = {"url": registry.url}
    data["spark"] = {"master": "local[1]", "warehouse": str(warehouse),
                     "flush_max_rows": flush_rows, "flush_max_interval_s": 0.5}
    for group_settings in data["groups"]:
        group_settings["max_poll_records"] = 100
        # Commit after every durable write, unless the test says otherwise.
        group_settings["commit"] = commit or {"mode": "batch", "max_messages": 1}
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


def expected(count: int, partitions: int) -> list[tuple[int, int]]:
    return sorted((i % partitions, i // partitions) for i in range(count))


def staged(warehouse: Path) -> Counter[tuple[int, int]]:
    """How often each (partition, offset) is in the staging table."""
    return iceberg_tables.coordinates(warehouse, TABLE)


async def total_committed(broker: str, group: str, topic: str, partitions: int) -> int:
    return sum(max(v, 0) for v in (await committed(broker, group, topic, partitions)).values())


async def test_sigkill_between_the_table_commit_and_the_kafka_commit_writes_nothing_twice(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    events, partitions = 2000, 2
    topic, group = unique("eo-gap"), unique("g-eo-gap")
    warehouse = tmp_path / "warehouse"
    with FakeRegistry() as registry:
        await create_topic(broker, topic, partitions=partitions)
        await produce_events(broker, registry, topic, 0, events, partitions)
        # Kafka commits only every hour: every table commit is ahead of Kafka's.
        cfg = config(tmp_path, broker, group, topic, registry, warehouse, flush_rows=250,
                     merge_s=None, commit={"mode": "batch", "max_messages": 10**9,
                                           "max_interval_s": 3600})
        first = kstage(cfg)
        await wait_until(lambda: first.proc.poll() is not None
                         or sum(staged(warehouse).values()) >= events, timeout=180,
                         what="every event in the staging table")
        assert first.proc.poll() is None, first.output()
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
        assert await total_committed(broker, group, topic, partitions) == 0
        assert iceberg_tables.offsets(warehouse, TABLE, group, topic) == {
            p: events // partitions for p in range(partitions)}

        second = kstage(cfg, "--drain")
        assert await second.wait(timeout=240) == 0, second.output()
        assert await total_committed(broker, group, topic, partitions) == events
    rows = staged(warehouse)
    assert sorted(rows) == expected(events, partitions)  # nothing lost
    assert max(rows.values()) == 1  # nothing twice
    for p in range(partitions):
        assert (f"partition {p} resumes at offset {events // partitions}, where the table "
                "holds it") in second.output()


async def test_a_fan_out_replays_to_its_other_sink_while_the_table_drops_what_it_holds(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    """spark + jsonl: after the same SIGKILL the worker cannot resume at the table's
    offset (the JSONL file needs the replay), so it reads from Kafka's committed offset;
    the JSONL sink gets every event again (at-least-once), the table none twice."""
    events, partitions = 1000, 2
    topic, group = unique("eo-fan"), unique("g-eo-fan")
    warehouse = tmp_path / "warehouse"
    with FakeRegistry() as registry:
        await create_topic(broker, topic, partitions=partitions)
        await produce_events(broker, registry, topic, 0, events, partitions)
        cfg = config(tmp_path, broker, group, topic, registry, warehouse, flush_rows=250,
                     merge_s=None, commit={"mode": "batch", "max_messages": 10**9,
                                           "max_interval_s": 3600})
        data = yaml.safe_load(cfg.read_text())
        (topic_settings,) = data["groups"][0]["topics"]
        topic_settings["sinks"] = [
            {"name": "table", "type": "spark"},
            {"name": "file", "type": "jsonl", "path": str(tmp_path / "out.jsonl")}]
        del topic_settings["sink"]
        cfg.write_text(yaml.safe_dump(data))
        first = kstage(cfg)
        await wait_until(lambda: first.proc.poll() is not None
                         or sum(staged(warehouse).values()) >= events, timeout=180,
                         what="every event in the staging table")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
        assert await total_committed(broker, group, topic, partitions) == 0
        second = kstage(cfg, "--drain")
        assert await second.wait(timeout=240) == 0, second.output()
    rows = staged(warehouse)
    assert sorted(rows) == expected(events, partitions) and max(rows.values()) == 1
    lines = Counter((r["_partition"], r["_offset"]) for r in
                    map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines()))
    assert sorted(lines) == expected(events, partitions)
    assert min(lines.values()) == 2  # the file got its replay: written before and after
    assert "resumes at offset" not in second.output()


async def test_repeated_sigkill_while_appending_leaves_every_event_once(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    events, partitions, kills = 6000, 2, 3
    topic, group = unique("eo-kill"), unique("g-eo-kill")
    warehouse = tmp_path / "warehouse"
    with FakeRegistry() as registry:
        await create_topic(broker, topic, partitions=partitions)
        await produce_events(broker, registry, topic, 0, events, partitions)
        # The merge runs once, after the last --drain (its interval is an hour).
        cfg = config(tmp_path, broker, group, topic, registry, warehouse, flush_rows=200,
                     merge_s=3600, commit={"mode": "batch", "max_messages": 300})
        for round_ in range(kills):
            proc = kstage(cfg)
            floor = sum(staged(warehouse).values())
            # Killed while it appends: once its first append of this round is in.
            await wait_until(lambda p=proc, f=floor: p.proc.poll() is not None
                             or sum(staged(warehouse).values()) > f, timeout=180,
                             what=f"an append in round {round_}")
            await asyncio.sleep(0.3 * round_)  # somewhere else in the append cycle
            assert proc.proc.poll() is None, proc.output()
            jvms = children(proc.proc.pid)
            proc.proc.send_signal(signal.SIGKILL)
            proc.proc.wait()
            await wait_until(lambda j=jvms: not any(alive(pid) for pid in j), timeout=60,
                             what="the killed process's Spark JVM to exit")
        assert sum(staged(warehouse).values()) < events, "killed too late: add events"
        last = kstage(cfg, "--drain")
        assert await last.wait(timeout=240) == 0, last.output()
        assert await total_committed(broker, group, topic, partitions) == events
    rows = staged(warehouse)
    assert sorted(rows) == expected(events, partitions)
    assert max(rows.values()) == 1, [k for k, n in rows.items() if n > 1][:10]
    final = iceberg_tables.coordinates(warehouse, FINAL)
    assert sorted(final) == expected(events, partitions) and max(final.values()) == 1


async def test_two_processes_in_one_group_append_to_one_table_exactly_once(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    events, partitions = 6000, 4
    topic, group = unique("eo-two"), unique("g-eo-two")
    warehouse = tmp_path / "warehouse"
    with FakeRegistry() as registry:
        await create_topic(broker, topic, partitions=partitions)
        cfg = config(tmp_path, broker, group, topic, registry, warehouse,
                     flush_rows=300, merge_s=None)
        a, b = kstage(cfg), kstage(cfg)
        try:
            # Both members hold partitions before any event exists: both write.
            await wait_until(lambda: split_between(a, b, partitions), timeout=90,
                             what="the partitions to be split between both processes")
            await a.wait_for_log("registered", timeout=90)
            await b.wait_for_log("registered", timeout=90)
            await produce_events(broker, registry, topic, 0, events, partitions)
            deadline = time.monotonic() + 180
            while await total_committed(broker, group, topic, partitions) < events:
                assert time.monotonic() < deadline, a.output() + b.output()
                await asyncio.sleep(0.5)
            for proc in (a, b):
                proc.signal(signal.SIGTERM)
            assert await a.wait(timeout=90) == 0, a.output()
            assert await b.wait(timeout=90) == 0, b.output()
        finally:
            a.close()
            b.close()
    rows = staged(warehouse)
    assert sorted(rows) == expected(events, partitions)
    assert max(rows.values()) == 1
    # both processes appended (a fold of the small files commits as no writer)
    writers = {s.get("kstage.writer-id") for s in iceberg_tables.summaries(warehouse, TABLE)}
    assert len(writers - {None}) == 2, writers
    logs = a.output() + b.output()
    assert "sink write failed" not in logs  # concurrent commits were retried by Iceberg
