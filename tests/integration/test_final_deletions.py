"""The final table remembers deletions: its deletions table ``<final>_deletions``.

Against real Spark, Iceberg and the SQLite catalog, with the ``debezium`` processor's rows
staged by the Spark sink: a key deleted by a merge stays deleted when an older upsert of
it is staged again (a ``kstage dlq replay``, an offset reset) and merged; a newer upsert
lands; a deletion older than the final row does not delete it; a ``kstage merge``
SIGKILLed between the deletions table's commit and the final table's, run again, gives
the exact tables; a final table made before deletions were remembered gets its deletions
table, filled from the staging table, at its next merge; two merges racing stay exact;
``kstage tables show`` and maintenance cover the deletions table; a deletions table that
is another's, or a staging table, is refused.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from actors.preflight import resolve_processors
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import dotted, qualified
from actors.tables import final_table
from actors.tables.final_deletions import FILLED, deletions_name
from actors.tables.maintenance import maintain
from actors.tables.merge import (
    MergeConfigError,
    MergeError,
    final_name,
    merge,
    merge_table,
    plan,
)
from service.ops.tables import describe, render
from settings.models import MaintenanceSettings, Settings
from tests.integration.merge_support import module_actor, snapshots
from tests.integration.test_deletes import OPTIONS, TOPIC, change, staged
from tests.integration.test_merge_faults import KstageMerge, gate, sessions

__all__ = ["sessions"]  # the fixture of racing Spark sessions, shared

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def actor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkActor]:
    yield from module_actor(tmp_path_factory)


def config(actor: SparkActor, table: str) -> Settings:
    return Settings(groups=[{"topics": [{"topic": TOPIC, "processor": "debezium",
                                         "options": OPTIONS,
                                         "sink": {"type": "spark", "table": table}}]}],
                    spark=actor.settings)


async def merged(actor: SparkActor, table: str) -> Any:
    cfg = config(actor, table)
    [result] = await merge(cfg, resolve_processors(cfg), actor=actor)
    return result


async def final(actor: SparkActor, table: str) -> list[tuple[Any, ...]]:
    """(id, email, _offset) of the final table's rows."""
    name = qualified(actor.settings, final_name(table))
    return sorted(tuple(r) for r in await actor.call(
        lambda spark: spark.table(name).select("id", "email", "_offset").collect()))


async def deletions(actor: SparkActor, table: str) -> list[tuple[Any, ...]]:
    """(id, _offset) of the deletions table's rows."""
    name = qualified(actor.settings, deletions_name(final_name(table)))
    return sorted(tuple(r) for r in await actor.call(
        lambda spark: spark.table(name).select("id", "_offset").collect()))


async def test_a_deleted_key_stays_deleted_when_an_older_upsert_is_merged_again(
        actor: SparkActor) -> None:
    table = "stg_resurrect"
    await staged(actor, table, [change("c", 1, "v1@x", 10), change("c", 2, "b@x", 11)])
    await merged(actor, table)
    assert await final(actor, table) == [(1, "v1@x", 10), (2, "b@x", 11)]
    assert await deletions(actor, table) == []
    await staged(actor, table, [change("d", 1, None, 20)])
    await merged(actor, table)
    assert await final(actor, table) == [(2, "b@x", 11)]
    assert await deletions(actor, table) == [(1, 20)]
    # v1 staged again (a replay of the same record), and an older update never merged:
    # the deletion is newer than both, the key stays deleted, merge after merge
    await staged(actor, table, [change("c", 1, "v1@x", 10), change("u", 1, "v1b@x", 15)])
    again = await merged(actor, table)
    assert again.new_rows == 2 and again.superseded_dropped == 2
    assert await final(actor, table) == [(2, "b@x", 11)]
    await merged(actor, table)
    assert await final(actor, table) == [(2, "b@x", 11)]
    # a newer upsert lands; the key's older deletion stays recorded
    await staged(actor, table, [change("u", 1, "v3@x", 30)])
    await merged(actor, table)
    assert await final(actor, table) == [(1, "v3@x", 30), (2, "b@x", 11)]
    assert await deletions(actor, table) == [(1, 20)]
    # ... and an upsert between the deletion and v3 does not replace v3
    await staged(actor, table, [change("u", 1, "v2@x", 25)])
    await merged(actor, table)
    assert await final(actor, table) == [(1, "v3@x", 30), (2, "b@x", 11)]
    # a deletion older than the final row deletes nothing and is not recorded; a newer
    # deletion of a key is recorded over its older one
    await staged(actor, table, [change("d", 2, None, 5), change("d", 1, None, 40)])
    await merged(actor, table)
    assert await final(actor, table) == [(2, "b@x", 11)]
    assert await deletions(actor, table) == [(1, 40)]
    # a deletion and an older upsert of a key never final, in one batch: nothing lands
    await staged(actor, table, [change("d", 9, None, 51), change("c", 9, "late@x", 50)])
    await merged(actor, table)
    assert await final(actor, table) == [(2, "b@x", 11)]
    assert await deletions(actor, table) == [(1, 40), (9, 51)]
    await staged(actor, table, [change("c", 9, "late@x", 50)])
    await merged(actor, table)
    assert await final(actor, table) == [(2, "b@x", 11)]


