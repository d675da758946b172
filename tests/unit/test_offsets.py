"""Tests of actors.offsets.OffsetTracker: only contiguous finished work is committable."""

from __future__ import annotations

from aiokafka import TopicPartition

from actors.offsets import OffsetTracker

TP0 = TopicPartition("events", 0)
TP1 = TopicPartition("events", 1)
OTHER = TopicPartition("other", 0)


def test_nothing_committable_before_any_ack() -> None:
    tracker = OffsetTracker()
    tracker.add(TP0, next_offset=10, count=10)
    assert tracker.committable(TP0) is None
    assert tracker.committed(TP0) is None
    assert tracker.to_commit() == {}
    assert tracker.committable(TP1) is None  # unknown partition


def test_committable_is_the_next_offset_of_the_acked_entry() -> None:
    tracker = OffsetTracker()
    entry = tracker.add(TP0, next_offset=5, count=5)  # offsets 0..4
    tracker.ack(entry)
    assert tracker.committable(TP0) == 5  # last processed (4) + 1
    assert tracker.to_commit() == {TP0: 5}


def test_out_of_order_acks_stop_at_the_first_gap() -> None:
    tracker = OffsetTracker()
    e1 = tracker.add(TP0, next_offset=10, count=10)
    e2 = tracker.add(TP0, next_offset=20, count=10)
    e3 = tracker.add(TP0, next_offset=30, count=10)
    e4 = tracker.add(TP0, next_offset=40, count=10)

    tracker.ack(e3)
    tracker.ack(e2)
    assert tracker.committable(TP0) is None  # e1 is still the gap
    assert tracker.to_commit() == {}
    assert tracker.pending_count(TP0) == 4

    tracker.ack(e1)
    assert tracker.committable(TP0) == 30  # e1..e3 are a contiguous prefix, e4 is not
    assert tracker.pending_count(TP0) == 1

    tracker.ack(e4)
    assert tracker.committable(TP0) == 40
    assert tracker.pending_count(TP0) == 0


def test_partitions_are_tracked_independently() -> None:
    tracker = OffsetTracker()
    a1 = tracker.add(TP0, next_offset=3, count=3)
    b1 = tracker.add(TP1, next_offset=7, count=7)
    b2 = tracker.add(TP1, next_offset=9, count=2)
    tracker.ack(b2)
    tracker.ack(a1)
    assert tracker.to_commit() == {TP0: 3}
    tracker.ack(b1)
    assert tracker.to_commit() == {TP0: 3, TP1: 9}


def test_to_commit_only_returns_partitions_that_advanced() -> None:
    tracker = OffsetTracker()
    a1 = tracker.add(TP0, next_offset=10, count=10)
    b1 = tracker.add(TP1, next_offset=10, count=10)
    tracker.ack(a1)
    tracker.ack(b1)
    offsets = tracker.to_commit()
    assert offsets == {TP0: 10, TP1: 10}
    tracker.mark_committed(offsets)
    assert tracker.committed(TP0) == 10
    assert tracker.committed(TP1) == 10
    assert tracker.to_commit() == {}  # nothing new

    a2 = tracker.add(TP0, next_offset=15, count=5)
    tracker.ack(a2)
    assert tracker.to_commit() == {TP0: 15}  # TP1 did not move
    tracker.mark_committed({TP0: 15})
    assert tracker.to_commit() == {}


def test_mark_committed_of_an_unknown_partition_is_ignored() -> None:
    tracker = OffsetTracker()
    tracker.mark_committed({OTHER: 4})
    assert tracker.committed(OTHER) is None
    assert tracker.to_commit() == {}


def test_savepoint_only_advances_at_savepoint_entries() -> None:
    tracker = OffsetTracker(savepoint_only=True)
    e1 = tracker.add(TP0, next_offset=10, count=10)
    e2 = tracker.add(TP0, next_offset=20, count=10, savepoint=True)
    e3 = tracker.add(TP0, next_offset=30, count=10)

    tracker.ack(e1)
    assert tracker.committable(TP0) is None  # not a savepoint
    assert tracker.pending_count(TP0) == 2  # but it left the pending queue

    tracker.ack(e3)
    assert tracker.committable(TP0) is None  # behind the gap at e2 anyway

    tracker.ack(e2)
    assert tracker.committable(TP0) == 20  # the savepoint, not e3's 30
    assert tracker.pending_count(TP0) == 0
    assert tracker.to_commit() == {TP0: 20}


def test_savepoint_flag_is_irrelevant_outside_savepoint_mode() -> None:
    tracker = OffsetTracker()
    e1 = tracker.add(TP0, next_offset=10, count=10, savepoint=True)
    e2 = tracker.add(TP0, next_offset=20, count=10)
    tracker.ack(e1)
    tracker.ack(e2)
    assert tracker.committable(TP0) == 20


