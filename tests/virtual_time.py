"""An asyncio event loop on a virtual clock, for tests of timing rules without the wall
clock: :func:`run` runs a coroutine on a loop whose ``time()`` stands still while
callbacks are ready and jumps to the next timer when none is (``asyncio.sleep(2)`` returns
at once, the loop's clock two seconds later). Durations read from ``loop.time()`` are then
exact, whatever the machine's load: a test asserts on them with no margin for scheduling.

Sockets and pipes still work (polled without waiting); a coroutine that waits on one with
no timer pending spins until it is ready.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class _Selector(selectors.BaseSelector):
    """A selector that never waits: a ``select`` with a timeout and nothing ready moves
    the loop's clock by the timeout instead."""

    def __init__(self, loop: VirtualLoop) -> None:
        self._loop = loop
        self._real = selectors.DefaultSelector()

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None,
               ) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if not ready and timeout is not None and timeout > 0:
            self._loop.now += timeout
        return ready

    def close(self) -> None:
        self._real.close()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._real.get_map()


class VirtualLoop(asyncio.SelectorEventLoop):
    """The loop of :func:`run`: its clock starts at 0 and moves only to the next timer."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_Selector(self))

    def time(self) -> float:
        return self.now


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on a new :class:`VirtualLoop`."""
    loop = VirtualLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
