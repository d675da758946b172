"""``mode: upsert`` of the JDBC sink: one row per natural key, the newest Kafka record wins.

The table holds one row per value of the processor's natural key
(:attr:`Processor.key <processors.base.Processor.key>`), enforced by a constraint that
kstage creates with the table (``PRIMARY KEY`` when every key column is NOT NULL, else
``UNIQUE NULLS NOT DISTINCT``, PostgreSQL 15+, so that NULL keys are one key as in the
Spark merge). An existing table must have a unique index on exactly the key columns.

A flush is one transaction, one statement per ``batch_size`` rows::

    INSERT INTO t AS cur (...) SELECT ... FROM json_populate_recordset(NULL::t, ?)
    ON CONFLICT (key...) DO UPDATE SET col = EXCLUDED.col, ... WHERE <incoming is newer>

The rows of a statement travel as one JSON array (one parameter, one round trip to the
JVM); PostgreSQL converts each value with its column's input function, so a value
it refuses fails the statement with a class ``22`` SQLSTATE like an append does.

"Newer" (:func:`newer`, and :data:`NEWER_SQL`, the same rule in SQL): offsets order the
records of one partition only, and a key's records all come from one partition as long
as producers keep partitioning by key. So:

1. same ``_topic`` and ``_partition``: the higher ``_offset`` wins, whatever the record
   timestamps say (the log order is the order the producers' writes were serialized in;
   producers' clocks may disagree). A replay of older offsets never rolls a row back, and
   a replay of the same offset changes nothing;
2. another partition or topic (producers changed a key's partitioning, or several topics
   feed the table): offsets say nothing, the later ``_timestamp`` wins (a NULL timestamp
   loses to any other);
3. equal timestamps: the smaller ``(_topic, _partition)`` wins (byte order of the topic
   name), an arbitrary but fixed choice, so that a replay gives the same row.

Rule 2 and 3 are the Spark merge's order (:mod:`actors.sinks.spark.merge`); rule 1 differs
from it only when a partition's timestamps go backwards. Mixing rules 1 and 2 is not
transitive in that corner case (a key that moved partitions *and* timestamps out of log
order): the row kept may then depend on the order records arrive.

PostgreSQL refuses ``ON CONFLICT DO UPDATE`` touching a row twice in one statement
(SQLSTATE 21000), so :func:`newest_per_key` first keeps one row per key in the batch,
folding the rows in batch order with :func:`newer` (the result one statement per row
would give). The rows it drops are written only if the row that superseded them is
refused by PostgreSQL (then the newest of them is written instead, as a row-by-row write
would have kept it).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from collections.abc import Sequence
from typing import Any

from processors.base import Column

# The coordinates' positions in a row tuple are given by the caller (the table's order).
Coordinates = tuple[str, int, int, int | None]
"""``(_topic, _partition, _offset, _timestamp)`` of a row."""


def newer(incoming: Coordinates, existing: Coordinates) -> bool:
    """Whether a row at ``incoming`` replaces the row at ``existing`` (module docstring)."""
    if incoming[:2] == existing[:2]:
        return incoming[2] > existing[2]
    if incoming[3] != existing[3]:
        if incoming[3] is None:
            return False
        return existing[3] is None or incoming[3] > existing[3]
    return (incoming[0].encode(), incoming[1]) < (existing[0].encode(), existing[1])


# The same rule in SQL, ``cur`` the row in the table, ``EXCLUDED`` the incoming one. NULL
# (an incoming NULL timestamp against a value) counts as false in a WHERE.
NEWER_SQL = (
    'CASE WHEN cur."_topic" = EXCLUDED."_topic" AND cur."_partition" = EXCLUDED."_partition" '
    'THEN EXCLUDED."_offset" > cur."_offset" '
    'WHEN EXCLUDED."_timestamp" IS DISTINCT FROM cur."_timestamp" '
    'THEN EXCLUDED."_timestamp" > cur."_timestamp" OR cur."_timestamp" IS NULL '
    'ELSE (EXCLUDED."_topic" COLLATE "C", EXCLUDED."_partition") '
    '< (cur."_topic" COLLATE "C", cur."_partition") END')


def newest_per_key(rows: Sequence[tuple[Any, ...]], key: Sequence[int],
                   coordinates: Sequence[int]) -> list[tuple[int, list[int]]]:
    """One row per key: ``(winner, superseded)`` positions in ``rows``, in batch order.

    ``key``: the positions of the key columns in a row; ``coordinates``: the positions of
    ``_topic, _partition, _offset, _timestamp``."""
    groups: dict[tuple[Any, ...], tuple[int, list[int]]] = {}
    topic, partition, offset, timestamp = coordinates
    for i, row in enumerate(rows):
        k = tuple(row[p] for p in key)
        found = groups.get(k)
        if found is None:
            groups[k] = (i, [])
            continue
        best, losers = found
        here = (row[topic], row[partition], row[offset], row[timestamp])
        there = (rows[best][topic], rows[best][partition], rows[best][offset],
                 rows[best][timestamp])
        if newer(here, there):
            groups[k] = (i, sorted([*losers, best]))
        else:
            losers.append(i)
    return sorted(groups.values())


def key_constraint(key: Sequence[str], columns: Sequence[Column]) -> str:
    """The table constraint of the key: ``PRIMARY KEY (...)`` when every key column is NOT
    NULL, else ``UNIQUE NULLS NOT DISTINCT (...)`` (NULL keys are equal, PostgreSQL 15+)."""
    nullable = {c.name for c in columns if c.nullable}
    names = ", ".join(f'"{k}"' for k in key)
    if any(k in nullable for k in key):
        return f"UNIQUE NULLS NOT DISTINCT ({names})"
    return f"PRIMARY KEY ({names})"


def upsert_sql(qualified: str, columns: Sequence[Column], key: Sequence[str]) -> str:
    """The statement of a flush: one JSON array parameter, the rows (see the module
    docstring); ``columns``: every column written but ``_ingested_at`` (now())."""
    names = [c.name for c in columns]
    listed = ", ".join(f'"{n}"' for n in names)
    conflict = ", ".join(f'"{k}"' for k in key)
    updated = ", ".join(f'"{n}" = EXCLUDED."{n}"' for n in (*names, "_ingested_at")
                        if n not in key)
    # Identifiers only, each a plain identifier checked by the settings, quoted.
    return (f'INSERT INTO {qualified} AS cur ({listed}, "_ingested_at") '  # noqa: S608
            f"SELECT {listed}, now() FROM json_populate_recordset(NULL::{qualified}, "
            f"CAST(? AS json)) ON CONFLICT ({conflict}) "
            f"DO UPDATE SET {updated} WHERE {NEWER_SQL}")


def _json_value(value: Any) -> Any:
    """A row value as JSON PostgreSQL's input function reads exactly: bytea as hex, a
    Decimal as its digits, a datetime in ISO 8601 with its offset."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return "\\x" + bytes(value).hex()  # bytea's hex input format
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def rows_json(rows: Sequence[tuple[Any, ...]], names: Sequence[str]) -> str:
    """The rows as the JSON array of objects :func:`upsert_sql` takes."""
    return json.dumps([{n: _json_value(v) for n, v in zip(names, row, strict=True)}
                       for row in rows], ensure_ascii=False, separators=(",", ":"))


