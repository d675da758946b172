"""Registry Avro Gobblin events decoded and mapped as columns (issue 35, point 4) on the
real parts: the embedded broker, a registry over HTTP, ``kstage run`` with pyiceberg
appends into an Iceberg staging table.

Among the events, a truncated body and an event without its required cluster: their
batches go one message at a time, each of the two is dead-lettered with its coordinates,
every other event lands once with the rows the processor's own transform makes of it,
and the run's counters say how many went as columns. Then the process is SIGKILLed after
its table commits, before Kafka's; the next run resumes where the table holds each
partition: every event still once.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from aiokafka import AIOKafkaProducer
from fastavro import parse_schema

from actors.codecs.avro import encode
from actors.worker.columns import MIN_BATCH
from processors.base import SCHEMA_DIR, Message
from processors.gobblin import GobblinCompactionProcessor
from service.broker import free_port
from tests.fake_registry import FakeRegistry
from tests.gobblin_events import event
from tests.kafkautil import (
    KstageProcess,
    committed,
    create_topic,
    read_jsonl,
    status_port,
    unique,
    write_config,
)
from tests.lake import HOURLY_KAFKA_COMMITS, IcebergReader, spark_section, wait_landed

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS, EVENTS = 2, 400
assert EVENTS // PARTITIONS >= MIN_BATCH
TRUNCATED, CLUSTERLESS = 14, 24  # events (partition i % 2: both 0, offset i // 2)


def values(text: str, sid: int) -> list[bytes]:
    schema = parse_schema(json.loads(text))
    out = []
    for i in range(EVENTS):
        value = event(i)
        if i == CLUSTERLESS:
            del value["metadata"]["clusterIdentifier"]
        raw = encode(schema, sid, value)
        out.append(raw[:-4] if i == TRUNCATED else raw)
    return out


def expected_rows(topic: str) -> dict[tuple[int, int], dict[str, Any]]:
    """The rows the processor's own transform makes, by (partition, offset)."""
    processor = GobblinCompactionProcessor({})
    rows = {}
    for i in range(EVENTS):
        if i in (TRUNCATED, CLUSTERLESS):
            continue
        message = Message(topic, i % PARTITIONS, i // PARTITIONS, 0, None, event(i), (),
                          None)
        for row in processor.transform(message):
            rows[(i % PARTITIONS, i // PARTITIONS)] = {
                k: v for k, v in row.items() if not k.startswith("_")}
    return rows


@pytest.mark.timeout(300)
async def test_avro_batches_land_as_columns_poison_named_and_a_kill_resumes_once(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    topic, group, table = unique("columns"), unique("g-columns"), "stg_columns"
    text = (SCHEMA_DIR / GobblinCompactionProcessor.reader_schema).read_text()  # type: ignore[operator]
    catalog = {"uri": f"jdbc:sqlite:{tmp_path / 'lake' / 'catalog.db'}",
               "warehouse": str(tmp_path / "lake" / "wh")}
    spark = spark_section(catalog, appends="pyiceberg", flush_max_rows=60)
    reader = IcebergReader(spark)
    with FakeRegistry() as registry:
        sid = registry.register(f"{topic}-value", text)
        await create_topic(broker, topic, partitions=PARTITIONS)
        # each partition's events in one record batch: each reaches the worker whole, a
        # batch above MIN_BATCH
        producer = AIOKafkaProducer(bootstrap_servers=broker, max_batch_size=1 << 20,
                                    linger_ms=3000)  # all sent within it
        await producer.start()
        try:
            for i, value in enumerate(values(text, sid)):
                await producer.send(topic, value, partition=i % PARTITIONS)
            await producer.flush()
        finally:
            await producer.stop()
        cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
            "topic": topic, "processor": "gobblin_compaction", "format": "avro",
            "sink": {"type": "spark", "table": table}}],
            commit=HOURLY_KAFKA_COMMITS, service={"http_port": free_port()})
        data = yaml.safe_load(cfg.read_text())
        data["schema_registry"] = {"url": registry.url}
        data["spark"] = spark
        cfg.write_text(yaml.safe_dump(data))

        first = kstage(cfg)
        base = f"http://127.0.0.1:{await status_port(first)}"
        await wait_landed(first, reader, table, EVENTS - 2)
        async with httpx.AsyncClient(timeout=10) as http:
            metrics = (await http.get(f"{base}/metrics")).text
        [as_columns] = [float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                        if line.startswith("kstage_messages_as_columns_total{")
                        and f'topic="{topic}"' in line]
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
        assert sum(max(v, 0) for v in (await committed(
            broker, group, topic, PARTITIONS)).values()) == 0  # only the table holds them
        second = kstage(cfg, "--drain")
        assert await second.wait(timeout=180) == 0, second.output()

    assert "decoded and mapped as columns" in first.output()
    landed = reader.rows(table)
    coordinates = sorted((r["_kafka_partition"], r["_offset"]) for r in landed)
    assert coordinates == sorted(expected_rows(topic))  # each once, the two poison absent
    want = expected_rows(topic)
    assert all({k: v for k, v in r.items() if not k.startswith("_")} == want[
        (r["_kafka_partition"], r["_offset"])] for r in landed)
    letters = read_jsonl(tmp_path / "dead.jsonl")
    assert sorted({(d["partition"], d["offset"]) for d in letters}) == [
        (TRUNCATED % 2, TRUNCATED // 2), (CLUSTERLESS % 2, CLUSTERLESS // 2)]
    assert all(d["topic"] == topic for d in letters)
    assert "undecodable Avro body" in " ".join(d["error"] for d in letters)
    assert "clusterIdentifier" in " ".join(d["error"] for d in letters)
    # partition 1 went as columns; partition 0 as well, but for its batches with poison
    assert EVENTS // 2 <= as_columns <= EVENTS - 2, metrics
    assert await committed(broker, group, topic, PARTITIONS) == {
        p: EVENTS // PARTITIONS for p in range(PARTITIONS)}
