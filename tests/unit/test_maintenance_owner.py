"""The maintenance inside ``kstage run`` by default: which process maintains a table (the
one holding partition 0 of its first topic), when it runs (600 s with ``appends: spark``,
off with ``appends: pyiceberg`` unless set), and the tables it leaves alone (a pattern's)
named in the log."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from actors.preflight import resolve_processors
from actors.sinks.spark.actor import SparkActor
from actors.tables import fold
from actors.tables.maintenance import maintain
from actors.tables.maintenance_loop import holder, maintain_periodically
from actors.tables.merge_job import TablePlan
from actors.worker_status import WorkerStatus
from settings.models import Settings


def status(topic: str, *partitions: int, joined: bool = True) -> WorkerStatus:
    """A worker's status holding ``partitions`` of ``topic`` (the rest never read)."""
    return {"group": "g", "topic": topic, "joined": joined,  # type: ignore[typeddict-item]
            "partitions": [{"partition": p} for p in partitions]}


def table(*topics: str) -> TablePlan:
    return TablePlan("stg", "final_stg", (), (), topics)


def test_the_process_holding_partition_0_of_the_first_topic_maintains_the_table(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "actors.tables.maintenance_loop")
    held: list[WorkerStatus] = [status("b", joined=False)]
    owned = holder(lambda: held)
    assert not owned(table("b"))  # before its group join: undecided, nothing said
    assert caplog.records == []
    held = [status("b", 0, 1), status("a", 2)]
    assert owned(table("b"))
    assert not owned(table("a"))  # partition 2 only
    assert not owned(table("c"))  # no worker of it here
    assert not owned(table("b", "a"))  # the first by name is a: partition 0 of a decides
    held[1] = status("a", 0)  # assigned now (a rebalance): read at each round
    assert owned(table("b", "a"))
    # said each time it changed for the table (all named stg here); c has no worker here
    # and nothing is said of it; b+a was already left when a held partition 2
    assert [r.getMessage() for r in caplog.records] == [
        "maintenance: table stg: maintained here, this process holds partition 0 of topic b",
        "maintenance: table stg: left to the process holding partition 0 of topic a",
        "maintenance: table stg: maintained here, this process holds partition 0 of topic a",
    ]


def settings(**spark: Any) -> Settings:
    entries = [{"topic": "t", "processor": "test_unkeyed",
                "sink": {"type": "spark", "table": "stg_t"}}]
    return Settings.model_validate({"name": "g", "groups": [{"topics": entries}],
                                    "spark": spark})


@pytest.mark.parametrize(("spark", "every"), [
    ({}, 600),
    ({"maintenance": {"every_s": 60}}, 60),
    ({"maintenance": {"every_s": None}}, None),
    ({"appends": "pyiceberg"}, None),  # the default would start a JVM
    ({"appends": "pyiceberg", "maintenance": {"every_s": 60}}, 60),
])
def test_the_service_maintains_every_ten_minutes_unless_it_would_start_a_jvm(
        spark: dict[str, Any], every: float | None) -> None:
    assert settings(**spark).spark.maintenance_every_s() == every


async def test_a_table_this_process_does_not_own_is_not_touched() -> None:
    """Not owned: no Spark call at all (the actor's session never starts)."""
    actor = SparkActor()
    try:
        async def committed(_: object) -> dict[Any, int | None]:
            raise AssertionError("not read: nothing is maintained")

        cfg = settings()
        assert await maintain(cfg, resolve_processors(cfg), committed, actor=actor,
                              owned=lambda _: False) == []
        assert actor.jvm_pid is None
    finally:
        actor.stop()


async def test_a_patterns_tables_are_named_as_left_alone(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """By default the maintenance runs with a pattern entry (refused only when set: see
    test_topic_pattern_settings) and says in the log which tables it leaves alone; the
    fold asks at each check whether this process holds the named topic's partition 0
    (here it does not: no Spark call, no JVM)."""
    monkeypatch.setattr(fold, "CHECK_S", 0.01)
    entries = [{"topic_pattern": r"gob\..*", "processor": "gobblin_compaction",
                "sink": {"type": "spark", "table": "stg_{topic}"}},
               {"topic": "t", "processor": "test_unkeyed",
                "sink": {"type": "spark", "table": "stg_t"}}]
    cfg = Settings.model_validate({"name": "g", "groups": [{"topics": entries}]})
    actor = SparkActor()
    caplog.set_level(logging.INFO, "actors.tables.maintenance_loop")
    asked = 0
    checked = asyncio.Event()

    async def committed(_: object) -> dict[Any, int | None]:
        raise AssertionError("not read: stg_t is not maintained here")

    def statuses() -> list[WorkerStatus]:
        nonlocal asked
        asked += 1
        if asked == 3:  # the third check: two were done
            checked.set()
        return [status("t", 1)]

    task = asyncio.create_task(maintain_periodically(
        cfg, resolve_processors(cfg), committed, actor, None, statuses))
    try:
        await asyncio.wait_for(checked.wait(), 30)
        assert actor.jvm_pid is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        actor.stop()
    messages = [r.getMessage() for r in caplog.records]
    [warning] = [m for m in messages if "not maintained" in m]
    assert "topic_pattern 'gob\\\\..*'" in warning, warning
    [left] = [m for m in messages if "maintenance: table stg_t: " in m]  # logged once
    assert left == "maintenance: table stg_t: left to the process holding partition 0 of " \
        "topic t", left


@pytest.mark.parametrize(("files", "after_last", "folded"), [
    (49, None, False), (50, None, True),  # none folded here yet: counted from no file
    (52, 3, False), (53, 3, True),  # 50 more than the last fold left
    (2, 10, False),  # fewer (another process compacted, or expiry): not until 50 more
])
def test_a_table_is_folded_at_fold_files_more_than_its_last_fold_left(
        files: int, after_last: int | None, folded: bool) -> None:
    assert fold.due(files, after_last, 50) is folded
