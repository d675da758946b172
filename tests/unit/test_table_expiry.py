"""Which snapshots maintenance expires: the offsets recovery needs, the merge's snapshot,
the age and count limits, and writers whose clocks disagree; a compaction that raced
another commit runs again (pure: no Spark)."""

from __future__ import annotations

import pytest

from actors.tables import maintenance
from actors.tables.expiry import Keep, bound, missing, offset_keeps
from actors.tables.snapshots import Snapshot, from_metadata, merged_through, offsets

NOW = 1_800_000_000_000
G, T = "grp", "topic"


def history(*specs: tuple[int, dict[tuple[str, str, int], int]]) -> list[Snapshot]:
    """Snapshots 1..n (oldest first, one second apart, ending a minute ago), newest first."""
    n = len(specs)
    snaps = [Snapshot(i + 1, i or None, NOW - 60_000 - (n - 1 - i) * 1000, "append", offs)
             for i, (_, offs) in enumerate(specs)]
    return list(reversed(snaps))


def test_without_keeps_everything_older_than_the_age_goes_but_the_newest_n() -> None:
    h = history(*[(i, {(G, T, 0): 10 * (i + 1)}) for i in range(8)])
    b = bound(h, [], NOW, max_age_s=1, min_keep=3)
    assert b.older_than_ms == NOW - 1000 and b.expires == 5 and not b.kept
    assert bound(h, [], NOW, max_age_s=3600, min_keep=3).expires == 0  # all young


def test_a_partition_ahead_of_its_committed_offset_keeps_its_snapshot_and_newer() -> None:
    # partition 0 is done in snapshot 3 (offset 30); later appends are of partition 1 only
    h = history((1, {(G, T, 0): 10}), (2, {(G, T, 0): 20}), (3, {(G, T, 0): 30}),
                (4, {(G, T, 1): 5}), (5, {(G, T, 1): 9}), (6, {(G, T, 1): 12}))
    keeps = offset_keeps(h, {(G, T, 0): 25, (G, T, 1): 12})  # a process died after 3's commit
    assert [k.snapshot for k in keeps] == [3]
    assert keeps[0].why == ("holds topic[0] up to offset 30, group grp's committed offset "
                            "is 25")
    b = bound(h, keeps, NOW, max_age_s=1, min_keep=1)
    assert b.expires == 2  # snapshots 1 and 2
    kept = h[:len(h) - b.expires]
    assert offsets(kept) == offsets(h)  # what the table holds is unchanged


def test_a_caught_up_partition_needs_no_snapshot_and_no_committed_offset_does() -> None:
    h = history((1, {(G, T, 0): 10}), (2, {(G, T, 0): 20}))
    assert offset_keeps(h, {(G, T, 0): 20}) == []
    assert offset_keeps(h, {(G, T, 0): 21}) == []  # Kafka is further: it wins anyway
    [keep] = offset_keeps(h, {})  # the group has no committed offset at all
    assert keep.snapshot == 2 and "committed offset is none" in keep.why
    assert [k.snapshot for k in offset_keeps(h, {("other", T, 0): 99})] == [2]


def test_the_newest_snapshot_recording_the_offset_is_kept() -> None:
    h = history((1, {(G, T, 0): 10}), (2, {(G, T, 0): 10, (G, T, 1): 3}), (3, {(G, T, 1): 4}))
    assert [k.snapshot for k in offset_keeps(h, {(G, T, 0): 5, (G, T, 1): 4})] == [2]


def test_the_merged_snapshot_and_its_descendants_stay() -> None:
    h = history(*[(i, {}) for i in range(10)])
    b = bound(h, [Keep(4, "merged through")], NOW, max_age_s=1, min_keep=1)
    assert b.expires == 3 and [k.snapshot for k in b.kept] == [4]
    # a snapshot the history no longer has is no reason to keep anything
    assert bound(h, [Keep(999, "gone")], NOW, max_age_s=1, min_keep=1).expires == 9


