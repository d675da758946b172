"""The control API and the liveness probe of a running ``kstage run`` on the real broker:

* ``kstage ctl pause`` pauses a topic: nothing more is written while a second member
  joins and leaves (two rebalances: the pause holds, the membership is kept); ``/status``,
  ``/readyz`` and ``/metrics`` show it paused (ready all the same); a wrong token changes
  nothing; ``resume`` delivers everything, and ``restart`` restarts the worker after a
  commit (nothing is delivered twice);
* a sink write that hangs without failing, with lag behind it, turns ``/healthz`` 503
  naming the partition after ``service.stall_after_s``, and 200 again once it moves;
  so does a fresh group's first write (no committed offset: the lag counts from where
  the worker started reading).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.broker import free_port
from tests.http_server import HttpTestServer
from tests.kafkautil import (
    committed,
    produce,
    unique,
    wait_readyz,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TOKEN = "ctl-token-for-the-test-0123"  # noqa: S105 - a fake secret


def values(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [json.loads(line)["i"] for line in path.read_text().splitlines() if line]


def ctl(cfg: Path, *args: str) -> str:
    """``kstage ctl ...`` as an operator runs it (the token from the environment)."""
    done = subprocess.run(
        [sys.executable, "-m", "service", "ctl", args[0], "-c", str(cfg), *args[1:]],
        capture_output=True, text=True, timeout=60, env={**os.environ, "TOKEN": TOKEN},
        check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def get(url: str, token: str | None = TOKEN) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(url, headers=headers, timeout=10)


def topic_status(status: dict[str, Any], group: str, topic: str) -> dict[str, Any]:
    (found,) = [t for g in status["groups"] if g["group"] == group
                for t in g["topics"] if t["topic"] == topic]
    return found


@pytest.mark.parametrize("fresh", [2], indirect=True)
async def test_pause_holds_across_rebalances_and_resume_and_restart_lose_nothing(
        fresh, broker: str, tmp_path: Path, kstage) -> None:
    topic, group = fresh.topic, fresh.group
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    out_a, out_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    cfg = write_config(tmp_path / "a.yml", broker, group,
                       [{"topic": topic, "processor": "json_rows",
                         "sink": {"type": "jsonl", "path": str(out_a)}}],
                       service={"http_port": port, "control_token": "${TOKEN}"})
    cfg_b = write_config(tmp_path / "b.yml", broker, group,
                         [{"topic": topic, "processor": "json_rows",
                           "sink": {"type": "jsonl", "path": str(out_b)}}])
    a = kstage(cfg, env={"TOKEN": TOKEN})
    await a.wait_for_log("assigned partitions [0, 1]", timeout=60)
    await produce(broker, topic, ({"i": i} for i in range(10)), partition_of=lambda i: i % 2)
    await wait_until(lambda: len(values(out_a)) == 10, 30, "the first ten written")

    pause = f"{base}/groups/{group}/topics/{topic}/pause"
    refused = httpx.post(pause, headers={"Authorization": "Bearer not-the-token-at-all"})
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == "Bearer"
    assert get(f"{base}/status", token=None).status_code == 401
    assert ctl(cfg, "pause", "--topic", topic) == f"{group}/{topic}: paused"
    await a.wait_for_log("paused by the operator")
    assert "control: refused pause of" in a.output() and TOKEN not in a.output()
    assert f"control: pause of {group}/{topic} by 127.0.0.1:" in a.output()

    await produce(broker, topic, ({"i": i} for i in range(10, 20)),
                  partition_of=lambda i: i % 2)
    b = kstage(cfg_b)  # joins: A keeps one partition, paused; B writes the other's
    await b.wait_for_log("assigned partitions [", timeout=60)
    await a.wait_for_log("assigned partitions [", count=2, timeout=60)
    await wait_until(lambda: len(values(out_b)) == 5, 30, "B writing its partition")
    b.signal(signal.SIGTERM)
    assert await b.wait(60) == 0, b.output()
    await a.wait_for_log("assigned partitions [0, 1]", count=2, timeout=60)
    await produce(broker, topic, ({"i": i} for i in range(20, 30)),
                  partition_of=lambda i: i % 2, one_per_batch=True)
    await asyncio.sleep(3)
    assert sorted(values(out_a)) == list(range(10)), "written while paused"
    assert "lost its group membership" not in a.output()

    def lag() -> int | None:  # asked while paused: from the end offsets kstage asks for
        parts = topic_status(get(f"{base}/status").json(), group, topic)["partitions"]
        return None if any(p["lag"] is None for p in parts) else sum(p["lag"] for p in parts)

    await wait_until(lambda: lag() == 15, 30, "the lag of the paused partitions")
    status = json.loads(ctl(cfg, "status", "--json"))
    entry = topic_status(status, group, topic)
    assert entry["paused"] and entry["paused_by"].startswith("127.0.0.1:")
    assert [p["state"] for p in entry["partitions"]] == ["paused", "paused"]
    assert ctl(cfg, "status").splitlines()[0] == f"{group}/{topic}: paused, restarts 0"
    ready = await wait_readyz(base, a, 200, "paused")  # ready, and it says what is paused
    assert ready["paused"] == [f"{group}/{topic}"], ready
    metrics = httpx.get(f"{base}/metrics").text
    assert f'kstage_topic_paused{{group="{group}",topic="{topic}"}} 1.0' in metrics
    assert httpx.get(f"{base}/healthz").status_code == 200

    assert ctl(cfg, "resume", "--topic", topic) == f"{group}/{topic}: resumed"
    await wait_until(lambda: len(values(out_a)) + len(values(out_b)) == 30, 30,
                     "everything written after the resume")
    assert ctl(cfg, "restart", "--topic", topic, "--group", group) == (
        f"{group}/{topic}: restarting")
    await a.wait_for_log("restarting at the operator's request")
    await a.wait_for_log(f"{group}/{topic}#1: assigned partitions [0, 1]", timeout=60)
    await produce(broker, topic, ({"i": i} for i in range(30, 40)),
                  partition_of=lambda i: i % 2)
    await wait_until(lambda: len(values(out_a)) + len(values(out_b)) >= 40, 30,
                     "written after the restart")
    await asyncio.sleep(1)
    written = values(out_a) + values(out_b)
    assert sorted(written) == list(range(40)), "lost or written twice"
    assert json.loads(ctl(cfg, "status", "--json"))["groups"][0]["topics"][0]["restarts"] == 1
    a.signal(signal.SIGTERM)
    assert await a.wait(60) == 0, a.output()
    assert await committed(broker, group, topic, 2) == {0: 20, 1: 20}


async def test_a_write_that_hangs_with_lag_behind_it_fails_liveness_until_it_moves(
        fresh, broker: str, tmp_path: Path, kstage) -> None:
    topic, group = fresh.topic, fresh.group
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with HttpTestServer() as api:
        cfg = write_config(
            tmp_path / "kstage.yml", broker, group,
            [{"topic": topic, "processor": "json_rows",
              "sink": {"type": "http", "url": f"{api.url}/events", "timeout_s": 60}}],
            service={"http_port": port, "stall_after_s": 2})
        proc = kstage(cfg)
        await proc.wait_for_log("assigned partitions [0]", timeout=60)
        await produce(broker, topic, ({"i": i} for i in range(5)))
        await wait_until(lambda: len(api.requests) >= 1, 30, "the first request")

        async def done() -> int:
            return (await committed(broker, group, topic, 1))[0]

        async with asyncio.timeout(30):  # a committed offset: the lag is known from here
            while await done() != 5:
                await asyncio.sleep(0.2)
        api.hang(8, times=1)  # the next request hangs 8 s, then is answered 200
        await produce(broker, topic, ({"i": i} for i in range(5, 10)))
        await wait_until(lambda: len(api.requests) >= 2, 30, "the hanging request")

        async def health() -> tuple[int, dict[str, Any]]:
            answer = await asyncio.to_thread(httpx.get, f"{base}/healthz", timeout=5)
            return answer.status_code, answer.json()

        seen: list[tuple[int, dict[str, Any]]] = []
        while not seen or seen[-1][0] != 503:
            seen.append(await health())
            assert len(seen) < 100, seen
            await asyncio.sleep(0.1)
        assert seen[-1][1]["reason"].startswith(f"{group}/{topic}[0]: lag ")
        assert "(service.stall_after_s 2): the consumer is stuck" in seen[-1][1]["reason"]
        metrics = httpx.get(f"{base}/metrics").text
        assert f'kstage_stalled_partitions{{group="{group}",topic="{topic}"}} 1.0' in metrics
        await wait_until(lambda: api.requests[1].answered_at is not None, 30,
                         "the hanging request answered")
        async with asyncio.timeout(30):
            while (await health())[0] != 200:
                await asyncio.sleep(0.2)
        output = proc.output()
        assert f"liveness: {group}/{topic}[0]: lag" in output
        assert f"liveness: {group}/{topic}[0] moves again" in output
        proc.signal(signal.SIGTERM)
        assert await proc.wait(60) == 0, proc.output()


async def test_a_fresh_groups_first_write_that_hangs_fails_liveness_until_it_moves(
        fresh, broker: str, tmp_path: Path, kstage) -> None:
    """No committed offset yet (a fresh group): the lag counts from where the worker
    started reading, so a first write that hangs is shown as a stall too."""
    topic, group = fresh.topic, fresh.group
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with HttpTestServer() as api:
        api.hang(20, times=1)  # the first request hangs 20 s, then is answered 200
        cfg = write_config(
            tmp_path / "kstage.yml", broker, group,
            [{"topic": topic, "processor": "json_rows",
              "sink": {"type": "http", "url": f"{api.url}/events", "timeout_s": 60}}],
            service={"http_port": port, "stall_after_s": 2})
        await produce(broker, topic, ({"i": i} for i in range(5)))
        proc = kstage(cfg)
        await wait_until(lambda: len(api.requests) >= 1, 60, "the first request")

        async def health() -> tuple[int, dict[str, Any]]:
            answer = await asyncio.to_thread(httpx.get, f"{base}/healthz", timeout=5)
            return answer.status_code, answer.json()

        seen: list[tuple[int, dict[str, Any]]] = []
        async with asyncio.timeout(15):  # stall_after_s 2 and a watch a second
            while not seen or seen[-1][0] != 503:
                seen.append(await health())
                await asyncio.sleep(0.1)
        assert api.requests[0].answered_at is None, "the stall seen after the hang ended"
        ready = await asyncio.to_thread(httpx.get, f"{base}/readyz", timeout=5)
        assert ready.status_code == 200, ready.text  # nothing failed: only liveness says it
        assert seen[-1][1]["reason"].startswith(f"{group}/{topic}[0]: lag 5, the offset 0 ")
        assert "(service.stall_after_s 2): the consumer is stuck" in seen[-1][1]["reason"]
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
        assert f'kstage_stalled_partitions{{group="{group}",topic="{topic}"}} 1.0' in metrics
        assert f'kstage_lag{{group="{group}",partition="0",topic="{topic}"}} 5.0' in metrics
        assert await committed(broker, group, topic, 1) == {0: -1}, "committed before the ack"
        await wait_until(lambda: api.requests[0].answered_at is not None, 30,
                         "the hanging request answered")
        async with asyncio.timeout(30):
            while (await health())[0] != 200:
                await asyncio.sleep(0.2)
        output = proc.output()
        assert f"liveness: {group}/{topic}[0]: lag 5" in output
        assert f"liveness: {group}/{topic}[0] moves again" in output
        proc.signal(signal.SIGTERM)
        assert await proc.wait(60) == 0, proc.output()
    assert await committed(broker, group, topic, 1) == {0: 5}


async def test_a_token_from_a_secret_file_with_its_newline_opens_the_control_api(
        broker: str, tmp_path: Path, kstage) -> None:
    """The token comes from a Secret made from a file: the variable ends in a newline.
    The running service and ``kstage ctl`` both drop it, so a client's header (which never
    carries it) matches."""
    port = free_port()
    cfg = write_config(tmp_path / "k.yml", broker, unique("g-token-file"),
                       [{"topic": unique("token-file"), "processor": "json_rows",
                         "sink": {"type": "null"}}],
                       service={"http_port": port, "control_token": "${TOKEN}"})
    proc = kstage(cfg, env={"TOKEN": TOKEN + "\n"})
    await proc.wait_for_log(f"status server on port {port}", timeout=60)
    answer = get(f"http://127.0.0.1:{port}/status")
    assert answer.status_code == 200 and "groups" in answer.json(), answer.text
    assert get(f"http://127.0.0.1:{port}/status", "wrong-token-0123456789").status_code == 401
    done = subprocess.run(
        [sys.executable, "-m", "service", "ctl", "status", "-c", str(cfg)],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "TOKEN": TOKEN + "\n"}, check=False)
    assert done.returncode == 0, done.stderr
    proc.signal(signal.SIGTERM)
    assert await proc.wait(timeout=60) == 0, proc.output()
