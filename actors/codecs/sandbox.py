"""JSON Schema validation off the event loop, in a killable child, with a time budget.

Validating a value costs what its schema and the value make it cost: ``uniqueItems`` on
an array of objects compares every pair (4,000 items: ~23 s of CPU), a ``pattern`` such
as ``^(a+)+$`` backtracks exponentially. In CPython a thread cannot be stopped, so the
validation runs in a child process (:mod:`actors.codecs.sandbox_child`) that can be
killed.

The contract (:class:`Validator`): ``await validate(key, schema, bodies)`` answers one
verdict per body, in order: None (valid, or not JSON: the caller's parse says why), the
validator's error text, or :data:`OVER_BUDGET`. It never blocks the event loop.

* One child per :class:`ValidationSandbox`, started on first use and kept: a batch's
  values go to it in one request; it answers each as it is validated.
* Each answer must come within ``budget_s`` of the one before (of the request for the
  first). When one does not, the child is killed and a new one started; the value it
  was working on is validated again alone, in the new child, with the same budget (a
  machine that stalled is not the value's fault): over budget again, it is
  :data:`OVER_BUDGET` (poison for the caller); the rest of the batch goes on.
* A child that dies by itself (killed by the kernel's OOM killer, a ``MemoryError``
  under a memory limit, a signal) is not a verdict on a value: the request is sent again
  to a new child, up to ``crash_retries`` times in a row, then
  :class:`SandboxUnavailable` (retriable: the caller waits and tries again, like a
  registry outage).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import resource
import struct
import sys
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from processors.errors import ProcessorError

logger = logging.getLogger(__name__)

_HEADER = struct.Struct(">I")
_CHILD = Path(__file__).with_name("sandbox_child.py")


class _OverBudget:
    __slots__ = ()

    def __repr__(self) -> str:
        return "OVER_BUDGET"


OVER_BUDGET: Final = _OverBudget()
"""The verdict on a value whose validation took more than the budget, twice."""

Verdict = str | _OverBudget | None
Schema = tuple[str, dict[str, str]]
"""A schema's text and its references' texts by the name its ``$ref`` uses."""


class SandboxUnavailable(ProcessorError):
    """The validating child died by itself ``crash_retries`` times in a row: not the
    message's fault (retriable)."""

    retriable = True


class Validator(Protocol):
    """What a decoder needs to validate values off the event loop."""

    budget_s: float

    async def validate(self, key: Hashable, schema: Schema,
                       bodies: Sequence[bytes]) -> list[Verdict]: ...

    async def close(self) -> None: ...


class _Crashed(Exception):
    """The child died while answering (not killed by us)."""


