"""Commit modes, backpressure and restart escalation, in-process on the real broker."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from actors.errors import EscalationError
from actors.master import Master
from actors.worker import Worker
from settings import load_settings
from tests.conftest import Fresh
from tests.kafkautil import committed, produce, read_jsonl, write_config

pytestmark = pytest.mark.kafka


async def run_drained(fresh: Fresh, tmp_path: Path, processor: str, values: list[Any],
                      **cfg: Any) -> tuple[str, str, Master]:
    broker, topic, group = fresh.bootstrap, fresh.topic, fresh.group
    await produce(broker, topic, values)
    options = cfg.pop("options", {})
    path = write_config(tmp_path / f"{topic}.yml", broker, group,
                        [{"topic": topic, "processor": processor, "options": options,
                          "sink": {"type": "jsonl", "path": str(tmp_path / f"{topic}.jsonl")}}],
                        **cfg)
    master = Master(load_settings(path), broker, drain=True)
    await asyncio.wait_for(master.run(), 60)
    return topic, group, master


def worker_of(master: Master) -> Worker:
    (child,) = master.supervisor.children
    assert isinstance(child, Worker)
    return child


async def test_per_message_commits_after_every_message(fresh, broker, tmp_path):
    topic, group, master = await run_drained(
        fresh, tmp_path, "json_rows", [{"i": i} for i in range(5)],
        commit={"mode": "per_message"})
    assert worker_of(master).stats["committed"] == 5
    assert (await committed(broker, group, topic, 1))[0] == 5
    assert len(read_jsonl(tmp_path / f"{topic}.jsonl")) == 5


async def test_savepoint_commits_only_where_asked(fresh, broker, tmp_path):
    values = [{"i": i, "savepoint": i == 4} for i in range(10)]
    topic, group, master = await run_drained(fresh, tmp_path, "test_savepoint", values,
                                             commit={"mode": "savepoint"})
    assert len(read_jsonl(tmp_path / f"{topic}.jsonl")) == 10
    assert (await committed(broker, group, topic, 1))[0] == 5, "next offset after the savepoint"


async def test_none_never_commits(fresh, broker, tmp_path):
    topic, group, _ = await run_drained(fresh, tmp_path, "json_rows",
                                        [{"i": i} for i in range(3)], commit={"mode": "none"})
    assert len(read_jsonl(tmp_path / f"{topic}.jsonl")) == 3
    assert (await committed(broker, group, topic, 1))[0] == -1


async def test_auto_commits_through_kafka_autocommit(fresh, broker, tmp_path):
    topic, group, _ = await run_drained(fresh, tmp_path, "json_rows",
                                        [{"i": i} for i in range(3)],
                                        commit={"mode": "auto", "max_interval_s": 0.2})
    assert (await committed(broker, group, topic, 1))[0] == 3


async def test_run_warns_at_start_that_auto_can_lose_data(fresh, broker, tmp_path, kstage):
    topic, group = fresh.topic, fresh.group
    path = write_config(tmp_path / "kstage.yml", broker, group,
                        [{"topic": topic, "processor": "json_rows"}], commit={"mode": "auto"})
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1)
                if text.strip() == "mode: auto")
    proc = kstage(path)
    await proc.wait_for_log("assigned partitions [0]")  # a warning: it runs
    assert (f"WARNING service.commands.run: {path}: groups[0].commit.mode (line {line}): "
            "'auto' can lose data") in proc.output()
    proc.signal(signal.SIGTERM)
    assert await proc.wait() == 0, proc.output()


async def test_batch_wait_for_ack_commits_everything(fresh, broker, tmp_path):
    topic, group, master = await run_drained(
        fresh, tmp_path, "json_rows", [{"i": i} for i in range(250)],
        commit={"mode": "batch", "max_messages": 50, "max_interval_s": 60, "wait_for_ack": True},
        max_poll_records=25)
    assert (await committed(broker, group, topic, 1))[0] == 250
    # max_messages triggered commits while consuming, not only the final one (acks that
    # arrive while a commit is in flight fold into the next, so the exact count varies).
    assert worker_of(master).stats["committed"] >= 2


async def test_slow_processing_pauses_partitions_without_eviction(fresh, broker, tmp_path, caplog):
    """Processing (6.4 s) takes far longer than max_poll_interval_ms (1.5 s), and the
    pipeline stays full longer than the pause threshold: partitions are paused, polling
    goes on, and the member is never evicted."""
    caplog.set_level("INFO", logger="actors.worker")
    topic, group, master = await run_drained(
        fresh, tmp_path, "test_slow", [{"i": i} for i in range(8)],
        options={"delay_s": 0.8}, max_poll_interval_ms=1500, max_poll_records=1,
        commit={"mode": "batch", "max_in_flight": 2, "max_messages": 1})
    worker = worker_of(master)
    assert worker.stats["paused"] >= 1, "the full pipeline paused fetching"
    assert [r["i"] for r in read_jsonl(tmp_path / f"{topic}.jsonl")] == list(range(8))
    assert (await committed(broker, group, topic, 1))[0] == 8
    revokes = [r for r in caplog.records if "revoked partitions" in r.getMessage()]
    assignments = [r for r in caplog.records if "assigned partitions" in r.getMessage()]
    assert len(assignments) == 1 and not revokes, "no rebalance: never evicted"


async def test_crash_loop_escalates(fresh, broker, tmp_path):
    topic, group = fresh.topic, fresh.group
    path = write_config(tmp_path / "kstage.yml", broker, group,
                        [{"topic": topic, "processor": "test_crash_start"}],
                        supervisor={"max_restarts": 2, "min_backoff_s": 0.01,
                                    "max_backoff_s": 0.05})
    master = Master(load_settings(path), broker)
    with pytest.raises(EscalationError, match="more than 2 crashes within 60s"):
        await asyncio.wait_for(master.run(), 30)
    assert master.supervisor.restarts == 2
    assert worker_of(master).label.endswith("#2"), "each restart is a fresh incarnation"


async def test_slow_sink_pauses_partitions_without_eviction(fresh, broker, tmp_path, caplog):
    """Fault matrix: a slow sink (an HTTP API taking 0.8 s per request, 6.4 s in all)
    under a max_poll_interval_ms of 1.5 s. The acks come late, the pipeline stays full,
    partitions are paused and polling goes on: the member is never evicted, every event
    arrives once and in order, and everything is committed."""
    from tests.http_server import HttpTestServer

    caplog.set_level("INFO", logger="actors.worker")
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, [{"i": i} for i in range(8)])
    with HttpTestServer() as api:
        api.hang(0.8, times=8)
        path = write_config(
            tmp_path / "kstage.yml", broker, group,
            [{"topic": topic, "processor": "json_rows",
              "sink": {"type": "http", "url": f"{api.url}/hook", "timeout_s": 10}}],
            max_poll_interval_ms=1500, max_poll_records=1,
            commit={"mode": "batch", "max_in_flight": 2, "max_messages": 1})
        master = Master(load_settings(path), broker, drain=True)
        await asyncio.wait_for(master.run(), 90)
        assert [r.json["i"] for r in api.requests] == list(range(8))
    assert worker_of(master).stats["paused"] >= 1, "the full pipeline paused fetching"
    assert (await committed(broker, group, topic, 1))[0] == 8
    revokes = [r for r in caplog.records if "revoked partitions" in r.getMessage()]
    assignments = [r for r in caplog.records if "assigned partitions" in r.getMessage()]
    assert len(assignments) == 1 and not revokes, "no rebalance: never evicted"
