"""``kstage merge`` into Iceberg final tables, against a real local SparkSession.

Staging rows are written by the real SparkSink (one Iceberg append per batch) from real
processors' rows (:mod:`tests.integration.merge_support`). One SparkActor (``local[1]``)
is shared by the module; each test uses its own tables. The CLI test stops the process's
Spark session (the CLI shuts Spark down and its session is the module's one): it must
stay last.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from actors.preflight import resolve_processors
from actors.sinks.spark.actor import SparkActor
from actors.tables import final_table
from actors.tables.merge import (
    MergeConfigError,
    MergeError,
    MergeResult,
    final_name,
    merge,
    merge_records,
)
from service.cli import main
from tests.integration.merge_support import (
    GOBBLIN,
    VERSIONS,
    expected,
    final_rows,
    gobblin_rows,
    gobblin_version,
    module_actor,
    names,
    settings,
    snapshots,
    sql,
    stage,
    version,
    write_config,
)
from tests.kafkautil import create_topic, produce, unique
from tests.kafkautil import write_config as kafka_config

# Several merges a test, each a handful of Spark jobs, on a CPU shared with other JVMs.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def actor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkActor]:
    yield from module_actor(tmp_path_factory)


@pytest.fixture(scope="module")
def warehouse(actor: SparkActor) -> Path:
    return Path(actor.settings.warehouse)


def counts(result: MergeResult) -> tuple[int, int, int, int, int]:
    return (result.staging_rows, result.final_rows, result.new_rows, result.replays_dropped,
            result.superseded_dropped)


def column(name: str, processor: type = GOBBLIN) -> int:
    return names(processor).index(name)


async def merge_commits(actor: SparkActor, table: str) -> list[dict[str, str]]:
    """The summaries of the final table's commits that record a merge, oldest first."""
    found = await snapshots(actor, final_name(table))
    return [s for _, _, s in found if final_table.MERGED_SNAPSHOT in s]


async def staging_snapshot(actor: SparkActor, table: str) -> int:
    return (await snapshots(actor, table))[-1][0]


async def test_replays_dropped_latest_version_kept_incremental_and_idempotent(
        actor: SparkActor, warehouse: Path) -> None:
    table = "stg_merge_main"
    base = gobblin_rows(0, 6)  # 6 distinct keys
    # a crash replays offsets 0-5 (a second append), and one key has 2 versions
    await stage(actor, table, base, gobblin_rows(0, 6), gobblin_version(100, 1),
                gobblin_version(101, 2))
    cfg = settings(warehouse, table)

    [first] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert first.table == table and first.final_table == "final_merge_main"
    assert counts(first) == (14, 7, 14, 6, 1) and first.full_read and not first.skipped
    rows = await final_rows(actor, table)
    assert len(rows) == 7
    key = [column(n) for n in GOBBLIN.key]
    assert len({tuple(r[i] for i in key) for r in rows}) == 7  # each key once
    latest = [r for r in rows if r[column("dataset")] == "/data/tracking/X"]
    assert [(r[column("record_count")], r[column("_offset")]) for r in latest] == [(2, 101)]
    assert {r[column("_offset")] for r in rows} == {0, 1, 2, 3, 4, 5, 101}
    assert {r[-1].isoformat() for r in rows} == {"2016-07-13", "2017-07-14"}  # log_date
    staged = await staging_snapshot(actor, table)
    [commit] = await merge_commits(actor, table)
    assert first.merged_snapshot_id == staged
    assert commit[final_table.MERGED_SNAPSHOT] == str(staged)
    assert commit[final_table.MERGED_FROM] == f"kstage.kstage.{table}"
    assert (commit[final_table.STAGING_ROWS], commit[final_table.NEW_ROWS]) == ("14", "14")

    # re-running changes nothing: no new snapshot, same rows (_ingested_at included)
    before = await snapshots(actor, final_name(table))
    [again] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert counts(again) == (14, 7, 0, 0, 0) and not again.full_read
    assert await snapshots(actor, final_name(table)) == before
    assert await final_rows(actor, table) == rows

    # new staging rows (another replay, a newer version, new keys): only the two new
    # appends are read (incremental), folded against the final rows of their keys
    await stage(actor, table, gobblin_version(101, 2) + gobblin_version(102, 3),
                gobblin_rows(10, 2, partition=1))
    [third] = await merge(cfg, resolve_processors(cfg), actor=actor)
    # the replay of 101 (against the final row); the final row of 101 superseded by 102
    assert counts(third) == (18, 9, 4, 1, 1) and not third.full_read
    rows3 = await final_rows(actor, table)
    assert len(rows3) == 9
    latest = [r for r in rows3 if r[column("dataset")] == "/data/tracking/X"]
    assert [r[column("record_count")] for r in latest] == [3]
    # only the superseded version left; every other row kept as it was (_ingested_at too)
    assert set(rows) - set(rows3) == {r for r in rows if r[column("_offset")] == 101}
    commits = await merge_commits(actor, table)
    assert [c[final_table.MERGED_SNAPSHOT] for c in commits] == [
        str(staged), str(await staging_snapshot(actor, table))]
    [fourth] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert counts(fourth) == (18, 9, 0, 0, 0)
    assert await final_rows(actor, table) == rows3

    records = await merge_records(cfg, resolve_processors(cfg), actor=actor)
    assert list(records) == ["final_merge_main"]
    record = records["final_merge_main"]
    assert (record.staging_table, record.merged_snapshot_id) == (
        f"kstage.kstage.{table}", await staging_snapshot(actor, table))
    assert (record.staging_rows, record.final_rows, record.new_rows) == (18, 9, 4)


