"""The background fold: a staging table's small data files compacted beside its appends.

Caught up, a table gets an append (a data file) about every second, for freshness. Every
:data:`CHECK_S` the process reads how many data files the current snapshot of each staging
table it maintains has (the table's topic's partition 0 is held here:
:func:`~actors.tables.maintenance_loop.holder`); once that is
``spark.maintenance.fold_files`` more than after the table's last compaction, it compacts
the table (``rewrite_data_files``, binpack into files of about ``target_file_mb``, the
files under :data:`SMALL_PART` of it; a partition of at least ``min_input_files`` of
them) on the session's second thread (:meth:`SparkActor.call_aside`): the appends go on
meanwhile, and a table holds at most about ``fold_files`` small files over what its last
fold left.

Every row stays once: the rewrite replaces data files with files of the same rows, in
one Iceberg commit, which kstage's fence gives the table's current offsets (a commit
that records none carries them: docs/spark.md). A rewrite that lost the race with an
append is planned again on the new snapshot (up to ``ATTEMPTS`` times; the next check
tries again). A process killed mid-rewrite committed nothing of it: its files are
orphans, removed by the maintenance once older than ``orphan_min_age_s``. A failure (of
the count or of the fold) is logged with the table, counted in
``kstage_maintenance_failures{table}`` and tried again after a wait that doubles with
each failure in a row, from :data:`CHECK_S` to :data:`RETRY_MAX_S` (a catalog or a
storage down for an hour is not asked every 5 s); the first success ends it. The service
and the table's appends go on meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from actors.backoff import backoff_s
from actors.metrics import Metrics
from actors.sinks.spark.actor import SparkActor, short
from actors.sinks.spark.catalog import dotted
from actors.tables import snapshots
from actors.tables.maintenance import again_on_conflict, compact
from actors.tables.merge import plan
from actors.tables.merge_job import TablePlan
from processors.base import Processor
from settings.models import Settings, SparkSettings

logger = logging.getLogger(__name__)

CHECK_S = 5.0
"""How often the data files of each maintained staging table are counted (a read of its
current metadata)."""

RETRY_MAX_S = 300.0
"""The longest wait before a table whose folds keep failing is tried again."""

SMALL_PART = 16
"""A fold rewrites the files under ``target_file_mb / SMALL_PART`` (8 MiB of the default
128) and leaves the larger ones to the maintenance rounds' binpack (under 75 % of the
target): a fold's own output is rewritten by the next folds only until it reaches that
size, so a fold's work stays about the size of the small files it folds, not of the
table's day."""


class Superseded(Exception):
    """A fold whose files another writer folded or removed meanwhile (the member that
    maintained the table before, frozen past its session while it folded, or ``kstage
    tables maintain``): nothing of it was committed, and the next check plans again on
    what the table holds now. Not a failure: logged, neither counted nor waited out."""


@dataclass(frozen=True, slots=True)
class Folded:
    """One fold: the data files before, rewritten, written, and after; its seconds."""

    table: str
    before: int
    rewritten: int
    written: int
    after: int
    seconds: float


def due(files: int, after_last: int | None, fold_files: int) -> bool:
    """Whether a table of ``files`` data files is folded now: ``fold_files`` more than its
    last fold left (``after_last``; None: none yet here, counted from no file)."""
    return files - (after_last or 0) >= fold_files


def data_files(spark: Any, settings: SparkSettings, table: str) -> int:
    """Spark thread: the data files of the table's current snapshot (its summary's
    ``total-data-files``; 0 without the table or a snapshot), read through Iceberg's Java
    API without turning the table's metadata into JSON (it lists every snapshot)."""
    if not snapshots.exists(spark, settings, table):
        return 0
    loaded = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, dotted(settings, table))
    current = loaded.currentSnapshot()
    total = None if current is None else current.summary().get("total-data-files")
    return 0 if total is None else int(total)


def fold(spark: Any, settings: SparkSettings, table: str) -> Folded:
    """Spark thread beside the appends (:meth:`SparkActor.call_aside`): compact
    ``table``."""
    started = time.monotonic()
    before = data_files(spark, settings, table)
    smaller = settings.maintenance.target_file_mb * 1024 * 1024 // SMALL_PART
    rewritten, written = again_on_conflict(lambda: compact(spark, settings, table, smaller),
                                           "the fold", table)
    after = data_files(spark, settings, table)
    return Folded(dotted(settings, table), before, rewritten, written, after,
                  time.monotonic() - started)


@dataclass(frozen=True, slots=True)
class Due:
    """A fold that a table's check found due: ``run`` does it; ``detail`` ends the log's
    ``folding`` line."""

    run: Callable[[], Awaitable[Folded]]
    detail: str = ""


