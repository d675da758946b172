"""SinkHealth: when a failing sink makes its worker not ready, and when it is ready again."""

from __future__ import annotations

from actors.sink_health import SinkHealth


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_not_ready_once_failing_for_the_threshold_ready_after_a_success() -> None:
    clock = Clock()
    health = SinkHealth(10, clock)
    health.failed(("t", 0), "http sink: answered HTTP 503", since=99.0)
    assert health.reason() is None and health.failing_since == 99.0
    clock.now = 108.9
    health.failed(("t", 0), "http sink: ReadTimeout", since=107.0)
    assert health.reason() is None
    clock.now = 109.0
    assert health.reason() == ("sink failing for 10s (2 failed attempt(s)): "
                               "http sink: ReadTimeout")
    health.succeeded(("t", 0))
    assert health.reason() is None and health.failing_since is None


def test_refused_credentials_are_not_ready_at_once_and_win() -> None:
    clock = Clock()
    health = SinkHealth(10, clock)
    health.failed(("t", 0), "answered HTTP 503", since=50.0)
    health.failed(("t", 1), "answered HTTP 401", auth=True)
    assert (health.reason() or "").startswith("sink credentials refused for 0s")
    health.succeeded(("t", 1))
    assert "HTTP 503" in (health.reason() or "")


def test_one_partition_going_through_does_not_hide_another_failing() -> None:
    clock = Clock()
    health = SinkHealth(1, clock)
    health.failed(("t", 0), "answered HTTP 404")
    clock.now += 5
    health.succeeded(("t", 1))
    assert "HTTP 404" in (health.reason() or "")


def test_long_errors_are_cut() -> None:
    health = SinkHealth(0)
    health.failed("k", "x" * 5000)
    reason = health.reason() or ""
    assert len(reason) < 400 and reason.endswith("...")


def test_forgotten_keys_no_longer_make_it_unready() -> None:
    """A partition taken from the worker (revoked, or fenced on a lost membership): its
    failing write was cancelled; the worker's readiness is about its own partitions."""
    clock = Clock()
    health = SinkHealth(1, clock)
    health.failed(("t", 0), "ReadTimeout")
    health.failed(("t", 1), "answered HTTP 503")
    clock.now += 5
    health.forget([("t", 0)])
    assert "HTTP 503" in (health.reason() or "")
    health.forget(iter([("t", 1), ("t", 7)]))
    assert health.reason() is None and health.failing_since is None
