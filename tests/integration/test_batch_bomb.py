"""A decompression bomb in a compressed record batch, on the real broker (issue 33).

A batch of 512 JSON values of 512 KiB of blanks each (256 MiB inflated, a few hundred
KB or less compressed), between good messages of its partition and beside a second
partition, read by ``kstage run`` with ``kafka.max_batch_inflated_bytes`` of
16 MiB: every offset of the bomb is dead-lettered once, naming its coordinates, the
codec, the cap and the setting; the good messages land; the offsets are committed past
it; and the process's peak RSS (the kernel's high-water mark, ``VmHWM``, read once
every offset is committed) stays under the ceiling
that docs/security.md documents. Without the bound aiokafka inflates the whole batch
(over 500 MB of RSS). Both of aiokafka's record readers are run: its C extension and its
pure-Python one (``AIOKAFKA_NO_EXTENSIONS``).
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer

from tests.kafkautil import committed, create_topic, produce, read_jsonl, unique, write_config

pytestmark = pytest.mark.kafka

BOMB_RECORDS = 512
BOMB_VALUE = json.dumps({"pad": " " * ((512 << 10) - 11)}).encode()  # 512 KiB, valid JSON
CAP = 16 << 20
# The ceiling: a kstage process of this config takes ~110 MB before a bomb; the bound
# adds at most twice the cap (the bounded buffer and aiokafka's copy of it).
CEILING_MB = 200


async def _produce_bomb(broker: str, topic: str, codec: str) -> int:
    """One compressed batch of BOMB_RECORDS values, to partition 0; its base offset.
    The batch is built and closed before it is sent, so it goes at once and whole (values
    sent one by one stay in one batch only under a long linger, which the producer then
    waited out: 60 s of each test)."""
    producer = AIOKafkaProducer(bootstrap_servers=broker, compression_type=codec,
                                max_request_size=1 << 30, max_batch_size=1 << 30)
    await producer.start()
    try:
        batch = producer.create_batch()
        for _ in range(BOMB_RECORDS):
            assert batch.append(key=None, value=BOMB_VALUE, timestamp=None) is not None
        batch.close()
        sent = await (await producer.send_batch(batch, topic, partition=0))
    finally:
        await producer.stop()
    assert batch.record_count() == BOMB_RECORDS, batch.record_count()
    return int(sent.offset)


@pytest.mark.parametrize(("codec", "records"), [
    ("gzip", "c"), ("zstd", "c"), ("lz4", "c"), ("gzip", "python"), ("zstd", "python")])
async def test_a_compressed_batch_bomb_is_dead_lettered_within_the_memory_ceiling(
        tansu_broker: str, tmp_path: Path, kstage: Any, codec: str, records: str,
        record_property: Callable[[str, object], None]) -> None:
    broker = tansu_broker  # Apache Kafka refuses a batch over its message.max.bytes (1 MB)
    topic, group = unique(f"bomb-{codec}"), unique("g-bomb")
    await create_topic(broker, topic, partitions=2)
    await produce(broker, topic, [{"i": i} for i in range(3)], partition_of=lambda i: 0,
                  one_per_batch=True)
    await produce(broker, topic, [{"i": i} for i in range(100, 103)],
                  partition_of=lambda i: 1, one_per_batch=True)
    assert await _produce_bomb(broker, topic, codec) == 3
    await produce(broker, topic, [{"i": i} for i in range(3, 6)], partition_of=lambda i: 0,
                  one_per_batch=True)
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [
        {"topic": topic, "processor": "json_rows", "max_message_bytes": 1 << 20,
         "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}])
    data = yaml.safe_load(cfg.read_text())
    data["kafka"]["max_batch_inflated_bytes"] = CAP
    cfg.write_text(yaml.safe_dump(data))
    env = {"AIOKAFKA_NO_EXTENSIONS": "1"} if records == "python" else {}
    proc = kstage(cfg, env=env)
    expected = {0: 6 + BOMB_RECORDS, 1: 3}
    for _ in range(900):  # the signal: every offset committed (bounded: 90 s)
        if await committed(broker, group, topic, 2) == expected:
            break
        assert proc.proc.poll() is None, proc.output()[-3000:]
        await asyncio.sleep(0.1)
    peak_kb = proc.peak_rss_kb()  # the kernel's high-water mark, before the exit
    record_property("peak_rss_mb", peak_kb >> 10)
    proc.signal(signal.SIGTERM)
    assert await proc.wait() == 0, proc.output()[-3000:]
    assert peak_kb >> 10 < CEILING_MB, f"peak RSS {peak_kb >> 10} MB: {proc.output()[-3000:]}"
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert sorted((r["_partition"], r["_offset"]) for r in rows) == [
        *[(0, o) for o in (0, 1, 2)], *[(0, 3 + BOMB_RECORDS + k) for k in range(3)],
        *[(1, o) for o in (0, 1, 2)]], proc.output()[-3000:]
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [(d["topic"], d["partition"], d["offset"]) for d in dead] == [
        (topic, 0, 3 + k) for k in range(BOMB_RECORDS)], dead[:2]
    last = 3 + BOMB_RECORDS - 1
    assert all(re.fullmatch(
        rf"record batch of {topic}\[0\] offsets 3\.\.{last} \({codec}, \d+ bytes compressed\) "
        rf"inflates to more than {CAP} bytes \(kafka\.max_batch_inflated_bytes\): not decoded",
        d["error"]) for d in dead), dead[0]["error"]
    assert await committed(broker, group, topic, 2) == expected


async def test_compressed_batches_within_the_cap_land_whole(
        tansu_broker: str, tmp_path: Path, kstage: Any) -> None:
    """The bounded decoders read what aiokafka's did: a batch of each codec (snappy
    xerial-framed, as aiokafka writes it) lands whole, none is poison."""
    broker = tansu_broker
    topic, group = unique("compressed"), unique("g-compressed")
    await create_topic(broker, topic)
    codecs = ["gzip", "snappy", "lz4", "zstd"]
    for n, codec in enumerate(codecs):
        producer = AIOKafkaProducer(bootstrap_servers=broker, compression_type=codec)
        await producer.start()
        try:
            batch = producer.create_batch()
            for i in range(50):
                batch.append(key=None, timestamp=None,
                             value=json.dumps({"i": n * 50 + i, "c": codec}).encode())
            batch.close()
            await (await producer.send_batch(batch, topic, partition=0))
        finally:
            await producer.stop()
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [
        {"topic": topic, "processor": "json_rows",
         "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}])
    proc = kstage(cfg, "--drain")
    assert await proc.wait(timeout=120) == 0, proc.output()[-3000:]
    assert sorted(r["i"] for r in read_jsonl(tmp_path / "out.jsonl")) == list(range(200))
    assert read_jsonl(tmp_path / "dead.jsonl") == []
