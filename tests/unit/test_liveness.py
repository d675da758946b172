"""actors.liveness.StallWatch: which workers and partitions are alive but stuck."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from actors.liveness import StallWatch
from actors.worker_status import NO_LEADER


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def worker(*parts: dict[str, Any], fetch_idle_s: float = 0.1) -> dict[str, Any]:
    return {"group": "g", "topic": "t", "fetch_idle_s": fetch_idle_s,
            "partitions": list(parts)}


def part(p: int, done: int, lag: int | None, state: str = "running") -> dict[str, Any]:
    high = None if lag is None else done + lag
    return {"partition": p, "high_water": high, "lag": lag, "state": state}


def test_a_partition_with_lag_whose_offset_does_not_move_stalls_then_recovers(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    watch = StallWatch(10, clock)
    caplog.set_level(logging.WARNING, "actors.liveness")
    watch.update([worker(part(0, 40, 5), part(1, 7, 3))])
    clock.now += 6
    watch.update([worker(part(0, 40, 9), part(1, 8, 3))])  # 1 moved, 0 did not
    assert watch.reasons() == []
    clock.now += 5
    watch.update([worker(part(0, 40, 9), part(1, 8, 4))])
    assert watch.reasons() == ["g/t[0]: lag 9, the offset 40 has not moved for 11s "
                               "(service.stall_after_s 10): the consumer is stuck"]
    assert watch.stalled("g", "t") == 1 and watch.stalled("g", "other") == 0
    watch.update([worker(part(0, 40, 9), part(1, 8, 4))])
    assert [r.getMessage() for r in caplog.records] == [f"liveness: {watch.reasons()[0]}"]
    watch.update([worker(part(0, 41, 8), part(1, 8, 4))])
    assert watch.reasons() == []
    assert caplog.records[-1].getMessage() == "liveness: g/t[0] moves again"


@pytest.mark.parametrize("state", ["paused", "retrying", NO_LEADER])
def test_paused_or_retrying_partitions_and_caught_up_ones_never_stall(state: str) -> None:
    """Nor one without a leader: its brokers are down, an outage for /readyz, which a
    restart of kstage would not end."""
    clock = Clock()
    watch = StallWatch(10, clock)
    for _ in range(3):
        watch.update([worker(part(0, 40, 9, state), part(1, 50, 0), part(2, 0, None))])
        clock.now += 20
    assert watch.reasons() == []


def test_a_worker_that_stopped_polling_is_not_live(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    watch = StallWatch(10, clock)
    caplog.set_level(logging.WARNING, "actors.liveness")
    watch.update([worker(fetch_idle_s=12.4)])
    assert watch.reasons() == ["g/t: its fetch loop has not run for 12s (service.stall_after_s "
                               "10): the worker is stuck"]
    watch.update([worker(fetch_idle_s=0.2)])
    assert watch.reasons() == []
    assert caplog.records[-1].getMessage() == "liveness: g/t: its fetch loop runs again"


def test_a_partition_that_left_the_worker_is_forgotten() -> None:
    clock = Clock()
    watch = StallWatch(10, clock)
    watch.update([worker(part(0, 40, 9))])
    clock.now += 11
    watch.update([worker()])  # revoked
    watch.update([worker(part(0, 40, 9))])  # back: counted afresh
    assert watch.reasons() == []
