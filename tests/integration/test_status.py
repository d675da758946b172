"""/metrics, /healthz and /readyz of a running `kstage run` on the real broker."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.broker import free_port
from tests.kafkautil import (
    produce,
    read_jsonl,
    status_port,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.kafka


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def get(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=5) as client:
        return await client.get(url)


@pytest.mark.parametrize("fresh", [2], indirect=True)
async def test_metrics_health_and_readiness_of_a_running_service(fresh, broker, tmp_path, kstage):
    topic, group = fresh.topic, fresh.group
    port = free_port()
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "test_flaky",
                         "sink": {"type": "jsonl", "path": "out.jsonl"}}],
                       service={"http_port": port, "http_host": "127.0.0.1"})
    proc = kstage(cfg)
    # port, unless another process on this host took it first (then the next free one)
    base = f"http://127.0.0.1:{await status_port(proc)}"
    deadline = time.monotonic() + 30
    first_ready: httpx.Response | None = None
    while first_ready is None:
        try:
            first_ready = await get(f"{base}/readyz")
        except httpx.TransportError:
            assert time.monotonic() < deadline and proc.proc.poll() is None, proc.output()
            await asyncio.sleep(0.05)
    if first_ready.status_code == 503:  # caught before the group join: says why
        assert "has not joined its consumer group" in first_ready.json()["reasons"][0]
    await proc.wait_for_log("assigned partitions")
    assert (await get(f"{base}/readyz")).json() == {"status": "ready"}
    health = await get(f"{base}/healthz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})

    values = [{"i": i, "fail": i % 10 == 0} for i in range(100)]
    await produce(broker, topic, values, partition_of=lambda i: i % 2)
    await wait_until(lambda: len(read_jsonl(tmp_path / "out.jsonl")) == 90, what="90 rows")

    labels = (("group", group), ("topic", topic))
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def committed_total() -> float:
        return sum(v for (name, lab), v in metrics.items()
                   if name == "kstage_committed_offset" and ("group", group) in lab)

    deadline = time.monotonic() + 60
    while True:  # commits run every 0.5 s
        metrics = samples((await get(f"{base}/metrics")).text)
        if committed_total() == 100 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    assert metrics[("kstage_messages_consumed_total", labels)] == 100
    assert metrics[("kstage_messages_processed_total", labels)] == 100
    assert metrics[("kstage_messages_failed_total", labels)] == 10
    assert metrics[("kstage_messages_dead_lettered_total", labels)] == 10
    assert metrics[("kstage_worker_restarts_total", labels)] == 0
    assert committed_total() == 100
    for p in ("0", "1"):
        plabels = (("group", group), ("partition", p), ("topic", topic))
        assert metrics[("kstage_high_water", plabels)] == 50
        assert metrics[("kstage_lag", plabels)] == 0
    assert metrics[("kstage_batch_size_count", labels)] >= 2
    sink = (("group", group), ("sink", "jsonl"), ("topic", topic))
    assert metrics[("kstage_sink_write_seconds_count", sink)] >= 2
    assert metrics[("kstage_commit_seconds_count", labels)] >= 1

    proc.signal(signal.SIGTERM)
    assert await proc.wait() == 0, proc.output()
