"""The lifecycle vocabulary every actor (the master, the supervisor, a worker) speaks.

* ``await actor.run()`` starts the actor and runs it until it is stopped (it returns) or
  crashes (it raises). An actor runs once: a second ``run()`` raises ``RuntimeError``.
* ``actor.stop()`` is phase 1 of a stop: intake stops, work in flight drains and is
  committed, then ``run()`` returns. It returns at once and may be called any number of
  times, before, during or after ``run()``.
* Phase 2 is cancelling the task that awaits ``run()``: what has not drained is abandoned
  (never committed). The supervisor does it to its children ``shutdown_grace_s`` after
  their ``stop()``, then waits ``abort_grace_s`` more and names the stragglers.
* Resources an actor uses (sinks, clients, files) are ``open()``-ed and ``close()``-d by it.

Each actor keeps its :class:`State` in a :class:`Lifecycle` and shows it in its ``repr``::

    INIT --run()--> RUNNING --stop()--> STOPPING --run() returns--> STOPPED
                       \\--------------------------run() raises--> CRASHED
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum


class State(StrEnum):
    """Where an actor is in its lifecycle."""

    INIT = "init"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    CRASHED = "crashed"


class Lifecycle:
    """The state of one actor, moved only along the arrows of the module doc.

    Args:
        name: the actor's name, for errors.
    """

    __slots__ = ("_started", "name", "state")

    def __init__(self, name: str) -> None:
        self.name = name
        self.state = State.INIT
        self._started = False

    def __repr__(self) -> str:
        return self.state.value

    def start(self) -> None:
        """``run()`` begins (stopped already: it returns soon); raises ``RuntimeError`` if
        it began before."""
        if self._started:
            raise RuntimeError(f"{self.name}: run() called again (state {self.state})")
        self._started = True
        if self.state is State.INIT:
            self.state = State.RUNNING

    def stopping(self) -> None:
        """``stop()`` was called (idempotent; no effect once stopped)."""
        if self.state in (State.INIT, State.RUNNING):
            self.state = State.STOPPING

    def ended(self, crashed: bool = False) -> None:
        """``run()`` returned (or raised: ``crashed``)."""
        self.state = State.CRASHED if crashed else State.STOPPED

    @contextmanager
    def running(self) -> Iterator[None]:
        """Around the body of ``run()``: :meth:`start` before, :meth:`ended` after
        (crashed when it raised anything but a cancellation: an abort ends a run)."""
        self.start()
        try:
            yield
        except BaseException as exc:
            self.ended(crashed=not isinstance(exc, asyncio.CancelledError))
            raise
        self.ended()

    @property
    def stopping_or_done(self) -> bool:
        return self.state in (State.STOPPING, State.STOPPED, State.CRASHED)


__all__ = ["Lifecycle", "State"]
