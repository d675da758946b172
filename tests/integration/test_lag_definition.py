"""One definition of lag (high-water minus the committed position) on the real broker:
after a transaction's commit marker, and after a restart with nothing to read."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from confluent_kafka import Producer

from service.broker import free_port
from tests.integration.test_ops_tools import cli
from tests.integration.test_status import samples
from tests.kafkautil import committed, produce, read_jsonl, unique, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def produce_transaction(bootstrap: str, topic: str, count: int) -> None:
    """``count`` records in one committed transaction (confluent-kafka: aiokafka's
    transactions fail on this broker); a commit marker follows the last record."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, json.dumps({"i": i}).encode(), key=str(i).encode(),
                         partition=0)
    producer.commit_transaction(30)


async def lag_json(cfg: Path) -> list[dict[str, object]]:
    code, out, err = await cli("lag", "-c", str(cfg), "--json", cwd=cfg.parent)
    assert code == 0, err
    rows: list[dict[str, object]] = json.loads(out)
    return rows


async def scrape(url: str, group: str, topic: str, proc, timeout: float = 30
                 ) -> dict[str, float]:
    """kstage_high_water and kstage_lag of partition 0, once both are exposed."""
    plabels = (("group", group), ("partition", "0"), ("topic", topic))
    deadline = time.monotonic() + timeout
    while True:
        assert proc.proc.poll() is None, proc.output()
        assert time.monotonic() < deadline, f"no lag metric within {timeout}s"
        try:
            async with httpx.AsyncClient(timeout=5) as client:
                text = (await client.get(f"{url}/metrics")).text
        except httpx.TransportError:
            await asyncio.sleep(0.1)
            continue
        values = samples(text)
        hw, lag = values.get(("kstage_high_water", plabels)), values.get(("kstage_lag", plabels))
        if hw is not None and lag is not None:
            return {"high_water": hw, "lag": lag}
        await asyncio.sleep(0.1)


async def test_drain_after_a_transaction_commits_the_position(fresh, broker, tmp_path, kstage):
    topic, group = fresh.topic, fresh.group
    await asyncio.to_thread(produce_transaction, broker, topic, 5)
    out = tmp_path / "out.jsonl"
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "json_rows",
                         "sink": {"type": "jsonl", "path": str(out)}}])
    run = kstage(cfg, "--drain")
    assert await run.wait(timeout=90) == 0, run.output()
    assert [r["i"] for r in read_jsonl(out)] == list(range(5))
    (row,) = await lag_json(cfg)
    # high-water = last record + 2 (the commit marker): the position is committed.
    assert (row["committed"], row["high_water"], row["lag"]) == (6, 6, 0), run.output()


async def test_running_service_after_a_transaction_shows_lag_zero(fresh, broker, tmp_path, kstage):
    topic, group = fresh.topic, fresh.group
    await asyncio.to_thread(produce_transaction, broker, topic, 5)
    port = free_port()
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "json_rows",
                         "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}],
                       service={"http_port": port, "http_host": "127.0.0.1",
                                "status_interval_s": 0.2})
    run = kstage(cfg)
    deadline = time.monotonic() + 60
    while (await committed(broker, group, topic, 1))[0] != 6:
        assert time.monotonic() < deadline, f"the position 6 was never committed:\n{run.output()}"
        assert run.proc.poll() is None, run.output()
        await asyncio.sleep(0.2)
    assert await scrape(f"http://127.0.0.1:{port}", group, topic, run) == {
        "high_water": 6, "lag": 0}
    mark = len(run.output())
    await run.wait_for_log(" lag=", count=run.output().count(" lag=") + 1)
    status = re.findall(r"status \S+ .* lag=(\d+)", run.output()[mark:])
    assert status and status[-1] == "0", run.output()[mark:]
    (row,) = await lag_json(cfg)
    assert (row["committed"], row["high_water"], row["lag"]) == (6, 6, 0)
    run.signal(signal.SIGTERM)
    assert await run.wait() == 0, run.output()


async def test_restart_with_nothing_to_read_has_the_lag_of_kstage_lag(
        fresh, broker, tmp_path, kstage):
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, ({"i": i} for i in range(10)))
    # The group finished an earlier run: offset 10 committed. (Committed outside a group
    # membership: a group whose members all left stays unassigned a while on this broker.)
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.commit({tp: 10})
    finally:
        await consumer.stop()
    port = free_port()
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "json_rows",
                         "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}],
                       service={"http_port": port, "http_host": "127.0.0.1"})
    (row,) = await lag_json(cfg)
    assert (row["committed"], row["high_water"], row["lag"]) == (10, 10, 0)
    run = kstage(cfg)
    await run.wait_for_log("assigned partitions [0]")
    assert await scrape(f"http://127.0.0.1:{port}", group, topic, run) == {
        "high_water": 10, "lag": row["lag"]}
    assert read_jsonl(tmp_path / "out.jsonl") == []
    run.signal(signal.SIGTERM)
    assert await run.wait() == 0, run.output()
