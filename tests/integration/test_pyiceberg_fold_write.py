"""pyiceberg's fold writes a group (one partition, by the plan) under the partition's
known key, without pyiceberg's grouping of the rows through Acero (which runs on Arrow's
shared CPU pool, at the appends' priority). On a real table of a SQLite catalog, with a
spec of every kind of transform kstage allows."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from actors.sinks.spark.partitioning import Transform, pyiceberg_spec
from actors.sinks.spark.pyiceberg_appends import Lake
from actors.sinks.spark.pyiceberg_catalog import ensure_namespace
from actors.tables import pyiceberg_fold
from settings.models import Settings
from tests.lake import one_table

pytestmark = pytest.mark.slow


def lake_of(tmp_path: Path) -> tuple[Settings, Lake]:
    settings = one_table(tmp_path)
    return settings, Lake(settings.spark)


def made(lake: Lake, namespace: str, spec_of: Any, rows: list[dict[str, Any]]) -> Any:
    """The table ``stg_t`` with the spec ``spec_of(update, schema)`` adds, one append (one
    file) per row."""
    import pyarrow as pa

    catalog = lake.catalog()
    ensure_namespace(catalog, namespace)
    arrow = pa.schema([("s", pa.string()), ("i", pa.int64()), ("d", pa.date32()),
                       ("y", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
                       ("h", pa.timestamp("us")), ("t", pa.string())])
    table = catalog.create_table((namespace, "stg_t"), schema=arrow)
    with table.update_spec() as update:
        spec_of(update, table.schema())
    for row in rows:
        table.append(pa.Table.from_pylist([row], schema=arrow))
    return lake.table("stg_t")


EVERY_TRANSFORM = (Transform("identity", "s"), Transform("bucket", "i", 4),
                   Transform("truncate", "t", 2), Transform("month", "d"),
                   Transform("year", "y"), Transform("day", "ts"), Transform("hour", "h"))
"""Every kind of ``partition_by`` transform kstage allows, one per column."""


def every_transform(update: Any, schema: Any) -> None:
    """The spec kstage makes of :data:`EVERY_TRANSFORM` over ``schema`` (its
    ``pyiceberg_spec``), added through ``update`` (the table's ``update_spec``)."""
    for field in pyiceberg_spec(schema, EVERY_TRANSFORM).fields:
        update.add_field(schema.find_column_name(field.source_id), field.transform, field.name)


ROWS = [{"s": s, "i": i, "d": dt.date(2026, 11 if s == "alpha" else 12, 1),
         "y": dt.date(2025 if s == "alpha" else 2026, 6, 1),
         "ts": dt.datetime(2026, 12, 1 if s == "alpha" else 2, 3, m, tzinfo=dt.UTC),
         "h": dt.datetime(2026, 12, 1, 3 if s == "alpha" else 7, m), "t": s * 2}
        for s in ("alpha", "beta") for i, m in ((7, 1), (7, 2), (7, 3))]


async def test_a_fold_writes_each_partition_under_its_known_key_without_acero(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two partitions of three one-row files each, folded: pyiceberg's grouping of the
    rows (``_determine_partitions``) is never called, each partition gets one file whose
    partition record is its files' and whose path is its partition's, every row once, and
    a scan filtered on a partition column prunes to that partition's file."""
    import pyiceberg.io.pyarrow as pyiceberg_arrow
    from pyiceberg.expressions import EqualTo

    def no_acero(**_: Any) -> Any:
        raise AssertionError("the fold grouped its rows through Acero")

    settings, lake = lake_of(tmp_path)
    spark = settings.spark
    try:
        table = await lake.call(lambda: made(lake, spark.catalog.namespace,
                                             every_transform, ROWS))
        monkeypatch.setattr(pyiceberg_arrow, "_determine_partitions", no_acero)
        before = {task.file.partition for task in table.scan().plan_files()}
        assert len(before) == 2
        count, fold = await lake.aside(lambda: pyiceberg_fold.plan(lake, spark, "stg_t", 0))
        assert (count, fold is not None and fold.files) == (6, 6)
        assert fold is not None
        written = await lake.aside(lambda: pyiceberg_fold.rewrite(fold))
        assert {w.partition for w in written} == before and len(written) == 2
        for w in written:
            path = table.metadata.spec().partition_to_path(w.partition, table.schema())
            assert f"/{path}/" in w.file_path, (path, w.file_path)
        assert await lake.call(lambda: pyiceberg_fold.commit(lake, "stg_t", fold, written)) == 2
        loaded = await lake.call(lambda: lake.table("stg_t"))
        got = loaded.scan().to_arrow().to_pylist()
        assert sorted(got, key=repr) == sorted(ROWS, key=repr)
        beta = list(loaded.scan(row_filter=EqualTo("s", "beta")).plan_files())
        assert len(beta) == 1 and beta[0].file.record_count == 3
    finally:
        lake.stop()


async def test_a_key_that_does_not_give_the_record_back_goes_pyicebergs_way(
        tmp_path: Path) -> None:
    """A partition record the spec's key cannot be made from (here: of another length)
    is written by pyiceberg's own write, which finds the partitions in the rows."""
    import pyarrow as pa
    from pyiceberg.typedef import Record

    settings, lake = lake_of(tmp_path)
    try:
        table = await lake.call(lambda: made(lake, settings.spark.catalog.namespace,
                                             every_transform, ROWS[:1]))
        [original] = [task.file.partition for task in table.scan().plan_files()]
        assert pyiceberg_fold.known_key(table.metadata, Record(1)) is None
        rows = pa.Table.from_pylist(ROWS[:1], schema=table.schema().as_arrow())
        written = await lake.call(
            lambda: pyiceberg_fold.written_files(table, rows, Record(1)))
        assert [w.partition for w in written] == [original]
    finally:
        lake.stop()


async def test_a_second_fold_of_the_same_files_is_refused_and_every_row_stays_once(
        tmp_path: Path) -> None:
    """Two members fold the same small files (a member frozen mid-fold past its session,
    its partition 0, and with it the table's folds, gone to another member that folded
    meanwhile; both plans read the same snapshot): the first commit lands, the second is
    refused (a file it replaces was deleted meanwhile) and adds nothing: every row once,
    in the first fold's file, an append between the two kept; the second's files are
    deleted (no snapshot names them) and the fold loop hears it as superseded."""
    import pyarrow as pa

    from actors.tables.fold import Superseded

    settings, lake = lake_of(tmp_path)
    spark = settings.spark
    try:
        table = await lake.call(lambda: made(lake, spark.catalog.namespace,
                                             lambda update, schema: None, ROWS))
        plans = [await lake.aside(lambda: pyiceberg_fold.plan(lake, spark, "stg_t", 0))
                 for _ in range(2)]
        [(_, first), (_, zombie)] = plans
        assert first is not None and zombie is not None
        assert {d.file_path for g in zombie.groups for d in g} == {
            d.file_path for g in first.groups for d in g}
        written = [await lake.aside(lambda fold=fold: pyiceberg_fold.rewrite(fold))
                   for fold in (first, zombie)]
        assert await lake.call(
            lambda: pyiceberg_fold.commit(lake, "stg_t", first, written[0])) == 1
        late = {**ROWS[0], "s": "late"}
        await lake.call(lambda: lake.table("stg_t").append(
            pa.Table.from_pylist([late], schema=table.schema().as_arrow())))
        with pytest.raises(Superseded, match=r"^6 of its 6 files were folded or removed by "
                           r"another writer meanwhile \(nothing of it committed; its 1 new "
                           r"file\(s\) deleted\)$"):
            await lake.call(lambda: pyiceberg_fold.commit(lake, "stg_t", zombie, written[1]))
        assert not any(Path(urlparse(w.file_path).path).exists() for w in written[1])
        assert all(Path(urlparse(w.file_path).path).exists() for w in written[0])
        loaded = await lake.call(lambda: lake.table("stg_t"))
        got = loaded.scan().to_arrow().to_pylist()
        assert sorted(got, key=repr) == sorted([*ROWS, late], key=repr)
        held = {t.file.file_path for t in loaded.scan().plan_files()}
        assert held >= {w.file_path for w in written[0]}
        assert not held & {w.file_path for w in written[1]}
        assert loaded.current_snapshot().summary.operation.value == "append"
    finally:
        lake.stop()
