"""Fault: the broker dies and comes back (persistent storage) while kstage runs.

The broker is Tansu on S3 storage (a real S3 API on loopback), or a one-node Apache
Kafka with its log directory, so topics, records and committed offsets survive its
restart. kstage must ride through the outage by itself: nothing lost, nothing
dead-lettered, no offset committed for work the sink did not accept, and after the
broker is back it goes on consuming.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from service.broker import free_port
from tests.brokers import dedicated_broker
from tests.kafkautil import (
    committed,
    create_topic,
    produce,
    read_jsonl,
    unique,
    wait_readyz,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def jsonl_config(tmp_path: Path, bootstrap: str, group: str, topic: str,
                 port: int) -> Path:
    """kstage's config: ``topic`` to a jsonl file, the status server on ``port``."""
    return write_config(tmp_path / "kstage.yml", bootstrap, group,
                        [{"topic": topic, "processor": "json_rows",
                          "sink": {"type": "jsonl", "path": "out.jsonl"}}],
                        service={"http_port": port, "http_host": "127.0.0.1"})


async def committed_to(bootstrap: str, group: str, topic: str, expected: dict[int, int],
                       timeout: float) -> None:
    """Wait until ``group`` committed ``expected`` (partition: offset) of ``topic``."""
    deadline = time.monotonic() + timeout
    while (got := await committed(bootstrap, group, topic, len(expected))) != expected:
        assert time.monotonic() < deadline, f"committed {got}, not {expected}"
        await asyncio.sleep(0.2)


async def test_broker_restart_with_persistent_storage(broker_kind, tmp_path, kstage):
    topic, group = unique("restart"), unique("g-restart")
    with dedicated_broker(broker_kind, tmp_path / "broker", persistent=True) as broker:
        await create_topic(broker.bootstrap, topic, partitions=2)
        port = free_port()
        cfg = jsonl_config(tmp_path, broker.bootstrap, group, topic, port)
        proc = kstage(cfg)
        await proc.wait_for_log("assigned partitions", timeout=60)
        readyz = f"http://127.0.0.1:{port}/readyz"

        async def ready() -> httpx.Response:
            async with httpx.AsyncClient(timeout=5) as client:
                return await client.get(readyz)

        assert (await ready()).status_code == 200
        await produce(broker.bootstrap, topic, [{"i": i} for i in range(100)],
                      partition_of=lambda i: i % 2)
        out = tmp_path / "out.jsonl"
        await wait_until(lambda: len(read_jsonl(out)) >= 100, 60, "the first 100 rows")

        async def committed_is(expected: dict[int, int], timeout: float) -> None:
            await committed_to(broker.bootstrap, group, topic, expected, timeout)

        await committed_is({0: 50, 1: 50}, 30)

        broker.stop()  # SIGKILL: every connection of kstage breaks at once
        lines_at_kill = len(proc.output().splitlines())
        # kstage notices (readiness says why) and keeps running through the outage.
        deadline = time.monotonic() + 30
        while (answer := await ready()).status_code == 200:
            assert time.monotonic() < deadline, "/readyz stayed 200 with the broker down"
            await asyncio.sleep(0.1)
        assert answer.status_code == 503
        assert "cannot reach the group coordinator" in answer.json()["reasons"][0]
        await asyncio.sleep(5)  # an outage of some seconds, as a broker restart takes
        assert proc.proc.poll() is None, proc.output()
        # aiokafka logs ~60 errors a second while the broker is down: repeats are held
        # back (service.logs.RepeatFilter), so the log stays readable.
        outage_lines = proc.output().splitlines()[lines_at_kill:]
        assert len(outage_lines) < 40, "\n".join(outage_lines)

        broker.start()
        await produce(broker.bootstrap, topic, [{"i": i} for i in range(100, 200)],
                      partition_of=lambda i: i % 2)
        await wait_until(lambda: {r["i"] for r in read_jsonl(out)} >= set(range(200)), 90,
                         "every row after the broker restart")
        await committed_is({0: 100, 1: 100}, 60)
        # Readiness is what the workers last saw, polled: a heartbeat that went unanswered
        # across the restart may still count for a moment after the commits went through
        # (the CI failure at e0c1a55). It must come back by itself, and say why until then.
        await wait_readyz(f"http://127.0.0.1:{port}", proc, 200, timeout=30)
        rows = Counter(r["i"] for r in read_jsonl(out))
        assert set(rows) == set(range(200))
        assert not (tmp_path / "dead.jsonl").exists()
        assert proc.proc.poll() is None, proc.output()
        proc.signal(signal.SIGTERM)
        assert await proc.wait(60) == 0, proc.output()


async def test_the_broker_not_up_when_kstage_starts_is_waited_for(broker_kind, tmp_path,
                                                                    kstage):
    """kstage started before its broker (a compose file or a pod that comes up first):
    the worker's consumer cannot bootstrap, and is started again with backoff, named in
    /readyz, instead of crashing until the restart limit stops the process; once the
    broker is up every row lands once and is committed."""
    topic, group = unique("not-up"), unique("g-not-up")
    with dedicated_broker(broker_kind, tmp_path / "broker", persistent=True) as broker:
        await create_topic(broker.bootstrap, topic, partitions=2)
        await produce(broker.bootstrap, topic, [{"i": i} for i in range(40)],
                      partition_of=lambda i: i % 2)
        broker.stop()
        port = free_port()
        cfg = jsonl_config(tmp_path, broker.bootstrap, group, topic, port)
        proc = kstage(cfg)
        said = f"cannot reach the Kafka brokers at {broker.bootstrap}"
        await proc.wait_for_log(said, timeout=60, count=2)  # tried again, no crash
        await wait_readyz(f"http://127.0.0.1:{port}", proc, 503, said, timeout=30)
        broker.start()
        out = tmp_path / "out.jsonl"
        await wait_until(lambda: {r["i"] for r in read_jsonl(out)} >= set(range(40)), 120,
                         "every row once the broker is up")
        await committed_to(broker.bootstrap, group, topic, {0: 20, 1: 20}, 60)
        assert Counter(r["i"] for r in read_jsonl(out)) == Counter(range(40))
        assert "crashed" not in proc.output(), proc.output()[-4000:]
        proc.signal(signal.SIGTERM)
        assert await proc.wait(60) == 0, proc.output()
