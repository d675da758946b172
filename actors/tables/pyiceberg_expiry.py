"""Snapshot expiry of the staging tables pyiceberg appends to, without a JVM.

With ``spark.appends: pyiceberg`` a process starts no JVM, so the maintenance of
``spark.maintenance.every_s`` (Spark's procedures) is off unless that is set. The staging
tables' snapshots would then pile up for as long as the service runs: about one a second
once caught up, and every append costs more with each snapshot kept (pyiceberg computes and
writes the whole metadata, every snapshot in it, at each commit). So when ``every_s`` is
not set, ``kstage run`` expires them here, every 60 s
(:meth:`~settings.lakehouse.SparkSettings.pyiceberg_expiry`):
each staging table of a topic entry by the process holding partition 0 of its topic
(:func:`~actors.tables.maintenance_loop.holder`), on the process's pyiceberg thread
(:class:`~actors.sinks.spark.pyiceberg_appends.Lake`: between two appends, never beside
one), by the rule of ``kstage tables maintain`` (:mod:`actors.tables.expiry`): older than
``snapshot_max_age_s`` (60 s unless set: no file is deleted, below, so the age protects
no reader, and each snapshot kept costs every append ~0.1 ms of CPU, more beside a busy
event loop), keeping the newest ``snapshot_min_keep``, and the staging snapshot the final
table last merged through with everything after it (the next merge reads the appends
after it). The metadata then holds about two minutes of commits, however long the
service runs.

What differs from Spark's ``expire_snapshots``:

* Only the metadata loses the snapshots (pyiceberg's ``ExpireSnapshots``, one commit of no
  data); no file is deleted. While a staging table only gets appends, every data file is
  still in the current snapshot; the expired snapshots' manifest lists (a few kB each)
  stay until ``kstage tables maintain`` removes orphan files older than
  ``orphan_min_age_s``. A reader whose query was planned on an expired snapshot still reads
  its files.
* Kafka's committed offsets are not read: every append carries every partition's offset
  into its own snapshot (:func:`~actors.sinks.spark.iceberg.carried`), so the current
  snapshot, always kept, holds them all. When it does not (another tool's commit recorded
  none), nothing is expired and the log says so: ``kstage tables maintain`` records them
  again (:func:`~actors.tables.expiry.missing`).

A failure (the catalog down, another writer's commit in between) is logged with the table,
counted in ``kstage_maintenance_failures{table}`` and tried again at the next interval; the
appends go on. pyiceberg is imported only inside functions.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from actors.metrics import Metrics
from actors.sinks.spark.pyiceberg_appends import Lake
from actors.sinks.spark.pyiceberg_transaction import transaction
from actors.tables.expiry import Keep, bound, missing
from actors.tables.maintenance_loop import Statuses, holder
from actors.tables.merge import final_name, spark_sinks
from actors.tables.merge_job import TablePlan
from actors.tables.snapshots import Snapshot, from_metadata, merged_through
from processors.base import Processor
from settings.models import Settings, SparkSettings

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Expired:
    """One table's expiry: its snapshots before, how many went, and why none went when
    that was the rule's answer (``not_expired``)."""

    table: str
    before: int
    expired: int
    not_expired: str = ""


def staging_tables(settings: Settings, processors: Mapping[str, type[Processor]],
                   ) -> list[TablePlan]:
    """The staging tables of the spark sinks of the topic entries
    (:func:`~actors.tables.merge.spark_sinks`), each with its final table's name and the
    topics feeding it: also those the merge leaves alone (staging only: columns from the
    writer schemas and no key), whose snapshots pile up all the same."""
    topics: dict[str, list[str]] = {}
    for topic, _cls, table in spark_sinks(settings, processors):
        if table:
            topics.setdefault(table, []).append(topic.topic)
    return [TablePlan(table, final_name(table), (), (), tuple(sorted(set(feeding))))
            for table, feeding in sorted(topics.items())]


def history(loaded: Any) -> list[Snapshot]:
    """The current history (newest first) of the pyiceberg table ``loaded``, read as
    ``kstage tables maintain`` reads a ``metadata.json`` (:func:`snapshots.from_metadata`)."""
    current = loaded.metadata.current_snapshot_id
    found = []
    for snapshot in loaded.metadata.snapshots:
        summary = snapshot.summary
        found.append({
            "snapshot-id": snapshot.snapshot_id,
            "parent-snapshot-id": snapshot.parent_snapshot_id,
            "timestamp-ms": snapshot.timestamp_ms,
            "summary": ({"operation": summary.operation.value, **summary.additional_properties}
                        if summary is not None else {})})
    return from_metadata({"current-snapshot-id": current, "snapshots": found})


