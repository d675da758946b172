"""Rows checked against a table's declared columns, and turned into Arrow record batches.

The staging sinks (:mod:`actors.sinks.spark.sink`, :mod:`actors.sinks.jdbc`) accept a processor's
rows only when every value fits its :class:`~processors.base.Column`: the Python types a
column type accepts are in :data:`TYPES`, from the one map of column types
(:mod:`actors.sinks.table.columns`; ``bool`` is not an ``int`` here), ints must fit
``int``/``long``, a ``float`` within the 32-bit range, a ``date`` is not a datetime, a
``timestamp`` is an aware datetime (converted to UTC), a ``timestamp_ntz`` a naive one, a
``decimal(P,S)`` a finite Decimal or int that fits P and S exactly (never rounded), a
nested value is checked to its leaves (:mod:`actors.sinks.table.nested`), a NOT NULL
column must have a value (see :data:`processors.base.ColumnType`). A row that does not fit
is refused with a reason that names the table, the row's Kafka coordinates and the column
(and the path inside a nested value).

:func:`record_batch` is the Spark sink's path: the rows become one ``pyarrow.RecordBatch``
as soon as a worker hands them over, checked column by column. Arrow holds a row in a
fraction of the memory of its dict or tuple (so more rows can wait for a flush within the
same memory), and Spark takes Arrow as columnar batches without pickling.

pyarrow is imported only inside functions (it comes with the ``spark`` extra).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any

from actors.sinks.table.columns import (
    COLUMN_TYPES,
    COORDINATES,
    INT_RANGE,
    arrow_type,
)
from actors.sinks.table.nested import NestedFault, nested_value
from processors.base import Column, Row, decimal_parts
from processors.column_types import DecimalType, Flat, Map, parse_type

# The Python types each column type accepts (bool is not an int here: type(True) is bool).
TYPES: dict[str, frozenset[type]] = {kind: k.python for kind, k in COLUMN_TYPES.items()}
"""The Python types of each type without parameters (``decimal(P,S)``: Decimal, int)."""
_NULLABLE_TYPES = {kind: types | {type(None)} for kind, types in TYPES.items()}
_EXACT = decimal.Context(prec=2 * 38 + 2, traps=[decimal.Inexact, decimal.InvalidOperation])


def _timestamp(value: Any) -> dt.datetime:
    """An aware datetime as its UTC instant; ValueError for anything else."""
    if not isinstance(value, dt.datetime):
        raise ValueError(f"value {repr(value)[:80]} ({type(value).__name__}) is not a "
                         "timestamp: give a datetime with a time zone (epoch milliseconds: "
                         "timestamp_from_millis)")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"datetime {value.isoformat()} has no time zone, so its instant is "
                         "unknown: give it a tzinfo (e.g. datetime.UTC)")
    return value.astimezone(dt.UTC)


def _decimal(value: Any, kind: str) -> decimal.Decimal:
    """``value`` as a Decimal of exactly the scale of ``kind`` (``decimal(P,S)``);
    ValueError when it is not a finite Decimal or int, or does not fit P and S."""
    precision, scale = decimal_parts(kind) or (0, 0)
    if isinstance(value, float):
        raise ValueError(f"value {value!r} is a float, not a {kind}: a float is not the "
                         "amount it was meant to be; give a decimal.Decimal (or an int)")
    if isinstance(value, bool) or not isinstance(value, decimal.Decimal | int):
        raise ValueError(f"value {repr(value)[:80]} ({type(value).__name__}) is not a "
                         f"{kind}: give a decimal.Decimal (or an int)")
    number = decimal.Decimal(value)
    if not number.is_finite():
        raise ValueError(f"value {number} is not a finite number, not a {kind}")
    if number and number.adjusted() + 1 > precision - scale:
        raise ValueError(f"value {number} has more than {precision - scale} digit(s) before "
                         f"the point of {kind} (precision {precision}, scale {scale})")
    try:
        return number.quantize(decimal.Decimal(1).scaleb(-scale), context=_EXACT)
    except (decimal.Inexact, decimal.InvalidOperation):
        raise ValueError(f"value {number} has more than {scale} digit(s) after the point "
                         f"of {kind}; it is refused, not rounded") from None


FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite 32-bit float: a finite value beyond it does not fit ``float``."""


