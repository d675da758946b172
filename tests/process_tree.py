"""The processes under a process (Linux ``/proc``), and a watch that records every one that
ever ran a given program while a test runs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path


def _parent(stat: str) -> int:
    """The parent pid in a ``/proc/PID/stat`` line (after the command in parentheses)."""
    return int(stat.rsplit(")", 1)[1].split()[1])


def descendants(pid: int) -> dict[int, str]:
    """Every process under ``pid`` (children, theirs ...): pid -> command line."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parents[int(entry.name)] = _parent((entry / "stat").read_text())
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, of in parents.items():
            if of == parent and child not in found:
                with contextlib.suppress(OSError):
                    found[child] = (Path("/proc") / str(child) / "cmdline").read_bytes(
                        ).replace(b"\0", b" ").decode(errors="replace").strip()
                    todo.append(child)
    return found


@contextlib.asynccontextmanager
async def watched(pid: int, program: str, every_s: float = 0.2,
                  ) -> AsyncIterator[dict[int, str]]:
    """While the block runs, every ``every_s`` look at the processes under ``pid``: the
    dict yielded collects those running ``program`` (the file name of their command line's
    first word; pid -> command line)."""
    seen: dict[int, str] = {}

    async def look() -> None:
        while True:
            seen.update({p: c for p, c in descendants(pid).items()
                         if Path(c.split(" ", 1)[0]).name == program})
            await asyncio.sleep(every_s)

    task = asyncio.create_task(look())
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
