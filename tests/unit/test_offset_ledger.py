"""OffsetLedger: which batches of a partition an append may take, and what it records."""

from __future__ import annotations

from aiokafka import TopicPartition

from actors.offsets import Entry
from actors.sinks.spark.ledger import OffsetLedger

P0 = ("g", "t", 0)
P1 = ("g", "t", 1)


def entry(partition: int, next_offset: int) -> Entry:
    return Entry(TopicPartition("t", partition), next_offset, 1)


def test_a_batch_waits_for_every_earlier_batch_of_its_partition() -> None:
    ledger = OffsetLedger()
    one, two, three = entry(0, 5), entry(0, 9), entry(0, 12)
    other = entry(1, 3)
    for stream, batch in ((P0, one), (P0, two), (P1, other), (P0, three)):
        ledger.register(stream, batch)
    assert ledger.eligible(one, set())
    assert not ledger.eligible(two, set())  # one is neither done nor taken
    assert ledger.eligible(two, {id(one)})  # taken with it, or running before it
    assert not ledger.eligible(three, {id(one)})
    assert ledger.eligible(other, set())  # another partition: independent
    assert ledger.watermarks([one, two, other]) == {P0: 9, P1: 3}
    ledger.committed([one])
    assert ledger.eligible(two, set()) and not ledger.eligible(three, set())
    ledger.finished(two)  # no rows for the table: done without an append
    assert ledger.eligible(three, set())
    assert ledger.open_count(P0) == 1


def test_registration_is_idempotent_and_kept_in_offset_order() -> None:
    ledger = OffsetLedger()
    late, early = entry(0, 20), entry(0, 10)
    ledger.register(P0, late)
    ledger.register(P0, early)  # registered after, but earlier in the partition
    ledger.register(P0, late)  # a retry registers nothing new
    assert ledger.open_batches(P0) == [early, late]
    assert not ledger.eligible(late, set())


def test_a_cancelled_batch_is_never_eligible_and_holds_later_batches_back() -> None:
    """Issue 32, finding 1: a revoke cancels batch 1 (its append failed, waiting in the
    backoff) and batch 2 (held behind it): neither may be appended, and a cancelled
    earlier batch never lets a later one of its partition pass (the offsets would claim
    rows the table lacks)."""
    ledger = OffsetLedger()
    one, two = entry(0, 5), entry(0, 9)
    ledger.register(P0, one)
    ledger.register(P0, two)
    one.cancelled = True  # its partition was revoked: it is never written here
    assert not ledger.eligible(two, set())
    assert not ledger.eligible(one, set())
    assert ledger.open_batches(P0) == [one, two]  # not done: still held
    two.cancelled = True
    assert not ledger.eligible(two, {id(one)})
    other = entry(1, 4)
    ledger.register(P1, other)
    assert ledger.eligible(other, set())  # another partition: independent


def test_a_forgotten_partition_holds_nothing_and_records_nothing() -> None:
    ledger = OffsetLedger()
    one, two = entry(0, 5), entry(0, 9)
    ledger.register(P0, one)
    ledger.register(P0, two)
    assert ledger.stream_of(two) == P0
    ledger.forget([P0])
    assert ledger.open_count(P0) == 0
    assert ledger.stream_of(two) is None  # the writer refuses to append it
    assert ledger.watermarks([two]) == {}
