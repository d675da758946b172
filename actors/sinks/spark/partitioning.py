"""A staging table's layout from the configuration: ``sink.partition_by`` (Iceberg
partition transforms) and ``sink.table_properties``, applied when kstage creates the table,
the same on both append paths (Spark's ``PARTITIONED BY`` / ``TBLPROPERTIES``, pyiceberg's
``PartitionSpec`` / properties).

A transform is written as in Iceberg's Spark DDL, one per item:

* ``col``: identity (any column of a flat type);
* ``year(col)``, ``month(col)``, ``day(col)``: a ``date``, ``timestamp`` or
  ``timestamp_ntz`` column; ``hour(col)``: a ``timestamp`` or ``timestamp_ntz`` one (the
  plural forms ``years``, ``months``, ``days``, ``hours`` are the same);
* ``bucket(N, col)``: N > 0 buckets of ``int``, ``long``, ``decimal``, ``date``,
  ``timestamp``, ``timestamp_ntz``, ``string`` or ``binary``;
* ``truncate(W, col)``: width W > 0 of ``int``, ``long``, ``decimal``, ``string`` or
  ``binary``.

``col`` is a column of the rows (a ``schema_rows`` table: a field of the writer schema) or
one of kstage's own: ``_topic`` (string), ``_kafka_partition`` (int), ``_offset`` (long),
``_timestamp`` (long: the record's timestamp in milliseconds, so ``bucket`` or
``truncate`` only; partition by time with ``day(_ingested_at)`` or a timestamp column of
the rows), ``_ingested_at`` (timestamp). Without ``partition_by`` a staging table is
partitioned by ``day(_ingested_at)``.

The syntax and the counts are checked when the settings load; the columns and their types
when the columns are known (``kstage validate``: a processor's declared columns, or the
latest writer schema a ``schema_rows`` topic's registry gives; at the create itself
otherwise: a FatalError naming the transform, before anything is created).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from processors.base import Column
from processors.column_types import DecimalType, Flat, parse_type

UNITS = {"year": "year", "years": "year", "month": "month", "months": "month",
         "day": "day", "days": "day", "hour": "hour", "hours": "hour"}
"""The time transforms by the names they may be written with (Iceberg's Spark DDL takes
both)."""

_NAME = r"`?([A-Za-z_][A-Za-z0-9_]*)`?"
_IDENTITY = re.compile(rf"^{_NAME}$")
_TIME = re.compile(rf"^([a-z]+)\(\s*{_NAME}\s*\)$")
_WIDTH = re.compile(rf"^(bucket|truncate)\(\s*(-?\d+)\s*,\s*{_NAME}\s*\)$")

_BUCKETS = ("int", "long", "date", "timestamp", "timestamp_ntz", "string", "binary")
_TRUNCATES = ("int", "long", "string", "binary")
_DATES = ("date", "timestamp", "timestamp_ntz")


@dataclass(frozen=True, slots=True)
class Transform:
    """One partition field: ``kind`` identity, year, month, day, hour, bucket or
    truncate, over ``column``, with ``width`` (bucket's N, truncate's W; 0 otherwise)."""

    kind: str
    column: str
    width: int = 0

    def __str__(self) -> str:
        if self.kind == "identity":
            return self.column
        if self.width:
            return f"{self.kind}({self.width}, {self.column})"
        return f"{self.kind}({self.column})"

    def spark_sql(self) -> str:
        """The transform in Iceberg's Spark DDL (``PARTITIONED BY``)."""
        column = f"`{self.column}`"
        if self.kind == "identity":
            return column
        if self.width:
            return f"{self.kind}({self.width}, {column})"
        return f"{self.kind}s({column})"

    def field_name(self) -> str:
        """The partition field's name, as Iceberg's Java library names it (Spark's DDL)."""
        if self.kind == "identity":
            return self.column
        if self.kind == "truncate":
            return f"{self.column}_trunc"
        return f"{self.column}_{self.kind}"  # bucket: col_bucket, whatever N

    def problem(self, kind: str) -> str | None:
        """Why the transform cannot take a column of type ``kind``, or None."""
        node = parse_type(kind)
        if isinstance(node, DecimalType):
            name = "decimal"
        elif isinstance(node, Flat):
            name = node.name
        else:
            return (f"{self} partitions by the nested column {self.column!r} ({kind}): "
                    "only flat columns can be partition sources")
        allowed: tuple[str, ...]
        if self.kind == "identity":
            allowed = ("string", "int", "long", "float", "double", "boolean", "binary",
                       "decimal", *_DATES)
        elif self.kind == "hour":
            allowed = ("timestamp", "timestamp_ntz")
        elif self.kind in ("year", "month", "day"):
            allowed = _DATES
        elif self.kind == "bucket":
            allowed = (*_BUCKETS, "decimal")
        else:
            allowed = (*_TRUNCATES, "decimal")
        if name in allowed:
            return None
        hint = (" (_timestamp is the record's timestamp in milliseconds, a long: partition "
                "by time with day(_ingested_at) or a timestamp column)"
                if self.column == "_timestamp" else "")
        return (f"{self} does not fit column {self.column!r} of type {kind}: "
                f"{self.kind} takes {', '.join(allowed)}{hint}")


