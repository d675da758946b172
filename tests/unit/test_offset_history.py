"""The offsets a staging table holds, resets included (``kstage.offsets-reset``): the one
rule of the worker's resume (Spark and pyiceberg readers), ``kstage tables show`` and
expiry (pure: no Spark, no catalog)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from actors.sinks.spark import iceberg, offset_history
from actors.tables.expiry import missing, offset_keeps
from actors.tables.snapshots import from_metadata, offsets

G, T = "grp", "topic"
P0, P1 = (G, T, 0), (G, T, 1)


def appended(offs: dict[tuple[str, str, int], int]) -> dict[str, str]:
    return {"operation": "append", iceberg.OFFSETS: iceberg.format_offsets(offs)}


def reset(current: dict[tuple[str, str, int], int],
          resets: dict[tuple[str, str, int], int]) -> dict[str, str]:
    return {"operation": "append", **offset_history.reset_summary(current, resets)}


def test_without_a_reset_the_highest_offset_of_the_history_counts() -> None:
    history = [appended({P0: 10}), appended({P0: 30, P1: 4}), {"operation": "replace"},
               appended({P0: 20, P1: 9})]
    assert offset_history.fold(history) == {P0: 30, P1: 9}


def test_a_reset_replaces_what_older_snapshots_held_and_later_appends_count_again() -> None:
    # The topic was re-created: partition 0 held up to 500, starts again at 0.
    history = [appended({P0: 300, P1: 7}), appended({P0: 500, P1: 8}),
               reset({P0: 500, P1: 8}, {P0: 0})]
    assert offset_history.fold(history) == {P0: 0, P1: 8}  # partition 1 untouched
    history += [appended({P0: 3, P1: 8}), appended({P0: 12, P1: 11})]
    assert offset_history.fold(history) == {P0: 12, P1: 11}


def test_the_newest_reset_of_a_partition_wins_and_a_reset_forward_counts_too() -> None:
    history = [appended({P0: 500}), reset({P0: 500}, {P0: 0}), appended({P0: 40}),
               reset({P0: 40}, {P0: 25}), appended({P0: 30})]
    assert offset_history.fold(history) == {P0: 30}
    assert offset_history.fold([appended({P0: 5}), reset({P0: 5}, {P0: 80})]) == {P0: 80}


def test_the_reset_snapshot_records_the_new_offset_so_appends_carry_it_forward() -> None:
    summary = offset_history.reset_summary({P0: 500, P1: 8}, {P0: 0})
    assert iceberg.parse_offsets(summary[iceberg.OFFSETS]) == {P0: 0, P1: 8}
    assert iceberg.parse_offsets(summary[offset_history.RESET]) == {P0: 0}
    # An append after it carries the current snapshot's offsets with its own.
    carried = iceberg.carried(iceberg.parse_offsets(summary[iceberg.OFFSETS]), {P0: 3})
    history = [appended({P0: 500, P1: 8}), summary, appended(carried)]
    assert offset_history.fold(history) == {P0: 3, P1: 8}


def test_expiry_keeping_only_the_snapshots_after_a_reset_still_reads_its_value() -> None:
    # Expiry keeps the newest part of the history: what descends from the reset.
    kept = [appended({P0: 3, P1: 8}), appended({P0: 12, P1: 8})]
    assert offset_history.fold(kept) == {P0: 12, P1: 8}


def metadata(summaries: list[dict[str, str]]) -> dict[str, Any]:
    snaps = [{"snapshot-id": i + 1, "parent-snapshot-id": i or None,
              "timestamp-ms": 1_000 * (i + 1), "summary": s} for i, s in enumerate(summaries)]
    return {"snapshots": snaps, "current-snapshot-id": len(snaps)}


def test_tables_show_and_expiry_read_the_history_with_its_resets() -> None:
    history = from_metadata(metadata([appended({P0: 500}), reset({P0: 500}, {P0: 0}),
                                      appended({P0: 7})]))  # newest first
    assert history[1].resets == {P0: 0}
    assert offsets(history) == {P0: 7}
    # Kafka's committed offset 7 covers the table: no snapshot is kept for it (without
    # the reset, 500 > 7 would keep the oldest snapshot forever).
    assert offset_keeps(history, {P0: 7}) == []
    assert [k.snapshot for k in offset_keeps(history, {P0: 5})] == [3]
    assert missing(history) == {}


def pyiceberg_table(summaries: list[dict[str, str]]) -> Any:
    """A stand-in of a pyiceberg table: snapshots with ids, parents and summaries."""
    snaps = [SimpleNamespace(snapshot_id=i + 1, parent_snapshot_id=i or None,
                             summary=SimpleNamespace(additional_properties=s))
             for i, s in enumerate(summaries)]
    return SimpleNamespace(metadata=SimpleNamespace(snapshots=snaps),
                           current_snapshot=lambda: snaps[-1] if snaps else None)


def test_the_pyiceberg_reader_walks_the_current_history_oldest_first() -> None:
    from actors.sinks.spark.pyiceberg_tables import table_offsets

    table = pyiceberg_table([appended({P0: 500}), reset({P0: 500}, {P0: 0}),
                             appended({P0: 9})])
    assert table_offsets(table) == {P0: 9}
    assert table_offsets(pyiceberg_table([])) == {}
