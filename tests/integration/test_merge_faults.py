"""The merge under faults: merges racing each other, a ``kstage merge`` killed mid-commit.

Against real Spark, Iceberg and the SQLite catalog: racing merges run in this process on
two Spark sessions of one JVM (each its own SQL conf and catalog connection, each on a
thread of its own, held at chosen points by a gate around the MERGE statement), and as two
``kstage merge`` processes; the killed merge is a ``kstage merge`` process whose process
group (Python and its JVM) gets SIGKILL while its MERGE writes, then while it commits.
Every final table is compared with an oracle computed apart from the merge
(:func:`tests.integration.merge_support.expected`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.preflight import resolve_processors
from actors.sinks.spark.actor import SparkActor
from actors.tables import final_table
from actors.tables.merge import MergeResult, final_name, merge, merge_table, plan
from actors.tables.merge_job import MergeJob
from processors.base import Row
from tests.integration.merge_support import (
    GOBBLIN,
    VERSIONS,
    expected,
    final_rows,
    gobblin_rows,
    gobblin_version,
    module_actor,
    settings,
    snapshots,
    stage,
    version,
    write_config,
)
from tests.kafkautil import CHILD_PATH, ROOT

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def actor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkActor]:
    yield from module_actor(tmp_path_factory)


@pytest.fixture(scope="module")
def warehouse(actor: SparkActor) -> Path:
    return Path(actor.settings.warehouse)


class SessionActor:
    """What :func:`merge_table` needs of an actor, on a Spark session of its own
    (``newSession``: its own SQL conf, so one merge's snapshot properties are never the
    other's) and a thread of its own: a second merging process, in this JVM."""

    def __init__(self, actor: SparkActor, spark: Any, name: str) -> None:
        self.settings = actor.settings
        self.writer_id = f"{actor.writer_id}-{name}"
        self.spark = spark.newSession()
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=name)

    async def call(self, fn: Callable[[Any], Any], *, retry: bool = False) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, self.spark)

    def stop(self) -> None:
        self._thread.shutdown()


@pytest.fixture
def sessions(actor: SparkActor) -> Iterator[Callable[[str], Any]]:
    made: list[SessionActor] = []

    async def make(name: str) -> SessionActor:
        spark = await actor.call(lambda spark: spark)
        made.append(SessionActor(actor, spark, name))
        return made[-1]

    yield make  # type: ignore[misc]
    for session in made:
        session.stop()


def gate(monkeypatch: pytest.MonkeyPatch, hold: Callable[[str], None]) -> None:
    """Call ``hold(writer id)`` on the merging thread before each MERGE statement."""
    original = MergeJob._merge_into

    def gated(self: MergeJob, spark: Any, *args: Any) -> None:
        hold(self.writer_id)
        original(self, spark, *args)

    monkeypatch.setattr(MergeJob, "_merge_into", gated)


def versions(round_: int, keys: int = 12) -> list[Row]:
    """One append's rows: a new version of every key (some NULL), later each round."""
    rows = []
    for i in range(keys):
        k1 = None if i % 5 == 0 else f"k{i % 6}"
        k2 = None if i % 4 == 0 else i // 6
        rows.append(version(k1, k2, f"v{round_}.{i}", offset=round_ * 100 + i,
                            timestamp=1000 + round_ * 10 + (i % 3), n=i))
    return rows


async def merge_records_of(actor: SparkActor, table: str) -> list[str]:
    found = await snapshots(actor, final_name(table))
    return [s[final_table.MERGED_SNAPSHOT] for _, _, s in found
            if final_table.MERGED_SNAPSHOT in s]


