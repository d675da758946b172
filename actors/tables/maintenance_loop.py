"""Table maintenance inside the service: every ``spark.maintenance.every_s`` (600 s by
default with ``appends: spark``; see :meth:`SparkSettings.maintenance_every_s`).

Each table is maintained by one process of a consumer group, not by every one: the
process whose worker holds partition 0 of the first topic feeding it (:func:`holder`).
Every process of a deployment can keep the default; a rebalance moves the table with the
partition (two processes maintaining one table for a moment is harmless: a compaction
that lost the race to another is planned again, expiry keeps what either needs).

It runs on the second thread of the process's SparkActor (passed in by the owner of the
process's resources), beside the spark sinks' appends, which go on while a table is
compacted or its snapshots expired (:meth:`SparkActor.call_aside`; a merge's commit waits
for it). A table whose maintenance fails is
logged with the table and what failed, counted (``kstage_maintenance_failures``) and
tried again at the next interval; the loop itself never stops the service. A table whose
snapshots could not be expired because Kafka's committed offsets could not be read is
logged as a warning (the rest of its maintenance was done; expiry is tried again at the
next interval).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from actors.metrics import Metrics
from actors.sinks.spark.actor import SparkActor
from actors.tables.fold import fold_periodically
from actors.tables.maintenance import Committed, Maintained, maintain
from actors.tables.merge_job import TablePlan
from actors.worker_status import WorkerStatus
from processors.base import Processor
from settings.models import Settings

logger = logging.getLogger(__name__)


Statuses = Callable[[], Sequence[WorkerStatus]]
"""The process's workers now (:meth:`Master.snapshot`)."""


def holder(statuses: Statuses) -> Callable[[TablePlan], bool]:
    """Whether this process maintains a table: one of its workers holds partition 0 of
    the first (by name) topic feeding it. Each change is logged (at the first round: what
    this process maintains and what it leaves to another)."""
    decided: dict[str, bool] = {}

    def owned(item: TablePlan) -> bool:
        first = min(item.topics)
        workers = [status for status in statuses() if status["topic"] == first]
        mine = any(p["partition"] == 0 for status in workers for p in status["partitions"])
        if not mine and not any(status["joined"] for status in workers):
            return False  # not joined yet: undecided (nothing said, nothing maintained)
        if decided.get(item.table) != mine:
            decided[item.table] = mine
            logger.info("maintenance: table %s: %s partition 0 of topic %s", item.table,
                        "maintained here, this process holds" if mine
                        else "left to the process holding", first)
        return mine
    return owned


async def maintain_all(settings: Settings, processors: Mapping[str, type[Processor]],
                       committed: Committed, actor: SparkActor,
                       metrics: Metrics | None = None,
                       owned: Callable[[TablePlan], bool] | None = None) -> list[Maintained]:
    """Maintain every spark table once (those ``owned`` says, when given); failures are
    logged and counted, never raised."""
    try:
        results = await maintain(settings, processors, committed, actor=actor, owned=owned,
                                 aside=True)
    except Exception as exc:  # noqa: BLE001 - the service goes on; the next interval retries
        logger.error("maintenance: failed before any table: %s: %s", type(exc).__name__, exc)
        if metrics is not None:
            metrics.maintenance_failures.labels("*").inc()
        return []
    for result in results:
        lines = result.summary(settings.spark.maintenance)
        if not result.exists:
            logger.debug("maintenance: %s", lines[0])
            continue
        if result.error:
            logger.error("maintenance: %s", " ".join(lines))
            if metrics is not None:
                metrics.maintenance_failures.labels(result.table).inc()
            continue
        if result.not_expired:
            logger.warning("maintenance: %s", lines[0])
        else:
            logger.info("maintenance: %s", " ".join(lines))
        if metrics is not None:
            metrics.maintenance_last_success.labels(result.table).set(time.time())
    return results


async def maintain_periodically(settings: Settings, processors: Mapping[str, type[Processor]],
                                committed: Committed, actor: SparkActor,
                                metrics: Metrics | None = None,
                                statuses: Statuses | None = None) -> None:
    """Maintain every ``spark.maintenance_every_s()`` seconds (the first round one
    interval after the start) and fold the staging tables as their small files grow
    (:mod:`actors.tables.fold`), until cancelled; only the tables this process holds
    partition 0 of, given its workers' ``statuses``."""
    every = settings.spark.maintenance_every_s()
    if every is None:
        return
    fold_files = settings.spark.maintenance.fold_files
    logger.info("maintenance: every %gs of the spark staging and final tables%s%s", every,
                f", and a fold of a staging table at {fold_files} more data files"
                if fold_files is not None else "",
                "; those whose topic's partition 0 this process holds" if statuses else "")
    left = settings.unplanned_spark_tables()
    if left:
        logger.warning("maintenance: the spark tables of %s are not maintained (only those "
                       "of topics named in topic entries are): run Iceberg's procedures on "
                       "them, or name their topics", ", ".join(left))
    owned = (lambda _: True) if statuses is None else holder(statuses)

    async def rounds() -> None:
        while True:
            await asyncio.sleep(every)
            await maintain_all(settings, processors, committed, actor, metrics, owned)

    await asyncio.gather(rounds(), fold_periodically(settings, processors, actor, owned,
                                                     metrics))


__all__ = ["Statuses", "holder", "maintain_all", "maintain_periodically"]
