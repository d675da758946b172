"""The background fold of a table that pyiceberg appends to. With real processes and the
real broker:

* with ``spark.maintenance.every_s`` set, the process starts Spark for the table jobs
  only, and Spark's fold (``spark.maintenance.fold_files``) compacts the small files the
  pyiceberg appends leave, beside them; its snapshot, a Spark commit between pyiceberg's,
  carries every partition's offsets (the fence gives a commit that records none the
  table's offsets); the table ends with fewer data files than the appends wrote; the
  process SIGKILLed after its table commits, before any Kafka commit, the next run
  (``--drain``) resumes each partition where the table holds it: every event once;
* without ``every_s`` (no JVM), pyiceberg's fold (:mod:`actors.tables.pyiceberg_fold`)
  does the same in a ``replace`` snapshot, no JVM started;
* a process SIGKILLed while its fold reads a small file (held: the file made a FIFO)
  commits nothing of the fold, its appends having gone on beside it; the next run lands
  every event once (both brokers: the resume is Kafka's part); the fold's thread runs
  nicer than the process (behind the appends);
* a fold that cannot read a file (gone from the storage) is logged with the table,
  counted and tried again; with the file back, the next one lands, every row once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from actors.metrics import Metrics
from actors.preflight import resolve_processors
from actors.sinks.spark import iceberg
from actors.sinks.spark.background_cpu import NICE_STEP
from actors.sinks.spark.pyiceberg_appends import Lake
from actors.sinks.spark.pyiceberg_catalog import ensure_namespace
from actors.tables import pyiceberg_fold
from tests.kafkautil import KstageProcess, committed, unique, wait_until
from tests.kit import until
from tests.lake import (
    IcebergReader,
    drain_resumes_once,
    fill_in_steps,
    one_table,
    produce_events,
    run_ahead_of_kafka,
    spark_section,
    wait_landed,
)
from tests.process_tree import watched

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2
STEP = 50  # events produced at a time while the table fills
FOLDED = "maintenance: folded kstage.kstage.{} (staging): data files "


async def while_alive(run: KstageProcess, predicate: Callable[[], bool], what: str,
                      timeout: float = 300) -> None:
    """Until ``predicate`` holds, ``run`` alive all the while (its output in the
    failure)."""
    try:
        await wait_until(lambda: run.proc.poll() is not None or predicate(),
                         timeout=timeout, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}:\n{run.output()[-6000:]}") from None
    assert run.proc.poll() is None, run.output()


async def fold_amid_appends(run: KstageProcess, broker: str, topic: str,
                            reader: IcebergReader, table: str, first: int,
                            events: int) -> None:
    """Events ``0 .. first-1`` in steps (caught up: appends of a data file or two each)
    until ``run`` logs a fold of ``table``, then the rest of ``events``, appended on top
    of the fold's snapshot."""
    await fill_in_steps(run, broker, topic, reader, table, first, STEP, PARTITIONS)
    await while_alive(run, lambda: FOLDED.format(table) in run.output(),
                      "a fold of the staging table")
    await produce_events(broker, topic, first, events - first, PARTITIONS)
    await wait_landed(run, reader, table, events)


