"""The Kafka offsets of a JDBC staging table (``mode: append``): exactly once.

Beside the staging table ``name``, kstage keeps ``<name>_kafka_offsets`` in the same
schema (:func:`offsets_table`; a name past PostgreSQL's 63-byte limit is refused, it
would be truncated), created with the table::

    group_id TEXT, topic TEXT, partition INTEGER, next_offset BIGINT,
    PRIMARY KEY (group_id, topic, partition)

``next_offset`` is the offset before which every message of the partition is done in the
table (its rows written, or it had none: filtered, dead-lettered). A flush writes its rows
and moves the offsets of the partitions it covers **in one transaction**, each with a
compare-and-set from the position the writer continues from (the offset read at
assignment, or the end of its own previous flush)::

    UPDATE offsets SET next_offset = :new
     WHERE group_id = :g AND topic = :t AND partition = :p AND next_offset = :expected

or, for a partition the table has no offset for yet (expected 0), an ``INSERT ... ON
CONFLICT DO NOTHING`` that must insert its row. Another writer that moved the partition
meanwhile (a stale member, frozen past its session, or a flush that landed before this
one) makes the update or the insert touch no row: the transaction is rolled back, nothing
of the flush is written (:class:`OffsetsMoved`, whose text says ``kstage fence:`` like the
Iceberg fence's). Under PostgreSQL's READ COMMITTED, a concurrent update of the same row
waits for the other transaction and re-reads the row: two writers cannot both pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from actors.sinks.jdbc_upsert import side_name_problem, side_table

OFFSETS_SUFFIX = "_kafka_offsets"

Stream = tuple[str, str, int]
"""(group id, topic, partition)."""


def offsets_table(table: str) -> str:
    """The offsets table of staging table ``table`` (``name`` or ``schema.name``)."""
    return side_table(table, OFFSETS_SUFFIX)


def offsets_name_problem(table: str) -> str | None:
    """Why ``table``'s offsets table cannot be named, or None."""
    return side_name_problem(table, OFFSETS_SUFFIX,
                             "mode: append keeps the Kafka offsets")


def create_offsets_sql(qualified: str) -> str:
    return (f"CREATE TABLE IF NOT EXISTS {qualified} (group_id TEXT NOT NULL, "
            "topic TEXT NOT NULL, partition INTEGER NOT NULL, next_offset BIGINT NOT NULL, "
            "PRIMARY KEY (group_id, topic, partition))")


def insert_rows_sql(qualified: str, names: Iterable[str]) -> str:
    """Append the rows of one JSON array parameter (``_ingested_at``: now())."""
    listed = ", ".join(f'"{n}"' for n in names)
    # Identifiers only, each a plain identifier checked by the settings, quoted.
    return (f'INSERT INTO {qualified} ({listed}, "_ingested_at") '  # noqa: S608
            f"SELECT {listed}, now() FROM json_populate_recordset(NULL::{qualified}, "
            "CAST(? AS json))")


class OffsetsMoved(Exception):
    """The table's offset of a partition is not where the flush continues from."""

    def __init__(self, table: str, stream: Stream, expected: int, found: int | None) -> None:
        group, topic, partition = stream
        super().__init__(
            f"kstage fence: table {table}: group {group} topic {topic} partition "
            f"{partition}: expected offset {expected}, found "
            f"{'none' if found is None else found}; another writer moved it (nothing of "
            "this flush written)")


def read_offsets(conn: Any, qualified: str, streams: Iterable[Stream]) -> dict[Stream, int]:
    """Spark thread: the table's offsets of ``streams`` (absent: none recorded)."""
    wanted = set(streams)
    found: dict[Stream, int] = {}
    query = conn.prepareStatement(
        f"SELECT group_id, topic, partition, next_offset FROM {qualified}")  # noqa: S608
    result = query.executeQuery()
    while result.next():
        stream = (str(result.getString(1)), str(result.getString(2)), int(result.getInt(3)))
        if stream in wanted:
            found[stream] = int(result.getLong(4))
    query.close()
    return found


def move_offsets(conn: Any, qualified: str, table: str, moves: Mapping[Stream, int],
                 expected: Mapping[Stream, int]) -> None:
    """Spark thread, inside the flush's transaction: move each stream's offset from
    ``expected`` to ``moves`` (compare-and-set); :class:`OffsetsMoved` on the first that
    is not where expected (the caller rolls back)."""
    update = conn.prepareStatement(
        f"UPDATE {qualified} SET next_offset = ? WHERE group_id = ? AND topic = ? "  # noqa: S608
        "AND partition = ? AND next_offset = ?")
    insert = conn.prepareStatement(
        f"INSERT INTO {qualified} (group_id, topic, partition, next_offset) "  # noqa: S608
        "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING")
    try:
        for stream, new in sorted(moves.items()):  # one lock order for every writer
            group, topic, partition = stream
            want = expected[stream]
            update.setLong(1, new)
            update.setString(2, group)
            update.setString(3, topic)
            update.setInt(4, partition)
            update.setLong(5, want)
            if update.executeUpdate() == 1:
                continue
            if want == 0:
                insert.setString(1, group)
                insert.setString(2, topic)
                insert.setInt(3, partition)
                insert.setLong(4, new)
                if insert.executeUpdate() == 1:
                    continue
            raise OffsetsMoved(table, stream, want,
                               read_offsets(conn, qualified, [stream]).get(stream))
    finally:
        update.close()
        insert.close()


__all__ = ["OFFSETS_SUFFIX", "OffsetsMoved", "Stream", "create_offsets_sql",
           "insert_rows_sql", "move_offsets", "offsets_name_problem", "offsets_table",
           "read_offsets"]
