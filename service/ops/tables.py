"""``kstage tables show|maintain|migrate``: the Iceberg tables of the spark sinks.

* ``show``: per staging table of the configuration's spark sinks, its final table and
  the final table's deletions table (when its processor has a key and emits deletions):
  snapshots (how many, the current one and when it was committed), data files, rows,
  bytes, the Kafka offsets a staging table holds per (group, topic, partition), and the
  staging snapshot a final table was merged through (:func:`describe`, one SparkSession,
  from each table's metadata as the catalog holds it);
* ``maintain``: :func:`actors.tables.maintenance.maintain`, with the consumer groups'
  committed offsets read from Kafka (:func:`kafka_committed`, also used by ``kstage
  run``'s scheduled maintenance);
* ``migrate``: :mod:`actors.tables.migrate`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import dotted
from actors.sinks.spark.ledger import Stream
from actors.tables import (
    Committed,
    TablePlan,
    deletions_apply,
    deletions_name,
    merged_through,
    on_spark,
    plan,
    snapshot_history,
    snapshot_offsets,
    table_content,
    table_exists,
)
from processors.base import Processor
from service.ops.lag import bootstrap_of, committed_offsets, connection_kwargs
from settings.models import Settings, SparkSettings


@dataclass(slots=True)
class TableView:
    """What ``kstage tables show`` says of one table (``exists`` False: not created yet).

    Attributes:
        table: ``catalog.namespace.table``; ``role``: staging, final (of ``staging``), or
            deletions (of the final table ``staging``: the final table's deletions
            table, each key's newest deletion).
        snapshots: how many the table keeps; ``current_snapshot``/``current_at``: the
            current one and its commit time (ISO 8601, UTC).
        data_files, rows, bytes: the current snapshot's data.
        offsets: per Kafka partition, the offset the table holds it up to (staging).
        merged_snapshot: the staging snapshot the last merge folded through (final).
    """

    table: str
    role: str
    staging: str | None = None
    exists: bool = True
    snapshots: int = 0
    current_snapshot: int | None = None
    current_at: str | None = None
    data_files: int = 0
    rows: int = 0
    bytes: int = 0
    offsets: list[dict[str, Any]] = field(default_factory=list)
    merged_snapshot: int | None = None


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def _view(spark: Any, settings: SparkSettings, table: str, role: str,
          staging: str | None = None) -> TableView:
    """Spark thread: one table's view."""
    view = TableView(dotted(settings, table), role, staging)
    if not table_exists(spark, settings, table):
        view.exists = False
        return view
    history = snapshot_history(spark, settings, table)
    if history:
        view.current_snapshot, view.current_at = history[0].id, _iso(history[0].committed_ms)
    content = table_content(spark, settings, table)
    view.data_files, view.rows, view.bytes = content.data_files, content.rows, content.bytes
    view.snapshots = content.snapshots
    view.offsets = [{"group": g, "topic": t, "partition": p, "offset": o}
                    for (g, t, p), o in sorted(snapshot_offsets(history).items())]
    merge = merged_through(history)
    view.merged_snapshot = None if merge is None else merge.merged
    return view


def staging_view(spark: Any, settings: SparkSettings, table: str) -> TableView:
    """Spark thread: the view of one staging table, planned or not (a table of a
    processor whose columns come from writer schemas is staging only, not planned)."""
    return _view(spark, settings, table, "staging")


def describe(spark: Any, settings: SparkSettings, items: Sequence[TablePlan],
             ) -> list[TableView]:
    """Spark thread: the views of every planned staging table and its final table."""
    views = []
    for item in items:
        views.append(_view(spark, settings, item.table, "staging"))
        views.append(_view(spark, settings, item.final_table, "final", item.table))
        if deletions_apply([c.name for c in item.columns], item.key):
            views.append(_view(spark, settings,
                               deletions_name(item.final_table), "deletions",
                               item.final_table))
    return views


async def show(settings: Settings, processors: Mapping[str, type[Processor]],
               table: str | None = None, *, actor: SparkActor) -> list[TableView]:
    """The views of the configuration's spark tables (only ``table`` and its final
    table when given; ``processors`` as for :func:`~actors.tables.merge.plan`),
    read on ``actor`` (the process's)."""
    items = plan(settings, processors, table)
    return await actor.call(on_spark(lambda spark: describe(spark, settings.spark, items)))


def _size(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"  # not reached


def render(views: Sequence[TableView]) -> str:
    """Text: a block per table."""
    lines: list[str] = []
    for v in views:
        head = f"{v.table} ({v.role}{f' of {v.staging}' if v.staging else ''})"
        if not v.exists:
            lines.append(f"{head}: not created yet")
            continue
        lines.append(head)
        current = (f", current {v.current_snapshot} committed {v.current_at}"
                   if v.current_snapshot is not None else "")
        lines.append(f"  snapshots   {v.snapshots}{current}")
        lines.append(f"  data files  {v.data_files} ({_size(v.bytes)}), {v.rows} rows")
        for i, o in enumerate(v.offsets):
            lines.append(f"  {'offsets' if i == 0 else '':<10}  group {o['group']} "
                         f"{o['topic']}[{o['partition']}] up to {o['offset']}")
        if v.role == "final":
            merged = "(none recorded)" if v.merged_snapshot is None else v.merged_snapshot
            lines.append(f"  merged through staging snapshot {merged}")
    return "\n".join(lines)


def render_json(views: Sequence[TableView]) -> str:
    return json.dumps([asdict(v) for v in views], indent=2)


def kafka_committed(settings: Settings, bootstrap: str | None = None) -> Committed:
    """A reader of the consumer groups' committed offsets from Kafka (``bootstrap``, else
    the configuration's), given up after ``spark.maintenance.kafka_timeout_s``."""
    async def read(streams: Collection[Stream]) -> Mapping[Stream, int | None]:
        groups: dict[str, list[TopicPartition]] = {}
        for group, topic, partition in streams:
            groups.setdefault(group, []).append(TopicPartition(topic, partition))
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap or bootstrap_of(settings),
                                    client_id=f"{settings.kafka.client_id}-maintenance",
                                    **connection_kwargs(settings))
        found: dict[Stream, int | None] = {}
        async with asyncio.timeout(settings.spark.maintenance.kafka_timeout_s):
            try:
                await admin.start()
                for group, tps in sorted(groups.items()):
                    for tp, offset in (await committed_offsets(admin, group, tps)).items():
                        found[(group, tp.topic, tp.partition)] = offset
            finally:
                await admin.close()
        return found

    return read


__all__ = ["TableView", "describe", "kafka_committed", "render", "render_json", "show",
           "staging_view"]