def test_a_writer_whose_clock_lags_cannot_cut_the_kept_history() -> None:
    # ids 1..6, newest first; 1 and 2 are 20 minutes old; snapshot 5 (newer than the
    # kept 3) was committed by a host whose clock is 10 minutes behind
    at = {1: NOW - 1_200_000, 2: NOW - 1_199_000, 3: NOW - 62_000, 4: NOW - 61_000,
          5: NOW - 600_000, 6: NOW - 60_000}
    h = [Snapshot(i, i - 1 or None, at[i], "append") for i in range(6, 0, -1)]
    b = bound(h, [Keep(3, "offsets")], NOW, max_age_s=1, min_keep=1)
    assert b.older_than_ms == NOW - 600_000
    # Iceberg keeps the newest while they are not older than the bound: 6, 5, 4, 3 stay
    assert b.expires == 2
    # bounded by the kept snapshot's own time, snapshot 5 would stop the walk: 4 and 3 go
    assert bound(h, [], NOW, max_age_s=62, min_keep=1).expires == 5


def test_the_history_follows_the_parents_from_the_current_snapshot() -> None:
    metadata = {"current-snapshot-id": 11, "snapshots": [
        {"snapshot-id": 7, "parent-snapshot-id": 3, "timestamp-ms": 30,
         "summary": {"operation": "append", "kstage.offsets": '{"g":{"t":{"0":5}}}'}},
        {"snapshot-id": 3, "timestamp-ms": 10, "summary": {"operation": "append"}},
        {"snapshot-id": 5, "parent-snapshot-id": 3, "timestamp-ms": 15,  # rolled back
         "summary": {"operation": "append"}},
        {"snapshot-id": 9, "parent-snapshot-id": 7, "timestamp-ms": 20,
         "summary": {"operation": "overwrite", "kstage.merged-snapshot-id": "42"}},
        {"snapshot-id": 11, "parent-snapshot-id": 9, "timestamp-ms": 40,
         "summary": {"operation": "replace"}}]}
    history = from_metadata(metadata)
    assert [(s.id, s.parent, s.operation) for s in history] == [
        (11, 9, "replace"), (9, 7, "overwrite"), (7, 3, "append"), (3, None, "append")]
    assert offsets(history) == {("g", "t", 0): 5}
    found = merged_through(history)
    assert found is not None and (found.id, found.merged) == (9, 42)
    assert from_metadata({"snapshots": []}) == [] and merged_through(history[-1:]) is None


def test_the_offsets_are_recorded_again_when_the_current_snapshot_lacks_some() -> None:
    h = history((1, {(G, T, 0): 10}), (2, {(G, T, 0): 10, (G, T, 1): 4}))
    assert missing(h) == {}  # the newest append carries every partition
    compacted = [Snapshot(3, 2, NOW, "replace"), *h]
    assert missing(compacted) == {(G, T, 0): 10, (G, T, 1): 4}
    behind = [Snapshot(3, 2, NOW, "append", {(G, T, 1): 5}), *h]
    assert missing(behind) == {(G, T, 0): 10, (G, T, 1): 5}
    assert missing([]) == {} and missing([Snapshot(1, None, NOW, "append")]) == {}


def test_a_step_that_raced_another_commit_runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(maintenance.time, "sleep", lambda _s: None)
    raced = RuntimeError("org.apache.iceberg.exceptions.ValidationException: Deleted "
                         "manifest m2.avro could not be found in the latest snapshot 7")
    calls: list[int] = []

    def step() -> tuple[int, int]:
        calls.append(1)
        if len(calls) < 3:
            raise raced
        return 5, 1

    assert maintenance.again_on_conflict(step, "the manifest rewrite", "t") == (5, 1)
    assert len(calls) == 3

    def always() -> None:
        raise raced

    with pytest.raises(RuntimeError, match="ValidationException"):
        maintenance.again_on_conflict(always, "compaction", "t")

    def broken() -> None:
        calls.append(1)
        raise OSError("disk gone")

    calls.clear()
    with pytest.raises(OSError):  # not a race: not run again
        maintenance.again_on_conflict(broken, "compaction", "t")
    assert len(calls) == 1
