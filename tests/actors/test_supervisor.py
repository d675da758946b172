"""Tests of actors.supervisor: one-for-one restarts, backoff, escalation and two-phase stop.

Children are counting fakes (no Kafka). Their behaviour is scripted per family: crash a
number of times then run until stopped, ignore ``stop`` (a hang), swallow
cancellation, or raise a :class:`FatalError`. Backoff waits go through a fake ``sleep``
that records the delays and moves a fake clock, so nothing waits for real except the
tiny grace periods of the shutdown tests.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from actors.errors import EscalationError, FatalError
from actors.supervisor import OneForOneSupervisor, RestartPolicy
from settings.models import SupervisorSettings

SEED = 1234
GUARD_S = 3.0  # every await on the supervisor is bounded: a bug fails, it never hangs


def make_settings(**overrides: float) -> SupervisorSettings:
    values: dict[str, float] = {
        "shutdown_grace_s": 0.05,
        "abort_grace_s": 0.05,
        "max_restarts": 10,
        "restart_window_s": 60,
        "min_backoff_s": 1.0,
        "max_backoff_s": 8.0,
    }
    values.update(overrides)
    return SupervisorSettings.model_validate(values)


class FakeTime:
    """A fake monotonic clock and a fake sleep that records delays and advances the clock."""

    def __init__(self, step_s: float = 0.0) -> None:
        self.now = 1000.0
        self.step_s = step_s
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        self.now += self.step_s
        await asyncio.sleep(0)


class FakeChild:
    """One incarnation of a scripted child; records what the supervisor did to it."""

    def __init__(self, family: Family, incarnation: int) -> None:
        self.family = family
        self.label = family.name
        self.incarnation = incarnation
        self.stop_calls = 0
        self.cancels = 0
        self.finished = False
        self.task: asyncio.Task[object] | None = None
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self.stop_calls += 1
        if not self.family.ignore_stop:
            self._stop.set()

    async def run(self) -> None:
        fam = self.family
        self.task = asyncio.current_task()
        if fam.wait_for is not None:
            await fam.wait_for.wait()
        if self.incarnation < fam.crashes:
            raise RuntimeError(f"{self.label} crash #{self.incarnation}")
        if fam.fatal:
            raise FatalError(f"{self.label}: fatal")
        fam.running.set()
        if fam.swallow_cancel:
            while not fam.release.is_set():
                try:
                    await fam.release.wait()
                except asyncio.CancelledError:
                    self.cancels += 1
            return
        try:
            await self._stop.wait()
        except asyncio.CancelledError:
            self.cancels += 1
            raise
        self.finished = True


class Family:
    """The factory of one child: builds a new FakeChild per incarnation and keeps them all."""

    def __init__(
        self,
        name: str,
        *,
        crashes: int = 0,
        fatal: bool = False,
        ignore_stop: bool = False,
        swallow_cancel: bool = False,
        wait_for: asyncio.Event | None = None,
    ) -> None:
        self.name = name
        self.crashes = crashes
        self.fatal = fatal
        self.ignore_stop = ignore_stop or swallow_cancel
        self.swallow_cancel = swallow_cancel
        self.wait_for = wait_for
        self.running = asyncio.Event()  # set when an incarnation runs past its script
        self.release = asyncio.Event()  # lets a cancellation-swallowing child end (cleanup)
        self.instances: list[FakeChild] = []

    def __call__(self, incarnation: int) -> FakeChild:
        child = FakeChild(self, incarnation)
        self.instances.append(child)
        return child

    @property
    def incarnations(self) -> list[int]:
        return [c.incarnation for c in self.instances]


def make_supervisor(
    families: list[Family],
    settings: SupervisorSettings,
    fake: FakeTime,
    *,
    seed: int = SEED,
) -> OneForOneSupervisor:
    policy = RestartPolicy(settings, rng=random.Random(seed), clock=fake.clock)  # noqa: S311
    return OneForOneSupervisor(
        [(f.name, f) for f in families], settings, policy=policy, sleep=fake.sleep
    )


@asynccontextmanager
async def supervising(sup: OneForOneSupervisor) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``sup.run()`` in a task; never leave it behind, even when the test fails."""
    runner = asyncio.create_task(sup.run())
    try:
        yield runner
    finally:
        if not runner.done():
            runner.cancel()
            await asyncio.wait([runner], timeout=1)


