"""The HTTP sink end to end: real broker, real local HTTP server, real kstage runs."""

from __future__ import annotations

import asyncio
import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from actors.master import Master
from settings import load_settings
from tests.http_server import HttpTestServer
from tests.kafkautil import committed, produce, read_jsonl, write_config

pytestmark = pytest.mark.kafka


def events(requests: list[Any]) -> list[dict[str, Any]]:
    """Every event the API received, in arrival order (batches flattened)."""
    out: list[dict[str, Any]] = []
    for r in requests:
        body = r.json
        out.extend(body if isinstance(body, list) else [body])
    return out


async def run(broker: str, tmp_path: Path, topic: str, group: str, sink: dict[str, Any],
              **cfg: Any) -> None:
    path = write_config(tmp_path / f"{group}.yml", broker, group,
                        [{"topic": topic, "processor": "json_rows",
                          "sink": {"type": "http", **sink}}], **cfg)
    await asyncio.wait_for(Master(load_settings(path), broker, drain=True).run(), 60)


@pytest.mark.parametrize("batch", [None, {"max_events": 4, "max_interval_s": 1}],
                         ids=["single", "batched"])
@pytest.mark.parametrize("fresh", [3], indirect=True)
async def test_events_arrive_in_order_per_partition(fresh, broker, tmp_path, batch):
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, ({"i": i} for i in range(60)), partition_of=lambda i: i % 3)
    with HttpTestServer() as api:
        await run(broker, tmp_path, topic, group,
                  {"url": f"{api.url}/hook", "batch": batch, "max_concurrency": 3})
        received = events(api.requests)
        keys = [r.headers["idempotency-key"] for r in api.requests]
        bodies = [r.json for r in api.requests]
    assert sorted(e["i"] for e in received) == list(range(60)), "each event exactly once"
    per_partition: dict[int, list[int]] = defaultdict(list)
    for e in received:
        per_partition[e["_partition"]].append(e["_offset"])
    assert all(offsets == sorted(offsets) for offsets in per_partition.values())
    assert len(set(keys)) == len(keys)
    if batch:
        assert all(isinstance(b, list) and 1 <= len(b) <= 4 for b in bodies)
        assert len(bodies) < 60
    else:
        assert all(isinstance(b, dict) for b in bodies) and len(bodies) == 60
    assert sum((await committed(broker, group, topic, 3)).values()) == 60


async def test_5xx_retried_400_dead_lettered_timeout_retried_retry_after_honoured(fresh, broker,
                                                                                 tmp_path):
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, ({"i": i} for i in range(6)))
    with HttpTestServer() as api:
        api.respond(500, times=2)                   # i=0: two 500s, then 200
        api.respond(200)
        api.respond(400, body="invalid event: " + "x" * 2000)   # i=1: permanent
        api.hang(3.0)                               # i=2: hangs past the 0.5 s timeout
        api.respond(200)
        api.respond(429, headers={"Retry-After": "1"})          # i=3: waits 1 s
        sink = {"url": f"{api.url}/hook", "timeout_s": 0.5, "min_backoff_s": 0.01,
                "max_backoff_s": 2}
        await run(broker, tmp_path, topic, group, sink)
        answers = [(r.json["i"], r.answer) for r in api.requests]
        at = [r.at for r in api.requests]
    assert answers == [(0, 500), (0, 500), (0, 200), (1, 400), (2, 200), (2, 200),
                       (3, 429), (3, 200), (4, 200), (5, 200)], answers
    assert at[7] - at[6] >= 0.95, "Retry-After: 1 was honoured"
    assert at[5] - at[4] >= 0.45, "the hanging request timed out (0.5 s) before its retry"
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [(d["offset"], d["status"]) for d in dead] == [(1, 400)]
    assert dead[0]["response_body"].startswith("invalid event: x")
    assert len(dead[0]["response_body"]) == 1024
    assert (await committed(broker, group, topic, 1))[0] == 6, "partition moved on"


async def test_sigkill_in_flight_then_restart_delivers_everything(fresh, broker, tmp_path, kstage):
    """Every event reaches the API at least once; a duplicate carries the same key."""
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, ({"i": i} for i in range(30)))
    with HttpTestServer() as api:
        cfg = write_config(tmp_path / "kstage.yml", broker, group,
                           [{"topic": topic, "processor": "json_rows",
                             "sink": {"type": "http", "url": f"{api.url}/hook",
                                      "timeout_s": 60}}],
                           max_poll_records=5)
        api.respond(200, times=2)
        api.hang(60)  # the third request is in flight when the process is killed
        first = kstage(cfg)
        # the hanging request arrived (not a sleep: its batch is never acked, so
        # nothing of it is committed before the kill)
        await asyncio.to_thread(api.wait_for, 3, 60)
        first.signal(signal.SIGKILL)
        await first.wait()
        second = kstage(cfg, "--drain")
        assert await second.wait(60) == 0, second.output()
    # Closing the server answered the request the killed process left hanging.
    keys: dict[int, set[str]] = defaultdict(set)
    for r in api.requests:
        keys[r.json["i"]].add(r.headers["idempotency-key"])
    assert sorted(keys) == list(range(30)), "every event reached the API"
    assert all(len(k) == 1 for k in keys.values()), "a replayed event keeps its key"
    assert keys[2] == {f"{topic}-0-2-2"}
    assert len(api.requests) > 30, "the in-flight event was sent again after the restart"
    assert (await committed(broker, group, topic, 1))[0] == 30
