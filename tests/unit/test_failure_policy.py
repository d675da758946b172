"""Tests of actors.failure: retry schedule and the continue / throw / retry decisions."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from actors.errors import MessageFailedError
from actors.failure import FailurePolicy, Outcome, retry_delays_s
from processors.errors import PoisonMessage
from settings.models import FailureSettings

WHERE = "events[0]@42"


def failure(**values: Any) -> FailureSettings:
    return FailureSettings.model_validate(values)


class FakeSleep:
    """Records the waits; answers True (waited) until ``stop_after`` waits were made."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.delays: list[float] = []
        self.stop_after = stop_after

    async def __call__(self, delay: float) -> bool:
        self.delays.append(delay)
        await asyncio.sleep(0)
        return self.stop_after is None or len(self.delays) <= self.stop_after


class Attempt:
    """Re-runs processing: fails ``failures`` times, then returns ``value``."""

    def __init__(
        self, failures: int, value: object = "rows", exc: type[Exception] = ValueError
    ) -> None:
        self.failures = failures
        self.value = value
        self.exc = exc
        self.calls = 0

    async def __call__(self) -> object:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc(f"retry {self.calls} failed")
        return self.value


class DeadLetter:
    def __init__(self) -> None:
        self.calls: list[tuple[BaseException, int]] = []

    async def __call__(self, exc: BaseException, attempts: int) -> None:
        self.calls.append((exc, attempts))


RETRY = {"mode": "retry", "max_retries": 3, "min_backoff_ms": 60000, "max_backoff_ms": 100000}


# -------------------------------------------------------------------------- schedule


@pytest.mark.parametrize(
    ("retries", "expected"),
    [
        (3, [60.0, 80.0, 100.0]),
        (1, [60.0]),
        (2, [60.0, 100.0]),
        (5, [60.0, 70.0, 80.0, 90.0, 100.0]),
    ],
)
def test_retry_delays_spread_linearly(retries: int, expected: list[float]) -> None:
    settings = failure(max_retries=retries, min_backoff_ms=60000, max_backoff_ms=100000)
    assert retry_delays_s(settings) == pytest.approx(expected)
    assert len(retry_delays_s(settings)) == retries


def test_retry_delays_with_equal_bounds() -> None:
    assert retry_delays_s(failure(max_retries=3, min_backoff_ms=500, max_backoff_ms=500)) == [
        0.5,
        0.5,
        0.5,
    ]


def test_policy_exposes_its_delays() -> None:
    policy = FailurePolicy(failure(**RETRY), FakeSleep())
    assert policy.delays_s == [60.0, 80.0, 100.0]


# ---------------------------------------------------------------------------- retry


async def test_retry_recovers_on_the_second_retry() -> None:
    sleep, attempt, dead = FakeSleep(), Attempt(failures=1, value=["row"]), DeadLetter()
    policy = FailurePolicy(failure(**RETRY), sleep)
    outcome, value = await policy.handle(ValueError("first"), attempt, dead, WHERE)
    assert outcome is Outcome.RECOVERED
    assert value == ["row"]
    assert sleep.delays == [60.0, 80.0]
    assert attempt.calls == 2
    assert dead.calls == []


async def test_retry_exhausted_then_continue_dead_letters_once() -> None:
    sleep, attempt, dead = FakeSleep(), Attempt(failures=99), DeadLetter()
    policy = FailurePolicy(failure(**RETRY, then="continue"), sleep)
    outcome, value = await policy.handle(ValueError("first"), attempt, dead, WHERE)
    assert outcome is Outcome.DEAD_LETTERED
    assert value is None
    assert sleep.delays == [60.0, 80.0, 100.0]
    assert attempt.calls == 3
    assert len(dead.calls) == 1
    exc, attempts = dead.calls[0]
    assert attempts == 4  # the first attempt and 3 retries
    assert str(exc) == "retry 3 failed"  # the last error is the one recorded


async def test_retry_exhausted_then_throw_raises_with_attempts() -> None:
    sleep, attempt, dead = FakeSleep(), Attempt(failures=99), DeadLetter()
    policy = FailurePolicy(failure(**RETRY, then="throw"), sleep)
    with pytest.raises(MessageFailedError, match=r"events\[0\]@42 failed after 4") as info:
        await policy.handle(ValueError("first"), attempt, dead, WHERE)
    assert info.value.attempts == 4
    assert isinstance(info.value.__cause__, ValueError)
    assert dead.calls == []
    assert sleep.delays == [60.0, 80.0, 100.0]