def parse(text: str) -> Transform:
    """One ``partition_by`` item (see the module doc); ValueError naming what is wrong."""
    spaced = text.strip()
    found = _IDENTITY.match(spaced)
    if found:
        return Transform("identity", found[1])
    found = _TIME.match(spaced)
    if found:
        unit = UNITS.get(found[1])
        if unit is None:
            raise ValueError(f"{text!r}: unknown transform {found[1]!r} (identity col, "
                             "year/month/day/hour(col), bucket(N, col), truncate(W, col))")
        return Transform(unit, found[2])
    found = _WIDTH.match(spaced)
    if found:
        width = int(found[2])
        if width <= 0:
            what = "bucket count" if found[1] == "bucket" else "truncate width"
            raise ValueError(f"{text!r}: the {what} must be > 0, not {width}")
        return Transform(found[1], found[3], width)
    hint = ""
    if spaced.count("(") != spaced.count(")"):
        hint = (" (in a YAML [...] list a comma ends an item: quote it, "
                "\"bucket(16, customer_id)\", or write one item per line)")
    raise ValueError(f"{text!r} is not a partition transform: write col, year(col), "
                     "month(col), day(col), hour(col), bucket(N, col) or truncate(W, col)"
                     + hint)


def parse_all(items: Sequence[str]) -> tuple[Transform, ...]:
    """Every item parsed; ValueError for a column that is the source of two partition
    fields: Iceberg's Java library refuses some such specs as redundant (``day(ts)`` with
    ``hour(ts)``, two buckets of one column) and pyiceberg's appends refuse every one
    (``truncate(2, region)`` with ``region``), so neither append path is given one."""
    parsed = tuple(parse(item) for item in items)
    sources = [t.column for t in parsed]
    again = sorted({c for c in sources if sources.count(c) > 1})
    if again:
        raise ValueError(f"column(s) {', '.join(again)} partitioned twice "
                         f"({', '.join(str(t) for t in parsed if t.column in again)}): a "
                         "column can be the source of one partition field only (pyiceberg's "
                         "appends refuse more, Iceberg's Java library some as redundant)")
    names = [t.field_name() for t in parsed]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"partition field name(s) {', '.join(twice)} given twice")
    return parsed


def problems(transforms: Sequence[Transform], columns: Sequence[Column],
             ) -> list[tuple[int, str]]:
    """Per transform that does not fit ``columns`` (the table's, Iceberg's names, the
    coordinates and ``_ingested_at`` among them): its index and why."""
    types = {c.name: c.type for c in columns}
    found = []
    for i, transform in enumerate(transforms):
        kind = types.get(transform.column)
        if kind is None:
            found.append((i, f"{transform}: the table has no column {transform.column!r} "
                          f"(columns: {', '.join(types)})"))
            continue
        why = transform.problem(kind)
        if why is not None:
            found.append((i, why))
    return found


