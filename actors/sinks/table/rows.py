"""Rows checked against a table's declared columns, and turned into Arrow record batches.

The staging sinks (:mod:`actors.sinks.spark.sink`, :mod:`actors.sinks.jdbc`) accept a processor's
rows only when every value fits its :class:`~processors.base.Column`: the Python types a
column type accepts are in :data:`TYPES`, from the one map of column types
(:mod:`actors.sinks.table.columns`; ``bool`` is not an ``int`` here), ints must fit
``int``/``long``, a NOT NULL column must have a value. A row that does not fit is refused
with a reason that names the table, the row's Kafka coordinates and the column.

:func:`record_batch` is the Spark sink's path: the rows become one ``pyarrow.RecordBatch``
as soon as a worker hands them over, checked column by column. Arrow holds a row in a
fraction of the memory of its dict or tuple (so more rows can wait for a flush within the
same memory), and Spark takes Arrow as columnar batches without pickling.

pyarrow is imported only inside functions (it comes with the ``spark`` extra).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from actors.sinks.table.columns import COLUMN_TYPES, COORDINATES, INT_RANGE, arrow_type
from processors.base import Column, Row

# The Python types each column type accepts (bool is not an int here: type(True) is bool).
TYPES: dict[str, frozenset[type]] = {kind: k.python for kind, k in COLUMN_TYPES.items()}
_NULLABLE_TYPES = {kind: types | {type(None)} for kind, types in TYPES.items()}


def check(value: Any, column: Column) -> Any:
    """``value`` converted for ``column``; ValueError when it does not fit."""
    if value is None:
        if column.nullable:
            return None
        raise ValueError("is null but the column is NOT NULL")
    kind = column.type
    ok = False
    if kind == "string":
        ok = isinstance(value, str)
    elif kind in ("int", "long"):
        lo, hi = INT_RANGE[kind]
        ok = isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi
    elif kind == "double":
        ok = isinstance(value, float | int) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif kind == "boolean":
        ok = isinstance(value, bool)
    elif kind == "binary":
        ok = isinstance(value, bytes | bytearray)
    if not ok:
        shown = repr(value)[:80]
        raise ValueError(f"value {shown} ({type(value).__name__}) is not a {kind}")
    return value


def check_rows(rows: Sequence[Row], columns: Sequence[Column], what: str,
               checker: Callable[[Any, Column], Any] = check,
               ) -> tuple[list[tuple[Any, ...]], list[tuple[Row, str]]]:
    """Every row checked value by value (``checker``: :func:`check` or a stricter one):
    the rows that fit as tuples in ``columns`` order, and the others, each with the
    reason (``what``, the row's Kafka coordinates, the column)."""
    out, rejected = [], []
    for row in rows:
        values = []
        for column in columns:
            try:
                values.append(checker(row.get(column.name), column))
            except ValueError as exc:
                where = (f"topic {row.get('_topic')!r} partition {row.get('_partition')} "
                         f"offset {row.get('_offset')}")
                rejected.append((row, f"{what}: row at {where}: column {column.name!r}: "
                                      f"{exc}"))
                break
        else:
            out.append(tuple(values))
    return out, rejected


def _fits(values: list[Any], column: Column) -> bool:
    """Whether every value of one column fits it (the fast, column-wise check)."""
    kinds = set(map(type, values))
    if not kinds <= (_NULLABLE_TYPES if column.nullable else TYPES)[column.type]:
        return False
    if column.type in INT_RANGE and int in kinds:
        present = [v for v in values if v is not None] if type(None) in kinds else values
        lo, hi = INT_RANGE[column.type]
        return bool(lo <= min(present) and max(present) <= hi)
    return True


def record_batch(rows: Sequence[Row], columns: Sequence[Column], what: str,
                 ) -> tuple[Any, list[tuple[Row, str]]]:
    """The rows that fit ``columns`` as one ``pyarrow.RecordBatch`` (columns in order),
    and the rows that do not, each with its reason (see :func:`check_rows`).

    Fast path: each column's values are gathered and checked as a whole (the set of
    their types, the range of their ints) and handed to Arrow at once; only a batch with
    a value that does not fit is checked row by row, to name the rows."""
    import pyarrow as pa  # only with the spark extra

    names = [c.name for c in columns]
    values = [[row.get(name) for row in rows] for name in names]
    rejected: list[tuple[Row, str]] = []
    if not all(_fits(v, c) for v, c in zip(values, columns, strict=True)):
        good, rejected = check_rows(rows, columns, what)
        values = [list(v) for v in zip(*good, strict=True)] if good else [[] for _ in names]
    # Arrow turns the ints of a double column into floats itself.
    arrays = [pa.array(v, type=arrow_type(c.type)) for v, c in zip(values, columns, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, names=names), rejected


def arrow_table(batches: Sequence[Any], ingested_at: dt.datetime) -> Any:
    """The (one or more) batches of :func:`record_batch` as one contiguous
    ``pyarrow.Table`` (one chunk: Spark makes a task, and a file, of each), with
    ``_ingested_at`` added."""
    import pyarrow as pa  # only with the spark extra

    table = pa.Table.from_batches(batches).combine_chunks()
    stamp = arrow_type("timestamp")
    return table.append_column("_ingested_at", pa.repeat(pa.scalar(ingested_at, type=stamp),
                                                         len(table)))


__all__ = ["COORDINATES", "INT_RANGE", "TYPES", "arrow_table", "arrow_type", "check",
           "check_rows", "record_batch"]
