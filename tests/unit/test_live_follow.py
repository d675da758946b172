"""A table follows its processor's live columns once per version
(:class:`actors.sinks.table.live_follow.ColumnsFollower`, the Spark and JDBC sinks'
guard): two writers arriving together apply a version once; a failed apply leaves the
version unapplied, so the next write tries again."""

from __future__ import annotations

import asyncio

import pytest

from actors.sinks.table.live_follow import ColumnsFollower
from processors.base import Column, LiveColumns

V1 = (Column("id", "string", False),)
V2 = (*V1, Column("note", "string", True))


async def test_two_concurrent_writers_apply_a_version_once() -> None:
    live, follower = LiveColumns(), ColumnsFollower()
    live.set(V1)
    applied: list[tuple[Column, ...]] = []
    entered, release = asyncio.Event(), asyncio.Event()

    async def apply(columns: tuple[Column, ...]) -> None:
        applied.append(columns)
        entered.set()
        await release.wait()  # the table's DDL under way: the second writer arrives

    first = asyncio.create_task(follower.follow(live, apply))
    await asyncio.wait_for(entered.wait(), 5)
    second = asyncio.create_task(follower.follow(live, apply))
    await asyncio.sleep(0)  # let it reach the lock (it must wait there, not apply)
    assert not second.done()
    release.set()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert applied == [V1] and follower.applied == live.version == 1
    live.set(V2)  # the processor met a new writer schema
    await follower.follow(live, apply)
    assert applied == [V1, V2] and follower.applied == 2


async def test_a_failed_apply_leaves_the_version_unapplied_and_the_next_call_retries() -> None:
    live, follower = LiveColumns(), ColumnsFollower()
    live.set(V1)
    calls: list[tuple[Column, ...]] = []

    async def failing(columns: tuple[Column, ...]) -> None:
        calls.append(columns)
        raise RuntimeError("the catalog is down")

    with pytest.raises(RuntimeError, match="catalog is down"):
        await follower.follow(live, failing)
    assert follower.applied == 0

    async def working(columns: tuple[Column, ...]) -> None:
        calls.append(columns)

    await follower.follow(live, working)
    assert calls == [V1, V1] and follower.applied == 1


async def test_nothing_to_follow_without_live_columns_or_a_version() -> None:
    follower = ColumnsFollower()

    async def apply(columns: tuple[Column, ...]) -> None:
        raise AssertionError("nothing to apply")

    await follower.follow(None, apply)  # declared columns
    await follower.follow(LiveColumns(), apply)  # version 0: none known yet
    assert follower.applied == 0