Check = Callable[[str, int | None], Awaitable[tuple[int, Due | None]]]
"""A table's check: given its name and the data files its last fold here left (None:
none yet), its data files now and the fold when one is due."""


async def fold_tables(tables: list[TablePlan], owned: Callable[[TablePlan], bool],
                      spark_settings: SparkSettings, check: Check,
                      metrics: Metrics | None, *, every: float, log: logging.Logger,
                      engine: str = "", forget: Callable[[str], object] | None = None,
                      ) -> None:
    """The background fold's loop, Spark's (:func:`fold_periodically`) and pyiceberg's
    (:mod:`actors.tables.pyiceberg_fold`): every ``every`` seconds, each table ``owned``
    says this process maintains is checked and folded when due, until cancelled. A failed
    check or fold is logged with the table (on ``log``), counted and tried again after a
    wait that doubles with each failure in a row, from ``every`` to :data:`RETRY_MAX_S`.
    ``engine`` ends the log's ``folded`` line; ``forget(name)``: the table is another
    process's now."""
    left: dict[str, int] = {}  # data files each table had after its last fold here
    failed: dict[str, int] = {}  # failures in a row of each table's checks or folds
    not_before: dict[str, float] = {}  # when a table that failed is tried again
    while True:
        await asyncio.sleep(every)
        for item in tables:
            name = item.table
            if not owned(item):
                left.pop(name, None)  # another process folds it now
                if forget is not None:
                    forget(name)
                continue
            if time.monotonic() < not_before.get(name, 0.0):
                continue  # its last check or fold failed: waiting out its backoff
            table = dotted(spark_settings, name)
            try:
                count, fold_due = await check(name, left.get(name))
                if metrics is not None:
                    metrics.table_data_files.labels(table).set(count)
                if fold_due is None:
                    failed.pop(name, None)  # read, nothing to fold: nothing failing
                    continue
                log.info("maintenance: folding %s (staging): %d data files, %d since its "
                         "last fold here%s", table, count, count - left.get(name, 0),
                         fold_due.detail)
                done = await fold_due.run()
            except Superseded as exc:
                failed.pop(name, None)
                log.info("maintenance: fold of %s superseded: %s; planned again at the "
                         "next check", table, exc)
                continue
            except Exception as exc:  # noqa: BLE001 - logged, counted, tried again
                failed[name] = failed.get(name, 0) + 1
                wait = backoff_s(failed[name] - 1, every, RETRY_MAX_S)
                not_before[name] = time.monotonic() + wait
                log.error("maintenance: fold of %s FAILED (%d in a row; tried again in "
                          "%.0fs): %s", table, failed[name], wait, short(exc))
                if metrics is not None:
                    metrics.maintenance_failures.labels(table).inc()
                continue
            failed.pop(name, None)
            left[name] = done.after
            if metrics is not None:
                metrics.table_folds.labels(done.table).inc()
                metrics.table_data_files.labels(done.table).set(done.after)
            log.info("maintenance: folded %s (staging): data files %d -> %d (rewrote %d "
                     "into %d, beside the appends, in %.1fs%s)", done.table, done.before,
                     done.after, done.rewritten, done.written, done.seconds, engine)


async def fold_periodically(settings: Settings, processors: Mapping[str, type[Processor]],
                            actor: SparkActor, owned: Callable[[TablePlan], bool],
                            metrics: Metrics | None = None) -> None:
    """Check every :data:`CHECK_S` and fold the staging tables ``owned`` says this process
    maintains, on the session's second thread, until cancelled (:func:`fold_tables`)."""
    spark_settings = actor.settings
    limit = spark_settings.maintenance.fold_files
    if limit is None:
        return
    try:
        tables = plan(settings, processors)  # the merge's (what the rounds maintain)
    except Exception as exc:  # noqa: BLE001 - the rounds log it at each interval
        logger.error("maintenance: no fold: the spark tables cannot be planned: %s", exc)
        return

    async def check(name: str, after_last: int | None) -> tuple[int, Due | None]:
        count = await actor.call_aside(lambda spark: data_files(spark, spark_settings, name))
        if not due(count, after_last, limit):
            return count, None
        return count, Due(lambda: actor.call_aside(
            lambda spark: fold(spark, spark_settings, name),
            f"the fold of {dotted(spark_settings, name)}"))

    await fold_tables(tables, owned, spark_settings, check, metrics, every=CHECK_S,
                      log=logger)


__all__ = ["CHECK_S", "RETRY_MAX_S", "SMALL_PART", "Check", "Due", "Folded", "Superseded",
           "data_files", "due", "fold", "fold_periodically", "fold_tables"]