def expected_caps(settings: SupervisorSettings, n: int) -> list[float]:
    return [min(settings.max_backoff_s, settings.min_backoff_s * 2**i) for i in range(n)]


# ------------------------------------------------------------------------- restarts


async def test_crashed_child_is_replaced_by_a_new_instance_from_the_factory() -> None:
    settings = make_settings()
    fake = FakeTime()
    fam = Family("worker-a", crashes=3)
    sup = make_supervisor([fam], settings, fake)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        await fam.running.wait()
        assert fam.incarnations == [0, 1, 2, 3]
        assert len({id(c) for c in fam.instances}) == 4  # a fresh object every time
        assert sup.restarts == 3
        assert len(fake.sleeps) == 3
        assert sup.children == [fam.instances[-1]]
        assert sup.crashes()["worker-a"][1] == "RuntimeError: worker-a crash #2"
        sup.stop()
        await runner
    assert runner.result() is None
    assert [c.stop_calls for c in fam.instances] == [0, 0, 0, 1]  # only the live one
    assert fam.instances[-1].finished
    assert sup.cancelled == []


async def test_only_the_crashed_child_is_restarted() -> None:
    settings = make_settings()
    fake = FakeTime()
    steady = Family("steady")
    flaky = Family("flaky", crashes=2)
    sup = make_supervisor([steady, flaky], settings, fake)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        await flaky.running.wait()
        await steady.running.wait()
        assert steady.incarnations == [0]
        assert flaky.incarnations == [0, 1, 2]
        assert sup.restarts == 2
        sup.stop()
        await runner
    assert steady.instances[0].stop_calls == 1
    assert steady.instances[0].finished


async def test_backoff_delays_are_capped_exponential_with_equal_jitter() -> None:
    settings = make_settings(min_backoff_s=1.0, max_backoff_s=4.0, max_restarts=10)
    fake = FakeTime()
    fam = Family("a", crashes=6)
    sup = make_supervisor([fam], settings, fake)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        await fam.running.wait()
        sup.stop()
        await runner

    caps = expected_caps(settings, 6)
    assert caps == [1.0, 2.0, 4.0, 4.0, 4.0, 4.0]
    assert len(fake.sleeps) == 6
    for delay, cap in zip(fake.sleeps, caps, strict=True):
        assert cap / 2 <= delay <= cap, (delay, cap)
    # equal jitter: half the cap fixed, the other half drawn from the injected rng
    rng = random.Random(SEED)  # noqa: S311 - jitter, not crypto
    assert fake.sleeps == [cap / 2 + rng.uniform(0, cap / 2) for cap in caps]


async def test_backoff_is_deterministic_for_a_seed() -> None:
    runs: list[list[float]] = []
    for _ in range(2):
        settings = make_settings()
        fake = FakeTime()
        fam = Family("a", crashes=4)
        sup = make_supervisor([fam], settings, fake, seed=7)
        async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
            await fam.running.wait()
            sup.stop()
            await runner
        runs.append(fake.sleeps)
    assert len(runs[0]) == 4
    assert runs[0] == runs[1]


# ------------------------------------------------------------------------ escalation


