"""The Iceberg tables a test's ``kstage`` wrote, read without Spark: pyiceberg through the
same SQLite JDBC catalog (``<warehouse>/catalog.db``, the embedded default), so a test
reads what another engine would, and starts no JVM of its own."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from sqlalchemy.exc import OperationalError

NAMESPACE = "kstage"


def catalog(warehouse: Path, name: str = "kstage") -> SqlCatalog:
    """The warehouse's catalog (the SQLite file kstage's embedded default keeps there);
    pyiceberg never creates the catalog's tables (kstage's Spark catalog does)."""
    return SqlCatalog(name, uri=f"sqlite:///{warehouse / 'catalog.db'}",
                      warehouse=f"file://{warehouse}", init_catalog_tables="false")


def _table(warehouse: Path, table: str) -> Table | None:
    """``table`` of the warehouse's catalog, None while it (or the catalog) does not exist."""
    if not (warehouse / "catalog.db").exists():
        return None
    try:
        return catalog(warehouse).load_table(f"{NAMESPACE}.{table}")
    except (NoSuchTableError, OperationalError):  # no table, or no catalog tables yet
        return None


def rows(warehouse: Path, table: str, columns: tuple[str, ...] = ("*",)) -> list[dict[str, Any]]:
    """Every row of ``table`` (empty when it does not exist yet)."""
    loaded = _table(warehouse, table)
    if loaded is None:
        return []
    return loaded.scan(selected_fields=columns).to_arrow().to_pylist()


def coordinates(warehouse: Path, table: str) -> Counter[tuple[int, int]]:
    """How often each (Kafka partition, offset) is in ``table``."""
    return Counter((r["_kafka_partition"], r["_offset"])
                   for r in rows(warehouse, table, ("_kafka_partition", "_offset")))


def summaries(warehouse: Path, table: str) -> list[dict[str, str]]:
    """The snapshot summaries of ``table``, oldest first."""
    loaded = _table(warehouse, table)
    if loaded is None:
        return []
    found = sorted(loaded.snapshots(), key=lambda s: s.timestamp_ms)
    return [dict(s.summary.additional_properties) if s.summary else {} for s in found]


def offsets(warehouse: Path, table: str, group: str, topic: str) -> dict[int, int]:
    """Per partition, the highest offset the table's snapshots record for ``group``."""
    found: dict[int, int] = {}
    for summary in summaries(warehouse, table):
        recorded = json.loads(summary.get("kstage.offsets", "{}"))
        for partition, offset in recorded.get(group, {}).get(topic, {}).items():
            found[int(partition)] = max(found.get(int(partition), 0), int(offset))
    return found
