"""What each system landed, read from its Iceberg table through the catalog (pyiceberg: an
engine none of the systems uses to write).

Every system writes ``kstage.<table>`` of a SQLite JDBC catalog beside a local warehouse
(``<warehouse>/catalog.db``), kstage's default layout, so one reader serves all three:

* :func:`landed`: rows, distinct Kafka offsets, data files, and when (the committing
  process's clock, ``timestamp-ms`` of the snapshot) the table first held ``n`` rows:
  the end of a system's timed window, counted in the table, not in a log;
* :func:`layout`: the columns (name, type, required) and the partition spec, to check
  that every system wrote kstage's staging layout;
* :func:`create_like`: a new table with another table's schema, spec and properties (the
  Kafka Connect run's table, made like kstage's before the connector starts).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

NAMESPACE = "kstage"  # kstage's default catalog name and namespace


def catalog(warehouse: Path, create: bool = False) -> Any:
    """The run's SQLite JDBC catalog (``create``: make its tables if the file is new)."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(NAMESPACE, uri=f"sqlite:///{warehouse / 'catalog.db'}",
                      warehouse=f"file://{warehouse}",
                      init_catalog_tables="true" if create else "false")


@dataclass(frozen=True)
class Landed:
    """A table read back whole."""

    rows: int
    offsets: int  # distinct _offset values
    first: int  # lowest _offset
    last: int  # highest _offset
    data_files: int  # in the current snapshot
    snapshots: int
    full_at: float | None  # wall clock (s) of the first snapshot holding >= n rows


def landed(warehouse: Path, table: str, n: int) -> Landed:
    """Read ``table`` back: see :class:`Landed`."""
    import pyarrow.compute as pc

    tbl = catalog(warehouse).load_table(f"{NAMESPACE}.{table}")
    offsets = tbl.scan(selected_fields=("_offset",)).to_arrow().column("_offset")
    full_at = None
    for snap in sorted(tbl.snapshots(), key=lambda s: s.timestamp_ms):
        total = snap.summary.get("total-records") if snap.summary is not None else None
        if total is not None and int(total) >= n:
            full_at = snap.timestamp_ms / 1000
            break
    files = len(list(tbl.scan().plan_files()))
    return Landed(rows=len(offsets), offsets=len(pc.unique(offsets)),
                  first=pc.min(offsets).as_py(), last=pc.max(offsets).as_py(),
                  data_files=files, snapshots=len(tbl.snapshots()), full_at=full_at)


def total_rows(warehouse: Path, table: str) -> int:
    """The rows of the table's current snapshot (its summary), 0 before its first."""
    try:
        snap = catalog(warehouse).load_table(f"{NAMESPACE}.{table}").current_snapshot()
    except Exception:  # noqa: BLE001 - the catalog file or the table not there yet
        return 0
    total = None if snap is None or snap.summary is None else snap.summary.get("total-records")
    return 0 if total is None else int(total)


def layout(warehouse: Path, table: str) -> tuple[list[tuple[str, str, bool]], list[str]]:
    """The table's columns (name, type, required) and its partition fields."""
    tbl = catalog(warehouse).load_table(f"{NAMESPACE}.{table}")
    schema = tbl.schema()
    columns = [(f.name, str(f.field_type), f.required) for f in schema.fields]
    parts = [f"{f.transform}({schema.find_column_name(f.source_id)})"
             for f in tbl.spec().fields]
    return columns, parts


def create_like(source: Path, target: Path, table: str) -> None:
    """Create ``table`` in ``target``'s catalog with the schema, partition spec and
    properties of the same table in ``source``'s (the catalog file is made if new)."""
    model = catalog(source).load_table(f"{NAMESPACE}.{table}")
    target.mkdir(parents=True, exist_ok=True)
    cat = catalog(target, create=True)
    cat.create_namespace_if_not_exists(NAMESPACE)
    cat.create_table(f"{NAMESPACE}.{table}", schema=model.schema(),
                     partition_spec=model.spec(), properties=dict(model.properties))