async def test_too_many_crashes_within_the_window_escalate() -> None:
    settings = make_settings(max_restarts=2, restart_window_s=60)
    fake = FakeTime(step_s=1.0)  # crashes 1 s apart: all inside the window
    doomed = Family("doomed", crashes=1_000)
    sibling = Family("sibling")
    sup = make_supervisor([sibling, doomed], settings, fake)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        with pytest.raises(EscalationError, match="doomed") as info:
            await runner
    assert "more than 2 crashes" in str(info.value)
    assert doomed.incarnations == [0, 1, 2]  # the 3rd crash is one too many: no 4th
    assert sup.restarts == 2
    assert len(fake.sleeps) == 2
    assert sup.crash_reason is info.value
    # the other children were stopped gracefully, not cancelled
    assert sibling.instances[0].stop_calls == 1
    assert sibling.instances[0].finished
    assert sup.cancelled == []


async def test_crashes_spread_beyond_the_window_do_not_escalate() -> None:
    settings = make_settings(max_restarts=2, restart_window_s=60)
    fake = FakeTime(step_s=61.0)  # each backoff moves the clock past the window
    fam = Family("slow-crasher", crashes=6)
    sup = make_supervisor([fam], settings, fake)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        await fam.running.wait()
        assert fam.incarnations == [0, 1, 2, 3, 4, 5, 6]
        assert sup.restarts == 6
        sup.stop()
        await runner
    assert runner.result() is None
    assert sup.crash_reason is None
    # only one crash is ever inside the window, so the backoff never grows
    assert len(fake.sleeps) == 6
    assert all(settings.min_backoff_s / 2 <= d <= settings.min_backoff_s for d in fake.sleeps)


def test_restart_policy_window_with_fake_clock() -> None:
    settings = make_settings(max_restarts=2, restart_window_s=10)
    now = [0.0]
    policy = RestartPolicy(settings, rng=random.Random(SEED), clock=lambda: now[0])  # noqa: S311
    assert policy.record_crash()
    now[0] = 5.0
    assert policy.record_crash()
    now[0] = 9.0
    assert not policy.record_crash()  # 3 crashes within 10 s
    now[0] = 30.0
    assert policy.record_crash()  # the old ones left the window


# ---------------------------------------------------------------------------- fatal


async def test_fatal_error_is_not_restarted_and_stops_siblings() -> None:
    settings = make_settings()
    fake = FakeTime()
    sibling = Family("sibling")
    fatal = Family("fatal", fatal=True, wait_for=sibling.running)
    sup = make_supervisor([sibling, fatal], settings, fake)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        with pytest.raises(FatalError, match="fatal: fatal") as info:
            await runner
    assert type(info.value) is FatalError
    assert fatal.incarnations == [0]
    assert sup.restarts == 0
    assert fake.sleeps == []
    assert sibling.instances[0].stop_calls == 1
    assert sibling.instances[0].finished
    assert sibling.instances[0].cancels == 0
    assert sup.cancelled == []


# ------------------------------------------------------------------------- shutdown


async def test_shutdown_phase_one_children_that_drain_are_not_cancelled() -> None:
    settings = make_settings(shutdown_grace_s=5.0, abort_grace_s=5.0)
    fake = FakeTime()
    a, b = Family("a"), Family("b")
    sup = make_supervisor([a, b], settings, fake)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        await a.running.wait()
        await b.running.wait()
        started = time.monotonic()
        sup.stop()
        await runner
        elapsed = time.monotonic() - started
    assert elapsed < 4.0  # did not wait out the 5 s grace (margin for a loaded machine)
    assert sup.cancelled == []
    for fam in (a, b):
        assert fam.instances[0].stop_calls == 1
        assert fam.instances[0].finished
        assert fam.instances[0].cancels == 0


async def test_shutdown_is_idempotent() -> None:
    settings = make_settings()
    fake = FakeTime()
    fam = Family("a")
    sup = make_supervisor([fam], settings, fake)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        await fam.running.wait()
        sup.stop()
        sup.stop()
        await runner
    assert fam.instances[0].stop_calls == 1