async def test_a_final_table_made_before_gets_its_deletions_table_filled_from_staging(
        actor: SparkActor) -> None:
    table = "stg_before"
    await staged(actor, table, [change("c", 1, "a@x", 1), change("c", 2, "b@x", 2),
                                change("c", 3, "c@x", 3)])
    await merged(actor, table)
    await staged(actor, table, [change("d", 1, None, 4), change("d", 2, None, 5),
                                change("d", 2, None, 6), change("c", 3, "c2@x", 7)])
    await merged(actor, table)
    # a final table made before: its deletions table never existed
    name = dotted(actor.settings, deletions_name(final_name(table)))
    await actor.call(lambda spark: spark.sql(f"DROP TABLE {name} PURGE"))
    assert await final(actor, table) == [(3, "c2@x", 7)]
    # the next merge, even of nothing new, creates it and fills it from staging
    result = await merged(actor, table)
    assert result.new_rows == 0
    assert await deletions(actor, table) == [(1, 4), (2, 6)]
    history = await snapshots(actor, deletions_name(final_name(table)))
    assert [s.get(FILLED) for _, _, s in history] == [
        f"{dotted(actor.settings, table)}@{(await snapshots(actor, table))[-1][0]}"]
    # so an older upsert of a deleted key, staged again, stays out
    await staged(actor, table, [change("c", 1, "a@x", 1), change("u", 2, "b2@x", 5)])
    await merged(actor, table)
    assert await final(actor, table) == [(3, "c2@x", 7)]


def _catalog_location(warehouse: Path, table: str) -> str | None:
    """The metadata location the SQLite catalog holds for ``table`` (None: none)."""
    with sqlite3.connect(warehouse / "catalog.db", timeout=30) as db:
        row = db.execute("SELECT metadata_location FROM iceberg_tables WHERE table_name = ?",
                         (table,)).fetchone()
    return None if row is None else str(row[0])