def spark_clause(transforms: Sequence[Transform]) -> str:
    """``PARTITIONED BY (...)`` of the transforms (``days(_ingested_at)`` when none)."""
    if not transforms:
        return "PARTITIONED BY (days(`_ingested_at`))"
    return f"PARTITIONED BY ({', '.join(t.spark_sql() for t in transforms)})"


def pyiceberg_spec(schema: Any, transforms: Sequence[Transform]) -> Any:
    """The pyiceberg ``PartitionSpec`` of the transforms over ``schema`` (field ids from
    1000, named as Spark's DDL names them; ``day(_ingested_at)`` when none)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import (
        BucketTransform,
        DayTransform,
        HourTransform,
        IdentityTransform,
        MonthTransform,
        TruncateTransform,
        YearTransform,
    )
    from pyiceberg.transforms import (
        Transform as IcebergTransform,
    )

    def made(t: Transform) -> IcebergTransform[Any, Any]:
        if t.kind == "bucket":
            return BucketTransform(t.width)
        if t.kind == "truncate":
            return TruncateTransform(t.width)
        plain: dict[str, IcebergTransform[Any, Any]] = {
            "identity": IdentityTransform(), "year": YearTransform(),
            "month": MonthTransform(), "day": DayTransform(), "hour": HourTransform()}
        return plain[t.kind]

    chosen = tuple(transforms) or (Transform("day", "_ingested_at"),)
    return PartitionSpec(*[
        PartitionField(source_id=schema.find_field(t.column).field_id, field_id=1000 + i,
                       transform=made(t), name=t.field_name())
        for i, t in enumerate(chosen)])


def spec_text(fields: Sequence[tuple[str, str]]) -> str:
    """A spec as ``name: transform`` pairs, for the operator."""
    return ", ".join(f"{name}={transform}" for name, transform in fields) or "unpartitioned"


def wanted_fields(transforms: Sequence[Transform]) -> list[tuple[str, str]]:
    """The (field name, Iceberg transform text) pairs the transforms make, as Iceberg
    prints them (``day``, ``bucket[16]``, ``truncate[4]``, ``identity``)."""
    chosen = tuple(transforms) or (Transform("day", "_ingested_at"),)
    return [(t.field_name(), f"{t.kind}[{t.width}]" if t.width else t.kind) for t in chosen]


def property_text(properties: Mapping[str, str]) -> str:
    """``TBLPROPERTIES`` items of ``properties``, quoted as Spark SQL string literals."""
    def quoted(text: str) -> str:
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

    return ", ".join(f"{quoted(k)} = {quoted(v)}" for k, v in properties.items())




@dataclass(frozen=True, slots=True)
class Layout:
    """What a staging table is created with besides its columns: the partition
    ``transforms`` (none: ``day(_ingested_at)``) and the user's ``properties``."""

    transforms: tuple[Transform, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()

    def check(self, table: str, columns: Sequence[Column]) -> None:
        """FatalError when a transform does not fit ``columns`` (the table's, Iceberg's
        names, ``_ingested_at`` among them), naming the table and every transform."""
        found = problems(self.transforms, columns)
        if found:
            from actors.errors import FatalError

            raise FatalError(f"spark sink: table {table}: partition_by cannot be applied: "
                             + "; ".join(why for _, why in found)
                             + " (nothing was created)")

    def differs(self, table: str, fields: Sequence[tuple[str, str]]) -> str | None:
        """The warning for an existing table whose current spec (``fields``: name,
        transform) is not the configured one; None when it is. The table is not changed."""
        wanted = wanted_fields(self.transforms)
        if list(fields) == wanted:
            return None
        return (f"spark sink: table {table} exists with partition spec [{spec_text(fields)}], "
                f"not the configured [{spec_text(wanted)}] (partition_by); kstage does not "
                "change an existing table's spec: rows land as the table is partitioned. To "
                "change it: ALTER TABLE ... ADD/DROP PARTITION FIELD (Iceberg's partition "
                "evolution), or write to a new table with sink.table")


__all__ = ["Layout", "Transform", "parse", "parse_all", "problems", "property_text",
           "pyiceberg_spec", "spark_clause", "spec_text", "wanted_fields"]
