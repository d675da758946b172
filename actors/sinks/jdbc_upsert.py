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

"Newer" (:func:`newer`, and :func:`newer_sql`, the same rule in SQL): offsets order the
records of one partition only, and a key's records all come from one partition as long
as producers keep partitioning by key. So:

1. same ``_topic`` and ``_partition``: the higher ``_offset`` wins, whatever the record
   timestamps say (the log order is the order the producers' writes were serialized in;
   producers' clocks may disagree, a Debezium delete's clock may step back). A replay of
   older offsets never rolls a row back, and a replay of the same offset changes nothing;
2. another partition or topic (producers changed a key's partitioning, or several topics
   feed the table): offsets say nothing. The processor's source position
   (:attr:`Processor.source_order <processors.base.Processor.source_order>`, the
   ``debezium`` processor's ``_source_lsn``), where it declares one, decides: the higher
   wins, a NULL loses to any value;
3. equal (or no) source positions: the later ``_timestamp`` wins (a NULL timestamp loses
   to any other);
4. equal timestamps: the smaller ``(_topic, _partition)`` wins (byte order of the topic
   name), an arbitrary but fixed choice, so that a replay gives the same row.

The final table's merge (:mod:`actors.tables.merge_fold`) uses the same rules.
Mixing rule 1 with the others is not transitive in one corner case (a key that moved
partitions *and* whose positions or timestamps went backwards within a partition): the
row kept may then depend on how the records were split into flushes (or merges).
A batch is folded as the merge folds its rows: the highest offset of each partition
first, then the partitions' rows by rules 2-4 (:func:`newest_per_key`).

PostgreSQL refuses ``ON CONFLICT DO UPDATE`` touching a row twice in one statement
(SQLSTATE 21000), so :func:`newest_per_key` first keeps one row per key in the batch,
folding the rows in batch order with :func:`newer` (the result one statement per row
would give). The rows it drops are written only if the row that superseded them is
refused by PostgreSQL (then the newest of them is written instead, as a row-by-row write
would have kept it).

Deletions (a processor with :attr:`~processors.base.Processor.emits_deletes`): the table
holds live rows only (``_is_deleted`` stays a column, always false), and kstage keeps a
*deletions table* beside it, ``<name>_deletions`` in the same schema
(:func:`deletions_table`; a name past PostgreSQL's 63-byte limit is refused, it would be
truncated), with the key's columns and ``_topic, _partition, _offset, _timestamp,
_ingested_at``, keyed like the table (:func:`key_constraint`), created with it (an
existing one is checked like the table). It holds each key's newest deletion: a delete is
a version. The deletions table also holds the processor's source position column, if it declares
one (rule 2; a deletions table made before gets it added, NULL in its old rows). In the
flush's transaction, after :func:`newest_per_key` (deletions included):

* the winning deletions are upserted into the deletions table with the same newer rule
  (:func:`record_deletions_sql`), and delete the rows of the table they are newer than
  (:func:`delete_sql`);
* the winning upserts are written as above, but only for a key whose deletion in the
  deletions table (if any) is older than them (``NOT EXISTS``, :func:`upsert_sql`): a
  replayed older upsert never brings a deleted row back, a newer insert does (the key's
  older deletion then stays in the deletions table).

A data engineer reads the table as the source's current rows; the deletions table says
which keys were deleted and when (its coordinates); a key with a row in the table too was
inserted again after that deletion.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from collections.abc import Sequence
from typing import Any

from actors.sinks.jdbc_json import JsonText
from actors.sinks.table.columns import COORDINATES, column_kind
from processors.base import Column

_COORDINATE_COLUMNS = tuple(COORDINATES)

# The coordinates' positions in a row tuple are given by the caller (the table's order).
Coordinates = tuple[str, int, int, int | None, int | None]
"""``(_topic, _partition, _offset, _timestamp, source position)`` of a row (the source
position None where the processor declares none)."""


def newer(incoming: Coordinates, existing: Coordinates) -> bool:
    """Whether a row at ``incoming`` replaces the row at ``existing`` (module docstring)."""
    if incoming[:2] == existing[:2]:
        return incoming[2] > existing[2]
    for i in (4, 3):  # the source position, then the timestamp: NULL loses
        if incoming[i] != existing[i]:
            if incoming[i] is None:
                return False
            return existing[i] is None or incoming[i] > existing[i]  # type: ignore[operator]
    return (incoming[0].encode(), incoming[1]) < (existing[0].encode(), existing[1])


def newer_sql(incoming: str, existing: str, source: str | None = None) -> str:
    """The rule of :func:`newer` in SQL: whether the row aliased ``incoming`` replaces the
    row aliased ``existing`` (``source``: the source position column, if any). NULL (an
    incoming NULL timestamp against a value) counts as false in a WHERE (``IS NOT TRUE``
    reads it as "not newer", as :func:`newer` does)."""
    i, e = incoming, existing
    position = (f'WHEN {i}."{source}" IS DISTINCT FROM {e}."{source}" '
                f'THEN {i}."{source}" > {e}."{source}" OR {e}."{source}" IS NULL '
                if source else "")
    return (f'CASE WHEN {e}."_topic" = {i}."_topic" AND {e}."_partition" = {i}."_partition" '
            f'THEN {i}."_offset" > {e}."_offset" {position}'
            f'WHEN {i}."_timestamp" IS DISTINCT FROM {e}."_timestamp" '
            f'THEN {i}."_timestamp" > {e}."_timestamp" OR {e}."_timestamp" IS NULL '
            f'ELSE ({i}."_topic" COLLATE "C", {i}."_partition") '
            f'< ({e}."_topic" COLLATE "C", {e}."_partition") END')


# ``cur`` the row in the table, ``EXCLUDED`` the incoming one (ON CONFLICT DO UPDATE).
NEWER_SQL = newer_sql("EXCLUDED", "cur")
"""The upsert's condition without a source position column."""


def newest_per_key(rows: Sequence[tuple[Any, ...]], key: Sequence[int],
                   coordinates: Sequence[int | None]) -> list[tuple[int, list[int]]]:
    """One row per key: ``(winner, superseded)`` positions in ``rows``, in batch order.

    ``key``: the positions of the key columns in a row; ``coordinates``: the positions of
    ``_topic, _partition, _offset, _timestamp`` and of the source position (None: the
    processor declares none). The winner of a key: the highest offset of each partition
    (the first of equal ones), then the newest of those (:func:`newer`), as the final
    table's merge folds."""
    topic, partition, offset, timestamp = (int(p) for p in coordinates[:4])  # type: ignore[arg-type]
    source = coordinates[4] if len(coordinates) > 4 else None

    def at(row: tuple[Any, ...]) -> Coordinates:
        return (row[topic], row[partition], row[offset], row[timestamp],
                None if source is None else row[source])

    streams: dict[tuple[Any, ...], dict[tuple[Any, Any], int]] = {}
    for i, row in enumerate(rows):
        k = tuple(row[p] for p in key)
        best = streams.setdefault(k, {})
        here = (row[topic], row[partition])
        if here not in best or row[offset] > rows[best[here]][offset]:
            best[here] = i
    groups = []
    for k, best in streams.items():
        winner = None
        for i in sorted(best.values()):
            if winner is None or newer(at(rows[i]), at(rows[winner])):
                winner = i
        assert winner is not None  # noqa: S101 - a key has a row
        groups.append((winner, k))
    winners = {k: w for w, k in groups}
    losers: dict[int, list[int]] = {w: [] for w in winners.values()}
    for i, row in enumerate(rows):
        w = winners[tuple(row[p] for p in key)]
        if i != w:
            losers[w].append(i)
    return sorted((w, losers[w]) for w in winners.values())


def key_constraint(key: Sequence[str], columns: Sequence[Column]) -> str:
    """The table constraint of the key: ``PRIMARY KEY (...)`` when every key column is NOT
    NULL, else ``UNIQUE NULLS NOT DISTINCT (...)`` (NULL keys are equal, PostgreSQL 15+)."""
    nullable = {c.name for c in columns if c.nullable}
    names = ", ".join(f'"{k}"' for k in key)
    if any(k in nullable for k in key):
        return f"UNIQUE NULLS NOT DISTINCT ({names})"
    return f"PRIMARY KEY ({names})"


def upsert_sql(qualified: str, columns: Sequence[Column], key: Sequence[str],
               deletions: str | None = None, source: str | None = None) -> str:
    """The statement of a flush: one JSON array parameter, the rows (see the module
    docstring); ``columns``: every column written but ``_ingested_at`` (now()). With
    ``deletions`` (the qualified deletions table), a row is inserted or updated only if no
    deletion of its key there is as new as it or newer. ``source``: the processor's
    source position column (:func:`newer_sql`), or None."""
    names = [c.name for c in columns]
    listed = ", ".join(f'"{n}"' for n in names)
    conflict = ", ".join(f'"{k}"' for k in key)
    updated = ", ".join(f'"{n}" = EXCLUDED."{n}"' for n in (*names, "_ingested_at")
                        if n not in key)
    alive = ""
    if deletions is not None:
        alive = (f" WHERE NOT EXISTS (SELECT 1 FROM {deletions} AS del WHERE "  # noqa: S608
                 f"{key_match('del', 'src', key, columns)} "
                 f"AND ({newer_sql('src', 'del', source)}) IS NOT TRUE)")
    # Identifiers only, each a plain identifier checked by the settings, quoted.
    return (f'INSERT INTO {qualified} AS cur ({listed}, "_ingested_at") '  # noqa: S608
            f"SELECT {listed}, now() FROM json_populate_recordset(NULL::{qualified}, "
            f"CAST(? AS json)) AS src{alive} ON CONFLICT ({conflict}) "
            f"DO UPDATE SET {updated} WHERE {newer_sql('EXCLUDED', 'cur', source)}")


def key_match(left: str, right: str, key: Sequence[str], columns: Sequence[Column]) -> str:
    """``left`` and ``right`` have the same key: ``=`` on NOT NULL columns, ``IS NOT
    DISTINCT FROM`` on nullable ones (NULL keys are one key, as the constraint says)."""
    nullable = {c.name for c in columns if c.nullable}
    return " AND ".join(f'{left}."{k}" ' + ("IS NOT DISTINCT FROM" if k in nullable else "=")
                        + f' {right}."{k}"' for k in key)


DELETIONS_SUFFIX = "_deletions"
MAX_IDENTIFIER = 63
"""PostgreSQL's identifier limit in bytes (NAMEDATALEN - 1); a longer name is truncated
silently, so kstage refuses it rather than write a table it did not name."""


def side_table(table: str, suffix: str) -> str:
    """A table kstage keeps beside ``table`` (``name`` or ``schema.name``): same schema,
    ``<name><suffix>``."""
    *schema, name = table.split(".")
    return ".".join((*schema, name + suffix))


def side_name_problem(table: str, suffix: str, what: str) -> str | None:
    """Why the side table ``<table><suffix>`` (holding ``what``, e.g. "mode: upsert keeps
    the deletions") cannot be named within PostgreSQL's identifier limit, or None."""
    name = side_table(table, suffix).split(".")[-1]
    if len(name.encode()) <= MAX_IDENTIFIER:
        return None
    return (f"{what} of table {table} in the table {name}, "
            f"longer than PostgreSQL's {MAX_IDENTIFIER}-byte identifier limit (it would be "
            f"truncated); name the table with at most "
            f"{MAX_IDENTIFIER - len(suffix)} characters (sink.table)")


def deletions_table(table: str) -> str:
    """The deletions table of upsert table ``table`` (``name`` or ``schema.name``): same
    schema, ``<name>_deletions``."""
    return side_table(table, DELETIONS_SUFFIX)


def deletions_name_problem(table: str) -> str | None:
    """Why ``table``'s deletions table cannot be named, or None."""
    return side_name_problem(table, DELETIONS_SUFFIX, "mode: upsert keeps the deletions")


def deletions_columns(key: Sequence[str], columns: Sequence[Column],
                      source: str | None = None) -> tuple[Column, ...]:
    """The columns of a deletions table but the coordinates: the key's, in key order,
    then the source position column ``source`` if any."""
    by_name = {c.name: c for c in columns}
    return tuple(by_name[k] for k in (*key, *([source] if source else [])))


def record_deletions_sql(deletions: str, key_columns: Sequence[Column],
                         key: Sequence[str], source: str | None = None) -> str:
    """Upsert the deletions of a flush (one per key, the JSON parameter of
    :func:`upsert_sql`'s shape) into the deletions table: the newest wins.
    ``key_columns``: :func:`deletions_columns`."""
    return upsert_sql(deletions, (*key_columns, *_COORDINATE_COLUMNS), key, source=source)


def delete_sql(qualified: str, deletions: str, columns: Sequence[Column],
               key: Sequence[str], source: str | None = None) -> str:
    """Delete the rows of the table that the flush's deletions (the JSON parameter) are
    newer than."""
    return (f"DELETE FROM {qualified} AS cur USING json_populate_recordset("  # noqa: S608
            f"NULL::{deletions}, CAST(? AS json)) AS del "
            f"WHERE {key_match('cur', 'del', key, columns)} "
            f"AND {newer_sql('del', 'cur', source)}")


def add_source_sql(deletions: str, source: Column) -> str:
    """Give a deletions table made before it the source position column (NULL in its
    rows); nothing when the table does not exist or has it."""
    return (f'ALTER TABLE IF EXISTS {deletions} ADD COLUMN IF NOT EXISTS "{source.name}" '
            f"{column_kind(source.type).postgres}")


def _json_value(value: Any) -> Any:
    """A row value as JSON PostgreSQL's input function reads exactly: bytea as hex, a
    Decimal as its digits, a datetime in ISO 8601 with its offset."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.date):  # a datetime too (a naive one: a timestamp_ntz)
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return "\\x" + bytes(value).hex()  # bytea's hex input format
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def rows_json(rows: Sequence[tuple[Any, ...]], names: Sequence[str]) -> str:
    """The rows as the JSON array of objects :func:`upsert_sql` takes (the JSON text of a
    nested value, a :class:`~actors.sinks.jdbc_json.JsonText`, embedded as is)."""
    if not any(type(v) is JsonText for row in rows for v in row):
        return json.dumps([{n: _json_value(v) for n, v in zip(names, row, strict=True)}
                           for row in rows], ensure_ascii=False, separators=(",", ":"))
    keys = [json.dumps(n, ensure_ascii=False) + ":" for n in names]
    return "[" + ",".join(
        "{" + ",".join(k + (v if type(v) is JsonText else
                            json.dumps(_json_value(v), ensure_ascii=False))
                       for k, v in zip(keys, row, strict=True)) + "}"
        for row in rows) + "]"


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


__all__ = ["DELETIONS_SUFFIX", "MAX_IDENTIFIER", "NEWER_SQL", "UNIQUE_INDEXES_SQL",
           "add_source_sql", "delete_sql", "deletions_columns", "deletions_name_problem",
           "deletions_table",
           "key_constraint", "key_match", "missing_key_index", "newer", "newer_sql",
           "newest_per_key", "record_deletions_sql", "rows_json", "side_name_problem",
           "side_table", "upsert_sql"]