@pytest.mark.timeout(600)  # a kstage merge process starts a JVM
async def test_merge_killed_between_the_deletions_commit_and_the_final_one_then_run_again(
        actor: SparkActor, tmp_path: Path) -> None:
    """SIGKILL once the deletions table's commit is in the catalog (the final table's
    MERGE still to come): the deletions are recorded, the final table is as before and
    records the same staging snapshot merged through; the merge run again deletes the
    row, and an older upsert staged later stays out."""
    table = "stg_killed_deletes"
    warehouse = Path(actor.settings.warehouse)
    final_ = final_name(table)
    await staged(actor, table, [change("c", 1, "a@x", 1), change("c", 2, "b@x", 2)])
    await merged(actor, table)
    await staged(actor, table, [change("u", 1, "a2@x", 3), change("d", 1, None, 4),
                                change("u", 2, "b2@x", 5)])
    committed = await snapshots(actor, final_)
    path = tmp_path / "kstage.yml"
    path.write_text(yaml.safe_dump({"name": "merge-test", "spark": {
        "master": "local[1]", "warehouse": str(warehouse),
        "conf": {"spark.driver.memory": "512m"}}, "groups": [{"topics": [{
            "topic": TOPIC, "processor": "debezium", "options": OPTIONS, "format": "json",
            "sink": {"type": "spark", "table": table}}]}]}), encoding="utf-8")
    before = _catalog_location(warehouse, deletions_name(final_))
    merging = KstageMerge(path, "killed")
    deadline = time.monotonic() + 300
    while _catalog_location(warehouse, deletions_name(final_)) == before:
        assert merging.proc.poll() is None, merging.output()[-3000:]
        assert time.monotonic() < deadline, "no deletions commit within 300s"
        await asyncio.sleep(0.005)
    merging.kill()
    assert await deletions(actor, table) == [(1, 4)]
    assert await snapshots(actor, final_) == committed  # the final commit never came
    assert await final(actor, table) == [(1, "a@x", 1), (2, "b@x", 2)]
    again = await merged(actor, table)
    assert again.new_rows == 3 and again.attempts == 1
    assert await final(actor, table) == [(2, "b2@x", 5)]
    assert await deletions(actor, table) == [(1, 4)]
    record = await actor.call(lambda spark: final_table.last_record(
        spark, actor.settings, final_))
    assert record is not None and record.merged_snapshot_id == (
        await snapshots(actor, table))[-1][0]
    await staged(actor, table, [change("u", 1, "a2@x", 3)])
    await merged(actor, table)
    assert await final(actor, table) == [(2, "b2@x", 5)]


async def branches(actor: SparkActor, table: str) -> list[str]:
    return await actor.call(lambda spark: sorted(str(n) for n in final_table.load(
        spark, actor.settings, table).refs().keySet()))


