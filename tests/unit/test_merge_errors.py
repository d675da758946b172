"""The merge's one translation of errors (``actors.tables.merge_job.translated``): the
final table's refusal becomes a MergeTableError (the merge cannot run against the tables
as they are), a commit that raced another a MergeConflict (the merge runs again), any
other error passes as it is. The real race, on Spark and Iceberg, is
``tests/integration/test_merge_faults.py``."""

from __future__ import annotations

import pytest

from actors.tables.final_deletions import FinalMoved
from actors.tables.final_table import FinalTableError
from actors.tables.merge_job import MergeConflict, MergeTableError, translated

# As py4j words an error of the JVM: the call first, then the Java exception.
RACED = ("An error occurred while calling o66.sql.\n"
         ": org.apache.iceberg.exceptions.CommitFailedException: Cannot commit: stale "
         "metadata\n\tat org.apache.iceberg...")


def test_a_final_table_refusal_is_a_merge_table_error() -> None:
    refusal = FinalTableError("final_t: the processor does not fit the table")
    with pytest.raises(MergeTableError, match="does not fit") as raised, translated():
        raise refusal
    assert raised.value.__cause__ is refusal


def test_a_racing_commit_is_a_conflict_named_by_its_java_exception() -> None:
    with pytest.raises(MergeConflict) as raised, translated():
        raise RuntimeError(RACED)
    assert str(raised.value).startswith("org.apache.iceberg.exceptions.CommitFailedException")


def test_a_racing_commit_found_in_the_cause_is_a_conflict() -> None:
    with pytest.raises(MergeConflict), translated():
        try:
            raise RuntimeError(RACED)
        except RuntimeError as exc:
            raise ValueError("wrapped") from exc


def test_the_final_table_moved_under_the_merge_is_a_conflict() -> None:
    with pytest.raises(MergeConflict, match="committed since"), translated():
        raise FinalMoved("final_t was committed since the merge read it")


def test_any_other_error_passes_as_it_is() -> None:
    with pytest.raises(KeyError), translated():
        raise KeyError("no such column")
