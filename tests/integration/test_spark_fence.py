"""The commit fence in the Spark session's catalog (``io.kstage.iceberg.FencingCatalog``,
built by ``kstage jars fetch``), on a real Spark session and a real SQLite JDBC catalog.

A staging append whose snapshot carries ``kstage.expect`` commits only if, in the metadata
the commit is applied on, the table's recorded offset of each stream it expects is the
expected one: a zombie's append of offsets the table already holds is refused (``kstage
fence:``) and adds nothing; an append whose expectation holds lands, also after a commit of
other partitions by a second writer. The check runs again on Iceberg's optimistic retry: a
second writer's commit slipped in between the check and the catalog's compare-and-swap
(the test holds the SQLite catalog's write lock to put it exactly there) is seen by the
retry. The Java rule and a Python reference of it agree on a table of cases.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.sinks.spark import carried_offsets, iceberg, offset_history
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import dotted, qualified, sqlite_file
from actors.tables import fold as background
from actors.tables.fold import Folded, fold
from actors.tables.maintenance import compact
from actors.tables.snapshots import content
from processors.base import Column
from settings.models import SparkSettings
from tests.lake import arrow_frame

pytestmark = [pytest.mark.slow]

COLUMNS = (Column("id"),)
EXPECT = "kstage.expect"
GROUP, TOPIC = "g", "events"
Offsets = dict[tuple[str, str, int], int]


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="module")
def actor(warehouse: Path) -> Iterator[SparkActor]:
    spark = SparkActor(SparkSettings(master="local[1]", warehouse=str(warehouse)))
    yield spark
    spark.stop()


def streams(**by_partition: int) -> Offsets:
    """``p0=10, p1=5`` -> {(GROUP, TOPIC, 0): 10, (GROUP, TOPIC, 1): 5}."""
    return {(GROUP, TOPIC, int(p[1:])): o for p, o in by_partition.items()}


def append(spark: Any, settings: SparkSettings, table: str, start: int, end: int,
           partition: int, expect: Offsets | None) -> None:
    """Spark thread: one staging append (DataFrameWriterV2) of offsets ``start..end-1`` of
    ``partition``, recording the partition done up to ``end`` (the current snapshot's
    offsets carried forward) and, if given, ``kstage.expect``."""
    now = dt.datetime.now(dt.UTC)
    rows = [(f"{partition}/{o}", TOPIC, partition, o, 0, now) for o in range(start, end)]
    offsets = iceberg.carried(iceberg.current_offsets(spark, settings, table),
                              {(GROUP, TOPIC, partition): end})
    writer = (arrow_frame(spark, rows, iceberg.struct_type(COLUMNS))
              .writeTo(dotted(settings, table))
              .option(f"snapshot-property.{iceberg.OFFSETS}", iceberg.format_offsets(offsets)))
    if expect is not None:
        writer = writer.option(f"snapshot-property.{EXPECT}", iceberg.format_offsets(expect))
    writer.append()


def state(spark: Any, settings: SparkSettings, table: str) -> tuple[list[str], int, Offsets]:
    """The table's ids, its number of snapshots, its recorded offsets."""
    ids = sorted(r["id"] for r in spark.table(dotted(settings, table)).select("id").collect())
    snapshots = len(iceberg.table_metadata(spark, settings, table).get("snapshots", []))
    return ids, snapshots, offset_history.table_offsets(spark, settings, table)


def data_files(warehouse: Path, table: str) -> list[Path]:
    return sorted((warehouse / "kstage" / table / "data").rglob("*.parquet"))


def metadata_files(warehouse: Path, table: str) -> set[Path]:
    return set((warehouse / "kstage" / table / "metadata").glob("*.metadata.json"))


def refusal(table: str, stream: tuple[str, str, int], expected: int, found: int) -> str:
    group, topic, partition = stream
    return (f"kstage fence: table kstage.kstage.{table}: group {group} topic {topic} "
            f"partition {partition}: expected offset {expected}, found {found}")