def _merged(lake: Lake, final: str) -> int | None:
    """Lake thread: the staging snapshot the final table's last merge read through (None:
    no final table yet, or no merge recorded in it)."""
    from pyiceberg.exceptions import NoSuchTableError  # only with appends: pyiceberg

    try:
        loaded = lake.table(final)
    except NoSuchTableError:
        return None
    last = merged_through(history(loaded))
    return None if last is None else last.merged


def expire(lake: Lake, settings: SparkSettings, item: TablePlan, max_age_s: float,
           now_ms: int | None = None) -> Expired:
    """Lake thread: expire the snapshots of ``item``'s staging table the rule lets go (the
    module doc), those older than ``max_age_s``. Raises what the catalog raised."""
    loaded = lake.table(item.table)
    found = history(loaded)
    before = len(loaded.metadata.snapshots)
    if missing(found):
        return Expired(item.table, before, 0, "its current snapshot does not record every "
                       "partition's offset (another tool's commit?): `kstage tables "
                       "maintain` records them again")
    keeps: list[Keep] = []
    merged = _merged(lake, item.final_table)
    if merged is not None:
        keeps.append(Keep(merged, f"the final table {item.final_table} merged through it"))
    where = bound(found, keeps, int(time.time() * 1000) if now_ms is None else now_ms,
                  max_age_s, settings.maintenance.snapshot_min_keep)
    if where.expires == 0:
        return Expired(item.table, before, 0)
    going = [snapshot.id for snapshot in found[len(found) - where.expires:]]
    expire_ids(loaded, going)
    return Expired(item.table, before, len(going))


def expire_ids(loaded: Any, ids: list[int]) -> None:
    """Lake thread: one commit of the pyiceberg table ``loaded`` that expires the
    snapshots ``ids``, in kstage's transaction (:mod:`~actors.sinks.spark.pyiceberg_transaction`:
    the table metadata computed once per state). pyiceberg's
    ``maintenance.expire_snapshots()`` reads its plain transaction's metadata, a deep copy
    of every snapshot, twice per snapshot expired: 100 of 200 took 3-5 s on the appends'
    thread beside a busy event loop, during which no append ran (freshness p99 windows of
    3.6-6 s every minute at 9 000 events/s)."""
    from pyiceberg.table.update.snapshot import ExpireSnapshots  # only with pyiceberg

    with transaction(loaded) as expiring:
        ExpireSnapshots(transaction=expiring).by_ids(ids).commit()


async def expire_periodically(settings: Settings, processors: Mapping[str, type[Processor]],
                              lake: Lake, every: float, max_age_s: float,
                              metrics: Metrics | None = None,
                              statuses: Statuses | None = None) -> None:
    """Every ``every`` seconds (the first round one interval after the start), expire the
    snapshots older than ``max_age_s`` of each staging table, until cancelled; only the
    tables this process holds partition 0 of, given its workers' ``statuses``."""
    owned: Callable[[TablePlan], bool] = (lambda _: True) if statuses is None \
        else holder(statuses)
    plans = staging_tables(settings, processors)
    if not plans:
        return
    maintenance = settings.spark.maintenance
    logger.info("maintenance: every %gs, the snapshots of the staging tables pyiceberg "
                "appends to older than %gs expire (keeping the newest %d and what the "
                "merge needs; no JVM)", every, max_age_s, maintenance.snapshot_min_keep)
    while True:
        await asyncio.sleep(every)
        for item in plans:
            if not owned(item):
                continue
            try:
                done = await lake.call(functools.partial(expire, lake, settings.spark, item,
                                                         max_age_s))
            except Exception as exc:  # noqa: BLE001 - the service goes on; next interval
                logger.error("maintenance: expiry of %s FAILED (tried again in %gs): %s: %s",
                             item.table, every, type(exc).__name__, exc)
                if metrics is not None:
                    metrics.maintenance_failures.labels(item.table).inc()
                continue
            if done.not_expired:
                logger.warning("maintenance: %s: expired no snapshot: %s", item.table,
                               done.not_expired)
                continue
            logger.info("maintenance: %s: expired %d of %d snapshots (pyiceberg)",
                        item.table, done.expired, done.before)
            if metrics is not None:
                metrics.maintenance_last_success.labels(item.table).set(time.time())


__all__ = ["Expired", "expire", "expire_ids", "expire_periodically", "history"]
