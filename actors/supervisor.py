"""One-for-one supervision of workers, with restart intensity and a two-phase stop.

Each child is described by a factory; a crashed child is replaced by a fresh instance
from its factory after a capped exponential backoff with jitter. More than
``max_restarts`` crashes within ``restart_window_s`` escalate: the supervisor stops
the other children and raises :class:`~actors.errors.EscalationError`. A
:class:`~actors.errors.FatalError` from a child (failure mode ``throw``, no committed
offset with ``auto_offset_reset: none``) is never restarted; it stops everything too.

Stop, in two phases (:meth:`OneForOneSupervisor.stop` asks, :meth:`~OneForOneSupervisor.run`
carries them out; the vocabulary is :mod:`actors.lifecycle`'s):

1. ask every child to stop intake, drain and commit; wait ``shutdown_grace_s``;
2. cancel whatever is left and wait ``abort_grace_s``; then name the stragglers.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from actors.backoff import Jitter, backoff_s
from actors.errors import EscalationError, FatalError
from actors.lifecycle import Lifecycle
from settings.models import SupervisorSettings

logger = logging.getLogger(__name__)


class Child(Protocol):
    label: str

    async def run(self) -> None: ...

    def stop(self) -> None: ...


ChildFactory = Callable[[int], Child]
"""Builds a fresh child; the argument is the incarnation number (0, 1, 2, ...)."""


@dataclass(eq=False)
class _Slot:
    factory: ChildFactory
    name: str
    incarnation: int = 0
    child: Child | None = None
    task: asyncio.Task[None] | None = None
    restart: bool = False  # an operator asked for a restart: start again when it ends
    crashed: tuple[float, str] | None = None  # the last crash: wall time, error
    retired: bool = False  # its topic is gone: stop it for good, then drop the slot


@dataclass
class RestartPolicy:
    """Restart intensity and backoff delays (capped exponential, equal jitter)."""

    settings: SupervisorSettings
    rng: random.Random = field(default_factory=random.Random)
    clock: Callable[[], float] = time.monotonic
    _crashes: deque[float] = field(default_factory=deque)

    def record_crash(self) -> bool:
        """Record one crash; False once the intensity is exceeded (escalate)."""
        now = self.clock()
        self._crashes.append(now)
        while self._crashes and now - self._crashes[0] > self.settings.restart_window_s:
            self._crashes.popleft()
        return len(self._crashes) <= self.settings.max_restarts

    def delay_s(self) -> float:
        """The wait before the next restart: half fixed, half random, capped."""
        n = max(len(self._crashes) - 1, 0)
        return backoff_s(n, self.settings.min_backoff_s, self.settings.max_backoff_s,
                         Jitter.EQUAL, self.rng.random)


class OneForOneSupervisor:
    """Runs children, replaces the ones that crash, stops them all in two phases.

    Args:
        factories: (name, factory) pairs, one per child.
        settings: restart intensity, backoff and grace periods.
        sleep: awaitable sleep (a fake clock in tests).
        dynamic: children come and go (:meth:`add`, :meth:`retire`): :meth:`run` keeps
            running with none until stopped, instead of returning once all ended.
    """

    def __init__(
        self,
        factories: list[tuple[str, ChildFactory]],
        settings: SupervisorSettings,
        *,
        policy: RestartPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        dynamic: bool = False,
    ) -> None:
        self.settings = settings
        self.dynamic = dynamic
        self.policy = policy or RestartPolicy(settings)
        self._slots = [_Slot(f, name) for name, f in factories]
        self._sleep = sleep
        self._stopping = False  # the two phases began
        self.lifecycle = Lifecycle("supervisor")
        self._wakeup = asyncio.Event()
        self._started = False
        self.restarts = 0
        self.cancelled: list[str] = []
        self.crash_reason: BaseException | None = None

    def __repr__(self) -> str:
        live = sum(1 for s in self._slots if s.task and not s.task.done())
        return (f"<OneForOneSupervisor {self.lifecycle} children={len(self._slots)} "
                f"live={live} restarts={self.restarts}>")

    @property
    def _stop_asked(self) -> bool:
        """A stop was asked or began: no child is (re)started any more."""
        return self._stopping or self.lifecycle.stopping_or_done

    def crashes(self) -> dict[str, tuple[float, str]]:
        """Each child's last crash (wall-clock time and error), by name; for
        ``/status``."""
        return {s.name: s.crashed for s in self._slots if s.crashed is not None}

    @property
    def children(self) -> list[Child]:
        """The current incarnation of every child that has been started."""
        return [s.child for s in self._slots if s.child is not None]

    async def _run_child(self, slot: _Slot, delay: float) -> None:
        if delay:
            await self._sleep(delay)
            if self._stop_asked:
                return
        child = slot.child = slot.factory(slot.incarnation)
        await child.run()

    def _launch(self, slot: _Slot, delay: float = 0.0) -> None:
        slot.task = asyncio.create_task(self._run_child(slot, delay), name=slot.name)
        slot.task.add_done_callback(lambda _: self._wakeup.set())

    def restart(self, name: str) -> None:
        """Restart the child ``name`` (an operator's request): it is asked to stop as in
        phase 1 (drain, commit), cancelled if it has not ended within
        ``shutdown_grace_s``, then started afresh at once; not counted as a crash.
        KeyError for an unknown name; nothing happens once a stop began."""
        slot = next((s for s in self._slots if s.name == name), None)
        if slot is None:
            raise KeyError(name)
        if self._stop_asked or slot.restart:
            return
        slot.restart = True
        if slot.task is None or slot.task.done() or slot.child is None:
            slot.restart = False  # not running (a restart backoff): it starts anyway
            return
        slot.child.stop()
        task = slot.task

        def overdue() -> None:
            if not task.done():
                logger.warning("%s: did not stop within the shutdown grace of %gs for the "
                               "restart; cancelling it", name, self.settings.shutdown_grace_s)
                task.cancel()
        asyncio.get_running_loop().call_later(self.settings.shutdown_grace_s, overdue)

    def names(self) -> list[str]:
        """The name of every child, running or not."""
        return [s.name for s in self._slots]

    def add(self, name: str, factory: ChildFactory) -> None:
        """A child more (a topic found by a pattern): started at once when :meth:`run`
        runs, with the others otherwise; nothing happens once a stop began. ValueError
        for a name it already has."""
        if any(s.name == name for s in self._slots):
            raise ValueError(f"a child named {name!r} is already supervised")
        if self._stop_asked:
            return
        slot = _Slot(factory, name)
        self._slots.append(slot)
        if self._started:
            self._launch(slot)

    def retire(self, name: str) -> None:
        """Stop the child ``name`` for good (its topic was deleted): it is asked to stop
        as in phase 1 (drain, commit), cancelled past ``shutdown_grace_s``, never
        restarted, and forgotten once it ended. KeyError for an unknown name."""
        slot = next((s for s in self._slots if s.name == name), None)
        if slot is None:
            raise KeyError(name)
        if slot.retired:
            return
        slot.retired = True
        if slot.task is None or slot.task.done():
            self._wakeup.set()  # not running: forgotten at once
            return
        if slot.child is None:
            slot.task.cancel()  # waiting out a restart backoff: nothing to drain
            return
        slot.child.stop()
        task = slot.task

        def overdue() -> None:
            if not task.done():
                logger.warning("%s: did not stop within the shutdown grace of %gs after its "
                               "topic was deleted; cancelling it", name,
                               self.settings.shutdown_grace_s)
                task.cancel()
        asyncio.get_running_loop().call_later(self.settings.shutdown_grace_s, overdue)

    def stop(self) -> None:
        """Phase 1 of a stop (idempotent): :meth:`run` asks every child to stop, waits
        ``shutdown_grace_s``, cancels what is left (phase 2), waits ``abort_grace_s`` and
        names the stragglers, then returns."""
        self.lifecycle.stopping()
        self._wakeup.set()

    async def run(self) -> None:
        """Supervise until stopped (:meth:`stop`; every child has finished or been
        abandoned) or a crash escalates; raises the escalation or fatal error then."""
        with self.lifecycle.running():
            await self._supervise()

    async def _supervise(self) -> None:
        if self.lifecycle.stopping_or_done:  # stop() came first: nothing to start
            self._stopping = True
            return
        self._started = True
        for slot in self._slots:
            self._launch(slot)
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            for slot in list(self._slots):
                if slot.retired and (slot.task is None or slot.task.done()):
                    self._forget(slot)
                    continue
                task = slot.task
                if task is None or not task.done():
                    continue
                slot.task = None
                if slot.restart:
                    self._restarted(slot, task)
                    continue
                if task.cancelled():
                    continue
                exc = task.exception()
                if exc is None:
                    logger.info("%s: finished", slot.name)
                    continue
                self._on_crash(slot, exc)
            if (self.crash_reason is not None or self.lifecycle.stopping_or_done) \
                    and not self._stopping:
                await self._shutdown()
            if all(s.task is None for s in self._slots) and (
                    not self.dynamic or self._stop_asked or self.crash_reason is not None):
                if self.crash_reason is not None:
                    raise self.crash_reason
                return

    def _forget(self, slot: _Slot) -> None:
        """A retired child ended: drop its slot (an error while it stopped is logged)."""
        self._slots.remove(slot)
        task = slot.task
        exc = None if task is None or task.cancelled() else task.exception()
        if exc is not None:
            logger.error("%s: stopped with an error after its topic was deleted: %s: %s",
                         slot.name, type(exc).__name__, exc, exc_info=exc)
        logger.info("%s: stopped and removed (its topic was deleted)", slot.name)

    def _restarted(self, slot: _Slot, task: asyncio.Task[None]) -> None:
        """``slot``'s child ended for an operator's restart: start the next incarnation
        (a crash meanwhile is reported as one, and restarts the same way)."""
        slot.restart = False
        exc = None if task.cancelled() else task.exception()
        if isinstance(exc, FatalError):
            self._on_crash(slot, exc)
            return
        if exc is not None:
            logger.error("%s crashed while stopping for a restart: %s: %s", slot.name,
                         type(exc).__name__, exc, exc_info=exc)
        if self._stop_asked:
            return
        slot.child = None
        slot.incarnation += 1
        self.restarts += 1
        logger.warning("%s: restarting at the operator's request (restart %d)", slot.name,
                       self.restarts)
        self._launch(slot)

    def _on_crash(self, slot: _Slot, exc: BaseException) -> None:
        slot.crashed = (time.time(), f"{type(exc).__name__}: {exc}")
        if isinstance(exc, FatalError):
            logger.critical("%s: %s", slot.name, exc)
            self.crash_reason = self.crash_reason or exc
            return
        logger.error("%s crashed: %s: %s", slot.name, type(exc).__name__, exc, exc_info=exc)
        if self._stop_asked:
            return
        if not self.policy.record_crash():
            msg = (f"{slot.name}: more than {self.settings.max_restarts} crashes within "
                   f"{self.settings.restart_window_s:g}s; giving up (last: "
                   f"{type(exc).__name__}: {exc})")
            logger.critical(msg)
            self.crash_reason = self.crash_reason or EscalationError(msg)
            return
        delay = self.policy.delay_s()
        slot.child = None  # the dead incarnation must not be asked to stop
        slot.incarnation += 1
        self.restarts += 1
        logger.warning("%s: restarting in %.2fs (restart %d)", slot.name, delay, self.restarts)
        self._launch(slot, delay)

    async def _shutdown(self) -> None:
        """Two-phase stop of every child; returns when all are gone or abandoned."""
        if self._stopping:
            return
        self._stopping = True
        live = [s for s in self._slots if s.task is not None and not s.task.done()]
        for slot in live:
            if slot.child is not None:
                slot.child.stop()
            else:  # still waiting out a restart backoff: nothing to drain
                assert slot.task is not None  # noqa: S101
                slot.task.cancel()
        tasks = {s.task for s in live if s.task is not None}
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self.settings.shutdown_grace_s)
        if not pending:
            return
        logger.warning("shutdown grace of %gs expired; cancelling %s",
                       self.settings.shutdown_grace_s, sorted(t.get_name() for t in pending))
        self.cancelled = sorted(t.get_name() for t in pending)
        for task in pending:
            task.cancel()
        _, stragglers = await asyncio.wait(pending, timeout=self.settings.abort_grace_s)
        if stragglers:
            logger.warning("abort grace of %gs expired; abandoning %s",
                           self.settings.abort_grace_s,
                           sorted(t.get_name() for t in stragglers))
            for slot in live:
                if slot.task in stragglers:
                    slot.task = None
            self._wakeup.set()