async def test_poison_message_is_not_retried_in_retry_mode() -> None:
    sleep, attempt, dead = FakeSleep(), Attempt(failures=0), DeadLetter()
    policy = FailurePolicy(failure(**RETRY, then="continue"), sleep)
    poison = PoisonMessage("not an object")
    outcome, _ = await policy.handle(poison, attempt, dead, WHERE)
    assert outcome is Outcome.DEAD_LETTERED
    assert attempt.calls == 0
    assert sleep.delays == []
    assert dead.calls == [(poison, 1)]


async def test_poison_message_in_retry_mode_follows_then_throw() -> None:
    sleep, attempt, dead = FakeSleep(), Attempt(failures=0), DeadLetter()
    policy = FailurePolicy(failure(**RETRY, then="throw"), sleep)
    with pytest.raises(MessageFailedError) as info:
        await policy.handle(PoisonMessage("bad"), attempt, dead, WHERE)
    assert info.value.attempts == 1
    assert attempt.calls == 0
    assert sleep.delays == []
    assert dead.calls == []


async def test_poison_message_raised_by_a_retry_stops_the_retries() -> None:
    """PoisonMessage means retrying will not help (processors.errors), also on a retry."""
    sleep, dead = FakeSleep(), DeadLetter()
    attempt = Attempt(failures=99, exc=PoisonMessage)
    policy = FailurePolicy(failure(**RETRY, then="continue"), sleep)
    outcome, _ = await policy.handle(ValueError("transient"), attempt, dead, WHERE)
    assert outcome is Outcome.DEAD_LETTERED
    assert attempt.calls == 1
    assert sleep.delays == [60.0]
    assert len(dead.calls) == 1
    exc, attempts = dead.calls[0]
    assert isinstance(exc, PoisonMessage)
    assert attempts == 2


async def test_stop_during_a_retry_wait_abandons_without_dead_letter() -> None:
    sleep, attempt, dead = FakeSleep(stop_after=0), Attempt(failures=99), DeadLetter()
    policy = FailurePolicy(failure(**RETRY), sleep)
    outcome, value = await policy.handle(ValueError("first"), attempt, dead, WHERE)
    assert outcome is Outcome.ABANDONED
    assert value is None
    assert sleep.delays == [60.0]
    assert attempt.calls == 0
    assert dead.calls == []


async def test_stop_during_a_later_retry_wait_abandons() -> None:
    sleep, attempt, dead = FakeSleep(stop_after=1), Attempt(failures=99), DeadLetter()
    policy = FailurePolicy(failure(**RETRY), sleep)
    outcome, _ = await policy.handle(ValueError("first"), attempt, dead, WHERE)
    assert outcome is Outcome.ABANDONED
    assert sleep.delays == [60.0, 80.0]
    assert attempt.calls == 1
    assert dead.calls == []


async def test_cancellation_of_a_retry_propagates() -> None:
    async def cancelled_attempt() -> object:
        raise asyncio.CancelledError

    dead = DeadLetter()
    policy = FailurePolicy(failure(**RETRY), FakeSleep())
    with pytest.raises(asyncio.CancelledError):
        await policy.handle(ValueError("first"), cancelled_attempt, dead, WHERE)
    assert dead.calls == []


# ------------------------------------------------------------------- throw, continue


async def test_mode_throw_raises_at_once_without_dead_letter() -> None:
    sleep, attempt, dead = FakeSleep(), Attempt(failures=0), DeadLetter()
    policy = FailurePolicy(failure(mode="throw"), sleep)
    first = ValueError("boom")
    with pytest.raises(MessageFailedError, match="failed after 1 attempt") as info:
        await policy.handle(first, attempt, dead, WHERE)
    assert info.value.attempts == 1
    assert info.value.__cause__ is first
    assert attempt.calls == 0
    assert sleep.delays == []
    assert dead.calls == []


async def test_mode_continue_dead_letters_with_one_attempt() -> None:
    sleep, attempt, dead = FakeSleep(), Attempt(failures=0), DeadLetter()
    policy = FailurePolicy(failure(mode="continue"), sleep)
    first = ValueError("boom")
    outcome, value = await policy.handle(first, attempt, dead, WHERE)
    assert outcome is Outcome.DEAD_LETTERED
    assert value is None
    assert dead.calls == [(first, 1)]
    assert attempt.calls == 0
    assert sleep.delays == []