def test_forget_drops_state_and_late_acks_are_ignored() -> None:
    tracker = OffsetTracker()
    a1 = tracker.add(TP0, next_offset=10, count=10)
    a2 = tracker.add(TP0, next_offset=20, count=10)
    b1 = tracker.add(TP1, next_offset=5, count=5)
    tracker.ack(a1)
    tracker.mark_committed(tracker.to_commit())
    tracker.ack(b1)

    tracker.forget({TP0})
    assert tracker.committable(TP0) is None
    assert tracker.committed(TP0) is None
    assert tracker.pending_count(TP0) == 0
    assert tracker.pending_count() == 0  # TP1 had nothing pending left
    assert tracker.to_commit() == {TP1: 5}  # the other partition is untouched

    tracker.ack(a2)  # a late ack of revoked work: no error, no state
    assert tracker.committable(TP0) is None
    assert tracker.to_commit() == {TP1: 5}


def test_late_ack_after_reassignment_does_not_move_the_new_state() -> None:
    tracker = OffsetTracker()
    old = tracker.add(TP0, next_offset=10, count=10)
    tracker.forget(frozenset({TP0}))
    new = tracker.add(TP0, next_offset=110, count=10)  # assigned again, elsewhere in the log
    tracker.ack(old)
    assert tracker.committable(TP0) is None
    assert tracker.pending_count(TP0) == 1
    tracker.ack(new)
    assert tracker.committable(TP0) == 110


def test_forget_unknown_partition_is_harmless() -> None:
    tracker = OffsetTracker()
    entry = tracker.add(TP0, next_offset=1, count=1)
    tracker.forget({OTHER})
    tracker.ack(entry)
    assert tracker.committable(TP0) == 1


def test_pending_count_per_partition_and_total() -> None:
    tracker = OffsetTracker()
    a1 = tracker.add(TP0, next_offset=1, count=1)
    tracker.add(TP0, next_offset=2, count=1)
    tracker.add(TP1, next_offset=1, count=1)
    assert tracker.pending_count(TP0) == 2
    assert tracker.pending_count(TP1) == 1
    assert tracker.pending_count(OTHER) == 0
    assert tracker.pending_count() == 3
    tracker.ack(a1)
    assert tracker.pending_count(TP0) == 1
    assert tracker.pending_count() == 2


def test_ack_marks_the_entry_done_and_is_idempotent() -> None:
    tracker = OffsetTracker()
    entry = tracker.add(TP0, next_offset=4, count=4)
    assert not entry.done
    tracker.ack(entry)
    tracker.ack(entry)
    assert entry.done
    assert tracker.committable(TP0) == 4
    assert tracker.pending_count(TP0) == 0


def test_advance_to_the_position_past_a_transaction_marker() -> None:
    tracker = OffsetTracker()
    entry = tracker.add(TP0, next_offset=5, count=5)
    assert not tracker.advance(TP0, 6), "pending work: the position is not done yet"
    tracker.ack(entry)
    assert tracker.advance(TP0, 6)  # records 0..4, commit marker at 5
    assert tracker.to_commit() == {TP0: 6}
    assert not tracker.advance(TP0, 5), "never backwards"
    assert tracker.committable(TP0) == 6


def test_advance_needs_a_known_offset() -> None:
    tracker = OffsetTracker()
    assert not tracker.advance(TP0, 3)  # never committed, never processed: left alone
    tracker.seed(TP0, 3)
    assert tracker.to_commit() == {}, "the group's own committed offset is not recommitted"
    assert tracker.advance(TP0, 4)


def test_savepoint_mode_advances_only_after_a_savepoint() -> None:
    tracker = OffsetTracker(savepoint_only=True)
    tracker.ack(tracker.add(TP0, next_offset=2, count=2, savepoint=True))
    tracker.ack(tracker.add(TP0, next_offset=4, count=2))
    assert not tracker.advance(TP0, 5), "messages after the savepoint are not committable"
    assert tracker.committable(TP0) == 2


def test_seed_gives_the_lag_base_and_never_overrides_work() -> None:
    tracker = OffsetTracker()
    tracker.ack(tracker.add(TP0, next_offset=8, count=8))
    tracker.seed(TP0, 3)
    assert (tracker.committed(TP0), tracker.committable(TP0)) == (3, 8)
    tracker.seed(TP0, 1)
    assert tracker.committed(TP0) == 3


def test_cancel_marks_pending_entries_and_their_late_acks_are_ignored() -> None:
    tracker = OffsetTracker()
    done = tracker.add(TP0, next_offset=1, count=1)
    tracker.add(TP0, next_offset=3, count=2)
    late = tracker.add(TP0, next_offset=6, count=3)
    tracker.ack(late)  # out of order: acked, but behind a gap
    tracker.ack(done)
    assert tracker.cancel({TP0}) == 2, "only the unacked entry is cancelled"
    assert tracker.pending_count(TP0) == 0
    new = tracker.add(TP0, next_offset=2, count=1)  # reassigned: replay from 1
    tracker.ack(new)
    assert tracker.committable(TP0) == 2


def test_committable_never_moves_backwards() -> None:
    tracker = OffsetTracker()
    tracker.seed(TP0, 10)
    tracker.ack(tracker.add(TP0, next_offset=7, count=1))
    assert tracker.committable(TP0) == 10
