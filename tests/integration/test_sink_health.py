"""A failing sink shows in ``/readyz`` and loses nothing (issue 11, defects 3 and 4).

A real ``kstage run`` on the real broker writes to a real local HTTP API that, for a
while, answers 401 (an expired token), 503, 429 with ``Retry-After`` or hangs, then
recovers: nothing is dead-lettered or committed during the fault, ``/readyz`` is 503
naming the worker, the sink and the status, then 200 again, and every event arrives.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable

import pytest

from service.broker import free_port
from tests.http_server import HttpTestServer
from tests.integration.test_http_pipeline import events, run
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

pytestmark = pytest.mark.kafka

TOKEN = "expired-bearer-t0ken-value"  # noqa: S105 - a fake secret that must not show
FOREVER = 100_000  # scripted answers: until release()


def fault_401(api: HttpTestServer) -> None:
    api.respond(401, f'{{"error": "token {TOKEN} expired"}}', times=FOREVER)


def fault_503(api: HttpTestServer) -> None:
    api.respond(503, "down for maintenance", times=FOREVER)


def fault_429(api: HttpTestServer) -> None:
    api.respond(429, "slow down", headers={"Retry-After": "2"}, times=FOREVER)


def fault_hang(api: HttpTestServer) -> None:
    api.hang(30, times=FOREVER)


# fault, supervisor.sink_unready_after_s, what /readyz must say. The 401 case keeps the
# threshold at 60 s: refused credentials must show at once, not after the threshold.
FAULTS: dict[str, tuple[Callable[[HttpTestServer], None], float, list[str]]] = {
    "401": (fault_401, 60, ["sink credentials refused", "answered HTTP 401", "token ***"]),
    "503": (fault_503, 1, ["sink failing", "answered HTTP 503", "down for maintenance"]),
    "429": (fault_429, 1, ["sink failing", "answered HTTP 429"]),
    "hang": (fault_hang, 1, ["sink failing", "ReadTimeout"]),
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_failing_api_is_not_ready_loses_nothing_and_recovers(
        broker, tmp_path, kstage, fault):
    inject, unready_after_s, expected = FAULTS[fault]
    topic, group = unique(f"http-{fault}"), unique(f"g-health-{fault}")
    await create_topic(broker, topic)
    await produce(broker, topic, ({"i": i} for i in range(5)))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with HttpTestServer() as api:
        inject(api)
        cfg = write_config(
            tmp_path / "kstage.yml", broker, group,
            [{"topic": topic, "processor": "json_rows",
              "sink": {"type": "http", "url": f"{api.url}/hook", "auth": {"bearer": TOKEN},
                       "timeout_s": 0.5, "min_backoff_s": 0.05, "max_backoff_s": 5}}],
            service={"http_port": port, "http_host": "127.0.0.1"},
            supervisor={"sink_unready_after_s": unready_after_s})
        proc = kstage(cfg)

        body = await wait_readyz(base, proc, 503, expected[0])
        [reason] = [r for r in body["reasons"] if r.startswith(f"{group}/{topic}: ")]
        for text in expected:
            assert text in reason, reason
        assert TOKEN not in json.dumps(body)
        # The commit loop runs every 0.5 s: let it run a few times during the fault.
        await wait_until(lambda: api.requests[-1].at - api.requests[0].at >= 1.5,
                         what="1.5 s of failing requests")
        assert (await committed(broker, group, topic, 1)) == {0: -1}, "nothing committed"
        assert read_jsonl(tmp_path / "dead.jsonl") == [], "nothing dead-lettered"
        assert {r.json["i"] for r in api.requests} == {0}, "the partition waits, in order"

        before = api.count()
        api.release()  # the API recovers
        assert await wait_readyz(base, proc, 200) == {"status": "ready"}
        await wait_until(lambda: {e["i"] for e in events(api.requests[before:])} == set(range(5)),
                         what="every event delivered after the recovery")

        async def all_committed() -> bool:
            return (await committed(broker, group, topic, 1)) == {0: 5}

        deadline = time.monotonic() + 30
        while not await all_committed():
            assert time.monotonic() < deadline, "offsets committed after the recovery"
            await asyncio.sleep(0.2)
        proc.signal(signal.SIGTERM)
        assert await proc.wait(30) == 0, proc.output()
        failing = api.requests[:before]
    assert read_jsonl(tmp_path / "dead.jsonl") == [], "nothing dead-lettered"
    if fault == "429":
        gaps = [b.at - a.at for a, b in zip(failing, failing[1:], strict=False)]
        assert gaps and min(gaps) >= 1.95, f"Retry-After: 2 honoured: {gaps}"


async def test_400_and_422_are_dead_lettered_and_committed(fresh, broker, tmp_path):
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, ({"i": i} for i in range(4)))
    with HttpTestServer() as api:
        api.respond(422, '{"error": "field i is not a string"}')
        api.respond(400, "bad request: " + "y" * 2000)
        await run(broker, tmp_path, topic, group, {"url": f"{api.url}/hook"})
        answers = [(r.json["i"], r.answer) for r in api.requests]
    assert answers == [(0, 422), (1, 400), (2, 200), (3, 200)]
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [(d["offset"], d["status"]) for d in dead] == [(0, 422), (1, 400)]
    assert dead[0]["response_body"] == '{"error": "field i is not a string"}'
    assert dead[1]["response_body"].startswith("bad request: y")
    assert (await committed(broker, group, topic, 1)) == {0: 4}


async def test_retry_statuses_makes_400_retried(fresh, broker, tmp_path):
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, ({"i": i} for i in range(2)))
    with HttpTestServer() as api:
        api.respond(400, "not yet", times=3)
        await run(broker, tmp_path, topic, group,
                  {"url": f"{api.url}/hook", "retry_statuses": [400], "min_backoff_s": 0.01})
        answers = [(r.json["i"], r.answer) for r in api.requests]
    assert answers == [(0, 400), (0, 400), (0, 400), (0, 200), (1, 200)]
    assert read_jsonl(tmp_path / "dead.jsonl") == []
    assert (await committed(broker, group, topic, 1)) == {0: 2}