async def test_latest_per_key_ties_null_keys_and_keyless(actor: SparkActor,
                                                         warehouse: Path) -> None:
    """The order: within a partition _offset desc (whatever the timestamps say); across
    partitions _timestamp desc nulls last, _topic, _kafka_partition; then the other
    columns; NULL key values are one key."""
    table = "stg_merge_ties"
    await stage(actor, table, [
        version("a", 1, "old", 0, timestamp=10),
        version("a", 1, "new", 1, timestamp=20),  # later timestamp wins
        version("b", 1, "x", 2, timestamp=None, partition=1),
        version("b", 1, "y", 3, timestamp=5),  # across partitions a timestamp beats none
        version("c", 1, "p0", 4, timestamp=30, partition=0),
        version("c", 1, "p1", 5, timestamp=30, partition=1),  # same time: lower partition
        version("d", 1, "o4", 6, timestamp=40),
        version("d", 1, "o7", 7, timestamp=40),  # same time, partition: higher offset
        version(None, None, "n1", 8, timestamp=50),
        version(None, None, "n2", 9, timestamp=60),  # NULL, NULL is one key
        version(None, 1, "m", 10, timestamp=50),  # (NULL, 1) another
        version("e", None, "z", 11, timestamp=70),
    ], [version("e", None, "a", 11, timestamp=70)],  # same coordinates, other content:
        processor=VERSIONS)                             # the smaller content wins
    cfg = settings(warehouse, table, processor=VERSIONS)
    [result] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert counts(result) == (13, 7, 13, 0, 6)
    got = {(r[0], r[1]): r[2] for r in await final_rows(actor, table, VERSIONS)}
    assert got == {("a", 1): "new", ("b", 1): "y", ("c", 1): "p0", ("d", 1): "o7",
                   (None, None): "n2", (None, 1): "m", ("e", None): "a"}

    # later merges: an older version (another partition) loses to the final row, a newer
    # one replaces it, NULL keys match their final rows (null-safe), equal rows change
    # nothing
    await stage(actor, table, [version("a", 1, "older", 12, timestamp=15, partition=1),
                               version(None, None, "n3", 13, timestamp=65),
                               version(None, 1, "m", 10, timestamp=50)], processor=VERSIONS)
    [second] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert counts(second) == (16, 7, 3, 1, 2)
    got = {(r[0], r[1]): r[2] for r in await final_rows(actor, table, VERSIONS)}
    assert got[("a", 1)] == "new" and got[(None, None)] == "n3" and got[(None, 1)] == "m"

    # without a key every distinct row is kept, replays once
    unkeyed = "stg_merge_unkeyed"
    rows = [version("a", 1, "x", 0), version("a", 1, "x", 1), version(None, None, None, 2)]
    await stage(actor, unkeyed, rows, rows[1:], processor=VERSIONS)
    keyless = settings(warehouse, unkeyed, processor=VERSIONS)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(VERSIONS, "key", ())
        [plain] = await merge(keyless, resolve_processors(keyless), actor=actor)
        assert counts(plain) == (5, 3, 5, 2, 0)
        await stage(actor, unkeyed, rows, [version("a", 1, "x", 3)], processor=VERSIONS)
        [plain2] = await merge(keyless, resolve_processors(keyless), actor=actor)
        assert counts(plain2) == (9, 4, 4, 3, 0)
    assert sorted(r[6] for r in await final_rows(actor, unkeyed, VERSIONS)) == [0, 1, 2, 3]