def _float32(value: Any) -> float:
    """A ``float`` value (float or int, not bool) as a Python float; ValueError when it
    is none, or finite beyond the 32-bit range (Arrow would make it infinite)."""
    if isinstance(value, bool) or not isinstance(value, float | int):
        raise ValueError(f"value {repr(value)[:80]} ({type(value).__name__}) is not a float")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if math.isfinite(number) and -FLOAT32_MAX <= number <= FLOAT32_MAX:
        return number
    if isinstance(value, float) and not math.isfinite(value):
        return number  # NaN and the infinities are 32-bit floats too
    raise ValueError(f"value {repr(value)[:80]} is beyond the range of a float (32-bit, "
                     f"at most {FLOAT32_MAX:g} either way): declare it double")


def _naive(value: Any) -> dt.datetime:
    """A naive datetime (a ``timestamp_ntz``); ValueError for anything else."""
    if not isinstance(value, dt.datetime):
        raise ValueError(f"value {repr(value)[:80]} ({type(value).__name__}) is not a "
                         "timestamp_ntz: give a datetime without a time zone")
    if value.tzinfo is not None and value.utcoffset() is not None:
        raise ValueError(f"datetime {value.isoformat()} has a time zone, but a "
                         "timestamp_ntz is a local date-time without one: declare the "
                         "column timestamp, or give a naive datetime")
    return value.replace(tzinfo=None) if value.tzinfo is not None else value


def _date(value: Any) -> dt.date:
    """A ``date`` value; ValueError for a datetime or anything else."""
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value
    hint = (": a datetime is not a date (give its .date(), or declare timestamp)"
            if isinstance(value, dt.datetime) else "")
    raise ValueError(f"value {repr(value)[:80]} ({type(value).__name__}) is not a date{hint}")


def convert(value: Any, kind: str) -> Any:
    """A value (not None) converted for the column type ``kind``; ValueError when it does
    not fit (for a nested type, naming the path inside it: ``at lines[3].qty: ...``)."""
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
    elif kind == "timestamp":
        return _timestamp(value)
    elif kind == "timestamp_ntz":
        return _naive(value)
    elif kind == "date":
        return _date(value)
    elif kind == "float":
        return _float32(value)
    else:
        node = parse_type(kind)
        if isinstance(node, DecimalType):
            return _decimal(value, kind)
        try:
            return nested_value(value, node, convert)
        except NestedFault as fault:
            raise ValueError(f"at {fault.where()}: {fault.why}" if fault.parts
                             else fault.why) from None
    if not ok:
        shown = repr(value)[:80]
        raise ValueError(f"value {shown} ({type(value).__name__}) is not a {kind}")
    return value


def check(value: Any, column: Column) -> Any:
    """``value`` converted for ``column``; ValueError when it does not fit."""
    if value is None:
        if column.nullable:
            return None
        raise ValueError("is null but the column is NOT NULL")
    return convert(value, column.type)


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
    """Whether every value of one column fits it (the fast, column-wise check; the types
    that convert values, ``timestamp`` and ``decimal``, are checked by :func:`_converted`)."""
    kinds = set(map(type, values))
    if not kinds <= (_NULLABLE_TYPES if column.nullable else TYPES)[column.type]:
        return False
    if column.type in INT_RANGE and int in kinds:
        present = [v for v in values if v is not None] if type(None) in kinds else values
        lo, hi = INT_RANGE[column.type]
        return bool(lo <= min(present) and max(present) <= hi)
    return True


_CONVERTED = frozenset({"timestamp", "timestamp_ntz", "float"})
"""The flat types whose values the check converts or bounds one by one."""


_FLAT_ENTRIES = frozenset({"string", "binary", "boolean", "int", "long"})
"""The key and value types of a map checked column-wise (Arrow takes them as they are)."""


def _flat_map(kind: str) -> tuple[str, str] | None:
    """The key and value types of ``map<K,V>`` when both are in :data:`_FLAT_ENTRIES`."""
    if not kind.startswith("map<"):
        return None
    node = parse_type(kind)
    if not (isinstance(node, Map) and isinstance(node.key, Flat)
            and isinstance(node.value, Flat)):
        return None
    if {node.key.name, node.value.name} <= _FLAT_ENTRIES:
        return node.key.name, node.value.name
    return None


def _maps_fit(values: list[Any], column: Column, entries: tuple[str, str]) -> bool:
    """Whether every value of a column of flat maps fits it, checked column-wise: every
    value a dict (or None where allowed), all keys at once, all values at once."""
    present = [v for v in values if v is not None]
    if len(present) < len(values) and not column.nullable:
        return False
    if not all(type(v) is dict for v in present):
        return False
    keys = [k for v in present for k in v]
    items = [x for v in present for x in v.values()]
    return (_fits(keys, Column("key", entries[0], False))
            and _fits(items, Column("value", entries[1], True)))


