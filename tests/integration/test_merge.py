"""``kstage merge`` against a real local SparkSession: replays, versions, idempotence.

Staging rows are written by the real SparkSink (processor ``gobblin_compaction``, key
``dataset, cluster, log_event_time``). One SparkActor (``local[1]``) is shared by the
module; each test uses its own tables. The CLI test stops the process's SparkContext (the
CLI shuts Spark down and its session is the module's one): it must stay last.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.sinks.spark.merge import MergeConfigError, MergeError, MergeResult, final_name, merge
from actors.sinks.spark.sink import SparkActor
from processors.base import Message, Row
from service.cli import main
from settings.models import Settings, SparkSettings
from tests.gobblin_events import PROCESSOR, TOPIC, events, opened

pytestmark = pytest.mark.slow

NAMES = [c.name for c in PROCESSOR.columns] + ["_topic", "_partition", "_offset", "_timestamp",
                                               "_ingested_at"]
FINAL_NAMES = [*NAMES, "log_date"]  # GobblinCompactionProcessor.final_partition


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="module")
def actor(warehouse: Path) -> Iterator[SparkActor]:
    spark = SparkActor(SparkSettings(master="local[1]", warehouse=str(warehouse),
                                     flush_max_interval_s=0.2))
    yield spark
    spark.stop()


def settings(warehouse: Path, *tables: str) -> Settings:
    topics = [{"topic": f"{TOPIC}_{i}", "processor": PROCESSOR.name,
               "sink": {"type": "spark", "table": table}} for i, table in enumerate(tables)]
    return Settings(groups=[{"topics": topics}],
                    spark=SparkSettings(master="local[1]", warehouse=str(warehouse)))


def version(offset: int, record_count: int, partition: int = 0) -> list[Row]:
    """A CompactionCompleted event of one fixed key (same dataset, cluster, event time)."""
    processor = PROCESSOR({"clusters": [{"code": "ltx1-holdem", "short_name": "holdem"}]})
    value = {"timestamp": 1500000000000, "namespace": "compaction.tracking.events",
             "name": "CompactionCompleted",
             "metadata": {"clusterIdentifier": "ltx1-holdem", "datasetUrn": "/data/tracking/X",
                          "partition": "2017/07/14/02", "recordCount": str(record_count)}}
    message = Message(TOPIC, partition, offset, 1500000000000 + offset, None, value, (), None)
    return list(processor.transform(message))


async def stage(actor: SparkActor, table: str, *batches: list[Row]) -> None:
    """Write each batch through the SparkSink (one append each, as after a crash replay)."""
    sink = await opened(actor, table)
    for rows in batches:
        await sink.write(rows)
    await sink.close()


async def final_rows(actor: SparkActor, table: str) -> list[tuple[Any, ...]]:
    """The final table's rows (by table name and by path, which must agree), sorted."""
    final = final_name(table)

    def read(spark: Any) -> tuple[list[Any], list[Any], list[str]]:
        by_table = spark.table(final)
        path = actor.warehouse / final
        if not list(path.rglob("*.parquet")):  # an empty partitioned table has no files
            return by_table.collect(), [], by_table.columns
        by_path = spark.read.parquet(str(path))
        return by_table.collect(), by_path.collect(), by_path.columns

    by_table, by_path, columns = await actor.call(read)
    assert columns == FINAL_NAMES  # no ingest_date / writer_id; the final partition last
    rows = sorted(tuple(r[n] for n in FINAL_NAMES) for r in by_table)
    assert rows == sorted(tuple(r[n] for n in FINAL_NAMES) for r in by_path)
    return rows


def counts(result: MergeResult) -> tuple[int, int, int, int]:
    return (result.staging_rows, result.final_rows, result.replays_dropped,
            result.superseded_dropped)