async def test_compacted_purged_and_expired_staging(actor: SparkActor,
                                                     warehouse: Path) -> None:
    """A compaction of staging (a replace snapshot) and a retention delete are not read
    (only appends are), the final table keeps the rows staging no longer has; once the
    snapshot merged through expired, the whole table is read and the result is exact."""
    table = "stg_merge_expire"
    cfg = settings(warehouse, table)
    await stage(actor, table, gobblin_rows(0, 4), gobblin_rows(4, 4))
    await merge(cfg, resolve_processors(cfg), actor=actor)
    rows = await final_rows(actor, table)

    name = f"kstage.kstage.{table}"
    await sql(actor, f"CALL kstage.system.rewrite_data_files(table => '{name}', "
                     "options => map('min-input-files', '2'))")
    assert (await snapshots(actor, table))[-1][1] == "replace"
    await stage(actor, table, gobblin_rows(8, 2), gobblin_version(100, 7))
    [compacted] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert counts(compacted) == (11, 11, 3, 0, 0) and not compacted.full_read
    rows2 = await final_rows(actor, table)
    assert set(rows) < set(rows2)

    await sql(actor, f"DELETE FROM {name} WHERE _offset < 4")  # noqa: S608 - retention
    assert (await snapshots(actor, table))[-1][1] in ("delete", "overwrite")
    await stage(actor, table, gobblin_version(101, 8))
    [purged] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert counts(purged) == (8, 11, 1, 0, 1) and not purged.full_read
    rows3 = await final_rows(actor, table)
    assert {r[column("_offset")] for r in rows3} >= {0, 1, 2, 3}  # kept in the final table

    await stage(actor, table, gobblin_rows(20, 1))
    await sql(actor, f"CALL kstage.system.expire_snapshots(table => '{name}', "
                     "older_than => now(), retain_last => 1)")
    assert len(await snapshots(actor, table)) == 1
    [full] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert full.full_read
    # every staging row read again: those already final are replays
    assert counts(full) == (9, 12, 9, 7, 1)
    rows4 = await final_rows(actor, table)
    latest = [r for r in rows4 if r[column("dataset")] == "/data/tracking/X"]
    assert [r[column("record_count")] for r in latest] == [8]
    assert set(rows4) - set(rows3) == {r for r in rows4 if r[column("_offset")] == 20}
    assert set(rows3) <= set(rows4)


