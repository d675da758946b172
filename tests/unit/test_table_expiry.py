"""Which snapshots maintenance expires: the offsets recovery needs, the merge's snapshot,
the age and count limits, and writers whose clocks disagree (pure: no Spark)."""

from __future__ import annotations

from actors.sinks.spark.expiry import Keep, bound, carried, offset_keeps
from actors.sinks.spark.snapshots import Snapshot, chain, merged_through, offsets

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


def test_chain_follows_the_parents_and_finds_the_merge_commit() -> None:
    snaps = [Snapshot(7, 3, 30, "append"), Snapshot(3, None, 10, "append"),
             Snapshot(9, 7, 20, "overwrite", merged=42), Snapshot(11, 9, 40, "replace")]
    ordered = chain(snaps)
    assert [s.id for s in ordered] == [11, 9, 7, 3]
    found = merged_through(ordered)
    assert found is not None and (found.id, found.merged) == (9, 42)
    assert chain([]) == [] and merged_through(ordered[:1]) is None


def test_offsets_only_expired_snapshots_record_are_carried_whole() -> None:
    h = history((1, {(G, T, 0): 10}), (2, {(G, T, 1): 4}), (3, {(G, T, 0): 12}))
    everything_but_the_newest = bound(h, [], NOW, max_age_s=1, min_keep=1)
    assert carried(h, everything_but_the_newest) == {(G, T, 0): 12, (G, T, 1): 4}
    nothing = bound(h, [], NOW, max_age_s=3600, min_keep=1)
    assert carried(h, nothing) == {}
    # partition 1's offset lives on in snapshot 2, kept: nothing to record again
    assert carried(h, bound(h, [Keep(2, "merge")], NOW, max_age_s=1, min_keep=1)) == {}
