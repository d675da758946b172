"""Stopping `kstage run`: a blocked event loop, a stop with nothing in flight, abandoned
work named (real processes, real broker)."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import pytest

from service.broker import free_port
from tests.kafkautil import (
    committed,
    produce,
    read_jsonl,
    status_port,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.kafka


async def test_sigterm_stops_a_process_whose_processor_blocks_the_loop(
        fresh, broker, tmp_path, kstage):
    """time.sleep in transform: the loop never runs again, the watchdog still fires."""
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, [{"i": 0}, {"i": 1, "block": True}])
    marker = tmp_path / "blocking"
    port = free_port()
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "test_block",
                         "options": {"marker": str(marker)},
                         "sink": {"type": "jsonl", "path": "out.jsonl"}}],
                       supervisor={"shutdown_grace_s": 1, "abort_grace_s": 1},
                       service={"http_port": port, "http_host": "127.0.0.1"},
                       max_poll_records=1)
    proc = kstage(cfg)
    await wait_until(marker.exists, what="the processor to block the loop")
    port = await status_port(proc)
    health: list[httpx.Response] = []

    async def unhealthy() -> bool:
        async with httpx.AsyncClient(timeout=5) as client:
            health.append(await client.get(f"http://127.0.0.1:{port}/healthz"))
        return health[-1].status_code == 503

    deadline = time.monotonic() + 20
    while not await unhealthy():  # the status thread still answers, and says why
        assert time.monotonic() < deadline, health[-1].text
        await asyncio.sleep(0.2)
    assert "event loop unresponsive" in health[-1].json()["reason"]
    proc.signal(signal.SIGTERM)
    started = time.monotonic()
    code = await proc.wait(timeout=30)
    took = time.monotonic() - started
    out = proc.output()
    assert code == 1, out
    assert took < 1 + 1 + 5 + 3, f"stopped after {took:.1f}s, deadline 7s:\n{out}"
    assert "received SIGTERM: stopping" in out
    assert "stop did not finish within 7s (the event loop never ran the stop" in out
    assert "kstage_test_plugins/__init__.py" in out and "in transform): terminating hard" in out
    assert (await committed(broker, group, topic, 1))[0] in (-1, 1), "blocked work uncommitted"


@pytest.mark.parametrize("fresh", [2], indirect=True)
async def test_sigterm_right_after_a_revoke_exits_0(fresh, broker, tmp_path: Path, kstage):
    """A stop while the partitions are revoked (rejoin held by the broker) abandons nothing."""
    topic, group = fresh.topic, fresh.group
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "json_rows",
                         "sink": {"type": "jsonl", "path": "${OUT}"}}],
                       supervisor={"shutdown_grace_s": 2, "abort_grace_s": 2})
    a = kstage(cfg, env={"OUT": str(tmp_path / "a.jsonl")})
    await a.wait_for_log("assigned partitions [0, 1]")
    await produce(broker, topic, ({"i": i} for i in range(20)), partition_of=lambda i: i % 2)
    await wait_until(lambda: len(read_jsonl(tmp_path / "a.jsonl")) == 20, what="20 rows")
    b = kstage(cfg, env={"OUT": str(tmp_path / "b.jsonl")})
    await a.wait_for_log("revoked partitions [0, 1]")
    a.signal(signal.SIGTERM)
    code = await a.wait(timeout=30)
    out = a.output()
    assert code == 0, out
    assert "unfinished work" not in out and "abandon" not in out, out
    if "stop had to cancel" in out:  # the rejoin the broker holds outlasted the grace
        assert "with nothing in flight: nothing was left uncommitted" in out, out
    await b.wait_for_log("assigned partitions [0, 1]", timeout=60)
    b.signal(signal.SIGTERM)
    assert await b.wait() == 0, b.output()
    assert sum((await committed(broker, group, topic, 2)).values()) == 20