async def test_two_merges_racing_commit_once_and_the_loser_merges_again(
        actor: SparkActor, warehouse: Path, sessions: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Both MERGEs start together from the same final snapshot: Iceberg refuses the
    second commit (ValidationException), that merge runs again and finds the table
    merged through the same staging snapshot: one merge commit, the exact table."""
    table = "stg_race"
    staged = versions(0) + versions(1) + versions(0)  # a replay of round 0
    await stage(actor, table, versions(0), versions(1), versions(0), processor=VERSIONS)
    cfg = settings(warehouse, table, processor=VERSIONS)
    [item] = plan(cfg, resolve_processors(cfg))
    await merge(cfg, resolve_processors(cfg), actor=actor)  # creates it
    await stage(actor, table, versions(2), processor=VERSIONS)
    staged += versions(2)

    both = threading.Barrier(2)
    held: set[str] = set()

    def hold(writer: str) -> None:
        if writer not in held:  # the first MERGE of each: together
            held.add(writer)
            both.wait(timeout=120)

    gate(monkeypatch, hold)
    one, two = await sessions("one"), await sessions("two")
    results: list[MergeResult] = await asyncio.gather(merge_table(one, item),
                                                      merge_table(two, item))
    assert sorted(r.attempts for r in results) == [1, 2]
    winner, loser = sorted(results, key=lambda r: r.attempts)
    assert (winner.new_rows, loser.new_rows) == (12, 0)  # the loser: nothing left to merge
    end = (await snapshots(actor, table))[-1][0]
    assert winner.merged_snapshot_id == loser.merged_snapshot_id == end
    records = await merge_records_of(actor, table)
    assert records[-1] == str(end) and len(records) == 2  # the first merge, the winner
    assert await final_rows(actor, table, VERSIONS, ingest=False) == expected(staged,
                                                                              VERSIONS)


async def test_a_merge_of_older_rows_never_overwrites_a_later_merge(
        actor: SparkActor, warehouse: Path, sessions: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Merge A reads staging and the final table, then waits; newer versions land in
    staging and merge B commits them; then A's MERGE runs on B's table: its older rows
    lose to B's (the statement checks the fold's order against the row it finds)."""
    table = "stg_stale"
    await stage(actor, table, versions(0), processor=VERSIONS)
    cfg = settings(warehouse, table, processor=VERSIONS)
    [item] = plan(cfg, resolve_processors(cfg))
    ready, go = threading.Event(), threading.Event()

    def hold(writer: str) -> None:
        if writer.endswith("-a"):
            ready.set()
            assert go.wait(timeout=120)

    gate(monkeypatch, hold)
    a, b = await sessions("a"), await sessions("b")
    first = asyncio.ensure_future(merge_table(a, item))
    assert await asyncio.to_thread(ready.wait, 120)
    s1 = (await snapshots(actor, table))[-1][0]
    await stage(actor, table, versions(1), processor=VERSIONS)
    s2 = (await snapshots(actor, table))[-1][0]
    later = await merge_table(b, item)
    assert (later.new_rows, later.merged_snapshot_id) == (24, s2)
    go.set()
    stale = await first
    assert (stale.new_rows, stale.merged_snapshot_id, stale.attempts) == (12, s1, 1)
    staged = versions(0) + versions(1)
    assert await final_rows(actor, table, VERSIONS, ingest=False) == expected(staged,
                                                                              VERSIONS)
    # A recorded s1 last: the next merge reads (s1, s2] again, and changes nothing
    assert (await merge_records_of(actor, table))[-2:] == [str(s2), str(s1)]
    [again] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert (again.new_rows, again.replays_dropped, again.merged_snapshot_id) == (12, 12, s2)
    # no row changed: the record is a commit of no file
    _, operation, summary = (await snapshots(actor, final_name(table)))[-1]
    assert (operation, summary.get("added-data-files", "0")) == ("append", "0")
    assert summary[final_table.MERGED_SNAPSHOT] == str(s2)
    assert summary[final_table.NEW_ROWS] == "12"
    assert await final_rows(actor, table, VERSIONS, ingest=False) == expected(staged,
                                                                              VERSIONS)


class KstageMerge:
    """``kstage merge -c config`` in a process group of its own (Python and its JVM),
    its output in a file beside the config."""

    def __init__(self, config: Path, name: str) -> None:
        self.log = config.with_name(f"{name}.log")
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service", "merge", "-c", str(config)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT,
                env={**os.environ, "PYTHONPATH": CHILD_PATH,
                     "SPARK_LOCAL_IP": "127.0.0.1"})

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"kstage merge still running after {timeout}s:\n"
                                 f"{self.output()[-3000:]}") from None

    def kill(self) -> None:
        """SIGKILL the process and its JVM; wait until both are gone."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        raise AssertionError(f"process group {self.proc.pid} still alive after SIGKILL")


@pytest.mark.timeout(600)  # two JVMs start on a shared CPU
async def test_two_merge_processes_at_once_give_the_exact_table(
        actor: SparkActor, warehouse: Path, tmp_path: Path) -> None:
    table = "stg_two_procs"
    batches = [versions(r) for r in range(4)] + [versions(1)]
    await stage(actor, table, *batches, processor=VERSIONS)
    config = write_config(tmp_path / "kstage.yml", warehouse, table, VERSIONS)
    procs = [KstageMerge(config, f"merge{i}") for i in range(2)]
    try:
        codes = [await asyncio.to_thread(p.wait, 300) for p in procs]
    finally:
        for p in procs:
            if p.proc.poll() is None:
                p.kill()
    for proc, code in zip(procs, codes, strict=True):
        assert code == 0, proc.output()[-3000:]
        summary = f"{table} -> {final_name(table)}: 60 staging rows, 12 final rows"
        assert summary in proc.output()
    staged = [row for batch in batches for row in batch]
    assert await final_rows(actor, table, VERSIONS, ingest=False) == expected(staged,
                                                                              VERSIONS)
    end = (await snapshots(actor, table))[-1][0]
    assert (await merge_records_of(actor, table))[-1] == str(end)


def _files(root: Path, pattern: str) -> set[Path]:
    return set(root.rglob(pattern)) if root.exists() else set()


async def _kill_when(merging: KstageMerge, root: Path, pattern: str,
                     before: set[Path]) -> Path:
    """SIGKILL the merge's process group as soon as a file matching ``pattern`` that is
    not in ``before`` appears under ``root``; that file."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        new = _files(root, pattern) - before
        if new:
            merging.kill()
            return new.pop()
        if merging.proc.poll() is not None:
            raise AssertionError(f"kstage merge exited {merging.proc.returncode} before "
                                 f"writing {pattern}:\n{merging.output()[-3000:]}")
        await asyncio.sleep(0.005)
    merging.kill()
    raise AssertionError(f"no new {pattern} under {root} within 300s")


