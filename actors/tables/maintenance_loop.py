"""Table maintenance inside the service: every ``spark.maintenance.every_s``.

It runs on the process's SparkActor thread (the one the spark sinks append on, like the
merge loop; passed in by the owner of the process's resources), so the sinks' appends
wait while a table is compacted or its snapshots expired: workers' pipelines fill up and
fetching pauses (backpressure; nothing is dropped). A table whose maintenance fails is
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
from collections.abc import Mapping

from actors.metrics import Metrics
from actors.sinks.spark.actor import SparkActor
from actors.tables.maintenance import Committed, Maintained, maintain
from processors.base import Processor
from settings.models import Settings

logger = logging.getLogger(__name__)


async def maintain_all(settings: Settings, processors: Mapping[str, type[Processor]],
                       committed: Committed, actor: SparkActor,
                       metrics: Metrics | None = None) -> list[Maintained]:
    """Maintain every spark table once; failures are logged and counted, never raised."""
    try:
        results = await maintain(settings, processors, committed, actor=actor)
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
                                metrics: Metrics | None = None) -> None:
    """Maintain every ``spark.maintenance.every_s`` seconds until cancelled."""
    every = settings.spark.maintenance.every_s
    if every is None:
        return
    logger.info("maintenance: every %gs of the spark staging and final tables", every)
    while True:
        await asyncio.sleep(every)
        await maintain_all(settings, processors, committed, actor, metrics)


__all__ = ["maintain_all", "maintain_periodically"]
