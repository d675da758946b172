"""A topic deleted and re-created under its staging table (``spark.appends: pyiceberg``,
no JVM), on both brokers (each deletes topics): the table holds partition 0 up to 40, the
new topic's partition 0 ends at 11.

* ``kstage run`` refuses partition 0 (its table's offset is above the high-water mark):
  nothing of it is consumed, dropped or committed, an ERROR line names the table, topic,
  partition, offset and high-water mark, ``/readyz`` answers 503 with it and ``/status``
  shows the partition ``refused``; partition 1 (no offset in the table) flows;
* ``kstage tables reset-offsets`` prints what it would change and changes nothing; with
  ``--yes`` it records the reset (a snapshot of no data);
* the next run lands every new message of partition 0 (the 40 old rows stay), and the
  table holds partition 0 up to 11.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient

from actors.sinks.spark.pyiceberg_tables import table_offsets
from tests.kafkautil import (
    CHILD_PATH,
    KstageProcess,
    committed,
    create_topic,
    status_port,
    unique,
    wait_readyz,
    wait_until,
)
from tests.lake import IcebergReader, lake_config, produce_events, spark_section

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2
TOKEN = "recreated-topic-token"  # noqa: S105 - a test's control token


async def delete_topic(broker: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker)
    await admin.start()
    try:
        await admin.delete_topics([topic])
        # Gone from the metadata before it is created again (bounded).
        await wait_until_async(lambda: _absent(admin, topic), 30, f"{topic} deleted")
    finally:
        await admin.close()


async def _absent(admin: AIOKafkaAdminClient, topic: str) -> bool:
    return topic not in await admin.list_topics()


async def wait_until_async(predicate: Callable[[], Awaitable[bool]], timeout: float,
                           what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


def reset_offsets(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kstage tables reset-offsets`` in its own process (this checkout's code)."""
    return subprocess.run(
        [sys.executable, "-m", "service", "tables", "reset-offsets", "-c", str(cfg), *args],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": CHILD_PATH},
        cwd=cfg.parent, timeout=120, check=False)


def per_partition(reader: IcebergReader, table: str, topic: str) -> Counter[int]:
    return Counter(p for t, p, _ in reader.coordinates(table).elements() if t == topic)


@pytest.mark.timeout(600)
async def test_a_recreated_topic_is_refused_until_its_offsets_are_reset(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    table = "stg_recreated"
    topic, group = unique("recreated"), unique("g-recreated")
    spark = spark_section({"uri": f"jdbc:sqlite:{tmp_path / 'lake' / 'catalog.db'}",
                           "warehouse": str(tmp_path / "lake" / "wh")}, appends="pyiceberg")
    cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark)
    data = yaml.safe_load(cfg.read_text())
    data["service"]["control_token"] = TOKEN  # GET /status
    cfg.write_text(yaml.safe_dump(data))
    reader = IcebergReader(spark)

    # Before: 40 events in partition 0, all landed (the table holds partition 0 up to 40).
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_events(broker, topic, 0, 40, 1)  # all to partition 0 (i % 1)
    first = kstage(cfg, "--drain")
    assert await first.wait(timeout=180) == 0, first.output()
    assert per_partition(reader, table, topic) == {0: 40}

    # The topic is deleted and re-created: partition 0 ends at 11, partition 1 at 2.
    await delete_topic(broker, topic)
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_events(broker, topic, 1000, 9, 1)  # 9 to partition 0 ...
    await produce_events(broker, topic, 2000, 4, PARTITIONS)  # ... and 2 to each
    before = await committed(broker, group, topic, PARTITIONS)

    second = kstage(cfg)
    base = f"http://127.0.0.1:{await status_port(second, timeout=60)}"
    ready = await wait_readyz(base, second, 503, "refused", timeout=120)
    [reason] = [r for r in ready["reasons"] if "refused" in r]
    assert (f"partition 0 of topic {topic!r} refused: spark table {table!r} holds it up to "
            "offset 40, above the partition's high-water mark 11 (log start 0)") in reason
    assert f"kstage tables reset-offsets --group {group} --topic {topic} --partition 0" \
        in reason
    await second.wait_for_log(f"ERROR   actors.worker.sink_offsets: {group}/{topic}#0: "
                              f"partition 0 of topic {topic!r} refused", timeout=10)
    # Partition 1 flows: its 2 messages land and are committed.
    await wait_until(lambda: per_partition(reader, table, topic)[1] == 2, timeout=120,
                     what="partition 1's messages in the table")
    await wait_until_async(lambda: _committed_is(broker, group, topic, 1, 2), 60,
                           "partition 1 committed")
    async with httpx.AsyncClient(timeout=5) as client:
        status = (await client.get(f"{base}/status", headers={
            "Authorization": f"Bearer {TOKEN}"})).json()
    assert "groups" in status, status
    [entry] = [t for g in status["groups"] for t in g["topics"] if t["topic"] == topic]
    parts = {p["partition"]: p for p in entry["partitions"]}
    assert parts[0]["state"] == "refused" and parts[0]["refused"] == reason.split(": ", 1)[1]
    assert parts[1]["state"] == "running" and reason.split(": ", 1)[1] in entry["error"]
    # Nothing of partition 0 consumed, dropped or committed.
    assert (await committed(broker, group, topic, PARTITIONS))[0] == before[0]
    assert per_partition(reader, table, topic)[0] == 40
    second.signal(signal.SIGTERM)
    assert await second.wait(timeout=60) == 0, second.output()

    # The way out: a dry run changes nothing; --yes records the reset.
    snapshots = reader.snapshots(table)
    dry = reset_offsets(cfg, "--group", group, "--topic", topic)
    assert dry.returncode == 0, dry.stderr
    assert (f"kstage.kstage.{table}: group {group} {topic}[0]: 40 -> 0 (log start 0, "
            "high-water mark 11)") in dry.stdout
    assert (f"kstage.kstage.{table}: group {group} {topic}[1]: 2 kept (log start 0, "
            "high-water mark 2): within the log") in dry.stdout
    assert "dry run: nothing changed" in dry.stdout and reader.snapshots(table) == snapshots
    done = reset_offsets(cfg, "--group", group, "--topic", topic, "--yes")
    assert done.returncode == 0, done.stderr
    assert f"kstage.kstage.{table}: reset recorded in snapshot" in done.stdout
    assert reader.snapshots(table) == snapshots + 1

    # After the restart every new message lands.
    third = kstage(cfg, "--drain")
    assert await third.wait(timeout=180) == 0, third.output()
    assert per_partition(reader, table, topic) == {0: 40 + 11, 1: 2}
    assert (await committed(broker, group, topic, PARTITIONS)) == {0: 11, 1: 2}
    held = table_offsets(reader._table(table))
    assert {s: o for s, o in held.items() if s[1] == topic} == {
        (group, topic, 0): 11, (group, topic, 1): 2}


async def _committed_is(broker: str, group: str, topic: str, partition: int,
                        offset: int) -> bool:
    return (await committed(broker, group, topic, PARTITIONS))[partition] == offset