async def test_shutdown_phase_two_cancels_a_child_ignoring_stop() -> None:
    settings = make_settings(shutdown_grace_s=0.05, abort_grace_s=10.0)
    fake = FakeTime()
    good = Family("good")
    hung = Family("hung", ignore_stop=True)
    sup = make_supervisor([good, hung], settings, fake)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        await good.running.wait()
        await hung.running.wait()
        started = time.monotonic()
        sup.stop()
        await runner
        elapsed = time.monotonic() - started
    assert runner.result() is None
    assert sup.cancelled == ["hung"]
    assert hung.instances[0].stop_calls == 1
    assert hung.instances[0].cancels == 1
    assert not hung.instances[0].finished
    assert good.instances[0].finished
    assert good.instances[0].cancels == 0
    assert 0.045 <= elapsed < 5.0  # waited the shutdown grace, not the 10 s abort grace


async def test_shutdown_abandons_a_child_that_swallows_cancellation() -> None:
    settings = make_settings(shutdown_grace_s=0.05, abort_grace_s=0.05)
    fake = FakeTime()
    good = Family("good")
    stubborn = Family("stubborn", swallow_cancel=True)
    sup = make_supervisor([good, stubborn], settings, fake)
    try:
        async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
            await good.running.wait()
            await stubborn.running.wait()
            started = time.monotonic()
            sup.stop()
            await runner
            elapsed = time.monotonic() - started
        assert runner.result() is None
        assert sup.cancelled == ["stubborn"]
        child = stubborn.instances[0]
        assert child.stop_calls == 1
        assert child.cancels >= 1
        assert child.task is not None and not child.task.done()  # abandoned, still alive
        assert 0.09 <= elapsed < GUARD_S / 2  # both graces, then gave up: not hung
        assert good.instances[0].finished
    finally:
        # let the abandoned task end so the event loop closes cleanly
        stubborn.release.set()
        tasks = [c.task for c in stubborn.instances if c.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=1)


async def test_shutdown_during_restart_backoff_does_not_wait_for_the_grace() -> None:
    """A child waiting out its restart backoff has nothing to drain: shutdown must cancel
    the backoff at once, not ask the dead incarnation to stop and wait the grace."""
    settings = make_settings(shutdown_grace_s=3.0, abort_grace_s=3.0)
    backing_off = asyncio.Event()
    never = asyncio.Event()

    async def long_sleep(delay: float) -> None:
        backing_off.set()
        await never.wait()  # a long backoff; only cancellation ends it

    fam = Family("a", crashes=1)
    policy = RestartPolicy(settings, rng=random.Random(SEED), clock=FakeTime().clock)  # noqa: S311
    sup = OneForOneSupervisor([("a", fam)], settings, policy=policy, sleep=long_sleep)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        await backing_off.wait()
        started = time.monotonic()
        sup.stop()
        await runner
        elapsed = time.monotonic() - started
    assert fam.incarnations == [0]  # never restarted
    assert sup.cancelled == []  # nothing was running, so nothing had to be cancelled
    assert elapsed < settings.shutdown_grace_s
    assert fam.instances[0].stop_calls == 0  # the crashed incarnation is gone: not asked


# ------------------------------------------------------------ an operator's restart


async def test_an_operators_restart_stops_the_child_then_starts_it_at_once() -> None:
    """The control API's restart: the child is asked to stop (drain, commit), and once it
    ended a new incarnation starts with no backoff and no crash counted; the other
    children are left alone."""
    settings = make_settings(max_restarts=0)  # a crash counted would escalate
    fake = FakeTime()
    target, other = Family("target"), Family("other")
    sup = make_supervisor([target, other], settings, fake)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        await target.running.wait()
        await other.running.wait()
        target.running.clear()
        sup.restart("target")
        sup.restart("target")  # asked twice meanwhile: one restart
        await target.running.wait()
        assert target.incarnations == [0, 1]
        assert target.instances[0].stop_calls == 1 and target.instances[0].finished
        assert fake.sleeps == [] and sup.restarts == 1
        assert other.incarnations == [0] and other.instances[0].stop_calls == 0
        with pytest.raises(KeyError):
            sup.restart("nope")
        sup.stop()
        await runner
    assert runner.result() is None