async def test_replays_dropped_latest_version_kept_and_rerun_changes_nothing(
        actor: SparkActor, warehouse: Path) -> None:
    table = "stg_merge_main"
    base = events(0, 0, 6)  # 6 distinct keys
    # a crash replays offsets 0-5 (a second append), and one key has 2 versions
    await stage(actor, table, base, events(0, 0, 6), version(100, 1), version(101, 2))
    cfg = settings(warehouse, table)

    [first] = await merge(cfg, actor=actor)
    assert first.table == table and first.final_table == "final_merge_main"
    assert counts(first) == (14, 7, 6, 1)
    assert first.new_rows == 14 and not first.skipped
    rows = await final_rows(actor, table)
    assert len(rows) == 7
    key_of = {n: NAMES.index(n) for n in ("dataset", "cluster", "log_event_time")}
    assert len({tuple(r[i] for i in key_of.values()) for r in rows}) == 7  # each key once
    latest = [r for r in rows if r[NAMES.index("dataset")] == "/data/tracking/X"]
    assert [(r[NAMES.index("record_count")], r[NAMES.index("_offset")]) for r in latest] == [
        (2, 101)]
    assert {r[NAMES.index("_offset")] for r in rows} == {0, 1, 2, 3, 4, 5, 101}

    state = json.loads((warehouse / "_merge_state" / "final_merge_main.json").read_text())
    assert state["staging_rows"] == 14 and state["final_rows"] == 7
    assert state["merged_at"] and state["max_ingested_at"]
    files = sorted(x.relative_to(warehouse / table).as_posix()
                   for x in (warehouse / table).rglob("*.parquet"))
    assert state["merged_files"] == files and len(files) == 4  # one per append

    # re-running changes nothing: same rows (_ingested_at included), nothing new
    [again] = await merge(cfg, actor=actor)
    assert counts(again) == (14, 7, 0, 0)
    assert again.new_rows == 0
    assert await final_rows(actor, table) == rows
    state2 = json.loads((warehouse / "_merge_state" / "final_merge_main.json").read_text())
    assert state2["max_ingested_at"] == state["max_ingested_at"]
    assert state2["merged_files"] == files

    # a crash after the swap, before the state was written: the files are read again,
    # their rows are exact replays of final rows, and the final table is unchanged
    lost = {**state2, "merged_files": []}
    (warehouse / "_merge_state" / "final_merge_main.json").write_text(json.dumps(lost))
    [replayed] = await merge(cfg, actor=actor)
    assert replayed.new_rows == 14
    assert counts(replayed) == (14, 7, 13, 1)  # all but version 1 replay a final row
    assert await final_rows(actor, table) == rows

    # new staging rows (another replay, a newer version, new keys) are folded in
    await stage(actor, table, version(101, 2), version(102, 3), events(1, 10, 2))
    [third] = await merge(cfg, actor=actor)
    assert counts(third) == (18, 9, 1, 1)  # the replay of 101; 101 superseded by 102
    assert third.new_rows == 4
    rows3 = await final_rows(actor, table)
    assert len(rows3) == 9
    latest = [r for r in rows3 if r[NAMES.index("dataset")] == "/data/tracking/X"]
    assert [r[NAMES.index("record_count")] for r in latest] == [3]
    # only the superseded version left; every other row kept as it was (_ingested_at too)
    assert set(rows) - set(rows3) == {r for r in rows if r[NAMES.index("_offset")] == 101}
    [fourth] = await merge(cfg, actor=actor)
    assert counts(fourth) == (18, 9, 0, 0) and fourth.new_rows == 0
    assert await final_rows(actor, table) == rows3


async def test_final_rows_survive_when_staging_is_purged(
        actor: SparkActor, warehouse: Path) -> None:
    """The merge folds into the existing final table: rows no longer in staging stay."""
    table = "stg_merge_purged"
    await stage(actor, table, events(0, 0, 4))
    cfg = settings(warehouse, table)
    await merge(cfg, actor=actor)
    before = await final_rows(actor, table)
    # staging retention removed the old partitions; new rows arrive
    shutil.rmtree(warehouse / table)
    await actor.call(lambda spark: spark.sql(f"DROP TABLE `{table}`"))
    actor._writers.pop(table)
    await stage(actor, table, events(0, 4, 2), version(7, 5))
    [result] = await merge(cfg, actor=actor)
    assert counts(result) == (3, 7, 0, 0)
    after = await final_rows(actor, table)
    assert set(before) <= set(after) and len(after) == 7


async def test_only_partitions_with_staging_rows_are_rewritten_and_swaps_are_repaired(
        actor: SparkActor, warehouse: Path) -> None:
    """final_partition = log_date (from the key's log_event_time): a merge rewrites only
    the dates its staging rows fall into; a swap cut between its renames is undone."""
    table = "stg_merge_parts"
    await stage(actor, table, events(0, 0, 4), version(100, 1))  # 2016-07-13, 2017-07-14
    cfg = settings(warehouse, table)
    [first] = await merge(cfg, actor=actor)
    assert counts(first) == (5, 5, 0, 0)
    final = warehouse / final_name(table)
    old_day, new_day = final / "log_date=2016-07-13", final / "log_date=2017-07-14"
    assert sorted(p.name for p in final.iterdir() if p.is_dir()) == [old_day.name,
                                                                      new_day.name]
    untouched = {p.name: p.stat().st_mtime_ns for p in old_day.iterdir()}

    # staging retention removed the rows; a newer version of the 2017 key arrives
    shutil.rmtree(warehouse / table)
    await actor.call(lambda spark: spark.sql(f"DROP TABLE `{table}`"))
    actor._writers.pop(table)
    await stage(actor, table, version(101, 2))
    [second] = await merge(cfg, actor=actor)
    assert counts(second) == (1, 5, 0, 1)
    assert {p.name: p.stat().st_mtime_ns for p in old_day.iterdir()} == untouched
    rows = await final_rows(actor, table)
    latest = [r for r in rows if r[NAMES.index("dataset")] == "/data/tracking/X"]
    assert [r[NAMES.index("record_count")] for r in latest] == [2]

    # a crash between "final/p -> .old-parts/p" and ".new/p -> final/p"
    work = warehouse / "_merge_work"
    (work / f"{final_name(table)}.old-parts").mkdir(parents=True)
    os.rename(new_day, work / f"{final_name(table)}.old-parts" / new_day.name)
    (work / f"{final_name(table)}.new" / new_day.name).mkdir(parents=True)  # half written
    [third] = await merge(cfg, actor=actor)
    assert counts(third) == (1, 5, 0, 0)  # version 1 was superseded by the last merge
    assert await final_rows(actor, table) == rows
    assert not list(work.glob(f"{final_name(table)}.*"))