async def test_final_table_compacted_and_its_records_expired(actor: SparkActor,
                                                              warehouse: Path) -> None:
    """Maintenance of the final table: a compaction is not a merge record; once every
    record expired the next merge reads the whole staging table, still exact."""
    table = "stg_merge_final_expire"
    cfg = settings(warehouse, table, processor=VERSIONS)
    first = [version("a", 1, "x", 0, timestamp=1), version("b", 1, "y", 1)]
    second = [version("a", 1, "x2", 2, timestamp=2), version("c", 1, "z", 3)]
    await stage(actor, table, first, processor=VERSIONS)
    await merge(cfg, resolve_processors(cfg), actor=actor)
    await stage(actor, table, second, processor=VERSIONS)
    await merge(cfg, resolve_processors(cfg), actor=actor)
    final = f"kstage.kstage.{final_name(table)}"
    await sql(actor, f"CALL kstage.system.rewrite_data_files(table => '{final}', "
                     "options => map('rewrite-all', 'true'))")
    assert (await snapshots(actor, final_name(table)))[-1][1] == "replace"
    # the record is the compaction's parent's
    [nothing] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert (nothing.new_rows, nothing.full_read) == (0, False)

    await sql(actor, f"CALL kstage.system.expire_snapshots(table => '{final}', "
                     "older_than => now(), retain_last => 1)")
    assert await merge_commits(actor, table) == []
    [full] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert full.full_read and counts(full) == (4, 3, 4, 3, 1)
    assert await final_rows(actor, table, VERSIONS, ingest=False) == expected(
        first + second, VERSIONS)
    assert len(await merge_commits(actor, table)) == 1  # recorded again (no row changed)