async def test_a_child_that_ignores_the_restart_is_cancelled_after_the_grace() -> None:
    settings = make_settings(shutdown_grace_s=0.05)
    fake = FakeTime()
    stuck = Family("stuck", ignore_stop=True)
    sup = make_supervisor([stuck], settings, fake)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        await stuck.running.wait()
        stuck.running.clear()
        sup.restart("stuck")
        await stuck.running.wait()
        assert stuck.incarnations == [0, 1]
        assert stuck.instances[0].cancels == 1 and not stuck.instances[0].finished
        stuck.ignore_stop = False
        sup.stop()
        await runner


# ------------------------------------------------------ children that come and go


def dynamic_supervisor(settings: SupervisorSettings, fake: FakeTime) -> OneForOneSupervisor:
    policy = RestartPolicy(settings, rng=random.Random(SEED), clock=fake.clock)  # noqa: S311
    return OneForOneSupervisor([], settings, policy=policy, sleep=fake.sleep, dynamic=True)


async def test_a_dynamic_supervisor_waits_for_children_and_starts_each_added_one() -> None:
    settings = make_settings()
    sup = dynamic_supervisor(settings, FakeTime())
    early, late = Family("early"), Family("late")
    sup.add("early", early)  # before run: started with the others
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        await early.running.wait()
        sup.add("late", late)
        await late.running.wait()
        with pytest.raises(ValueError, match="'late' is already supervised"):
            sup.add("late", late)
        assert sup.names() == ["early", "late"]
        sup.stop()
        await runner
    assert [c.finished for c in (*early.instances, *late.instances)] == [True, True]


async def test_a_dynamic_supervisor_left_without_children_runs_until_stopped() -> None:
    """Its only child retired (the only topic of a pattern deleted), it goes on: a child
    added later still starts (a supervisor that had returned would never start it)."""
    sup = dynamic_supervisor(make_settings(), FakeTime())
    first, second = Family("first"), Family("second")
    sup.add("first", first)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        await first.running.wait()
        sup.retire("first")
        while sup.names():  # bounded by GUARD_S
            await asyncio.sleep(0.01)
        sup.add("second", second)
        await second.running.wait()
        assert not runner.done()
        sup.stop()
        await runner


async def test_a_retired_child_is_stopped_once_never_restarted_and_forgotten() -> None:
    settings = make_settings()
    sup = dynamic_supervisor(settings, FakeTime())
    gone, stays = Family("gone"), Family("stays")
    sup.add("gone", gone)
    sup.add("stays", stays)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        await gone.running.wait()
        await stays.running.wait()
        sup.retire("gone")
        sup.retire("gone")  # idempotent
        while "gone" in sup.names():  # bounded by GUARD_S
            await asyncio.sleep(0.01)
        assert [c.stop_calls for c in gone.instances] == [1] and gone.instances[0].finished
        assert sup.restarts == 0 and sup.names() == ["stays"]
        with pytest.raises(KeyError):
            sup.retire("gone")
        sup.stop()
        await runner


async def test_a_retired_child_that_ignores_stop_is_cancelled_after_the_grace() -> None:
    settings = make_settings()
    sup = dynamic_supervisor(settings, FakeTime())
    stuck = Family("stuck", ignore_stop=True)
    sup.add("stuck", stuck)
    async with asyncio.timeout(GUARD_S), supervising(sup) as runner:
        await stuck.running.wait()
        sup.retire("stuck")
        while sup.names():  # bounded by GUARD_S: cancelled after shutdown_grace_s
            await asyncio.sleep(0.01)
        assert stuck.instances[0].cancels == 1 and sup.restarts == 0
        sup.stop()
        await runner
