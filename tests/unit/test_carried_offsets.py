"""The ``kstage.offsets`` a pyiceberg commit records, made again on the base it is applied
on (actors/sinks/spark/carried_offsets.py; the fence jar's rule, which
tests/integration/test_spark_fence.py compares with this one on a table of cases)."""

from __future__ import annotations

from actors.sinks.spark import carried_offsets, iceberg
from actors.sinks.spark.carried_offsets import _redone, merged
from actors.sinks.spark.iceberg import strict_offsets as strict
from actors.sinks.spark.offset_history import RESET

A, B = ("g", "a", 0), ("g", "b", 0)


def fmt(offsets: dict[tuple[str, str, int], int]) -> str:
    return iceberg.format_offsets(offsets)


def test_the_base_offsets_with_the_appends_own_the_higher_of_each() -> None:
    # computed on a base where b was at 5; applied on one where b is at 8 and a at 3
    assert strict(merged(fmt({A: 3, B: 8}), fmt({A: 9, B: 5}), fmt({A: 3})) or "") == {
        A: 9, B: 8}
    # a partition the append does not own keeps the base's, even higher in the summary
    assert strict(merged(fmt({B: 2}), fmt({A: 9, B: 7}), fmt({A: 0})) or "") == {A: 9, B: 2}
    assert strict(merged(None, fmt({A: 9}), fmt({A: 0})) or "") == {A: 9}
    assert strict(merged("not json", fmt({A: 9}), fmt({A: 0})) or "") == {A: 9}


def test_malformed_offsets_or_expectations_are_left_as_they_are() -> None:
    assert merged(fmt({A: 1}), "{", fmt({A: 0})) is None
    assert merged(fmt({A: 1}), fmt({A: 2}), "[1]") is None
    assert strict('{"g": {"a": {"x": 1}}}') is None


def test_which_snapshots_are_made_again() -> None:
    base = fmt({A: 3, B: 8})
    stale = {iceberg.OFFSETS: fmt({A: 9, B: 5}), iceberg.EXPECT: fmt({A: 3})}
    assert strict(_redone(base, stale) or "") == {A: 9, B: 8}
    same = {iceberg.OFFSETS: fmt({A: 9, B: 8}), iceberg.EXPECT: fmt({A: 3})}
    assert _redone(base, same) is None  # nothing changes
    # a rewrite records none: the base's; a reset's offsets and hand-set ones stay
    assert _redone(base, {"added-data-files": "1"}) == base
    assert _redone(base, {RESET: fmt({A: 0})}) is None
    assert _redone(base, {iceberg.OFFSETS: fmt({A: 0})}) is None
    assert _redone(None, {"added-data-files": "1"}) is None
    assert _redone("{", {"added-data-files": "1"}) is None


def test_a_new_table_has_nothing_to_carry() -> None:
    updates = (object(),)
    assert carried_offsets.onto(None, updates) is updates