# The unique indexes of a table usable by ON CONFLICT (valid, neither partial nor on
# expressions): their columns, comma-separated, and whether NULLs are not distinct
# (read through to_jsonb: the column exists from PostgreSQL 15 on).
UNIQUE_INDEXES_SQL = (
    "SELECT string_agg(a.attname::text, ',' ORDER BY a.attname), "
    "bool_or(coalesce((to_jsonb(i) ->> 'indnullsnotdistinct')::boolean, false)) "
    "FROM pg_index i "
    "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
    "WHERE i.indrelid = to_regclass(?) AND i.indisunique AND i.indisvalid "
    "AND i.indpred IS NULL AND i.indexprs IS NULL GROUP BY i.indexrelid")


def missing_key_index(table: str, key: Sequence[str], columns: Sequence[Column],
                      indexes: Sequence[tuple[str, bool]]) -> str | None:
    """Why ``table`` cannot take the upsert, or None: it needs a unique index on exactly
    ``key`` among ``indexes`` (each: its comma-separated columns, whether NULLs are not
    distinct), one that treats NULLs as equal when a key column is nullable."""
    names = ", ".join(key)
    found = [equal for cols, equal in indexes if set(cols.split(",")) == set(key)]
    nullable = [c.name for c in columns if c.nullable and c.name in key]
    if found and (any(found) or not nullable):
        return None
    if found:
        return (f"mode: upsert: table {table} has a unique index on the natural key "
                f"({names}) that treats NULLs as distinct, and {', '.join(nullable)} may be "
                "NULL: rows with a NULL there would never be updated; recreate it with "
                f"UNIQUE NULLS NOT DISTINCT ({names}) (PostgreSQL 15+)")
    return (f"mode: upsert needs a unique index on exactly the natural key ({names}) for "
            f"ON CONFLICT, and table {table} has none; add one (ALTER TABLE {table} ADD "
            f"{key_constraint(key, columns)}), or write to a new table with sink.table "
            "(kstage creates it with the constraint)")


__all__ = ["NEWER_SQL", "UNIQUE_INDEXES_SQL", "key_constraint", "missing_key_index",
           "newer", "newest_per_key", "rows_json", "upsert_sql"]