async def test_a_final_partition_must_depend_on_the_key_alone(
        actor: SparkActor, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await stage(actor, "stg_merge_badpart", events(0, 0, 1))
    monkeypatch.setattr(PROCESSOR, "final_partition", ("day", "to_date(partition_name)"))
    with pytest.raises(MergeError, match=r"'day' = 'to_date\(partition_name\)' must be an "
                                         r"expression over the key columns"):
        await merge(settings(warehouse, "stg_merge_badpart"), actor=actor)
    monkeypatch.setattr(PROCESSOR, "final_partition", ("cluster", "cluster"))
    with pytest.raises(MergeConfigError, match="final partition column 'cluster' must be a "
                                               "new plain identifier"):
        await merge(settings(warehouse, "stg_merge_badpart"), actor=actor)


async def test_table_filter_skip_and_config_errors(actor: SparkActor, warehouse: Path) -> None:
    await stage(actor, "stg_merge_a", events(0, 0, 3))
    await stage(actor, "stg_merge_b", events(0, 0, 2), events(0, 0, 2))
    (warehouse / "stg_merge_empty").mkdir()  # registered by a sink, nothing appended yet
    cfg = settings(warehouse, "stg_merge_a", "stg_merge_b", "other_table", "stg_merge_empty")

    [only_b] = await merge(cfg, "stg_merge_b", actor=actor)
    assert (only_b.table, only_b.final_table) == ("stg_merge_b", "final_merge_b")
    assert counts(only_b) == (4, 2, 2, 0)
    assert not (warehouse / "final_merge_a").exists()

    results = await merge(cfg, actor=actor)
    assert [r.table for r in results] == ["stg_merge_a", "stg_merge_b", "other_table",
                                          "stg_merge_empty"]
    assert counts(results[3]) == (0, 0, 0, 0) and not results[3].skipped
    assert await final_rows(actor, "stg_merge_empty") == []
    assert counts(results[0]) == (3, 3, 0, 0)
    assert counts(results[1]) == (4, 2, 0, 0)  # merged just before: nothing new
    skipped = results[2]
    assert skipped.skipped and skipped.final_table == "other_table_final"
    assert "no staging data" in skipped.summary()

    with pytest.raises(MergeConfigError, match="'stg_nope' is not fed by a spark sink"):
        await merge(cfg, "stg_nope", actor=actor)


async def test_a_table_being_merged_elsewhere_is_skipped(
        actor: SparkActor, warehouse: Path) -> None:
    """Another process holding the table's merge lock: the merge is skipped, untouched."""
    await stage(actor, "stg_merge_locked", events(0, 0, 2))
    cfg = settings(warehouse, "stg_merge_locked")
    lock = warehouse / "_merge_state" / "final_merge_locked.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(  # flock(1)-like holder in another process
        [sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'a');"
         "fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)",
         str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        [skipped] = await merge(cfg, actor=actor)
        assert skipped.skipped and "another process is merging" in skipped.summary()
        assert not (warehouse / "final_merge_locked").exists()
    finally:
        holder.kill()
        holder.communicate()
    [merged] = await merge(cfg, actor=actor)
    assert counts(merged) == (2, 2, 0, 0)


def write_config(tmp_path: Path, warehouse: Path, table: str) -> str:
    cfg = tmp_path / "kstage.yml"
    cfg.write_text(
        f"name: merge-test\nspark: {{master: 'local[1]', warehouse: '{warehouse}'}}\n"
        "groups:\n  - topics:\n"
        f"      - {{topic: {TOPIC}, processor: {PROCESSOR.name}, format: json,\n"
        f"         sink: {{type: spark, table: {table}}}}}\n", encoding="utf-8")
    return str(cfg)


def test_cli_config_error_exit_2(tmp_path: Path, warehouse: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, warehouse, "stg_merge_cli")
    assert main(["merge", "-c", cfg, "--table", "stg_missing"]) == 2
    assert "not fed by a spark sink" in capsys.readouterr().err


async def test_cli_merge_last(actor: SparkActor, tmp_path: Path, warehouse: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    """Last: the CLI reuses the process's SparkContext and stops it when done."""
    import asyncio

    await stage(actor, "stg_merge_cli", events(0, 0, 3), events(0, 1, 1))
    cfg = write_config(tmp_path, warehouse, "stg_merge_cli")
    code = await asyncio.to_thread(main, ["merge", "-c", cfg, "--table", "stg_merge_cli"])
    assert code == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["stg_merge_cli -> final_merge_cli: 4 staging rows, 3 final rows "
                   "(1 replays dropped, 0 superseded; 4 new since last merge)"]
    state = json.loads((warehouse / "_merge_state" / "final_merge_cli.json").read_text())
    assert (state["staging_rows"], state["final_rows"]) == (4, 3)