async def test_a_stale_expectation_is_refused_and_adds_nothing(
        actor: SparkActor, warehouse: Path) -> None:
    settings, table = actor.settings, "stg_stale"

    def run(spark: Any) -> tuple[Any, ...]:
        iceberg.create_staging(spark, settings, table, COLUMNS)
        append(spark, settings, table, 0, 10, 0, streams(p0=0))  # the owner: lands
        before = state(spark, settings, table), data_files(warehouse, table)
        try:  # a zombie that read the table before the owner's append
            append(spark, settings, table, 0, 10, 0, streams(p0=0))
        except Exception as exc:  # noqa: BLE001 - the test inspects what pyspark raised
            refused: BaseException | None = exc
        else:
            refused = None
        return before, refused, state(spark, settings, table), data_files(warehouse, table)

    (before, files_before), refused, after, files_after = await actor.call(run)
    assert before == ([f"0/{o}" for o in range(10)], 1, streams(p0=10))
    assert refused is not None, "the zombie's append was committed"
    assert refusal(table, (GROUP, TOPIC, 0), 0, 10) in str(refused)
    assert after == before  # no row, no snapshot, no offset
    assert files_after == files_before  # its data file was deleted (a cleanable failure)


async def test_an_expectation_that_holds_lands_after_other_partitions_moved(
        actor: SparkActor) -> None:
    settings, table = actor.settings, "stg_holds"

    def run(spark: Any) -> tuple[list[str], int, Offsets]:
        iceberg.create_staging(spark, settings, table, COLUMNS)
        append(spark, settings, table, 0, 5, 0, streams(p0=0))
        read = offset_history.table_offsets(spark, settings, table)  # writer A reads: p0 at 5
        append(spark, settings, table, 0, 3, 1, streams(p1=0))  # writer B: partition 1
        expect = {s: o for s, o in read.items() if s[2] == 0}
        append(spark, settings, table, 5, 8, 0, expect)  # writer A continues p0 from 5
        append(spark, settings, table, 8, 9, 0, None)  # no kstage.expect: never checked
        return state(spark, settings, table)

    ids, snapshots, offsets = await actor.call(run)
    assert ids == sorted([f"0/{o}" for o in range(9)] + [f"1/{o}" for o in range(3)])
    assert snapshots == 4 and offsets == streams(p0=9, p1=3)


@pytest.mark.parametrize(("other", "lands"), [(0, False), (1, True)],
                         ids=["same-partition-refused", "other-partition-lands"])
async def test_the_fence_is_checked_again_on_the_optimistic_retry(
        actor: SparkActor, warehouse: Path, other: int, lands: bool) -> None:
    """Writer A's append passes the fence on metadata S1, then waits for the catalog's
    write lock (held by the test) in its compare-and-swap; meanwhile the catalog's pointer
    moves to S2, where writer B appended partition ``other``. A's swap fails, Iceberg
    retries on S2, and the fence is checked again there. When A lands, its snapshot (the
    current one, all a REST catalog may serve) records B's offsets too: A carried forward
    the offsets of S1, and the fence made them again on S2."""
    settings, table = actor.settings, f"stg_retry_{other}"

    def second(spark: Any) -> None:
        append(spark, settings, table, 5, 10, other, streams(**{f"p{other}": 5 * (1 - other)}))

    refused, ids, offsets, current = await retried(actor, warehouse, table, second)
    if lands:
        assert refused is None, refused
        assert offsets == streams(p0=8, p1=10)
        assert current == streams(p0=8, p1=10)  # B's offsets still in the current snapshot
        assert ids == sorted([f"0/{o}" for o in range(8)] + [f"1/{o}" for o in range(5, 10)])
    else:
        assert refused is not None, "A's retry committed on top of B's append of p0"
        assert refusal(table, (GROUP, TOPIC, 0), 5, 10) in str(refused)
        assert offsets == current == streams(p0=10) and ids == [f"0/{o}" for o in range(10)]


