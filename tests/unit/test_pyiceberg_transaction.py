"""kstage's pyiceberg transaction (:mod:`actors.sinks.spark.pyiceberg_transaction`) on a
real SQLite catalog and local warehouse: an append computes the table's metadata a few
times, not at every read as ``Table.append`` does, and a commit that lost the race to
another writer is applied again on the refreshed metadata, not on the cached one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyiceberg.table
import pyiceberg.table.update
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from actors.sinks.spark.pyiceberg_transaction import transaction

ROWS = pa.table({"id": pa.array(range(10), pa.int64()),
                 "value": pa.array([f"v{i}" for i in range(10)])})


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    made = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db",
                      warehouse=f"file://{tmp_path}/warehouse")
    made.create_namespace("kstage")
    return made


def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the computations of a transaction's table metadata (both names of the
    function: pyiceberg's Transaction calls its import, kstage's the module's)."""
    calls = [0]
    original = pyiceberg.table.update.update_table_metadata

    def update_table_metadata(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(pyiceberg.table.update, "update_table_metadata", update_table_metadata)
    monkeypatch.setattr(pyiceberg.table, "update_table_metadata", update_table_metadata)
    return calls


def test_an_append_computes_the_metadata_a_few_times_not_at_every_read(
        catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch) -> None:
    table = catalog.create_table(("kstage", "few"), schema=ROWS.schema)
    calls = counted(monkeypatch)
    table.append(ROWS, snapshot_properties={"n": "1"})
    plain, calls[0] = calls[0], 0
    with transaction(table) as appending:
        appending.append(ROWS, snapshot_properties={"n": "2"})
    cached = calls[0]
    assert 0 < cached * 3 < plain, (cached, plain)  # each read deep-copies every snapshot
    assert [s.summary.additional_properties["n"] for s in table.snapshots()] == ["1", "2"]
    assert table.scan().to_arrow().num_rows == 2 * len(ROWS)


def test_a_commit_that_lost_the_race_is_applied_on_the_refreshed_metadata(
        catalog: SqlCatalog) -> None:
    """Another writer committed after this one loaded the table: pyiceberg's retry
    refreshes the table, and the metadata of the retried commit is computed anew, so
    the snapshot follows the other writer's and both appends are in the table."""
    mine = catalog.create_table(("kstage", "race"), schema=ROWS.schema)
    mine.append(ROWS, snapshot_properties={"n": "1"})
    other = catalog.load_table(("kstage", "race"))
    other.append(ROWS, snapshot_properties={"n": "other"})
    with transaction(mine) as appending:  # mine still has snapshot "1" as current
        appending.append(ROWS, snapshot_properties={"n": "2"})
    reread = catalog.load_table(("kstage", "race"))
    history = []
    snapshot = reread.current_snapshot()
    while snapshot is not None:
        history.append(snapshot.summary.additional_properties["n"])
        parent = snapshot.parent_snapshot_id
        snapshot = reread.snapshot_by_id(parent) if parent is not None else None
    assert history == ["2", "other", "1"]
    assert reread.scan().to_arrow().num_rows == 3 * len(ROWS)
    assert mine.metadata_location == reread.metadata_location


def test_an_expiry_computes_the_metadata_a_few_times_not_twice_per_snapshot(
        catalog: SqlCatalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """Expiring 40 of 50 snapshots: pyiceberg's own expiry computes (deep-copies) the
    metadata twice per snapshot; kstage's (expire_ids, on its transaction) a few times in
    all, and expires the same snapshots."""
    from actors.tables.pyiceberg_expiry import expire_ids

    tables = [catalog.create_table(("kstage", name), schema=ROWS.schema)
              for name in ("plain", "cached")]
    for table in tables:
        for n in range(50):
            table.append(ROWS, snapshot_properties={"n": str(n)})
    calls = counted(monkeypatch)
    plain, cached = tables
    plain.maintenance.expire_snapshots().by_ids(
        [s.snapshot_id for s in plain.snapshots()[:40]]).commit()
    theirs, calls[0] = calls[0], 0
    expire_ids(cached, [s.snapshot_id for s in cached.snapshots()[:40]])
    ours = calls[0]
    assert theirs >= 80 and 0 < ours <= 5, (theirs, ours)
    for table in tables:
        table.refresh()
        assert [s.summary.additional_properties["n"] for s in table.snapshots()] == [
            str(n) for n in range(40, 50)]
        assert table.scan().to_arrow().num_rows == 50 * len(ROWS)
