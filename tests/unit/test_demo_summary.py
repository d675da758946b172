"""The demo's summary lines: per staging table its rows and snapshots and its final
table's, ``(not merged)`` when the final table does not exist."""

from __future__ import annotations

from service.dev.demo import summary_rows
from service.ops.tables import TableView


def test_rows_and_snapshots_per_staging_and_final_table() -> None:
    views = {"stg_a": TableView("kstage.kstage.stg_a", "staging", rows=40, snapshots=3),
             "final_a": TableView("kstage.kstage.final_a", "final", "stg_a", rows=31,
                                  snapshots=2),
             "stg_b": TableView("kstage.kstage.stg_b", "staging", rows=5, snapshots=1),
             "final_b": TableView("kstage.kstage.final_b", "final", "stg_b", exists=False)}
    rows = summary_rows(views, ["stg_a", "stg_b", "stg_c"])
    assert rows == [
        ("staging table -> final table", "rows", "snapshots", "final rows", "snapshots"),
        ("stg_a -> final_a", "40", "3", "31", "2"),
        ("stg_b -> (not merged)", "5", "1", "0", "0"),
        ("stg_c -> (not merged)", "0", "0", "0", "0")]