async def test_a_reset_slipped_in_before_the_retry_stands(
        actor: SparkActor, warehouse: Path) -> None:
    """The same race with ``kstage tables reset-offsets`` of partition 1 (recorded at 7 in
    S1, reset to 2) as B's commit: A carried p1 at 7 forward from S1; on S2 it records the
    reset's 2, so the reset stands (A's snapshot is newer than the reset's)."""
    settings, table = actor.settings, "stg_retry_reset"

    def second(spark: Any) -> None:
        current = offset_history.table_offsets(spark, settings, table)
        loaded = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            spark._jsparkSession, dotted(settings, table))
        commit = loaded.newAppend()
        for key, value in offset_history.reset_summary(current, streams(p1=2)).items():
            commit = commit.set(key, value)
        commit.commit()

    refused, ids, offsets, current = await retried(actor, warehouse, table, second,
                                                   other_first=7)
    assert refused is None, refused
    assert offsets == current == streams(p0=8, p1=2)
    assert ids == sorted([f"0/{o}" for o in range(8)] + [f"1/{o}" for o in range(7)])


async def retried(actor: SparkActor, warehouse: Path, table: str,
                  second: Any, other_first: int = 0,
                  ) -> tuple[BaseException | None, list[str], Offsets, Offsets]:
    """Writer A appends offsets 5..7 of partition 0 (expecting 5) on metadata S1 (p0 at 5,
    p1 at ``other_first`` when not 0), held in its compare-and-swap by the SQLite catalog's
    write lock until the pointer is moved to S2, the table after ``second(spark)`` (writer
    B's commit, made before A starts). What A's append raised (None: it landed), then the
    table's ids, its recorded offsets and its current snapshot's ``kstage.offsets``."""
    settings = actor.settings
    catalog_db = sqlite_file(settings)
    assert catalog_db is not None

    def prepare(spark: Any) -> tuple[str, str]:
        iceberg.create_staging(spark, settings, table, COLUMNS)
        append(spark, settings, table, 0, 5, 0, streams(p0=0))
        if other_first:
            append(spark, settings, table, 0, other_first, 1, streams(p1=0))
        s1 = location(spark)
        second(spark)
        return s1, location(spark)

    def location(spark: Any) -> str:
        return str(spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            spark._jsparkSession, dotted(settings, table)).operations().current()
            .metadataFileLocation())

    def point(db: sqlite3.Connection, metadata: str) -> None:
        db.execute("UPDATE iceberg_tables SET metadata_location = ? WHERE table_name = ?",
                   (metadata, table))

    s1, s2 = await actor.call(prepare)
    db = sqlite3.connect(str(catalog_db), isolation_level=None, timeout=30)
    try:
        point(db, s1)  # A will read S1: B's commit not yet there
        written = metadata_files(warehouse, table)
        db.execute("BEGIN IMMEDIATE")  # the catalog's write lock: A's swap waits for it
        a = asyncio.ensure_future(actor.call(
            lambda spark: append(spark, settings, table, 5, 8, 0, streams(p0=5))))
        deadline = time.monotonic() + 60
        while not metadata_files(warehouse, table) - written:  # A is in its swap
            assert not a.done(), a.exception()
            assert time.monotonic() < deadline, "writer A never reached its commit"
            await asyncio.sleep(0.02)
        point(db, s2)  # B's commit lands before A's swap
        db.execute("COMMIT")
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")
        db.close()
    try:
        await a
    except Exception as exc:  # noqa: BLE001 - the test inspects what pyspark raised
        refused: BaseException | None = exc
    else:
        refused = None
    ids, _, offsets = await actor.call(lambda spark: state(spark, settings, table))
    current = await actor.call(lambda spark: iceberg.current_offsets(spark, settings, table))
    return refused, ids, offsets, current