def _converted(values: list[Any], column: Column) -> list[Any]:
    """One column's values as Arrow takes them (timestamps in UTC, decimals at their
    scale, nested values checked to their leaves; a map of flat keys and values checked
    column-wise, :func:`_maps_fit`); ValueError when one does not fit (the rows are then
    checked one by one)."""
    entries = _flat_map(column.type)
    if entries is not None:
        if not _maps_fit(values, column, entries):
            raise ValueError(column.name)
        return values
    if column.type in _CONVERTED or column.type not in COLUMN_TYPES:
        return [check(v, column) for v in values]
    if not _fits(values, column):
        raise ValueError(column.name)
    return values


def record_batch(rows: Sequence[Row], columns: Sequence[Column], what: str,
                 ) -> tuple[Any, list[tuple[Row, str]]]:
    """The rows that fit ``columns`` as one ``pyarrow.RecordBatch`` (columns in order),
    and the rows that do not, each with its reason (see :func:`check_rows`).

    Fast path: each column's values are gathered and checked as a whole (the set of
    their types, the range of their ints) and handed to Arrow at once; only a batch with
    a value that does not fit is checked row by row, to name the rows."""
    import pyarrow as pa  # only with the spark extra

    names = [c.name for c in columns]
    try:  # dict.get mapped over the rows: no Python frame per value
        values = [list(map(dict.get, rows, repeat(name))) for name in names]
    except TypeError:  # a row that is a Mapping but not a dict
        values = [[row.get(name) for row in rows] for name in names]
    rejected: list[tuple[Row, str]] = []
    try:
        values = [_converted(v, c) for v, c in zip(values, columns, strict=True)]
    except ValueError:
        good, rejected = check_rows(rows, columns, what)
        values = [list(v) for v in zip(*good, strict=True)] if good else [[] for _ in names]
    # Arrow turns the ints of a double column into floats itself.
    arrays = [pa.array(v, type=arrow_type(c.type)) for v, c in zip(values, columns, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, names=names), rejected


def column_batch(table: Any, columns: Sequence[Column]) -> Any | None:
    """A table of rows already in columns (:class:`~actors.column_rows.ColumnRows`) as
    one ``pyarrow.RecordBatch`` of ``columns`` in order (an absent column is all NULL),
    or None when a column does not fit as it is: an Arrow type of another kind than the
    column's (only integers widen or narrow, and only to values that fit), or a NULL in
    a NOT NULL column. The caller then checks the rows one by one
    (:func:`record_batch`), which names each that does not fit."""
    import pyarrow as pa  # only with the spark extra

    n = table.num_rows
    arrays = []
    for column in columns:
        want = arrow_type(column.type)
        if table.schema.get_field_index(column.name) < 0:
            if not column.nullable:
                return None
            arrays.append(pa.nulls(n, want))
            continue
        values = table[column.name].combine_chunks()
        if values.type != want:
            if not (pa.types.is_integer(values.type) and pa.types.is_integer(want)):
                return None
            try:
                values = values.cast(want)  # safe: a value out of range raises
            except (pa.ArrowInvalid, OverflowError):
                return None
        if values.null_count and not column.nullable:
            return None
        arrays.append(values)
    return pa.RecordBatch.from_arrays(arrays, names=[c.name for c in columns])


def arrow_table(batches: Sequence[Any], ingested_at: dt.datetime, *,
                contiguous: bool = True) -> Any:
    """The (one or more) batches of :func:`record_batch` as one ``pyarrow.Table``, with
    ``_ingested_at`` added: contiguous (one chunk, a copy of the batches: Spark makes a
    task, and a file, of each chunk), or, ``contiguous=False``, the batches themselves as
    its chunks (no copy: pyiceberg writes one file of them all)."""
    import pyarrow as pa  # only with the spark extra

    table = pa.Table.from_batches(batches)
    if contiguous:
        table = table.combine_chunks()
    stamp = arrow_type("timestamp")
    return table.append_column("_ingested_at", pa.repeat(pa.scalar(ingested_at, type=stamp),
                                                         len(table)))


__all__ = ["COORDINATES", "FLOAT32_MAX", "INT_RANGE", "TYPES", "arrow_table", "arrow_type",
           "check", "column_batch", "convert",
           "check_rows", "record_batch"]
