"""``groups[].start_from`` on the real broker: latest skips the backlog at the process's
start (and only there), earliest reads everything once more; a worker restarted by the
supervisor and a rebalance within the run do not seek again."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from actors.master import Master
from actors.worker import Worker
from settings import load_settings
from tests.kafkautil import (
    FAST_GROUP,
    committed,
    create_topic,
    read_jsonl,
    unique,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.kafka

_LOGGER = "actors.worker.start_from"


async def produce_each(broker: str, topic: str, values: list[dict[str, Any]],
                       partition: int = 0) -> None:
    """One record per batch: the broker's ListOffsets(latest) is only right then (see
    ENVIRONMENT.md), and seeking to the end uses it."""
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, repr(value).replace("'", '"').encode(),
                                         partition=partition)
    finally:
        await producer.stop()


def config(tmp_path: Path, broker: str, topic: str, group: str, out: str,
           **group_keys: Any) -> Path:
    return write_config(tmp_path / f"{out}.yml", broker, group,
                        [{"topic": topic, "processor": "json_rows",
                          "sink": {"type": "jsonl", "path": str(tmp_path / f"{out}.jsonl")}}],
                        **group_keys)


def worker_of(master: Master) -> Worker:
    (child,) = master.supervisor.children
    assert isinstance(child, Worker)
    return child


def committed_of(master: Master, partition: int = 0) -> int | None:
    parts = worker_of(master).snapshot()["partitions"]
    return next((p["committed"] for p in parts if p["partition"] == partition), None)


def rows(tmp_path: Path, out: str) -> list[dict[str, Any]]:
    path = tmp_path / f"{out}.jsonl"
    return read_jsonl(path) if path.exists() else []


async def drained_run(path: Path, broker: str) -> Master:
    master = Master(load_settings(path), broker, drain=True)
    await asyncio.wait_for(master.run(), 60)
    return master


async def test_latest_skips_the_backlog_only_at_start(broker, tmp_path, caplog):
    topic, group = unique("sf-latest"), unique("g-sf-latest")
    await create_topic(broker, topic)
    await produce_each(broker, topic, [{"i": i, "phase": "old"} for i in range(5)])
    await drained_run(config(tmp_path, broker, topic, group, "first"), broker)
    assert (await committed(broker, group, topic, 1))[0] == 5
    await produce_each(broker, topic, [{"i": i, "phase": "backlog"} for i in range(7)])

    caplog.set_level(logging.INFO, logger=_LOGGER)
    master = Master(load_settings(config(tmp_path, broker, topic, group, "second",
                                         start_from="latest")), broker)
    run = asyncio.create_task(master.run())
    try:
        await wait_until(lambda: master.supervisor.children
                         and worker_of(master).snapshot()["skipped_at_start"] == {0: 7},
                         what="the seek to the end")
        # The sought position is committed at once, before any new message.
        await wait_until(lambda: committed_of(master) == 12, what="the commit of 12")
        assert (await committed(broker, group, topic, 1))[0] == 12
        await produce_each(broker, topic, [{"i": i, "phase": "new"} for i in range(3)])
        await wait_until(lambda: len(rows(tmp_path, "second")) == 3, what="the new rows")
    finally:
        master.request_stop()
        await asyncio.wait_for(run, 30)
    assert {r["phase"] for r in rows(tmp_path, "second")} == {"new"}
    assert (await committed(broker, group, topic, 1))[0] == 15
    lines = [r.getMessage() for r in caplog.records if r.name == _LOGGER]
    assert any("start_from latest: partition 0 at end offset 12, skipped 7 message(s) "
               "(from committed offset 5)" in line for line in lines), lines