async def test_everything_else_goes_to_the_wrapped_catalog(actor: SparkActor) -> None:
    """With the fence on: metadata tables, namespaces, views, MERGE INTO, the stored
    procedures; a merge's snapshot (no ``kstage.expect``) between two appends does not
    move the fence."""
    settings, table = actor.settings, "stg_other"
    name = qualified(settings, table)

    def run(spark: Any) -> dict[str, Any]:
        catalog = (spark._jsparkSession.sessionState().catalogManager().catalog("kstage")
                   .icebergCatalog())
        iceberg.create_staging(spark, settings, table, COLUMNS)
        append(spark, settings, table, 0, 5, 0, streams(p0=0))
        append(spark, settings, table, 5, 10, 0, streams(p0=5))
        spark.sql(f"MERGE INTO {name} t USING (SELECT '0/1' AS id) s ON t.id = s.id "
                  "WHEN MATCHED THEN DELETE")
        append(spark, settings, table, 10, 12, 0, streams(p0=10))
        spark.sql("CREATE NAMESPACE IF NOT EXISTS kstage.fence_other")
        spark.sql(f"CREATE OR REPLACE VIEW kstage.kstage.v_other AS SELECT id FROM {name}")  # noqa: S608
        found = {
            "catalog": (str(catalog.getClass().getName()),
                        str(catalog.delegate().getClass().getName())),
            "snapshots": spark.sql(f"SELECT count(*) FROM {name}.snapshots")  # noqa: S608
            .first()[0],
            "history": spark.sql(f"SELECT count(*) FROM {name}.history").first()[0],  # noqa: S608
            "namespaces": sorted(r[0] for r in spark.sql("SHOW NAMESPACES IN kstage")
                                 .collect()),
            "view": spark.sql("SELECT count(*) FROM kstage.kstage.v_other").first()[0],
        }
        dotted_name = dotted(settings, table)
        rewrite = spark.sql(f"CALL kstage.system.rewrite_data_files(table => '{dotted_name}', "
                            "options => map('min-input-files', '2'))")
        found["rewritten"] = rewrite.first()["rewritten_data_files_count"]
        expire = spark.sql(f"CALL kstage.system.expire_snapshots(table => '{dotted_name}', "
                           "older_than => TIMESTAMP '2100-01-01 00:00:00', retain_last => 1)")
        found["expired"] = expire.first()["deleted_manifest_lists_count"]
        found["ids"] = state(spark, settings, table)[0]
        return found

    found = await actor.call(run)
    assert found.pop("catalog") == ("io.kstage.iceberg.FencingCatalog",
                                    "org.apache.iceberg.jdbc.JdbcCatalog")
    assert found.pop("ids") == sorted(f"0/{o}" for o in range(12) if o != 1)
    assert found.pop("namespaces") == ["fence_other", "kstage"]
    assert found == {"snapshots": 4, "history": 4, "view": 11, "rewritten": 3, "expired": 4}


async def test_the_wrapped_catalog_is_named_once_and_must_have_namespaces_and_views(
        actor: SparkActor, warehouse: Path) -> None:
    def run(spark: Any) -> list[str]:
        jvm = spark._jvm
        seen = []
        for props in ({}, {"kstage.delegate-type": "jdbc", "kstage.delegate-impl": "x.Y"},
                      {"kstage.delegate-type": "hadoop", "warehouse": str(warehouse / "h")},
                      {"kstage.delegate-impl": "org.apache.iceberg.inmemory.InMemoryCatalog",
                       "catalog-impl": "io.kstage.iceberg.FencingCatalog"}):
            properties = jvm.java.util.HashMap()
            for key, value in props.items():
                properties.put(key, value)
            catalog = jvm.io.kstage.iceberg.FencingCatalog()
            catalog.setConf(spark._jsc.hadoopConfiguration())  # as Iceberg does: passed on
            try:
                catalog.initialize("c", properties)
            except Exception as exc:  # noqa: BLE001 - the test inspects what py4j raised
                text = str(exc)
                seen.append(text[text.find("kstage fence:"):].splitlines()[0])
            else:
                seen.append(str(catalog.delegate().getClass().getName()))
        return seen

    assert await actor.call(run) == [
        "kstage fence: catalog c: set exactly one of kstage.delegate-type (jdbc, rest) and "
        "kstage.delegate-impl (a catalog class)"] * 2 + [
        "kstage fence: catalog c: org.apache.iceberg.hadoop.HadoopCatalog does not support "
        "namespaces and views",
        "org.apache.iceberg.inmemory.InMemoryCatalog"]


Entry = str | tuple[str | None, str]
"""A snapshot of a case's history: its ``kstage.offsets``, or (offsets or None, its
``kstage.offsets-reset``)."""


def _summary(entry: Entry) -> dict[str, str]:
    offsets, reset = (entry, None) if isinstance(entry, str) else entry
    summary = {} if offsets is None else {iceberg.OFFSETS: offsets}
    return summary if reset is None else {**summary, offset_history.RESET: reset}