async def test_schema_evolution_and_refused_changes(actor: SparkActor, warehouse: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from processors.base import Column

    table = "stg_merge_schema"
    cfg = settings(warehouse, table, processor=VERSIONS)
    original = VERSIONS.columns
    await stage(actor, table, [version("a", 1, "x", 0)], processor=VERSIONS)
    await merge(cfg, resolve_processors(cfg), actor=actor)

    # a new nullable column: added to staging by the sink, to the final table by the merge
    wider = (*original, Column("note"))
    monkeypatch.setattr(VERSIONS, "columns", wider)
    actor._tables.pop(table)  # the sink's writer of the old columns
    await stage(actor, table, [{**version("b", 1, "y", 1), "note": "hi"}], processor=VERSIONS)
    [result] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert counts(result) == (2, 2, 1, 0, 0)
    final = f"kstage.kstage.{final_name(table)}"
    got = await sql(actor, f"SELECT k1, note FROM {final} ORDER BY k1")  # noqa: S608
    assert [tuple(r) for r in got] == [("a", None), ("b", "hi")]

    # a column removed, a type changed, a new NOT NULL column: refused, table named
    monkeypatch.setattr(VERSIONS, "columns", (*original[:3], Column("n", "string"),
                                              Column("note"), Column("id", nullable=False)))
    with pytest.raises(MergeError) as error:
        await merge(cfg, resolve_processors(cfg), actor=actor)
    text = str(error.value)
    assert f"final table {final}: the processor does not fit the table" in text
    assert "column 'n' was bigint, is now declared string" in text
    assert "new column 'id' is NOT NULL" in text
    monkeypatch.setattr(VERSIONS, "columns", original)
    with pytest.raises(MergeError, match=r"column 'note' \(string\) is no longer declared"):
        await merge(cfg, resolve_processors(cfg), actor=actor)

    # a final partition declared after the table was created
    monkeypatch.setattr(VERSIONS, "columns", wider)
    monkeypatch.setattr(VERSIONS, "final_partition", ("kp", "k2 % 2"))
    with pytest.raises(MergeError, match="final partition 'kp = k2 % 2' is declared but "
                                         "the table was created without one"):
        await merge(cfg, resolve_processors(cfg), actor=actor)


async def test_a_final_partition_must_depend_on_the_key_alone(
        actor: SparkActor, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await stage(actor, "stg_merge_badpart", gobblin_rows(0, 1))
    cfg = settings(warehouse, "stg_merge_badpart")
    monkeypatch.setattr(GOBBLIN, "final_partition", ("day", "to_date(partition_name)"))
    with pytest.raises(MergeError, match=r"'day' = 'to_date\(partition_name\)' must be an "
                                         r"expression over the key columns"):
        await merge(cfg, resolve_processors(cfg), actor=actor)
    monkeypatch.setattr(GOBBLIN, "final_partition", ("cluster", "cluster"))
    with pytest.raises(MergeConfigError, match="final partition column 'cluster' must be a "
                                               "new plain identifier"):
        await merge(cfg, resolve_processors(cfg), actor=actor)


async def test_only_affected_partitions_are_rewritten(actor: SparkActor,
                                                      warehouse: Path) -> None:
    """final_partition log_date: a merge rewrites only the files of the dates its
    staging rows fall into; the final table is partitioned by identity on it."""
    table = "stg_merge_parts"
    await stage(actor, table, gobblin_rows(0, 6, days=3), gobblin_version(100, 1))
    cfg = settings(warehouse, table)
    await merge(cfg, resolve_processors(cfg), actor=actor)
    final = f"kstage.kstage.{final_name(table)}"
    query = f"SELECT partition.log_date AS d, file_path FROM {final}.files"  # noqa: S608
    files = {str(r["d"]): r["file_path"] for r in await sql(actor, query)}
    assert sorted(files) == ["2016-07-13", "2016-07-14", "2016-07-15", "2017-07-14"]

    await stage(actor, table, gobblin_version(101, 2))
    [second] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert counts(second) == (8, 7, 1, 0, 1)
    after = {str(r["d"]): r["file_path"] for r in await sql(actor, query)}
    assert {d: p for d, p in after.items() if d != "2017-07-14"} == {
        d: p for d, p in files.items() if d != "2017-07-14"}  # untouched
    assert after["2017-07-14"] != files["2017-07-14"]


async def test_table_filter_skip_and_config_errors(actor: SparkActor, warehouse: Path) -> None:
    await stage(actor, "stg_merge_a", gobblin_rows(0, 3))
    await stage(actor, "stg_merge_b", gobblin_rows(0, 2), gobblin_rows(0, 2))
    await stage(actor, "stg_merge_empty")  # registered by a sink, nothing appended yet
    cfg = settings(warehouse, "stg_merge_a", "stg_merge_b", "other_table", "stg_merge_empty")

    [only_b] = await merge(cfg, resolve_processors(cfg), "stg_merge_b", actor=actor)
    assert (only_b.table, only_b.final_table) == ("stg_merge_b", "final_merge_b")
    assert counts(only_b) == (4, 2, 4, 2, 0)
    exists = await actor.call(lambda spark: spark.catalog.tableExists(
        "kstage.kstage.final_merge_a"))
    assert not exists

    results = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert [r.table for r in results] == ["stg_merge_a", "stg_merge_b", "other_table",
                                          "stg_merge_empty"]
    assert counts(results[3]) == (0, 0, 0, 0, 0) and not results[3].skipped
    assert await final_rows(actor, "stg_merge_empty") == []
    assert counts(results[0]) == (3, 3, 3, 0, 0)
    assert counts(results[1]) == (4, 2, 0, 0, 0)  # merged just before: nothing new
    skipped = results[2]
    assert skipped.skipped and skipped.final_table == "other_table_final"
    assert "no staging table kstage.kstage.other_table" in skipped.summary()

    with pytest.raises(MergeConfigError, match="'stg_nope' is not fed by a spark sink"):
        await merge(cfg, resolve_processors(cfg), "stg_nope", actor=actor)
    with pytest.raises(MergeConfigError, match="its final table final_merge_a is also a "
                                               "staging table"):
        clash = settings(warehouse, "stg_merge_a", "final_merge_a")
        await merge(clash, resolve_processors(clash), actor=actor)


async def test_a_final_table_of_another_staging_table_is_refused(
        actor: SparkActor, warehouse: Path) -> None:
    await stage(actor, "stg_merge_owner", gobblin_rows(0, 1))
    await sql(actor, "CREATE TABLE kstage.kstage.final_merge_owner (x INT) USING iceberg")
    with pytest.raises(MergeError, match="final table kstage.kstage.final_merge_owner exists "
                                         "but is not the final table of "
                                         "kstage.kstage.stg_merge_owner"):
        cfg = settings(warehouse, "stg_merge_owner")
        await merge(cfg, resolve_processors(cfg), actor=actor)


@pytest.mark.kafka
@pytest.mark.timeout(600)  # a kstage process starts its own JVM on a shared CPU
async def test_merges_inside_the_service_on_an_interval_and_after_drain(
        actor: SparkActor, warehouse: Path, broker: str, kstage: Any, tmp_path: Path) -> None:
    """``merge.interval_s`` in ``kstage run --drain``: both tables are merged on the
    interval and once more at the end; a table whose merge fails (its final table is
    another table) is logged at every interval, the others still merge, and the final
    merge's failure makes the run exit 1."""
    topics = {name: unique(name) for name in ("svc_a", "svc_b")}
    values = [{"k1": f"k{i % 7}", "k2": i % 3, "v": f"v{i}", "n": i} for i in range(60)]
    for topic in topics.values():
        await create_topic(broker, topic, 2)
        await produce(broker, topic, values, partition_of=lambda i: i % 2)
    await sql(actor, "CREATE TABLE kstage.kstage.final_svc_b (x INT) USING iceberg")
    cfg = kafka_config(tmp_path / "kstage.yml", broker, unique("merge-svc"), [
        {"topic": topics[name], "processor": VERSIONS.name,
         "sink": {"type": "spark", "table": f"stg_{name}"}} for name in ("svc_a", "svc_b")])
    data = yaml.safe_load(cfg.read_text())
    data["spark"] = {"master": "local[1]", "warehouse": str(warehouse),
                     "flush_max_interval_s": 0.5, "conf": {"spark.driver.memory": "512m"}}
    data["merge"] = {"interval_s": 0.5}
    cfg.write_text(yaml.safe_dump(data))

    service = kstage(cfg, "--drain")
    assert await service.wait(timeout=500) == 1
    out = service.output()
    assert "stopping: the final merge after --drain failed for 1 table(s)" in out
    refused = ("merge: merge stg_svc_b -> final_svc_b: final table "
               "kstage.kstage.final_svc_b exists but is not the final table of "
               "kstage.kstage.stg_svc_b")
    assert out.count(refused) >= 2, out[-4000:]  # on the interval, and after --drain
    merged = re.findall(r"merge: stg_svc_a -> final_svc_a: (\d+) staging rows, (\d+) final "
                        r"rows", out)
    assert merged and merged[-1] == ("60", "21"), out[-4000:]
    # each staging row read by one merge (a merge the drain's end cancelled while it ran
    # finished on the Spark thread without its log line: count its commit instead)
    commits = await merge_commits(actor, "stg_svc_a")
    assert sum(int(c[final_table.NEW_ROWS]) for c in commits) == 60
    staged = await actor.call(lambda spark: [
        {("_partition" if k == "_kafka_partition" else k): v
         for k, v in row.asDict().items()}
        for row in spark.table("kstage.kstage.stg_svc_a").collect()])
    assert len(staged) == 60
    assert await final_rows(actor, "stg_svc_a", VERSIONS, ingest=False) == expected(
        staged, VERSIONS)


def test_cli_config_error_exit_2(tmp_path: Path, warehouse: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path / "kstage.yml", warehouse, "stg_merge_cli")
    assert main(["merge", "-c", str(cfg), "--table", "stg_missing"]) == 2
    assert "not fed by a spark sink" in capsys.readouterr().err


async def test_cli_merge_last(actor: SparkActor, tmp_path: Path, warehouse: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    """Last: the CLI runs its own SparkActor (stopped when done), so the module's is
    stopped first: a process runs one Spark session at a time."""
    await stage(actor, "stg_merge_cli", gobblin_rows(0, 3), gobblin_rows(1, 1))
    await stage(actor, "stg_merge_clibad", gobblin_rows(0, 1))
    await sql(actor, "CREATE TABLE kstage.kstage.final_merge_clibad (x INT) USING iceberg")
    await actor.astop()
    bad = write_config(tmp_path / "bad.yml", warehouse, "stg_merge_clibad")
    code = await asyncio.to_thread(main, ["merge", "-c", str(bad)])
    assert code == 1
    err = capsys.readouterr().err
    assert "merge stg_merge_clibad -> final_merge_clibad: final table" in err
    cfg = write_config(tmp_path / "kstage.yml", warehouse, "stg_merge_cli")
    code = await asyncio.to_thread(main, ["merge", "-c", str(cfg), "--table", "stg_merge_cli"])
    assert code == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["stg_merge_cli -> final_merge_cli: 4 staging rows, 3 final rows "
                   "(1 replays dropped, 0 superseded; 4 new since last merge)"]
