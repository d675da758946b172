"""The Iceberg tables a test's ``kstage`` wrote in a local warehouse, read without Spark:
pyiceberg through the same SQLite JDBC catalog (``<warehouse>/catalog.db``, the embedded
default; :class:`tests.lake.IcebergReader`), so a test reads what another engine would,
and starts no JVM of its own."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from tests.lake import IcebergReader


def reader(warehouse: Path) -> IcebergReader:
    """A reader of the embedded default's catalog in ``warehouse``."""
    return IcebergReader({"warehouse": str(warehouse)})


def rows(warehouse: Path, table: str) -> list[dict[str, Any]]:
    """Every row of ``table`` (empty when it does not exist yet)."""
    return reader(warehouse).rows(table)


def coordinates(warehouse: Path, table: str) -> Counter[tuple[int, int]]:
    """How often each (Kafka partition, offset) is in ``table``."""
    return Counter((p, o) for (_, p, o), n in reader(warehouse).coordinates(table).items()
                   for _ in range(n))


def summaries(warehouse: Path, table: str) -> list[dict[str, str]]:
    """The snapshot summaries of ``table``, oldest first."""
    return reader(warehouse).summaries(table)


def offsets(warehouse: Path, table: str, group: str, topic: str) -> dict[int, int]:
    """Per partition, the highest offset the table's snapshots record for ``group``."""
    found: dict[int, int] = {}
    for summary in summaries(warehouse, table):
        recorded = json.loads(summary.get("kstage.offsets", "{}"))
        for partition, offset in recorded.get(group, {}).get(topic, {}).items():
            found[int(partition)] = max(found.get(int(partition), 0), int(offset))
    return found