def python_rule(expect: Offsets, history: list[Entry]) -> dict[tuple[str, str, int], int]:
    """The fence rule in Python: the streams whose recorded offset (the rule of every
    reader, :func:`offset_history.fold` over the history, newest first here; 0 if none) is
    not the expected one, with the recorded offset; then :func:`iceberg.fence_violations`
    must say the same."""
    found = offset_history.fold(_summary(entry) for entry in reversed(history))
    wrong = {s: found.get(s, 0) for s, o in expect.items() if found.get(s, 0) != o}
    assert {s: held for s, _, held in iceberg.fence_violations(expect, found)} == wrong
    return wrong


def js(data: Any) -> str:
    return json.dumps(data)


CASES: list[tuple[Offsets, list[Entry]]] = [
    (streams(p0=0), []),  # a new table
    (streams(p0=5), []),  # expects offsets a new table does not hold
    (streams(p0=0), [js({"g": {"events": {"1": 7}}})]),  # another partition only
    (streams(p0=7), [js({"g": {"events": {"0": 7}}})]),
    (streams(p0=7), [js({"g": {"events": {"0": 9}}})]),  # a zombie
    (streams(p0=9), [js({"g": {"events": {"0": 7}}})]),  # behind the expectation
    (streams(p0=9), [js({"g": {"events": {"0": 9}}}), js({"g": {"events": {"0": 4}}})]),
    (streams(p0=4), [js({"g": {"events": {"0": 4}}}), js({"g": {"events": {"0": 9}}})]),
    (streams(p0=3, p1=8), [js({"g": {"events": {"0": 3, "1": 8}}})]),
    (streams(p0=3, p1=8), [js({"g": {"events": {"0": 3, "1": 9}}})]),
    (streams(p0=3), [js({"h": {"events": {"0": 9}}}), js({"g": {"other": {"0": 9}}})]),
    (streams(p0=3), ["not json", js([1, 2]), js({"g": {"events": {"0": 3}}})]),  # ignored
    (streams(p0=0), [js({"g": {"events": {"0": "x"}}})]),  # a malformed value is ignored
    # a reset (kstage tables reset-offsets) replaces what older snapshots recorded
    (streams(p0=2), [(js({"g": {"events": {"0": 2}}}), js({"g": {"events": {"0": 2}}})),
                     js({"g": {"events": {"0": 90}}})]),
    (streams(p0=90), [(js({"g": {"events": {"0": 2}}}), js({"g": {"events": {"0": 2}}})),
                      js({"g": {"events": {"0": 90}}})]),  # a zombie's expectation
    (streams(p0=6), [js({"g": {"events": {"0": 6}}}),
                     (None, js({"g": {"events": {"0": 2}}})),
                     js({"g": {"events": {"0": 90, "1": 5}}})]),  # appended after it
    (streams(p0=2, p1=5), [(None, js({"g": {"events": {"0": 2}}})),
                           js({"g": {"events": {"0": 90, "1": 5}}})]),  # p1 not reset
    ({("gr.1", 'tö"pic', 3): 2**40}, [js({"gr.1": {'tö"pic': {"3": 2**40 + 1}}})]),  # escapes
    ({("gr.1", 'tö"pic', 3): 2**40}, [js({"gr.1": {'tö"pic': {"3": 2**40}}})]),
]


async def test_the_java_rule_agrees_with_the_python_reference(actor: SparkActor) -> None:
    def run(spark: Any) -> list[str | None]:
        fence = spark._jvm.io.kstage.iceberg.Fence
        answers = []
        for expect, history in CASES:
            listed = spark._jvm.java.util.ArrayList()
            resets = spark._jvm.java.util.ArrayList()
            for entry in history:
                summary = _summary(entry)
                listed.add(summary.get(iceberg.OFFSETS))
                resets.add(summary.get(offset_history.RESET))
            answer = fence.refusal("t", iceberg.format_offsets(expect), listed, resets)
            answers.append(None if answer is None else str(answer))
        return answers

    answers = await actor.call(run)
    for (expect, history), answer in zip(CASES, answers, strict=True):
        wrong = python_rule(expect, history)
        case = f"expect {expect}, history {history}: java {answer!r}, python {wrong}"
        if not wrong:
            assert answer is None, case
            continue
        assert answer is not None and answer.startswith("kstage fence: table t: "), case
        for stream, found in wrong.items():
            assert (f"group {stream[0]} topic {stream[1]} partition {stream[2]}: expected "
                    f"offset {expect[stream]}, found {found}") in answer, case
        assert answer.count("expected offset") == len(wrong), case