class _Child:
    """One running child process."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.known: set[Hashable] = set()  # keys whose validator this child built

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def send(self, obj: Any) -> None:
        assert self.proc.stdin is not None  # noqa: S101 - created with PIPE
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.proc.stdin.write(_HEADER.pack(len(data)) + data)
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise _Crashed(f"its input pipe closed: {exc}") from exc

    async def receive(self) -> Any:
        assert self.proc.stdout is not None  # noqa: S101 - created with PIPE
        try:
            head = await self.proc.stdout.readexactly(_HEADER.size)
            (size,) = _HEADER.unpack(head)
            return pickle.loads(await self.proc.stdout.readexactly(size))  # noqa: S301
        except asyncio.IncompleteReadError:
            code = await self.proc.wait()
            raise _Crashed(f"it exited with status {code}") from None

    async def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        await self.proc.wait()


class ValidationSandbox:
    """Validates JSON values in a child process, ``budget_s`` seconds per value.

    Args:
        budget_s: the most one value's validation may take (wall seconds).
        crash_retries: new children tried when one dies by itself, before
            :class:`SandboxUnavailable`.
        start_timeout_s: the most a child may take to start (not on any value's budget).
        memory_limit_bytes: the child's ``RLIMIT_AS`` (None: the process's own).
    """

    def __init__(self, budget_s: float, *, crash_retries: int = 3,
                 start_timeout_s: float = 60.0, memory_limit_bytes: int | None = None) -> None:
        self.budget_s = budget_s
        self.crash_retries = crash_retries
        self.start_timeout_s = start_timeout_s
        self.memory_limit_bytes = memory_limit_bytes
        self._child: _Child | None = None
        self._lock = asyncio.Lock()  # one request at a time on the one child
        self.started = 0  # children started (metrics, tests)
        self.killed = 0  # children killed over budget
        self.crashes = 0  # children that died by themselves
        self.busy = False  # a request is with the child

    def __repr__(self) -> str:
        return (f"<ValidationSandbox budget={self.budget_s}s pid={self.pid} "
                f"started={self.started} killed={self.killed} crashes={self.crashes}>")

    @property
    def pid(self) -> int | None:
        """The running child's process id (None: none running)."""
        return None if self._child is None else self._child.pid

    async def validate(self, key: Hashable, schema: Schema,
                       bodies: Sequence[bytes]) -> list[Verdict]:
        """One verdict per body, in order (see the module doc)."""
        verdicts: list[Verdict] = []
        async with self._lock:
            crashes = 0
            while len(verdicts) < len(bodies):
                try:
                    await self._run(key, schema, bodies, verdicts)
                except _Crashed as exc:
                    await self._drop()
                    self.crashes += 1
                    crashes += 1
                    logger.warning("JSON Schema validation: the child process died (%s); "
                                   "not the message's fault: validating again in a new one "
                                   "(%d of %d)", exc, crashes, self.crash_retries)
                    if crashes > self.crash_retries:
                        raise SandboxUnavailable(
                            f"the JSON Schema validation process died {crashes} times in a "
                            f"row (last: {exc})") from None
        return verdicts

    async def _run(self, key: Hashable, schema: Schema, bodies: Sequence[bytes],
                   verdicts: list[Verdict]) -> None:
        """Validate ``bodies[len(verdicts):]`` in one request, appending their verdicts;
        on a value over budget, kill the child and try that value alone once more."""
        start = len(verdicts)
        child = await self._running()
        self.busy = True
        done = False
        try:
            await child.send((key, None if key in child.known else schema, bodies[start:]))
            child.known.add(key)
            loop = asyncio.get_running_loop()
            try:
                # one timer for the request, moved on at each answer (no task per value)
                async with asyncio.timeout_at(loop.time() + self.budget_s) as timer:
                    for _ in range(start, len(bodies)):
                        verdicts.append((await child.receive())[1])
                        timer.reschedule(loop.time() + self.budget_s)
            except TimeoutError:
                done = True  # _alone replaces the child
                verdicts.append(await self._alone(key, schema, bodies[len(verdicts)]))
                return
            done = True
        finally:
            self.busy = False
            if not done and self._child is child:  # cancelled or crashed mid-request: the
                self._child = None  # child may still work on it; never read it again
                if child.proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        child.proc.kill()

    async def _alone(self, key: Hashable, schema: Schema, body: bytes) -> Verdict:
        """Kill the child working past the budget on ``body``; validate it alone in a new
        one: :data:`OVER_BUDGET` if it overruns again."""
        await self._drop()
        self.killed += 1
        child = await self._running()
        await child.send((key, schema, [body]))
        child.known.add(key)
        try:
            _, verdict = await asyncio.wait_for(child.receive(), self.budget_s)
        except TimeoutError:
            await self._drop()
            self.killed += 1
            return OVER_BUDGET
        answer: Verdict = verdict
        return answer

    async def _running(self) -> _Child:
        if self._child is not None and self._child.proc.returncode is None:
            return self._child
        await self._drop()
        limit = self.memory_limit_bytes

        def limits() -> None:  # in the forked child, before exec
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-P", str(_CHILD), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, env=os.environ.copy(),
            preexec_fn=limits if limit is not None else None)
        child = _Child(proc)
        self.started += 1
        try:
            hello = await asyncio.wait_for(child.receive(), self.start_timeout_s)
        except TimeoutError:
            await child.kill()
            raise _Crashed(f"it did not start in {self.start_timeout_s:g}s") from None
        except _Crashed:
            await child.kill()
            raise
        if hello != ("ready", proc.pid):
            await child.kill()
            raise _Crashed(f"it started with {hello!r}")
        self._child = child
        return child

    async def _drop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            await child.kill()

    async def close(self) -> None:
        """Stop the child (a later :meth:`validate` starts another)."""
        async with self._lock:
            await self._drop()


__all__ = ["OVER_BUDGET", "SandboxUnavailable", "ValidationSandbox", "Validator", "Verdict"]
