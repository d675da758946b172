"""The commit-time fence's rule (issue 32), as the pyiceberg catalog applies it and the
JVM's catalog wrapper mirrors it: :func:`actors.sinks.spark.iceberg.fence_violations`,
its refusal text, and how a refusal is recognised in an exception chain."""

from __future__ import annotations

from actors.errors import SinkError
from actors.sinks.spark import iceberg

A0, A1, B0 = ("g", "a", 0), ("g", "a", 1), ("h", "a", 0)


def test_every_expected_stream_must_be_exactly_where_the_table_holds_it() -> None:
    recorded = {A0: 10, A1: 4, B0: 7}
    assert iceberg.fence_violations({A0: 10, A1: 4}, recorded) == []
    assert iceberg.fence_violations({}, recorded) == []  # nothing expected, nothing to check
    # another writer appended past the position: refused
    assert iceberg.fence_violations({A0: 5, A1: 4}, recorded) == [(A0, 5, 10)]
    # ahead of the table (rows it lacks): refused too, not only behind
    assert iceberg.fence_violations({A1: 9}, recorded) == [(A1, 9, 4)]
    # a stream the table never recorded is at 0
    assert iceberg.fence_violations({("g", "c", 0): 0}, recorded) == []
    assert iceberg.fence_violations({("g", "c", 0): 3}, recorded) == [(("g", "c", 0), 3, 0)]


def test_the_refusal_names_the_table_partition_expected_and_found_offsets() -> None:
    text = iceberg.fence_message("kstage.kstage.stg", [(A0, 5, 10)])
    assert text.startswith(iceberg.FENCE_PREFIX)
    assert text.startswith("kstage fence: table kstage.kstage.stg: ")
    assert "group g topic a partition 0: expected offset 5, found 10" in text


def test_a_refusal_is_found_anywhere_in_an_exception_chain() -> None:
    refusal = iceberg.fence_message("c.n.t", [(A0, 5, 10)])
    jvm = RuntimeError("An error occurred while calling o123.append.\n"
                       f": org.apache.iceberg.exceptions.ValidationException: {refusal}\n"
                       "\tat org.apache.iceberg...")
    try:
        try:
            raise jvm
        except RuntimeError as exc:
            raise SinkError("spark sink c.n.t: append failed") from exc
    except SinkError as wrapped:
        assert iceberg.fence_refusal(wrapped) == refusal
    assert iceberg.fence_refusal(SinkError("spark sink: database is locked")) is None
    # the JVM wrapper's error of its own configuration is no refusal
    assert iceberg.fence_refusal(RuntimeError(
        "java.lang.IllegalArgumentException: kstage fence: catalog kstage: set exactly "
        "one of ...")) is None