CARRY_CASES: list[tuple[str | None, Offsets, Offsets]] = [
    # (the base's current kstage.offsets, the append's kstage.offsets, its kstage.expect)
    (None, streams(p0=5), streams(p0=0)),  # a new table
    (js({"g": {"events": {"1": 7}}}), streams(p0=5), streams(p0=0)),  # another's kept
    (js({"g": {"events": {"1": 7}}}), streams(p0=5, p1=3), streams(p0=0)),  # stale carry
    (js({"g": {"events": {"0": 9}}}), streams(p0=5), streams(p0=5)),  # the higher stays
    (js({"h": {"other": {"2": 1}}}), streams(p0=5, p1=4), streams(p0=2, p1=4)),
    ("not json", streams(p0=5), streams(p0=0)),  # a malformed current value is ignored
    (js({"gr.1": {'tö"pic': {"3": 2**40}}}), streams(p0=1), streams(p0=0)),  # escapes
]


async def test_the_java_carry_agrees_with_the_python_reference(actor: SparkActor) -> None:
    """``CarriedOffsets.merged`` (the offsets the fence makes again on the base) is
    :func:`iceberg.carried` of the base's current offsets and the append's own partitions
    (those of its ``kstage.expect``)."""
    def run(spark: Any) -> list[str | None]:
        carry = spark._jvm.io.kstage.iceberg.CarriedOffsets
        return [carry.merged(current, iceberg.format_offsets(offsets),
                             iceberg.format_offsets(expect))
                for current, offsets, expect in CARRY_CASES]

    answers = await actor.call(run)
    for (current, offsets, expect), answer in zip(CARRY_CASES, answers, strict=True):
        base = iceberg.parse_offsets(current) if current else {}
        mine = {s: o for s, o in offsets.items() if s in expect}
        assert answer is not None
        assert iceberg.parse_offsets(answer) == iceberg.carried(base, mine), (current, answer)
        assert answer == iceberg.format_offsets(iceberg.parse_offsets(answer)) \
            or not answer.isascii()  # Python's format, bar its escapes of non-ASCII
        # the pyiceberg catalogs' twin (actors/sinks/spark/carried_offsets.py) agrees
        python = carried_offsets.merged(current, iceberg.format_offsets(offsets),
                                        iceberg.format_offsets(expect))
        assert python is not None and iceberg.parse_offsets(python) == iceberg.parse_offsets(
            answer), (current, python, answer)


async def test_a_commit_of_no_offsets_carries_the_current_ones(actor: SparkActor) -> None:
    """A compaction's rewrite and a DELETE record no offsets: the fence gives their
    snapshots the current ones, so the current snapshot (all a REST catalog may serve)
    still says how far the table holds each partition."""
    settings, table = actor.settings, "stg_rewrite"

    def run(spark: Any) -> list[tuple[str, Offsets]]:
        iceberg.create_staging(spark, settings, table, COLUMNS)
        append(spark, settings, table, 0, 5, 0, streams(p0=0))
        append(spark, settings, table, 0, 3, 1, streams(p1=0))
        seen = []
        for change in ("compact", "delete"):
            if change == "compact":
                two = settings.model_copy(update={"maintenance": settings.maintenance
                                                  .model_copy(update={"min_input_files": 2})})
                assert compact(spark, two, table)[0] >= 2
            else:
                spark.sql(f"DELETE FROM {qualified(settings, table)} "  # noqa: S608 - a test table
                          "WHERE id = '0/0'")
            loaded = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
                spark._jsparkSession, dotted(settings, table))
            seen.append((str(loaded.currentSnapshot().operation()),
                         iceberg.current_offsets(spark, settings, table)))
        return seen

    (compacted, after_compaction), (deleted, after_delete) = await actor.call(run)
    assert compacted == "replace" and after_compaction == streams(p0=5, p1=3)
    assert deleted in ("delete", "overwrite") and after_delete == streams(p0=5, p1=3)


