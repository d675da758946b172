"""The background fold's loop (:func:`actors.tables.fold.fold_periodically`) on a stand-in
for the Spark calls (the fold itself runs on a real session in test_spark_fence and
test_maintenance_owner): when a table is folded, a failed fold (the storage refusing the
rewrite) logged with the table, counted and tried again at the next check, the metrics."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from actors.metrics import Metrics
from actors.preflight import resolve_processors
from actors.tables import fold
from settings.models import Settings

TABLE = "kstage.kstage.stg_t"


class Aside:
    """The actor's ``call_aside`` on no session: runs the job with ``None``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings.spark

    async def call_aside(self, fn: Callable[[Any], Any], what: str | None = None) -> Any:
        return fn(None)


async def run_until(cfg: Settings, event: asyncio.Event, metrics: Metrics | None = None
                    ) -> None:
    """The fold loop over ``cfg``'s tables, all maintained here, until ``event``."""
    task = asyncio.create_task(fold.fold_periodically(
        cfg, resolve_processors(cfg), Aside(cfg), lambda _: True,  # type: ignore[arg-type]
        metrics))
    try:
        await asyncio.wait_for(event.wait(), 30)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_table_is_folded_at_fold_files_more_and_a_failed_fold_is_tried_again(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    cfg = Settings.model_validate({"name": "g", "groups": [{"topics": [
        {"topic": "t", "processor": "test_unkeyed",
         "sink": {"type": "spark", "table": "stg_t"}}]}]})
    counts = [10, 60, 20, 51, 53, 53, 40]  # the data files read at each check
    folds: list[int] = []  # the count each fold began at
    refuse = [False, True, False]  # the second fold fails
    checked = asyncio.Event()

    def content(_spark: Any, _settings: Any, table: str) -> int:
        assert table == "stg_t"
        files = counts.pop(0) if len(counts) > 1 else counts[0]  # the last one stays
        if len(counts) == 1:
            checked.set()
        return files

    def folded(_spark: Any, _settings: Any, table: str) -> fold.Folded:
        folds.append(current[0])
        if refuse.pop(0):
            raise OSError("java.io.IOException: No space left on device")
        return fold.Folded(TABLE, current[0], current[0] - 1, 2, 3, 0.1)

    current = [0]

    def counted(spark: Any, settings: Any, table: str) -> int:
        current[0] = content(spark, settings, table)
        return current[0]

    monkeypatch.setattr(fold, "CHECK_S", 0)
    monkeypatch.setattr(fold, "data_files", counted)
    monkeypatch.setattr(fold, "fold", folded)
    metrics = Metrics()
    caplog.set_level(logging.INFO, "actors.tables.fold")
    await run_until(cfg, checked, metrics)

    # 60: 50 more than none; 20 and 51: fewer than 50 over the 3 it left; 53: due, fails;
    # 53 again: due, folded; 40: fewer than 50 over the 3 it left
    assert folds == [60, 53, 53]
    [failed] = [r.getMessage() for r in caplog.records if "FAILED" in r.getMessage()]
    assert failed == (f"maintenance: fold of {TABLE} FAILED (1 in a row; tried again in 0s): "
                      "OSError: java.io.IOException: No space left on device")
    assert metrics.registry.get_sample_value(
        "kstage_maintenance_failures_total", {"table": TABLE}) == 1
    assert metrics.registry.get_sample_value(
        "kstage_table_folds_total", {"table": TABLE}) == 2
    assert metrics.registry.get_sample_value(
        "kstage_table_data_files", {"table": TABLE}) == 40
    assert sum("maintenance: folded " in r.getMessage() for r in caplog.records) == 2


async def test_a_table_whose_folds_keep_failing_waits_longer_each_time_until_one_lands(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A storage refusing every rewrite for a while: each failure in a row doubles the wait
    before the table is tried again (its count read too), up to RETRY_MAX_S; the fold
    that lands ends it, and the next failure waits the first wait again."""
    cfg = Settings.model_validate({"name": "g", "groups": [{"topics": [
        {"topic": "t", "processor": "test_unkeyed",
         "sink": {"type": "spark", "table": "stg_t"}}]}]})
    refuse = [True, True, True, True, False, True, False]
    reads: list[float] = []  # when the count was read
    done = asyncio.Event()

    def counted(_spark: Any, _settings: Any, _table: str) -> int:
        reads.append(asyncio.get_running_loop().time())
        return 100  # always due: nothing is left by a fold

    def folded(_spark: Any, _settings: Any, _table: str) -> fold.Folded:
        if not refuse:
            done.set()
            raise OSError("stop here")
        if refuse.pop(0):
            raise OSError("java.io.IOException: No space left on device")
        return fold.Folded(TABLE, 100, 99, 1, 2, 0.1)

    monkeypatch.setattr(fold, "CHECK_S", 0.02)
    monkeypatch.setattr(fold, "RETRY_MAX_S", 0.08)
    monkeypatch.setattr(fold, "data_files", counted)
    monkeypatch.setattr(fold, "fold", folded)
    caplog.set_level(logging.INFO, "actors.tables.fold")
    await run_until(cfg, done)

    failures = [r.getMessage().split(" FAILED ")[1].split(":")[0]
                for r in caplog.records if " FAILED " in r.getMessage()]
    assert failures[:6] == ["(1 in a row; tried again in 0s)", "(2 in a row; tried again in 0s)",
                            "(3 in a row; tried again in 0s)", "(4 in a row; tried again in 0s)",
                            "(1 in a row; tried again in 0s)", "(1 in a row; tried again in 0s)"]
    # the reads after the first four failures came no sooner than 0.02, 0.04, 0.08, 0.08 s
    # after them (each read here is followed at once by its failing fold)
    gaps = [later - earlier for earlier, later in zip(reads, reads[1:], strict=False)]
    for gap, wait in zip(gaps, [0.02, 0.04, 0.08, 0.08], strict=False):
        assert gap >= wait * 0.99, (gaps, wait)


async def test_a_superseded_fold_is_no_failure_and_the_next_check_folds(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A fold whose files another writer folded meanwhile (pyiceberg's commit raises
    Superseded): logged at INFO with the table and why, not counted as a failure, no
    backoff; the next check folds."""
    cfg = Settings.model_validate({"name": "g", "groups": [{"topics": [
        {"topic": "t", "processor": "test_unkeyed",
         "sink": {"type": "spark", "table": "stg_t"}}]}]})
    outcomes: list[Exception | None] = [fold.Superseded("6 of its 6 files were folded or "
                                                        "removed by another writer"), None]
    landed = asyncio.Event()

    def folded(_spark: Any, _settings: Any, _table: str) -> fold.Folded:
        outcome = outcomes.pop(0) if outcomes else None
        if outcome is not None:
            raise outcome
        landed.set()
        return fold.Folded(TABLE, 100, 99, 1, 2, 0.1)

    monkeypatch.setattr(fold, "CHECK_S", 0)
    monkeypatch.setattr(fold, "RETRY_MAX_S", 3600)  # a backoff would outlast the test
    monkeypatch.setattr(fold, "data_files", lambda *_: 100)
    monkeypatch.setattr(fold, "fold", folded)
    metrics = Metrics()
    caplog.set_level(logging.INFO, "actors.tables.fold")
    await run_until(cfg, landed, metrics)

    said = [(r.levelno, r.getMessage()) for r in caplog.records if "superseded" in r.getMessage()]
    assert said == [(logging.INFO, f"maintenance: fold of {TABLE} superseded: 6 of its 6 "
                     "files were folded or removed by another writer; planned again at the "
                     "next check")]
    assert not any("FAILED" in r.getMessage() for r in caplog.records)
    assert metrics.registry.get_sample_value(
        "kstage_maintenance_failures_total", {"table": TABLE}) in (None, 0)
    assert outcomes == []
