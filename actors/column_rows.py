"""The rows of a batch as Arrow columns, handed to the sinks that take them as they are.

A batch decoded and mapped at once (:mod:`actors.worker.columns`) reaches the sinks as a
:class:`ColumnRows`: a ``Sequence`` of rows like any batch (its rows are made as dicts
only if someone reads them one by one: a dead letter, a test), whose :attr:`table` a sink
that declares :attr:`SinkCapabilities.arrow_rows <actors.sinks.base.SinkCapabilities>`
converts without a dict per row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

from processors.base import Row


class ColumnRows(Sequence[Row]):
    """Rows as one ``pyarrow.Table`` (a column per name, the coordinate columns
    ``_topic``, ``_partition``, ``_offset`` and ``_timestamp`` included)."""

    __slots__ = ("_dicts", "table")

    def __init__(self, table: Any) -> None:
        self.table = table
        self._dicts: list[Row] | None = None

    def __repr__(self) -> str:
        return f"<ColumnRows {self.table.num_rows} rows: {', '.join(self.table.column_names)}>"

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def _rows(self) -> list[Row]:
        if self._dicts is None:
            self._dicts = self.table.to_pylist()
        return self._dicts

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Row]: ...

    def __getitem__(self, index: int | slice) -> Row | Sequence[Row]:
        return self._rows()[index]

    def __iter__(self) -> Iterator[Row]:
        return iter(self._rows())

    def keep_from(self, offset: int) -> None:
        """Keep only the rows of messages at or after ``offset`` (in place: a retry of
        the batch passes this same object)."""
        import pyarrow.compute as pc

        self.table = self.table.filter(pc.greater_equal(self.table["_offset"], offset))
        self._dicts = None


def rows_from(rows: Sequence[Row], offset: int) -> Sequence[Row]:
    """The rows of a batch from the message at ``offset`` on: those a table does not
    hold yet. A list of dicts or :class:`ColumnRows` is cut in place (a retry of the
    batch passes the same object) and returned; any other sequence (immutable) as a new
    list of the rows kept, never as it was."""
    if isinstance(rows, ColumnRows):
        rows.keep_from(offset)
        return rows
    kept = [row for row in rows if row["_offset"] >= offset]
    if isinstance(rows, list):
        rows[:] = kept
        return rows
    return kept


__all__ = ["ColumnRows", "rows_from"]
