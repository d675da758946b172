"""A topic created after kstage started (Apache Kafka with ``auto.create.topics.enable``
off, as production clusters often run): kstage says in ``/readyz`` what it waits for and
consumes the topic within seconds of its creation, not after ``metadata.max.age.ms``
(5 min: aiokafka asks for metadata no sooner on its own). The same happens to a topic
created a moment before kstage starts, when the broker that answers has not learnt of it
yet (seen on the 3-node cluster)."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from service.broker import free_port
from tests.apache_kafka import KafkaCluster
from tests.kafkautil import (
    KstageProcess,
    create_topic,
    produce,
    read_jsonl,
    unique,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.apache_kafka]


async def test_a_topic_created_after_the_start_is_consumed_within_seconds(
        tmp_path: Path, kstage: type[KstageProcess]) -> None:
    topic, group = unique("late"), unique("g-late")
    with KafkaCluster(tmp_path / "kafka", 1,
                      properties={"auto.create.topics.enable": "false"}) as cluster:
        port = free_port()
        out = tmp_path / "out.jsonl"
        cfg = write_config(tmp_path / "kstage.yml", cluster.bootstrap, group,
                           [{"topic": topic, "processor": "json_rows",
                             "sink": {"type": "jsonl", "path": str(out)}}],
                           service={"http_port": port, "http_host": "127.0.0.1"})
        proc = kstage(cfg)
        await proc.wait_for_log("assigned partitions []", timeout=60)
        await proc.wait_for_log("is not in the cluster's metadata", timeout=10)
        async with httpx.AsyncClient(timeout=5) as client:
            answer = await client.get(f"http://127.0.0.1:{port}/readyz")
            assert answer.status_code == 503
            assert f"topic '{topic}' is not in the cluster's metadata" in \
                answer.json()["reasons"][0], answer.text

            await create_topic(cluster.bootstrap, topic, partitions=2)
            await produce(cluster.bootstrap, topic, ({"i": i} for i in range(10)),
                          partition_of=lambda i: i % 2)
            await wait_until(lambda: len(read_jsonl(out)) == 10, 30,
                             "the rows of the topic created after the start")
            await proc.wait_for_log("assigned partitions [0, 1]", timeout=10)
            answer = await client.get(f"http://127.0.0.1:{port}/readyz")
            assert answer.status_code == 200, answer.text
        assert sorted(r["i"] for r in read_jsonl(out)) == list(range(10))
        proc.signal(signal.SIGTERM)
        assert await proc.wait(60) == 0, proc.output()
