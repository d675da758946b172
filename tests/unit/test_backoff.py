"""actors.backoff: capped exponential waits with no, full or equal jitter, and the
failure policy's linear schedule. Each caller's former formula is written out here once,
and the helper must reproduce it exactly (same floats), so moving a caller onto the
helper changes no wait."""

from __future__ import annotations

import random

import pytest

from actors.backoff import Jitter, backoff_s, linear_delays_s


def doubling(lo: float, hi: float, n: int) -> list[float]:
    """The sink and dead-letter write loops: start at lo, double after each wait, cap hi."""
    out, delay = [], lo
    for _ in range(n):
        out.append(delay)
        delay = min(delay * 2, hi)
    return out


def test_no_jitter_doubles_from_min_up_to_the_cap() -> None:
    waits = [backoff_s(n, 0.5, 30.0) for n in range(10)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]
    assert waits == doubling(0.5, 30.0, 10)


@pytest.mark.parametrize(("lo", "hi"), [(0.5, 30.0), (0.001, 0.001), (0.2, 1.0), (0.3, 7.7)])
def test_no_jitter_equals_the_write_loops_doubling(lo: float, hi: float) -> None:
    assert [backoff_s(n, lo, hi) for n in range(40)] == doubling(lo, hi, 40)


def test_no_jitter_never_calls_rand() -> None:
    def rand() -> float:
        raise AssertionError("rand called without jitter")

    assert backoff_s(3, 1.0, 60.0, Jitter.NONE, rand) == 8.0


def test_full_jitter_scales_the_capped_wait() -> None:
    assert [backoff_s(n, 0.2, 1.0, Jitter.FULL, lambda: 1.0) for n in range(4)] == [
        0.2, 0.4, 0.8, 1.0]
    assert backoff_s(2, 0.2, 1.0, Jitter.FULL, lambda: 0.5) == 0.4
    assert backoff_s(5, 0.2, 1.0, Jitter.FULL, lambda: 0.0) == 0.0


def test_full_jitter_equals_the_http_clients_formula() -> None:
    """actors/codecs/schema_registry.py and actors/http_sink.py computed
    ``jitter() * min(cap, min_backoff_s * 2.0 ** min(attempt, 60))``."""
    draws = random.Random(7)  # noqa: S311 - test data
    for _ in range(500):
        attempt = draws.randrange(0, 80)
        lo, hi, r = draws.uniform(0, 2), draws.uniform(0, 60), draws.random()
        assert backoff_s(attempt, lo, hi, Jitter.FULL, lambda r=r: r) == (
            r * min(hi, lo * 2.0 ** min(attempt, 60)))


def test_equal_jitter_equals_the_supervisors_formula() -> None:
    """actors/supervisor.py computed ``cap / 2 + rng.uniform(0, cap / 2)`` with
    ``cap = min(max_backoff_s, min_backoff_s * 2**n)``: same rng, same floats."""
    mine, theirs = random.Random(42), random.Random(42)  # noqa: S311 - test data
    for n in range(30):
        for lo, hi in ((0.5, 30.0), (0.1, 5.0), (1.0, 1.0), (0.0, 10.0)):
            cap = min(hi, lo * 2**n)
            assert backoff_s(n, lo, hi, Jitter.EQUAL, mine.random) == (
                cap / 2 + theirs.uniform(0, cap / 2))


def test_equal_jitter_stays_between_half_and_the_whole_wait() -> None:
    assert backoff_s(3, 1.0, 60.0, Jitter.EQUAL, lambda: 0.0) == 4.0
    assert backoff_s(3, 1.0, 60.0, Jitter.EQUAL, lambda: 0.5) == 6.0
    assert backoff_s(10, 1.0, 60.0, Jitter.EQUAL, lambda: 0.999) == pytest.approx(59.97)


def test_a_long_outage_neither_overflows_nor_exceeds_the_cap() -> None:
    # 2.0 ** 10_000 alone raises OverflowError; the wait must still be the cap
    assert backoff_s(10_000, 0.5, 30.0) == 30.0
    assert backoff_s(10_000, 0.5, 30.0, Jitter.FULL, lambda: 0.5) == 15.0
    assert backoff_s(10_000, 0.0, 30.0) == 0.0


def test_jitter_modes_are_named_like_their_values() -> None:
    assert [Jitter(v) for v in ("full", "equal", "none")] == [
        Jitter.FULL, Jitter.EQUAL, Jitter.NONE]


@pytest.mark.parametrize(("n", "lo", "hi", "expected"), [
    (1, 60.0, 100.0, [60.0]),
    (3, 60.0, 100.0, [60.0, 80.0, 100.0]),
    (5, 0.0, 1.0, [0.0, 0.25, 0.5, 0.75, 1.0]),
    (2, 0.5, 0.5, [0.5, 0.5]),
])
def test_linear_delays_spread_evenly(n: int, lo: float, hi: float,
                                     expected: list[float]) -> None:
    assert linear_delays_s(n, lo, hi) == expected
