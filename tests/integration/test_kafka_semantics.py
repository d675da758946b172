"""What only a real Kafka broker has, on the session's Apache Kafka node: transactions
read with ``isolation.level: read_committed`` (the embedded broker returns aborted records
to read_committed consumers), and static membership (``group.instance.id``): a member
restarted within ``session.timeout.ms`` takes its partitions back without a rebalance."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer

from tests.integration.test_lag_definition import lag_json
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

COMMITTED, ABORTED = [*range(0, 5), *range(5, 10)], list(range(100, 105))


def transactions(bootstrap: str, topic: str) -> None:
    """Three transactions on partition 0 (confluent-kafka): 0-4 committed, 100-104
    aborted (sent to the broker first, so they are in the log), 5-9 committed."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx")})
    producer.init_transactions(30)
    for values, commit in ((range(0, 5), True), (ABORTED, False), (range(5, 10), True)):
        producer.begin_transaction()
        for i in values:
            producer.produce(topic, json.dumps({"i": i}).encode(), partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def _config(tmp_path: Path, name: str, bootstrap: str, topic: str,
            consumer_config: dict[str, Any], **group: Any) -> Path:
    cfg = write_config(tmp_path / f"{name}.yml", bootstrap, unique(f"g-{name}"),
                       [{"topic": topic, "processor": "json_rows",
                         "sink": {"type": "jsonl", "path": str(tmp_path / f"{name}.jsonl")}}],
                       **group)
    data = yaml.safe_load(cfg.read_text())
    data["kafka"]["consumer_config"] = consumer_config
    cfg.write_text(yaml.safe_dump(data))
    return cfg


async def test_read_committed_never_lands_a_record_of_an_aborted_transaction(
        apache_kafka_broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    broker = apache_kafka_broker
    topic = unique("txn-rc")
    await create_topic(broker, topic)
    await asyncio.to_thread(transactions, broker, topic)
    committed_cfg = _config(tmp_path, "rc", broker, topic,
                            {"isolation.level": "read_committed"})
    uncommitted_cfg = _config(tmp_path, "ru", broker, topic, {})
    for cfg in (committed_cfg, uncommitted_cfg):
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=90) == 0, proc.output()
    assert sorted(r["i"] for r in read_jsonl(tmp_path / "rc.jsonl")) == COMMITTED
    # The test can fail: read_uncommitted (the default) does land the aborted records.
    assert set(ABORTED) <= {r["i"] for r in read_jsonl(tmp_path / "ru.jsonl")}
    (row,) = await lag_json(committed_cfg)
    # 15 records and 3 markers; the position past the last marker is committed: lag 0.
    assert (row["committed"], row["high_water"], row["lag"]) == (18, 18, 0)


async def test_a_static_member_restarted_within_the_session_takes_its_partitions_back(
        apache_kafka_broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    broker = apache_kafka_broker
    topic = unique("static")
    await create_topic(broker, topic, partitions=2)
    group = unique("g-static")
    session = {"session_timeout_ms": 30000, "heartbeat_interval_ms": 1000}

    def config(name: str) -> Path:
        cfg = write_config(tmp_path / f"{name}.yml", broker, group,
                           [{"topic": topic, "processor": "json_rows",
                             "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}],
                           **session)
        data = yaml.safe_load(cfg.read_text())
        data["kafka"]["consumer_config"] = {"group.instance.id": f"kstage-{name}"}
        cfg.write_text(yaml.safe_dump(data))
        return cfg

    a = kstage(config("a"))
    await a.wait_for_log("assigned partitions [0, 1]", timeout=60)
    b = kstage(config("b"))
    await b.wait_for_log("assigned partitions [", timeout=60)
    await a.wait_for_log("assigned partitions [", count=2, timeout=60)
    a_part = a.output().rsplit("assigned partitions [", 1)[1][0]
    await produce(broker, topic, ({"i": i} for i in range(20)), partition_of=lambda i: i % 2)
    await wait_until(lambda: len(read_jsonl(tmp_path / "out.jsonl")) == 20, 30, "20 rows")

    b_before = len(b.output())
    a.signal(signal.SIGTERM)  # a static member leaves no group: no rebalance
    assert await a.wait(60) == 0, a.output()
    await produce(broker, topic, ({"i": i} for i in range(20, 40)),
                  partition_of=lambda i: i % 2)
    again = kstage(config("a"))  # within session.timeout.ms (30 s)
    await again.wait_for_log(f"assigned partitions [{a_part}]", timeout=30)
    await wait_until(lambda: {r["i"] for r in read_jsonl(tmp_path / "out.jsonl")}
                     >= set(range(40)), 30, "every row, A's partition after its return")
    # B saw no rebalance: no partition of it was revoked, none assigned again.
    since = b.output()[b_before:]
    assert "partitions [" not in since and "rebalancing" not in since, b.output()
    for proc in (again, b):
        proc.signal(signal.SIGTERM)
    for proc in (again, b):
        assert await proc.wait(60) == 0, proc.output()
