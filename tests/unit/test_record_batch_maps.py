"""``record_batch`` checks a column of flat maps (``map<string,string>``: the Gobblin
events' ``metadata`` through ``schema_rows``) column-wise, as it does flat columns: the
types of all keys and all values at once, not entry by entry (the hot path
bench/schema_rows.py found: ~3 us a row for ~20 entries). A batch with an entry that does
not fit is still checked row by row, naming the row, the column and the entry."""

from __future__ import annotations

from typing import Any

import pytest

from actors.sinks.table import rows as table_rows
from actors.sinks.table.rows import record_batch
from processors.base import Column

COLUMNS = (Column("id", "long", False), Column("metadata", "map<string,string>"),
           Column("counts", "map<string,long>"))


def row(i: int, metadata: Any, counts: Any = None) -> dict[str, Any]:
    return {"id": i, "metadata": metadata, "counts": counts, "_topic": "t", "_partition": 0,
            "_offset": i}


def test_a_batch_of_fitting_maps_is_checked_column_wise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def per_entry(*_: Any) -> Any:
        raise AssertionError("a fitting batch of flat maps was checked entry by entry")

    monkeypatch.setattr(table_rows, "nested_value", per_entry)
    batch, rejected = record_batch(
        [row(0, {"a": "1", "b": None}, {"n": 2**40}), row(1, None), row(2, {}, {})],
        COLUMNS, "test")
    assert rejected == []
    assert batch.column(1).to_pylist() == [[("a", "1"), ("b", None)], None, []]
    assert batch.column(2).to_pylist() == [[("n", 2**40)], None, []]


@pytest.mark.parametrize(("bad", "why"), [
    (row(1, {"a": 7}), "column 'metadata': at ['a']: value 7 (int) is not a string"),
    (row(1, {5: "x"}), "column 'metadata': key 5: value 5 (int) is not a string"),
    (row(1, ["a", "b"]), "column 'metadata': value ['a', 'b'] (list) is not a map: give a dict"),
    (row(1, {}, {"n": 2**63}), "column 'counts': at ['n']: value 9223372036854775808 (int) "
                               "is not a long"),
    (row(1, {}, {"n": True}), "column 'counts': at ['n']: value True (bool) is not a long"),
])
def test_a_map_entry_that_does_not_fit_rejects_its_row_alone(bad: dict[str, Any],
                                                             why: str) -> None:
    batch, rejected = record_batch([row(0, {"a": "1"}), bad, row(2, {"c": "3"})], COLUMNS,
                                   "test")
    assert batch.column(0).to_pylist() == [0, 2]
    [(refused, reason)] = rejected
    assert refused is bad and reason.endswith(why), reason
