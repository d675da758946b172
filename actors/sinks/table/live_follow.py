"""A table that follows a processor's live columns (:class:`~processors.base.LiveColumns`:
columns from the messages' writer schemas, changing while the worker runs):
:class:`ColumnsFollower` creates or evolves the table once per version of the columns,
before the rows of that version are written. The Spark and the JDBC sinks each hold one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from processors.base import Column, LiveColumns

Apply = Callable[[tuple[Column, ...]], Awaitable[None]]
"""Creates or evolves the table to the columns given, committed before it returns."""


class ColumnsFollower:
    """The version of a processor's live columns a table has, and the one way to move it.

    :meth:`follow` takes the columns' version once, under a lock (concurrent writers of
    the sink wait for one another; the second finds the version applied and returns),
    and calls ``apply`` with that version's columns; the version counts as applied only
    once ``apply`` returned: one that raised leaves it unapplied, so the next write
    tries again.
    """

    __slots__ = ("_applied", "_lock")

    def __init__(self) -> None:
        self._applied = 0  # 0: nothing applied (LiveColumns' version 0: none known)
        self._lock = asyncio.Lock()

    @property
    def applied(self) -> int:
        """The version of the live columns the table has (0: none yet)."""
        return self._applied

    async def follow(self, live: LiveColumns | None, apply: Apply) -> None:
        """Apply ``live``'s columns if their version is not the table's yet (None: the
        processor's columns are declared, nothing to follow)."""
        if live is None or live.version == self._applied:
            return
        async with self._lock:
            version, columns = live.version, live.columns  # one version, read at once
            if version == self._applied:
                return
            await apply(columns)
            self._applied = version


__all__ = ["Apply", "ColumnsFollower"]
