"""The Parquet warehouse of an earlier kstage version: found, repaired, moved aside.

Before Iceberg, a spark sink wrote its staging table as plain Parquet under the
warehouse directory, ``<warehouse>/<table>/ingest_date=D/writer_id=W/*.parquet`` (columns:
the processor's, then ``_topic, _partition, _offset, _timestamp, _ingested_at``), and
``kstage merge`` wrote each final table as Parquet at ``<warehouse>/<final>`` (the same
columns, in ``<column>=<value>`` directories when the processor declares a final
partition), recording what it had merged in ``<warehouse>/_merge_state/<final>.json``
(``merged_files``: the staging files folded, relative to the staging directory) and
swapping results in through ``<warehouse>/_merge_work``.

:func:`find` lists such directories (``kstage validate`` and ``run`` refuse to start
while there are any: :func:`problems`); ``kstage tables migrate``
(:mod:`actors.tables.migrate`) imports them into Iceberg tables and then moves them
into ``<warehouse>/_pre_iceberg/`` (:func:`move_aside`): never deleted. Only a local
warehouse can hold them (the old version refused any other). Nothing here imports
pyspark.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from actors.sinks.spark.catalog import is_local, warehouse_location
from settings.models import Settings, SparkSettings

logger = logging.getLogger(__name__)

ASIDE = "_pre_iceberg"
"""The directory of the warehouse the migrated old directories are moved into."""
STATE = "_merge_state"
WORK = "_merge_work"


def parquet_files(directory: Path) -> list[str]:
    """The committed Parquet files under an old table directory, relative to it, sorted
    (files a write was staging sit under ``_temporary`` and are not listed)."""
    found = []
    for path in directory.rglob("*.parquet"):
        relative = path.relative_to(directory)
        if not any(part.startswith(("_", ".")) for part in relative.parts):
            found.append(relative.as_posix())
    return sorted(found)


def _is_staging(directory: Path) -> bool:
    return any(directory.glob("ingest_date=*/writer_id=*"))


def _is_final(directory: Path) -> bool:
    """Parquet files at the top or in ``<column>=<value>`` directories, and no Iceberg
    ``metadata`` directory (an Iceberg namespace or table directory is never taken)."""
    if (directory / "metadata").is_dir() or _is_staging(directory):
        return False
    return any(directory.glob("*.parquet")) or any(directory.glob("*=*/*.parquet"))


@dataclass(frozen=True, slots=True)
class MergeState:
    """An old ``_merge_state/<final>.json``: the staging table and the files merged."""

    final: str
    staging: str
    merged_files: frozenset[str]


@dataclass(frozen=True, slots=True)
class Legacy:
    """The old directories of one warehouse (empty lists: none).

    Attributes:
        root: the warehouse directory.
        staging, finals: old staging and final table directories.
        states: the old merge's records, by final table name.
        extra: ``_merge_state`` / ``_merge_work`` directories (moved aside last).
    """

    root: Path
    staging: list[Path] = field(default_factory=list)
    finals: list[Path] = field(default_factory=list)
    states: dict[str, MergeState] = field(default_factory=dict)
    extra: list[Path] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.staging or self.finals or self.extra)

    def names(self) -> list[str]:
        return [p.name for p in (*self.staging, *self.finals, *self.extra)]


def _states(root: Path) -> dict[str, MergeState]:
    found: dict[str, MergeState] = {}
    for path in sorted((root / STATE).glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            found[path.stem] = MergeState(path.stem, str(data["staging_table"]),
                                          frozenset(map(str, data.get("merged_files", ()))))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("tables: %s: unreadable merge state (%s): its final table is "
                           "migrated, its staging rows count as not merged yet", path, exc)
    return found


def find(settings: SparkSettings) -> Legacy | None:
    """The old directories of the warehouse of ``settings`` (None: not a local
    warehouse, or no such directory)."""
    if not is_local(settings):
        return None
    root = Path(warehouse_location(settings))
    if not root.is_dir():
        return None
    entries = sorted(p for p in root.iterdir()
                     if p.is_dir() and not p.name.startswith(("_", ".")))
    legacy = Legacy(root, [p for p in entries if _is_staging(p)],
                    [p for p in entries if _is_final(p)], _states(root),
                    [root / d for d in (STATE, WORK) if (root / d).is_dir()])
    return legacy if legacy else None


def problems(settings: Settings, config: str) -> Iterator[tuple[tuple[str, ...], str]]:
    """What ``validate`` and ``run`` refuse: old directories in the warehouse of a
    configuration with spark sinks (``config``: its file, named in the command to run)."""
    if not settings.uses_sink("spark"):
        return
    legacy = find(settings.spark)
    if legacy:
        yield ("spark", "warehouse"), (
            f"{legacy.root} holds tables of an earlier kstage version (Parquet, not "
            f"Iceberg): {', '.join(legacy.names())}; run `kstage tables migrate -c "
            f"{config}` to import them into their Iceberg tables (the old directories are "
            f"then moved to {legacy.root / ASIDE}, never deleted)")


def repair(root: Path) -> None:
    """Finish or undo the swaps an old merge left half done in ``_merge_work``, as the old
    version's next merge would have (without deleting anything): a final table moved to
    ``<final>.old`` and not replaced is put back; partitions moved to
    ``<final>.old-parts`` are put back where they were not replaced."""
    work = root / WORK
    if not work.is_dir():
        return
    for old in sorted(work.glob("*.old")):
        target = root / old.name.removesuffix(".old")
        if old.is_dir() and not target.exists():
            os.rename(old, target)
            logger.warning("tables: %s: put back from %s (an old merge stopped mid-swap)",
                           target, old)
    for parts in sorted(work.glob("*.old-parts")):
        target = root / parts.name.removesuffix(".old-parts")
        for part in sorted(p for p in parts.iterdir() if p.is_dir()):
            if not (target / part.name).exists():
                target.mkdir(exist_ok=True)
                os.rename(part, target / part.name)
                logger.warning("tables: %s: partition %s put back (an old merge stopped "
                               "mid-swap)", target, part.name)


def move_aside(root: Path, directory: Path) -> Path:
    """Move an old directory into ``<root>/_pre_iceberg/`` (a new name if taken)."""
    aside = root / ASIDE
    aside.mkdir(exist_ok=True)
    target = aside / directory.name
    if target.exists():
        target = aside / f"{directory.name}.{time.strftime('%Y%m%dT%H%M%S')}"
    shutil.move(str(directory), str(target))
    return target


__all__ = ["ASIDE", "Legacy", "MergeState", "find", "move_aside", "parquet_files",
           "problems", "repair"]
