"""A JDBC staging table's SQL names, DDL and checks: its qualified name
(:func:`qualified`), its ``CREATE TABLE`` (:func:`create_table_sql`), what makes an
existing table unfit (:func:`table_mismatches`), and the check of a value before it is
written (:func:`pg_check`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actors.sinks.jdbc_json import jsonb_text
from actors.sinks.jdbc_upsert import key_constraint
from actors.sinks.table.columns import COORDINATES, INGESTED_AT, column_kind
from actors.sinks.table.rows import check
from processors.base import Column
from settings.identifiers import IDENTIFIER


def table_parts(table: str) -> tuple[str, ...]:
    """The parts of ``name`` or ``schema.name`` (ValueError if not plain identifiers)."""
    parts = tuple(table.split("."))
    if len(parts) > 2 or not all(IDENTIFIER.match(p) for p in parts):
        raise ValueError(f"jdbc sink table {table!r} is not `name` or `schema.name` made of "
                         "plain identifiers")
    return parts


def qualified(table: str) -> str:
    """``table`` quoted for SQL."""
    return ".".join(f'"{p}"' for p in table_parts(table))


def create_table_sql(table: str, columns: Sequence[Column], key: Sequence[str] = ()) -> str:
    """The ``CREATE TABLE IF NOT EXISTS`` of a staging table with the processor's
    ``columns`` (the Kafka coordinates and ``_ingested_at`` follow them); with a ``key``
    (``mode: upsert``), its constraint (:func:`~actors.sinks.jdbc_upsert.key_constraint`)."""
    cols = ", ".join(f'"{c.name}" {column_kind(c.type).postgres}'
                     + ("" if c.nullable else " NOT NULL")
                     for c in (*columns, *COORDINATES, INGESTED_AT))
    if key:
        cols += ", " + key_constraint(key, columns)
    return f"CREATE TABLE IF NOT EXISTS {qualified(table)} ({cols})"


def table_mismatches(table: str, existing: Sequence[tuple[str, str, bool, bool]],
                     declared: Sequence[Column]) -> list[str]:
    """What makes an existing table unfit for the ``declared`` columns (coordinates and
    ``_ingested_at`` included). ``existing``: (name, format_type, NOT NULL, has default)."""
    found = {name: (kind, notnull, default) for name, kind, notnull, default in existing}
    errors = []
    missing = [c for c in declared if c.name not in found]
    if missing:
        added = ", ".join(f'ADD COLUMN "{c.name}" {column_kind(c.type).postgres}'
                          for c in missing if c.nullable)
        errors.append(f"table {table} has no column(s) {', '.join(c.name for c in missing)}"
                      + (f" (ALTER TABLE {table} {added} adds the nullable ones)"
                         if added else ""))
    for column in declared:
        if column.name not in found:
            continue
        kind, notnull, _ = found[column.name]
        if not kind.startswith(column_kind(column.type).postgres_found):
            errors.append(f"table {table} column {column.name!r} is {kind}, the processor "
                          f"declares {column.type} ({column_kind(column.type).postgres})")
        if notnull and column.nullable:
            errors.append(f"table {table} column {column.name!r} is NOT NULL but the "
                          "processor declares it nullable")
    names = {c.name for c in declared}
    extra = [name for name, (_, notnull, default) in found.items()
             if name not in names and notnull and not default]
    if extra:
        errors.append(f"table {table} has NOT NULL column(s) without a default the sink "
                      f"does not write: {', '.join(extra)}")
    return errors


_WIDENS = (("integer", "bigint"), ("real", "double precision"))


def evolution_sql(table: str, existing: Sequence[tuple[str, str, bool, bool]],
                  declared: Sequence[Column]) -> list[tuple[str, str]]:
    """The ``ALTER TABLE`` statements, each with what it does, that make an existing
    table take the ``declared`` columns of a processor whose columns come from writer
    schemas: a column it lacks added (nullable), a column widened as the writer schema
    widened it (``integer`` -> ``bigint``, ``real`` -> ``double precision``, a
    ``numeric``'s precision at the same scale). Anything else is left to
    :func:`table_mismatches` to refuse."""
    found = {name: kind for name, kind, _, _ in existing}
    out = []
    for column in declared:
        kind = column_kind(column.type)
        now = found.get(column.name)
        if now is None:
            out.append((f'ALTER TABLE {qualified(table)} ADD COLUMN IF NOT EXISTS '
                        f'"{column.name}" {kind.postgres}', f"added {column.name}"))
        elif not now.startswith(kind.postgres_found) and (
                (now, kind.postgres.lower()) in _WIDENS
                or (now.startswith("numeric(") and kind.postgres.startswith("NUMERIC(")
                    and now.split(",")[-1] == kind.postgres.split(",")[-1])):
            out.append((f'ALTER TABLE {qualified(table)} ALTER COLUMN "{column.name}" TYPE '
                        f"{kind.postgres}", f"widened {column.name} to {column.type}"))
    return out


def pg_check(value: Any, column: Column) -> Any:
    """:func:`~actors.sinks.table.rows.check`, and no NUL in text (PostgreSQL cannot store
    it); a nested value becomes its ``jsonb`` text (:func:`~actors.sinks.jdbc_json.jsonb_text`)."""
    value = check(value, column)
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("contains a NUL character (PostgreSQL text cannot store it)")
    node = column_kind(column.type).node
    if node is not None and value is not None:
        return jsonb_text(value, node)
    return value
