"""Merging inside the service: every ``merge.interval_s``, and once more after ``--drain``.

The merge runs on the process's SparkActor thread (the one the spark sinks append on,
passed in by the owner of the process's resources: ``kstage run``'s lifecycle), so
appends of this process wait while a table is merged: the sinks' writes take longer,
workers' pipelines fill up and fetching pauses (backpressure; nothing is dropped). A
failed merge is logged with the table and counted (``kstage_merge_failures``); the next
interval tries again. Tables are merged one at a time. Other processes may merge the
same tables at the same time (each merge is idempotent and retried when its commit races
another's, see :mod:`actors.tables.merge`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from actors.metrics import Metrics
from actors.sinks.spark.actor import SparkActor
from actors.tables.merge import MergeError, MergeResult, merge_table, plan
from processors.base import Processor
from settings.models import Settings

logger = logging.getLogger(__name__)


async def merge_all(settings: Settings, processors: Mapping[str, type[Processor]],
                    actor: SparkActor, metrics: Metrics | None = None,
                    ) -> tuple[list[MergeResult], int]:
    """Merge every spark staging table once on ``actor`` (``processors``: the
    configuration's classes by name, as the master resolved them): the results, and how
    many tables failed (each logged and counted; the other tables are still merged)."""
    results, failed = [], 0
    for item in plan(settings, processors):
        started = time.monotonic()
        try:
            result = await merge_table(actor, item)
        except MergeError as exc:
            logger.error("merge: %s", exc)
            failed += 1
            if metrics is not None:
                metrics.merge_failures.labels(item.table).inc()
            continue
        results.append(result)
        if metrics is not None and not result.skipped:
            metrics.merge_seconds.labels(item.table).observe(time.monotonic() - started)
            metrics.merge_last_success.labels(item.table).set(time.time())
            metrics.merge_final_rows.labels(item.table).set(result.final_rows)
    return results, failed


async def merge_periodically(settings: Settings, processors: Mapping[str, type[Processor]],
                             actor: SparkActor, metrics: Metrics | None = None) -> None:
    """Merge every ``settings.merge.interval_s`` seconds until cancelled."""
    interval = settings.merge.interval_s
    if interval is None:
        return
    logger.info("merge: every %gs into the final tables of %s", interval,
                ", ".join(p.table for p in plan(settings, processors)))
    while True:
        await asyncio.sleep(interval)
        await merge_all(settings, processors, actor, metrics)


__all__ = ["merge_all", "merge_periodically"]
