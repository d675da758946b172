"""``route:`` into Iceberg staging tables (``spark.appends: pyiceberg``, no JVM), on the
real broker (both):

* the issue's acceptance test: one of a topic's three tables refuses the rows routed to
  it (it exists with a column type that conflicts with the rows'): each of its rows is
  dead-lettered naming the table, while the other two tables keep committing every row
  of theirs once, and every offset is committed to Kafka;
* SIGKILL once every row is in its table and before any Kafka commit, then ``--drain``:
  every routed row in its table exactly once (each table, made on first use in the new
  run, drops the rows it holds already).
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer

from actors.sinks.spark import iceberg, pyiceberg_tables
from actors.sinks.spark.pyiceberg_appends import Lake
from processors.base import Column, table_columns
from tests.gobblin_events import PROCESSOR, compaction
from tests.kafkautil import (
    KstageProcess,
    committed,
    create_topic,
    read_jsonl,
    unique,
    wait_until,
    write_config,
)
from tests.lake import IcebergReader, spark_section, spark_settings

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2
KINDS = ("a", "b", "c")


async def produce_routed(broker: str, topic: str, count: int) -> None:
    """Compaction event ``i`` to partition ``i % 2``, header ``kind`` ``KINDS[i % 3]``."""
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        for i in range(count):
            await producer.send(topic, json.dumps(compaction(i)).encode(),
                                partition=i % PARTITIONS,
                                headers=[("kind", KINDS[i % 3].encode())])
        await producer.flush()
    finally:
        await producer.stop()


def expected(topic: str, count: int, kind: str) -> list[tuple[str, int, int]]:
    return sorted((topic, i % PARTITIONS, i // PARTITIONS) for i in range(count)
                  if KINDS[i % 3] == kind)


def config(tmp_path: Path, broker: str, group: str, topic: str, tables: dict[str, str],
           spark: dict[str, Any], **group_keys: Any) -> Path:
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
        "topic": topic, "processor": "gobblin_compaction",
        "route": {"by": "header.kind", "tables": tables},
        "sink": {"type": "spark", "table": "{table}"}}], **group_keys)
    data = yaml.safe_load(cfg.read_text())
    data["spark"] = spark
    cfg.write_text(yaml.safe_dump(data))
    return cfg


def lake(tmp_path: Path) -> dict[str, Any]:
    return spark_section({"uri": f"jdbc:sqlite:{tmp_path / 'catalog.db'}",
                          "warehouse": str(tmp_path / "wh")}, appends="pyiceberg",
                         flush_max_rows=20)


@pytest.mark.timeout(400)
async def test_a_table_that_refuses_rows_while_the_others_keep_committing(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    events, topic, group = 120, unique("route-ice"), unique("g-route-ice")
    spark = lake(tmp_path)
    # stg_rt_bad exists already, record_count a string: the rows' bigint does not fit.
    conflicting = tuple(Column(c.name, "string", c.nullable, c.doc)
                        if c.name == "record_count" else c
                        for c in table_columns(PROCESSOR))
    settings = spark_settings(spark)
    owner = Lake(settings)
    try:
        await owner.call(lambda: pyiceberg_tables.create_staging(
            owner.catalog(), settings, "stg_rt_bad", conflicting))
    finally:
        owner.stop()
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_routed(broker, topic, events)
    proc = kstage(config(tmp_path, broker, group, topic,
                         {"a": "stg_rt_a", "b": "stg_rt_bad", "c": "stg_rt_c"}, spark,
                         max_poll_records=10), "--drain")
    assert await proc.wait(timeout=300) == 0, proc.output()

    half = events // PARTITIONS
    assert await committed(broker, group, topic, PARTITIONS) == {0: half, 1: half}
    reader = IcebergReader(spark)
    for kind, table in (("a", "stg_rt_a"), ("c", "stg_rt_c")):
        coordinates = reader.coordinates(table)
        assert sorted(coordinates) == expected(topic, events, kind), table
        assert max(coordinates.values()) == 1, coordinates.most_common(3)
        assert len(reader.summaries(table)) >= 2  # committed as it went, not once
        assert all("_kstage_route" not in row for row in reader.rows(table))
    assert reader.rows("stg_rt_bad") == []
    letters = read_jsonl(tmp_path / "dead.jsonl")
    assert sorted((d["topic"], d["partition"], d["offset"]) for d in letters) == expected(
        topic, events, "b")
    assert all("table stg_rt_bad refuses the rows routed to it" in d["error"]
               and "do not fit" in d["error"] for d in letters), letters[0]
    assert proc.output().count("table stg_rt_bad refuses the topic's rows") == 1
    # Each dead letter's row holds its table: `kstage dlq replay` writes it back there.
    assert {json.loads(base64.b64decode(d["value"]))["_kstage_route"]
            for d in letters} == {"stg_rt_bad"}


@pytest.mark.timeout(500)
async def test_sigkill_then_restart_leaves_every_routed_row_once(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    events, topic, group = 300, unique("route-kill"), unique("g-route-kill")
    spark = lake(tmp_path)
    tables = {"a": "stg_rk_a", "b": "stg_rk_b", "c": "stg_rk_c"}
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_routed(broker, topic, events)
    # Kafka commits only every hour: every table commit is ahead of Kafka's.
    cfg = config(tmp_path, broker, group, topic, tables, spark, max_poll_records=25,
                 commit={"mode": "batch", "max_messages": 10**9, "max_interval_s": 3600})
    reader = IcebergReader(spark)
    first = kstage(cfg)

    def landed() -> int:
        return sum(sum(reader.coordinates(t).values()) for t in tables.values())

    await wait_until(lambda: first.proc.poll() is not None or landed() >= events,
                     timeout=240, what="every routed row in its table")
    assert first.proc.poll() is None, first.output()
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    assert sum(max(v, 0) for v in (await committed(
        broker, group, topic, PARTITIONS)).values()) == 0

    second = kstage(cfg, "--drain")
    assert await second.wait(timeout=240) == 0, second.output()
    half = events // PARTITIONS
    assert await committed(broker, group, topic, PARTITIONS) == {0: half, 1: half}
    for kind, table in tables.items():
        coordinates = reader.coordinates(table)
        assert sorted(coordinates) == expected(topic, events, kind), table
        assert max(coordinates.values()) == 1, (table, coordinates.most_common(3))


@pytest.mark.timeout(500)
async def test_a_rebalance_mid_stream_leaves_every_routed_row_once(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    """A second process joins while the first writes the routed tables: the first's
    partitions are revoked mid-stream (its tables told, its batches of them dropped),
    the second's tables made on first use resume where each holds the partitions: every
    routed row once, every offset committed."""
    from tests.kafkautil import split_between
    from tests.lake import wait_committed

    partitions = 4
    topic, group = unique("route-two"), unique("g-route-two")
    spark = lake(tmp_path)
    tables = {"a": "stg_r2_a", "b": "stg_r2_b", "c": "stg_r2_c"}
    await create_topic(broker, topic, partitions=partitions)
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    events = 0

    async def produce(count: int) -> None:
        nonlocal events
        for i in range(events, events + count):
            await producer.send(topic, json.dumps(compaction(i)).encode(),
                                partition=i % partitions,
                                headers=[("kind", KINDS[i % 3].encode())])
        await producer.flush()
        events += count

    try:
        await produce(300)
        cfg = config(tmp_path, broker, group, topic, tables, spark, max_poll_records=20)
        reader = IcebergReader(spark)
        first = kstage(cfg)
        await wait_until(lambda: first.proc.poll() is not None or sum(
            sum(reader.coordinates(t).values()) for t in tables.values()) > 0,
            timeout=180, what="the first routed rows")
        second = kstage(cfg)
        deadline = time.monotonic() + 120
        while (not split_between(first, second, partitions)  # rows flow in while the
               and time.monotonic() < deadline):                # second joins (paced)
            await produce(4)
            await asyncio.sleep(0.1)
        assert split_between(first, second, partitions), second.output()
        await produce(300)  # both processes write
    finally:
        await producer.stop()
    await first.wait_for_log("revoked", timeout=120)
    await wait_committed(broker, group, topic, partitions, events, [first, second])
    for proc in (first, second):
        proc.signal(signal.SIGTERM)
    assert await first.wait(timeout=90) == 0, first.output()
    assert await second.wait(timeout=90) == 0, second.output()
    for kind, table in tables.items():
        coordinates = reader.coordinates(table)
        assert sorted(coordinates) == sorted(
            (topic, i % partitions, i // partitions) for i in range(events)
            if KINDS[i % 3] == kind), table
        assert max(coordinates.values()) == 1, (table, coordinates.most_common(3))
    # Both processes wrote the routed tables.
    writers = {s.get(iceberg.WRITER_ID) for t in tables.values() for s in reader.summaries(t)}
    assert len(writers - {None}) == 2, writers