@pytest.mark.timeout(900)  # two kstage merge processes start a JVM each
async def test_merge_killed_mid_commit_then_run_again(actor: SparkActor, warehouse: Path,
                                                      tmp_path: Path) -> None:
    """SIGKILL while the MERGE writes its data files (nothing committed: the files are
    orphans, not table rows), then again once its new metadata file is written (around
    the catalog's compare-and-swap: committed or not, either is fine); each time the
    merge run again gives the exact table."""
    table = "stg_killed"
    final = final_name(table)
    staged: list[Row] = []

    async def add(*batches: list[Row]) -> None:
        staged.extend(row for batch in batches for row in batch)
        await stage(actor, table, *batches)

    await add(gobblin_rows(0, 10, days=10))
    cfg = settings(warehouse, table)
    await merge(cfg, resolve_processors(cfg), actor=actor)
    config = write_config(tmp_path / "kstage.yml", warehouse, table)
    root = warehouse / "kstage" / final

    # 1. killed while the MERGE writes: one file of many partitions written
    await add(gobblin_rows(10, 60, days=30), gobblin_version(100, 1),
              gobblin_rows(10, 5, days=30))
    committed = await snapshots(actor, final)
    before = _files(root / "data", "*.parquet")
    written = await _kill_when(KstageMerge(config, "killed1"), root / "data", "*.parquet",
                               before)
    assert await snapshots(actor, final) == committed  # nothing of it in the table
    query = f"SELECT file_path FROM kstage.kstage.{final}.all_files"  # noqa: S608
    referenced = await actor.call(lambda spark: {r[0] for r in spark.sql(query).collect()})
    assert str(written) not in referenced and f"file:{written}" not in referenced
    [again] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert again.new_rows == 66 and again.attempts == 1
    assert await final_rows(actor, table, ingest=False, partition=False) == expected(
        staged, GOBBLIN)

    # 2. killed once its new table metadata is written (around the catalog update)
    await add(gobblin_version(101, 2), gobblin_rows(70, 20, days=30))
    before = _files(root / "metadata", "*.metadata.json")
    await _kill_when(KstageMerge(config, "killed2"), root / "metadata", "*.metadata.json",
                     before)
    landed = [s for s in await merge_records_of(actor, table)
              if s == str((await snapshots(actor, table))[-1][0])]
    [last] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert last.new_rows == (0 if landed else 21)
    assert await final_rows(actor, table, ingest=False, partition=False) == expected(
        staged, GOBBLIN)
    # the rows of both killed merges are in the table once: nothing lost or doubled
    rows = await final_rows(actor, table, ingest=False, partition=False)
    assert len(rows) == len(set(rows)) == len(expected(staged, GOBBLIN))


@pytest.mark.timeout(400)  # a kstage merge process starts a JVM
async def test_kstage_merge_with_its_catalog_down_exits_1_naming_the_table(
        tmp_path: Path) -> None:
    """The catalog (PostgreSQL here) does not answer: exit 1, the table and the cause
    named, the catalog's password never printed."""
    with socket.socket() as probe:  # a port nothing listens on: the server is down
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "kstage.yml"
    config.write_text(
        "name: merge-down\n"
        f"spark: {{master: 'local[1]', warehouse: '{tmp_path / 'warehouse'}',\n"
        "        conf: {spark.driver.memory: 512m},\n"
        f"        catalog: {{uri: 'jdbc:postgresql://127.0.0.1:{port}/catalog',\n"
        "                  user: kstage, password: s3cret-pw}}\n"
        "groups:\n  - topics:\n"
        f"      - {{topic: t, processor: {VERSIONS.name}, format: json,\n"
        "         sink: {type: spark, table: stg_down}}\n", encoding="utf-8")
    merging = KstageMerge(config, "down")
    assert await asyncio.to_thread(merging.wait, 300) == 1
    out = merging.output()
    assert ("kstage: merge stg_down -> final_down failed: org.apache.iceberg.jdbc."
            f"UncheckedSQLException: Failed to connect: jdbc:postgresql://127.0.0.1:{port}/"
            "catalog") in out, out[-3000:]
    assert "s3cret-pw" not in out
