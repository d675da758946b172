"""The demo's progress display: a line per change of the count when stderr is a log."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from service.dev import demo


class _Master:
    """Answers ``snapshot()`` with the next processed count of ``counts``."""

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts
        self.asked = 0

    def snapshot(self) -> list[dict[str, Any]]:
        count = self.counts[min(self.asked, len(self.counts) - 1)]
        self.asked += 1
        return [{"stats": {"processed": count}}]


async def test_a_log_gets_a_line_when_the_count_moves_and_none_while_it_stands(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real_sleep = asyncio.sleep

    async def no_wait(_seconds: float) -> None:
        await real_sleep(0)

    monkeypatch.setattr(demo.asyncio, "sleep", no_wait)
    master = _Master([0, 10, 10, 10, 20, 20, 20, 20])
    task = asyncio.create_task(demo.progress_display(20)(master))  # type: ignore[arg-type]
    while master.asked < 12:  # the count stood at 20 for several rounds
        await real_sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    lines = capsys.readouterr().err.splitlines()
    assert [re.search(r"(\d+)/20 messages", line)[1] for line in lines] == ["0", "10", "20"]