@pytest.mark.timeout(600)
async def test_a_merge_that_read_before_a_racing_deletion_merges_again(
        actor: SparkActor, sessions: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Merge 1 folds an update of a key and is held before its final commit; the key's
    deletion is staged and merge 2 deletes the row; merge 1's commit is refused (the
    final table moved since it read it), it runs again and finds nothing to do: the
    update never lands after the deletion."""
    table = "stg_race_deletes"
    await staged(actor, table, [change("c", 1, "a@x", 10), change("c", 2, "b@x", 11)])
    await merged(actor, table)
    await staged(actor, table, [change("u", 1, "a15@x", 15)])
    held, release = threading.Event(), threading.Event()

    def hold(writer: str) -> None:
        if writer.endswith("-m1") and not release.is_set():
            held.set()
            assert release.wait(300)

    gate(monkeypatch, hold)
    cfg = config(actor, table)
    [item] = plan(cfg, resolve_processors(cfg))
    m1, m2 = await sessions("m1"), await sessions("m2")
    first = asyncio.create_task(merge_table(m1, item))
    assert await asyncio.to_thread(held.wait, 300)
    await staged(actor, table, [change("d", 1, None, 20)])
    second = await merge_table(m2, item)
    assert second.attempts == 1 and second.new_rows == 2
    assert await final(actor, table) == [(2, "b@x", 11)]
    release.set()
    again = await first
    assert again.attempts == 2 and again.new_rows == 0
    assert await final(actor, table) == [(2, "b@x", 11)]
    assert await deletions(actor, table) == [(1, 20)]
    assert await branches(actor, final_name(table)) == ["main"]


async def test_tables_show_and_maintenance_cover_the_deletions_table(
        actor: SparkActor, monkeypatch: pytest.MonkeyPatch) -> None:
    """``kstage tables show`` lists the deletions table after its final table; ``kstage
    tables maintain`` compacts it and expires its snapshots by age, every deletion kept."""
    table = "stg_kept"
    for i in range(3):  # three merges, each records a deletion: three data files
        await staged(actor, table, [change("c", i, "a@x", 10 * i),
                                    change("d", i, None, 10 * i + 1)])
        await merged(actor, table)
    assert await deletions(actor, table) == [(0, 1), (1, 11), (2, 21)]
    cfg = config(actor, table)
    items = plan(cfg, resolve_processors(cfg))
    views = await actor.call(lambda spark: describe(spark, actor.settings, items))
    name = deletions_name(final_name(table))
    assert [(v.role, v.table, v.staging) for v in views] == [
        ("staging", dotted(actor.settings, table), None),
        ("final", dotted(actor.settings, final_name(table)), table),
        ("deletions", dotted(actor.settings, name), final_name(table))]
    assert views[2].rows == 3
    assert f"{dotted(actor.settings, name)} (deletions of {final_name(table)})" in render(views)
    monkeypatch.setattr(actor, "settings", actor.settings.model_copy(update={
        "maintenance": MaintenanceSettings(snapshot_max_age_s=0.001, snapshot_min_keep=1,
                                           min_input_files=2)}))

    async def nothing_committed(streams: Any) -> dict[Any, None]:
        return dict.fromkeys(streams)

    results = await maintain(config(actor, table), resolve_processors(cfg), nothing_committed,
                             actor=actor)
    [kept] = [r for r in results if r.role.startswith("deletions")]
    assert kept.role == f"deletions of {dotted(actor.settings, final_name(table))}"
    assert (kept.error, kept.files_before, kept.files_after) == ("", 3, 1)
    assert kept.expired >= 3
    assert await deletions(actor, table) == [(0, 1), (1, 11), (2, 21)]


async def test_a_deletions_table_of_another_or_a_staging_one_is_refused(
        actor: SparkActor) -> None:
    table = "stg_other"
    name = qualified(actor.settings, deletions_name(final_name(table)))
    await actor.call(lambda spark: spark.sql(f"CREATE TABLE {name} (id INT) USING iceberg"))
    await staged(actor, table, [change("c", 1, "a@x", 1)])
    with pytest.raises(MergeError, match=(
            rf"merge {table} -> {final_name(table)}: deletions table "
            rf"{dotted(actor.settings, deletions_name(final_name(table)))} exists but is not "
            rf"the deletions table of {dotted(actor.settings, final_name(table))}")):
        await merged(actor, table)
    clash = Settings(groups=[{"topics": [
        {"topic": TOPIC, "processor": "debezium", "options": OPTIONS,
         "sink": {"type": "spark", "table": "stg_a"}},
        {"topic": "other", "processor": "debezium", "options": OPTIONS,
         "sink": {"type": "spark", "table": "final_a_deletions"}}]}], spark=actor.settings)
    with pytest.raises(MergeConfigError, match="table stg_a: the deletions table "
                       "final_a_deletions of its final table is also a staging table"):
        plan(clash, resolve_processors(clash))


async def test_a_killed_merges_branch_is_removed_once_stale(actor: SparkActor) -> None:
    """A merge killed between making its branch and removing it leaves the branch; a
    later merge removes it once older than an hour (a younger one may be a running
    merge's)."""
    table = "stg_branches"
    final_ = final_name(table)
    await staged(actor, table, [change("c", 1, "a@x", 1)])
    await merged(actor, table)
    now = int(time.time())
    stale, young = f"kstage_merge_{now - 7200}_dead", f"kstage_merge_{now - 60}_running"

    def make(spark: Any) -> None:
        loaded = final_table.load(spark, actor.settings, final_)
        base = loaded.currentSnapshot().snapshotId()
        for name in (stale, young):
            loaded.manageSnapshots().createBranch(name, base).commit()

    await actor.call(make)
    assert await branches(actor, final_) == sorted(["main", stale, young])
    await staged(actor, table, [change("d", 1, None, 2)])
    await merged(actor, table)
    assert await branches(actor, final_) == sorted(["main", young])
    assert await final(actor, table) == []