@pytest.mark.timeout(600)
async def test_a_fold_beside_pyiceberg_appends_carries_the_offsets_and_a_kill_resumes_once(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    first_batch, events, table = 400, 800, "stg_pyice_fold"
    topic, group = unique("pyice-fold"), unique("g-pyice-fold")
    spark = pyiceberg_lake(tmp_path, {"every_s": 3600, "fold_files": 4})
    run, cfg, reader = await run_ahead_of_kafka(kstage, broker, tmp_path, topic, group,
                                                table, spark, PARTITIONS)
    await fold_amid_appends(run, broker, topic, reader, table, first_batch, events)
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait()
    out = run.output()
    assert "spark: session started" in out, out  # for the table jobs only
    assert sum(max(v, 0) for v in (await committed(
        broker, group, topic, PARTITIONS)).values()) == 0

    summaries = reader.summaries(table)
    folds = [s for s in summaries if int(s.get("deleted-data-files", "0")) > 0]
    assert folds, summaries
    for fold in folds:  # a Spark commit between pyiceberg's, with every partition's offsets
        held = iceberg.parse_offsets(fold.get(iceberg.OFFSETS, "{}"))
        assert sorted(held) == [(group, topic, p) for p in range(PARTITIONS)], fold
    appended = sum(int(s.get("added-data-files", "0")) for s in summaries
                   if int(s.get("deleted-data-files", "0")) == 0)
    assert int(summaries[-1]["total-data-files"]) < appended, summaries

    await drain_resumes_once(kstage, cfg, broker, reader, group, table, topic,
                             events, PARTITIONS)


# -- without a JVM: pyiceberg's fold (actors/tables/pyiceberg_fold.py) --------------------

def pyiceberg_lake(tmp_path: Path, maintenance: dict[str, Any]) -> dict[str, Any]:
    """A ``spark:`` section of pyiceberg appends of 40 rows at most to a SQLite catalog
    under ``tmp_path``, with ``maintenance``."""
    catalog = {"uri": f"jdbc:sqlite:{tmp_path / 'lake' / 'catalog.db'}",
               "warehouse": str(tmp_path / "lake" / "wh")}
    return spark_section(catalog, appends="pyiceberg", flush_max_rows=40,
                         maintenance=maintenance)


def operations(reader: IcebergReader, table: str) -> list[str]:
    """The operation of each of the table's snapshots, oldest first."""
    loaded = reader.catalog.load_table((reader.settings.catalog.namespace, table))
    return [s.summary.operation.value if s.summary else ""
            for s in sorted(loaded.snapshots(), key=lambda s: s.timestamp_ms)]


def held_events(reader: IcebergReader, table: str) -> int:
    """How many events the table's snapshots say it holds (metadata only: no data file
    read), from its ``kstage.offsets``."""
    return sum(reader.offsets(table).values())


def oldest_data_file(reader: IcebergReader, table: str) -> Path:
    """The local path of the current snapshot's oldest data file (the first a fold
    reads)."""
    loaded = reader.catalog.load_table((reader.settings.catalog.namespace, table))
    current = loaded.current_snapshot()
    assert current is not None, f"{table} has no snapshot"
    entries = [entry for manifest in current.manifests(loaded.io)
               for entry in manifest.fetch_manifest_entry(loaded.io, discard_deleted=True)]
    oldest = min(entries, key=lambda e: (e.sequence_number or 0, e.data_file.file_path))
    return Path(urlparse(oldest.data_file.file_path).path)


def reading_a_fifo(pid: int) -> bool:
    """Whether a thread of process ``pid`` waits in ``open(2)`` of a FIFO for a writer."""
    return fifo_reader(pid) is not None


def fifo_reader(pid: int) -> Path | None:
    """The ``/proc`` directory of the thread of process ``pid`` that waits in ``open(2)``
    of a FIFO for a writer, if one does."""
    for wchan in Path(f"/proc/{pid}/task").glob("*/wchan"):
        with contextlib.suppress(OSError):
            if wchan.read_text().strip() == "wait_for_partner":
                return wchan.parent
    return None


def nice(task: Path) -> int:
    """The nice value of the thread or process whose ``/proc`` directory is ``task``."""
    stat = (task / "stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[16])


@pytest.mark.timeout(600)
async def test_pyiceberg_folds_without_a_jvm_into_a_replace_that_carries_the_offsets(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    first_batch, events, table = 400, 800, "stg_pyice_fold_nojvm"
    topic, group = unique("pyice-fold-nojvm"), unique("g-pyice-fold-nojvm")
    # no maintenance.every_s: no JVM; the fold is pyiceberg's
    spark = pyiceberg_lake(tmp_path, {"fold_files": 4})
    run, cfg, reader = await run_ahead_of_kafka(kstage, broker, tmp_path, topic, group,
                                                table, spark, PARTITIONS)
    async with watched(run.proc.pid, "java") as jvms:
        await fold_amid_appends(run, broker, topic, reader, table, first_batch, events)
    assert jvms == {}, run.output()
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait()
    out = run.output()
    assert "spark: session started" not in out, out
    assert "; pyiceberg)" in out.split(FOLDED.format(table), 1)[1].splitlines()[0], out
    assert sum(max(v, 0) for v in (await committed(
        broker, group, topic, PARTITIONS)).values()) == 0

    summaries, kinds = reader.summaries(table), operations(reader, table)
    folds = [s for s, kind in zip(summaries, kinds, strict=True) if kind == "replace"]
    assert folds, list(zip(kinds, summaries, strict=True))
    assert set(kinds) == {"append", "replace"}, kinds
    for fold in folds:  # no offsets of its own: the catalog's commit gave it the table's
        assert int(fold["deleted-data-files"]) >= 2, fold
        assert "kstage.writer-id" not in fold, fold
        held = iceberg.parse_offsets(fold.get(iceberg.OFFSETS, "{}"))
        assert sorted(held) == [(group, topic, p) for p in range(PARTITIONS)], fold
    appended = sum(int(s.get("added-data-files", "0"))
                   for s, kind in zip(summaries, kinds, strict=True) if kind == "append")
    assert int(summaries[-1]["total-data-files"]) < appended, summaries

    await drain_resumes_once(kstage, cfg, broker, reader, group, table, topic,
                             events, PARTITIONS)


@pytest.mark.timeout(600)
async def test_a_process_killed_while_its_fold_reads_commits_none_of_it_and_lands_once(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    """The fold's read of the oldest small file held (the file made a FIFO: the fold's
    thread waits in ``open(2)``, seen in ``/proc``), the process is SIGKILLed mid-fold."""
    table = "stg_pyice_fold_kill"
    topic, group = unique("pyice-fold-kill"), unique("g-pyice-fold-kill")
    spark = pyiceberg_lake(tmp_path, {"fold_files": 4, "min_input_files": 2})
    run, cfg, reader = await run_ahead_of_kafka(kstage, broker, tmp_path, topic, group,
                                                table, spark, PARTITIONS)
    await fill_in_steps(run, broker, topic, reader, table, STEP, STEP, PARTITIONS)
    files = int(reader.summaries(table)[-1]["total-data-files"])
    assert files < 4, f"{files} data files after the first step: folded too early"
    oldest = oldest_data_file(reader, table)
    kept = oldest.with_name(oldest.name + ".kept")
    oldest.rename(kept)
    os.mkfifo(oldest)
    events = STEP
    try:
        # steps until the table has 4 data files: a fold, which reads the FIFO first
        while int(reader.summaries(table)[-1]["total-data-files"]) < 4:
            await produce_events(broker, topic, events, STEP, PARTITIONS)
            events += STEP
            await wait_until(lambda n=events: held_events(reader, table) == n,
                             timeout=120, what=f"the first {events} events appended")
        await while_alive(run, lambda: reading_a_fifo(run.proc.pid),
                          "the fold reading the oldest data file")
        assert "maintenance: folding" in run.output(), run.output()
        # the appends go on beside the held fold
        await produce_events(broker, topic, events, STEP, PARTITIONS)
        events += STEP
        await wait_until(lambda: held_events(reader, table) == events, timeout=120,
                         what="a step appended beside the held fold")
        reader_task = fifo_reader(run.proc.pid)
        assert reader_task is not None, "the fold no longer reads the oldest file"
        # the fold's thread runs behind the appends' (actors/sinks/spark/background_cpu.py)
        assert nice(reader_task) == min(19, nice(Path(f"/proc/{run.proc.pid}")) + NICE_STEP)
        run.proc.send_signal(signal.SIGKILL)
        run.proc.wait()
    finally:
        oldest.unlink()
        kept.rename(oldest)
    assert FOLDED.format(table) not in run.output(), run.output()
    assert "replace" not in operations(reader, table), "the killed fold committed"

    await drain_resumes_once(kstage, cfg, broker, reader, group, table, topic,
                             events, PARTITIONS)


async def test_a_fold_that_cannot_read_a_file_is_logged_counted_and_tried_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """pyiceberg's fold loop on a real table of a SQLite catalog: a data file gone from
    the warehouse (a storage losing it) fails the fold, which is logged with the table,
    counted and tried again after its backoff; the file back, the next fold lands, every
    row once."""
    import pyarrow as pa

    settings = one_table(tmp_path)
    namespace = settings.spark.catalog.namespace
    lake = Lake(settings.spark)

    def made() -> Path:
        catalog = lake.catalog()
        ensure_namespace(catalog, namespace)
        table = catalog.create_table((namespace, "stg_t"), schema=pa.schema([("x", pa.int64())]))
        for x in range(5):  # five small files
            table.append(pa.table({"x": [x]}))
        return Path(urlparse(sorted(
            task.file.file_path for task in table.scan().plan_files())[0]).path)

    metrics = Metrics()
    monkeypatch.setattr(pyiceberg_fold, "CHECK_S", 0.05)
    caplog.set_level(logging.INFO, "actors.tables.pyiceberg_fold")
    folding: asyncio.Task[None] | None = None
    try:
        lost = await lake.call(made)
        kept = lost.with_name(lost.name + ".kept")
        lost.rename(kept)
        folding = asyncio.create_task(pyiceberg_fold.fold_periodically(
            settings, resolve_processors(settings), lake, metrics))
        failed = ("maintenance: fold of kstage.kstage.stg_t FAILED (1 in a row; tried again "
                  "in 0s)")
        await until(lambda: failed in caplog.text, failed, timeout=60)
        assert metrics.maintenance_failures.labels("kstage.kstage.stg_t")._value.get() >= 1
        kept.rename(lost)
        folded = ("maintenance: folded kstage.kstage.stg_t (staging): data files 5 -> 1 "
                  "(rewrote 5 into 1")
        await until(lambda: folded in caplog.text, folded, timeout=60)
        loaded = await lake.call(lambda: lake.table("stg_t"))
        assert sorted(loaded.scan().to_arrow().column("x").to_pylist()) == [0, 1, 2, 3, 4]
        assert loaded.current_snapshot().summary.operation.value == "replace"
        assert metrics.table_folds.labels("kstage.kstage.stg_t")._value.get() == 1
    finally:
        if folding is not None:
            folding.cancel()
            await asyncio.gather(folding, return_exceptions=True)
        lake.stop()



async def test_the_commit_reads_only_the_manifests_added_since_the_plan(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plan a fold of five one-row appends, append once more, commit: on the appends'
    thread only the manifest of the append after the plan is read (the plan's entries
    serve the rest), and the table holds every row once, the last append's untouched."""
    import pyarrow as pa
    from pyiceberg.manifest import ManifestFile

    spark = one_table(tmp_path).spark
    lake = Lake(spark)
    try:
        def made() -> None:
            catalog = lake.catalog()
            ensure_namespace(catalog, spark.catalog.namespace)
            table = catalog.create_table((spark.catalog.namespace, "stg_t"),
                                         schema=pa.schema([("x", pa.int64())]))
            for x in range(5):  # five small files, a manifest each
                table.append(pa.table({"x": [x]}))

        await lake.call(made)
        count, fold = await lake.aside(lambda: pyiceberg_fold.plan(lake, spark, "stg_t", 0))
        assert count == 5 and fold is not None and fold.files == 5
        assert len(fold.entries) == 5

        def append_after_the_plan() -> set[str]:
            table = lake.table("stg_t")
            table.append(pa.table({"x": [5]}))
            return {m.manifest_path for m in table.current_snapshot().manifests(table.io)}

        [newest] = await lake.call(append_after_the_plan) - set(fold.entries)
        written = await lake.aside(lambda: pyiceberg_fold.rewrite(fold))
        read: list[str] = []
        fetch = ManifestFile.fetch_manifest_entry

        def counted(self: Any, io: Any, discard_deleted: bool = True) -> Any:
            read.append(self.manifest_path)
            return fetch(self, io, discard_deleted)

        monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", counted)
        after = await lake.call(lambda: pyiceberg_fold.commit(lake, "stg_t", fold, written))
        monkeypatch.undo()
        assert set(read) == {newest}, (read, newest)
        assert after == 2  # the fold's file and the append's after the plan
        loaded = await lake.call(lambda: lake.table("stg_t"))
        assert sorted(loaded.scan().to_arrow().column("x").to_pylist()) == [0, 1, 2, 3, 4, 5]
        assert loaded.current_snapshot().summary.operation.value == "replace"
    finally:
        lake.stop()