async def test_a_fold_beside_the_appends_keeps_every_row_once_and_every_offset(
        actor: SparkActor) -> None:
    """The background fold runs on the session's second thread (``call_aside``): an
    append on the Spark thread lands while a job there runs (held until the append is
    in), and a fold racing the appends of two partitions keeps every row once and the
    offsets of both in the current snapshot (its rewrite commit carries them)."""
    settings, table = actor.settings, "stg_fold"
    ends = {0: 0, 1: 0}

    def appended(partition: int, count: int) -> Callable[[Any], None]:
        start = ends[partition]
        ends[partition] += count

        def run(spark: Any) -> None:
            append(spark, settings, table, start, start + count, partition, None)
        return run

    await actor.call(lambda spark: iceberg.create_staging(spark, settings, table, COLUMNS))
    for i in range(6):  # six small files
        await actor.call(appended(i % 2, 5))
    entered, release = threading.Event(), threading.Event()

    def held(_: Any) -> bool:
        entered.set()
        return release.wait(120)

    aside = asyncio.create_task(actor.call_aside(held))
    assert await asyncio.to_thread(entered.wait, 120)
    await actor.call(appended(0, 5))  # lands while the job beside it runs
    assert not aside.done()
    release.set()
    assert await aside

    folding = asyncio.create_task(actor.call_aside(lambda spark: fold(spark, settings, table)))
    for i in range(4):  # appends racing the fold's rewrite, in whatever order
        await actor.call(appended(i % 2, 5))
    done = await folding
    assert done.rewritten >= 7 and done.written >= 1, done

    ids, _, offsets = await actor.call(lambda spark: state(spark, settings, table))
    assert ids == sorted(f"{p}/{o}" for p, end in ends.items() for o in range(end))
    assert offsets == streams(p0=ends[0], p1=ends[1])
    assert await actor.call(lambda spark: iceberg.current_offsets(spark, settings, table)) \
        == streams(p0=ends[0], p1=ends[1])
    # the fold's count of the files (Java API) is the metadata's; no table: none
    counted, listed, missing = await actor.call(lambda spark: (
        background.data_files(spark, settings, table),
        content(spark, settings, table).data_files,
        background.data_files(spark, settings, "stg_no_such_table")))
    assert counted == listed >= done.written and missing == 0


async def test_a_fold_leaves_the_files_of_a_sixteenth_of_the_target_or_more(
        actor: SparkActor) -> None:
    """A fold rewrites the small files only (under ``target_file_mb / 16``: 64 KiB of a
    1-MiB target here), not a larger one that Iceberg's own binpack would (under 75 % of
    the target): a fold's work stays about the small files it folds."""
    base = actor.settings
    settings = base.model_copy(update={"maintenance": base.maintenance.model_copy(
        update={"target_file_mb": 1, "min_input_files": 2})})
    table = "stg_fold_sizes"

    def run(spark: Any) -> tuple[Folded, int, int]:
        iceberg.create_staging(spark, settings, table, COLUMNS)
        now = dt.datetime.now(dt.UTC)
        big = [(uuid.uuid4().hex * 6, TOPIC, 0, o, 0, now) for o in range(6000)]
        arrow_frame(spark, big, iceberg.struct_type(COLUMNS)).writeTo(
            dotted(settings, table)).append()  # about 140 KB: over 64 KiB, under 768 KiB
        for i in range(3):
            append(spark, settings, table, 10 * i, 10 * i + 5, 1, None)  # three small files
        sizes = [int(r["file_size_in_bytes"]) for r in spark.table(
            f"{qualified(settings, table)}.files").select("file_size_in_bytes").collect()]
        return fold(spark, settings, table), min(sizes), max(sizes)

    done, smallest, largest = await actor.call(run)
    assert smallest < 64 * 1024 < largest < 768 * 1024, (smallest, largest)
    assert (done.before, done.rewritten, done.written, done.after) == (4, 3, 1, 2), done
