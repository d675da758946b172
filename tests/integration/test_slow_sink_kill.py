"""Fault matrix: a group member SIGKILLed in the middle of a slow sink write.

Two ``kstage run`` processes share a 2-partition topic; the HTTP API (a real local
server) takes 0.4 s to answer each request. Member A is SIGKILLed while one of its
requests is in flight; B takes A's partition over once A's session expired and sends
the unanswered event again. All along, a monitor compares the group's committed offsets
with what the API had answered: a committed offset is never ahead of the acknowledged
events.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.http_server import HttpTestServer, RecordedRequest
from tests.kafkautil import (
    KstageProcess,
    committed,
    produce,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

EVENTS = 60
DELAY_S = 0.4


def coords(request: RecordedRequest) -> tuple[int, int]:
    body = request.json
    return int(body["_partition"]), int(body["_offset"])


def answered(api: HttpTestServer) -> set[tuple[int, int]]:
    return {coords(r) for r in list(api.requests) if r.answered_at is not None}


def assigned(log: str) -> list[int]:
    """The partitions of the last ``assigned partitions [...]`` line of a member's log."""
    found = re.findall(r"assigned partitions \[([\d, ]*)\]", log)
    assert found, log
    return [int(p) for p in found[-1].split(",") if p.strip()]


class CommitMonitor:
    """Samples committed offsets; records every one ahead of the API's answers."""

    def __init__(self, broker: str, group: str, topic: str, api: HttpTestServer) -> None:
        self.broker, self.group, self.topic, self.api = broker, group, topic, api
        self.violations: list[str] = []
        self.samples = 0
        self.last: dict[int, int] = {}

    async def run(self) -> None:
        while True:
            offsets = await committed(self.broker, self.group, self.topic, 2)
            acked = answered(self.api)  # read after the commits: it only grows
            for part, upto in offsets.items():
                missing = [o for o in range(max(upto, 0)) if (part, o) not in acked]
                if missing:
                    self.violations.append(f"partition {part} committed {upto} but offsets "
                                           f"{missing} were never answered")
            self.last = offsets
            self.samples += 1
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("fresh", [2], indirect=True)
async def test_member_killed_during_slow_write_loses_nothing(
        fresh, broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    topic, group = fresh.topic, fresh.group
    with HttpTestServer() as api:
        api.hang(DELAY_S, times=100_000)  # every write is slow
        cfg = write_config(tmp_path / "kstage.yml", broker, group,
                           [{"topic": topic, "processor": "json_rows",
                             "sink": {"type": "http", "url": f"{api.url}/hook",
                                      "timeout_s": 30}}],
                           commit={"max_messages": 1, "max_interval_s": 0.2},
                           max_poll_records=2)  # a poll's batch is acked as a whole
        a = kstage(cfg)
        await a.wait_for_log("assigned partitions [0, 1]")
        b = kstage(cfg)
        await b.wait_for_log("assigned partitions [")
        await a.wait_for_log("assigned partitions [", count=2)
        mine = assigned(a.output())
        assert len(mine) == 1 and assigned(b.output()) == [1 - mine[0]]
        part = mine[0]

        monitor = CommitMonitor(broker, group, topic, api)
        watching = asyncio.create_task(monitor.run())
        try:
            await produce(broker, topic, ({"i": i} for i in range(EVENTS)),
                          partition_of=lambda i: i % 2)
            # A has committed some of its partition, and a request of A's is in flight.
            await wait_until(lambda: monitor.last.get(part, -1) >= 2, timeout=60,
                             what="A to commit two events")
            await wait_until(lambda: any(r.answered_at is None and coords(r)[0] == part
                                         for r in list(api.requests)),
                             what="a request of A in flight")
            in_flight = next(coords(r) for r in list(api.requests)
                             if r.answered_at is None and coords(r)[0] == part)
            a.signal(signal.SIGKILL)
            assert await a.wait() == -signal.SIGKILL
            killed_at = time.monotonic()

            # B takes A's partition over and lands everything.
            await b.wait_for_log("assigned partitions [0, 1]", timeout=60)
            await wait_until(lambda: sum(monitor.last.values()) == EVENTS, timeout=90,
                             what=f"the group to commit all {EVENTS} events")
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
        b.signal(signal.SIGTERM)
        assert await b.wait() == 0, b.output()
        requests = list(api.requests)

    assert monitor.samples > 20
    assert not monitor.violations, monitor.violations[:5]
    keys: dict[tuple[int, int], set[str]] = defaultdict(set)
    for r in requests:
        keys[coords(r)].add(r.headers["idempotency-key"])
    assert sorted(keys) == sorted((i % 2, i // 2) for i in range(EVENTS)), "nothing lost"
    assert all(len(k) == 1 for k in keys.values()), "a re-sent event keeps its key"
    resent = [r for r in requests if coords(r) == in_flight]
    assert len(resent) >= 2, "the write in flight at the kill was sent again"
    assert any(r.at > killed_at and r.answered_at is not None for r in resent), \
        "and answered after the kill"
    assert await committed(broker, group, topic, 2) == {0: EVENTS // 2, 1: EVENTS // 2}
