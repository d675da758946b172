"""The lakehouse table jobs on the spark sinks' Iceberg tables: the merge of staging tables
into final tables (:mod:`.merge`, :mod:`.merge_job`, :mod:`.merge_fold`,
:mod:`.final_table`, :mod:`.final_deletions`), their maintenance (:mod:`.maintenance`,
:mod:`.expiry`, :mod:`.snapshots`; without a JVM, :mod:`.pyiceberg_expiry` and
:mod:`.pyiceberg_fold`), the
migration of an earlier version's Parquet tables (:mod:`.migrate`, :mod:`.legacy`), the
reset of the offsets a table holds (:mod:`.offset_resets`), and the loops that run the
merge and the maintenance in ``kstage run`` (:mod:`.merge_loop`,
:mod:`.maintenance_loop`). They build on the sink (:mod:`actors.sinks.spark`), which
never imports them.

This module is the entry the shell (``service/``) reaches them through: the names below,
each imported on first use (PEP 562), so that ``kstage --help`` loads none of them and
``kstage run`` loads the merge only when it merges. A name that is also a module's here
is exported under another one (``merge_tables``, ``migrate_tables``), as are the generic
names of ``snapshots``, ``final_deletions`` and ``legacy``.
"""

from __future__ import annotations

import typing as _typing

from actors.lazy_exports import exports as _exports

if _typing.TYPE_CHECKING:
    from actors.tables.final_deletions import applies as deletions_apply
    from actors.tables.final_deletions import deletions_name
    from actors.tables.legacy import problems as legacy_problems
    from actors.tables.maintenance import Committed, MaintenanceError, maintain, on_spark
    from actors.tables.maintenance_loop import maintain_periodically
    from actors.tables.merge import MergeError, TablePlan, final_name, plan
    from actors.tables.merge import merge as merge_tables
    from actors.tables.merge_loop import merge_all, merge_periodically
    from actors.tables.migrate import MigrationError
    from actors.tables.migrate import migrate as migrate_tables
    from actors.tables.offset_resets import PyIcebergOffsets, SparkOffsets, TableOffsets
    from actors.tables.pyiceberg_expiry import expire_periodically as expire_pyiceberg_snapshots
    from actors.tables.pyiceberg_fold import fold_periodically as fold_pyiceberg_tables
    from actors.tables.snapshots import content as table_content
    from actors.tables.snapshots import exists as table_exists
    from actors.tables.snapshots import history as snapshot_history
    from actors.tables.snapshots import merged_through
    from actors.tables.snapshots import offsets as snapshot_offsets

_HOME = {
    "Committed": "actors.tables.maintenance",
    "MaintenanceError": "actors.tables.maintenance",
    "MergeError": "actors.tables.merge",
    "MigrationError": "actors.tables.migrate",
    "PyIcebergOffsets": "actors.tables.offset_resets",
    "SparkOffsets": "actors.tables.offset_resets",
    "TableOffsets": "actors.tables.offset_resets",
    "TablePlan": "actors.tables.merge",
    "deletions_apply": "actors.tables.final_deletions:applies",
    "deletions_name": "actors.tables.final_deletions",
    "expire_pyiceberg_snapshots": "actors.tables.pyiceberg_expiry:expire_periodically",
    "final_name": "actors.tables.merge",
    "fold_pyiceberg_tables": "actors.tables.pyiceberg_fold:fold_periodically",
    "legacy_problems": "actors.tables.legacy:problems",
    "maintain": "actors.tables.maintenance",
    "maintain_periodically": "actors.tables.maintenance_loop",
    "merge_all": "actors.tables.merge_loop",
    "merge_periodically": "actors.tables.merge_loop",
    "merge_tables": "actors.tables.merge:merge",
    "merged_through": "actors.tables.snapshots",
    "migrate_tables": "actors.tables.migrate:migrate",
    "on_spark": "actors.tables.maintenance",
    "plan": "actors.tables.merge",
    "snapshot_history": "actors.tables.snapshots:history",
    "snapshot_offsets": "actors.tables.snapshots:offsets",
    "table_content": "actors.tables.snapshots:content",
    "table_exists": "actors.tables.snapshots:exists",
}
"""Where each name of the entry lives (``module:attribute`` when exported under another
name)."""

__getattr__ = _exports(__name__, _HOME)

__all__ = [
    "Committed",
    "MaintenanceError",
    "MergeError",
    "MigrationError",
    "PyIcebergOffsets",
    "SparkOffsets",
    "TableOffsets",
    "TablePlan",
    "deletions_apply",
    "deletions_name",
    "expire_pyiceberg_snapshots",
    "final_name",
    "fold_pyiceberg_tables",
    "legacy_problems",
    "maintain",
    "maintain_periodically",
    "merge_all",
    "merge_periodically",
    "merge_tables",
    "merged_through",
    "migrate_tables",
    "on_spark",
    "plan",
    "snapshot_history",
    "snapshot_offsets",
    "table_content",
    "table_exists",
]
