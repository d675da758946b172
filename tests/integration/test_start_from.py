"""``groups[].start_from`` on the real broker, what only a whole run shows: a worker
restarted by the supervisor and a rebalance within the run do not seek again. That
latest skips the backlog and earliest reads it once more, the sought offset committed
at once, is tests/behaviour's (fake consumer and both brokers)."""

from __future__ import annotations

import asyncio
import json
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
    read_jsonl,
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
            await producer.send_and_wait(topic, json.dumps(value).encode(),
                                         partition=partition)
    finally:
        await producer.stop()


def config(tmp_path: Path, broker: str, topic: str, group: str, out: str,
           **group_keys: Any) -> Path:
    return write_config(tmp_path / f"{out}.yml", broker, group,
                        [{"topic": topic, "processor": "json_rows",
                          "sink": {"type": "jsonl", "path": str(tmp_path / f"{out}.jsonl")}}],
                        **group_keys)


def live_worker(master: Master) -> Worker | None:
    """The master's one worker; None while the supervisor waits out a restart backoff
    (the crashed child is gone, its replacement not yet started)."""
    children = master.supervisor.children
    assert len(children) <= 1, children
    if not children:
        return None
    assert isinstance(children[0], Worker)
    return children[0]


def worker_of(master: Master) -> Worker:
    worker = live_worker(master)
    assert worker is not None, "no worker running"
    return worker


def committed_of(master: Master, partition: int = 0) -> int | None:
    worker = live_worker(master)
    if worker is None:
        return None
    parts = worker.snapshot()["partitions"]
    return next((p["committed"] for p in parts if p["partition"] == partition), None)


def rows(tmp_path: Path, out: str) -> list[dict[str, Any]]:
    path = tmp_path / f"{out}.jsonl"
    return read_jsonl(path) if path.exists() else []


async def test_a_restarted_worker_does_not_seek_again(fresh, broker, tmp_path, caplog):
    """A worker that crashes and is replaced within the run continues from the committed
    offset: seeking again would skip the message it crashed on and what came since."""
    topic, group = fresh.topic, fresh.group
    await produce_each(broker, topic, [{"i": i, "phase": "old"} for i in range(4)])
    caplog.set_level(logging.INFO, logger=_LOGGER)
    master = Master(load_settings(config(tmp_path, broker, topic, group, "out",
                                         start_from="latest", failure={"mode": "throw"})),
                    broker)
    run = asyncio.create_task(master.run())
    try:
        await wait_until(lambda: master.supervisor.children
                         and committed_of(master) == 4, what="the seek to the end")
        first = worker_of(master)
        assert first.snapshot()["start_from_counts"] == {0: 4}

        async def crash(records: Any) -> bool:
            raise RuntimeError("injected crash")  # not the message's fault: a restart

        first.parts.pipeline.fetch_schemas = crash  # type: ignore[method-assign]  # this one only
        await produce_each(broker, topic, [{"i": i, "phase": "new"} for i in range(3)])
        await wait_until(lambda: live_worker(master) not in (None, first), what="the restart")
        await wait_until(lambda: len(rows(tmp_path, "out")) == 3, timeout=60,
                         what="the new rows, after the restart")
        await wait_until(lambda: committed_of(master) == 7, what="the commit of 7")
    finally:
        master.stop()
        await asyncio.wait_for(run, 30)
    assert master.supervisor.restarts == 1
    assert [r["i"] for r in rows(tmp_path, "out")] == [0, 1, 2]
    seeks = [r for r in caplog.records if r.name == _LOGGER and "skipped" in r.getMessage()]
    assert len(seeks) == 1, [r.getMessage() for r in seeks]


@pytest.mark.parametrize("fresh", [2], indirect=True)
async def test_a_rebalance_within_the_run_does_not_seek_again(fresh, broker, tmp_path):
    """A second member joins and leaves: the partition that comes back continues from its
    committed offset (the messages produced meanwhile are processed, not skipped)."""
    topic, group = fresh.topic, fresh.group
    for partition in (0, 1):
        await produce_each(broker, topic, [{"i": i, "p": partition} for i in range(3)],
                           partition)
    master = Master(load_settings(config(tmp_path, broker, topic, group, "out",
                                         start_from="latest")), broker)
    run = asyncio.create_task(master.run())
    other = AIOKafkaConsumer(topic, bootstrap_servers=broker, group_id=group,
                             enable_auto_commit=False, **FAST_GROUP)
    try:
        await wait_until(lambda: master.supervisor.children
                         and committed_of(master, 0) == 3 and committed_of(master, 1) == 3,
                         what="the seek to the end")
        assert worker_of(master).snapshot()["start_from_counts"] == {0: 3, 1: 3}
        await other.start()
        await wait_until(lambda: len(other.assignment()) == 1
                         and len(worker_of(master).flow.assigned) == 1, timeout=60,
                         what="the second member's share")
        (held,) = other.assignment()
        # Produced while the second member holds the partition (it reads nothing).
        for partition in (0, 1):
            await produce_each(broker, topic, [{"i": i, "p": partition, "new": True}
                                               for i in range(3, 5)], partition)
        await other.stop()  # leaves: the worker gets both partitions back
        await wait_until(lambda: len(worker_of(master).flow.assigned) == 2, timeout=60,
                         what="the partition back")
        await wait_until(lambda: len(rows(tmp_path, "out")) == 4, timeout=60,
                         what="the new rows of both partitions")
        await wait_until(lambda: committed_of(master, held.partition) == 5,
                         what="the commit of the partition that came back")
    finally:
        await other.stop()
        master.stop()
        await asyncio.wait_for(run, 30)
    assert sorted((r["p"], r["i"]) for r in rows(tmp_path, "out")) == [
        (0, 3), (0, 4), (1, 3), (1, 4)]
    assert worker_of(master).snapshot()["start_from_counts"] == {0: 3, 1: 3}
