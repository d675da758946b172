"""``kstage merge``: fold each Spark staging table into its Iceberg final table.

For every staging table fed by topics with ``sink.type: spark`` (the sink's ``table`` or
the processor's; several topics may feed one table, their processors must then agree on
columns, key and final partition), the final table is ``final_<rest>`` for ``stg_<rest>``
(else ``<table>_final``), an Iceberg table in the same catalog and namespace, created at
the first merge: the processor's columns, ``_topic, _kafka_partition, _offset,
_timestamp, _ingested_at``, then the processor's ``final_partition`` column when it
declares one (:mod:`actors.tables.final_table`). A processor whose columns come from
writer schemas (``schema_rows``) has the staging table's columns, read at each merge; its
``options.key`` is the natural key, and with ``options.deletes`` its tombstones' deletions
delete the rows.

A merge reads the staging rows committed since the last merge (Iceberg's incremental
append scan between the staging snapshot the final table records as merged through and
the current one; the whole table the first time or when that snapshot expired), folds
them (exact replays dropped, the latest row per natural key ``Processor.key``:
:mod:`actors.tables.merge_fold`) and ``MERGE``s them into the final table in one
Iceberg commit that records the staging snapshot merged through
(:mod:`actors.tables.merge_job`). No lock, no state file: a crashed, repeated or
concurrent merge is idempotent, and a merge whose commit raced another's (Iceberg's
optimistic concurrency refuses it) runs again, up to :data:`ATTEMPTS` times. A final
table of deletions also remembers each key's newest deletion in its deletions table
(:mod:`actors.tables.final_deletions`), so an older upsert staged later stays out.

A final partition: ``final_partition = (name, expression over key columns)`` (the
built-in WhereHows processors: ``log_date`` from ``log_event_time``; DataHub entity change
events: ``audit_date``): a real column, the table partitioned by its value, so a merge
reads and rewrites only the partitions its staging rows fall into. The expression is
analysed against the key columns alone at each merge (anything else is a MergeError).

A table of a processor whose columns come from the writer schemas (``schema_rows``) and
that has no key is a staging table only: left out of the plan (one INFO line), the rest
of the configuration merges.

Errors: a configuration problem is a MergeConfigError (``kstage merge`` exits 2); a
catalog or Spark failure, a table that does not fit the processor, or too many
conflicting commits is a MergeError naming the table (exit 1; inside ``kstage run`` the
next interval tries again). pyspark is imported only inside functions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any

from actors.errors import FatalError
from actors.record_columns import sink_columns
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import dotted
from actors.sinks.spark.sink import SparkSinkSettings
from actors.tables import final_deletions, final_table
from actors.tables.final_table import MergeRecord
from actors.tables.merge_job import (
    MergeConflict,
    MergeJob,
    MergeResult,
    MergeTableError,
    TablePlan,
    describe,
)
from processors.base import DELETED, Column, Processor, source_order_problem
from processors.registry import for_options
from settings.errors import SettingsError
from settings.models import Settings, TopicSettings

logger = logging.getLogger(__name__)

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

ATTEMPTS = 8
"""How many times a merge whose commit raced another's is run (each re-reads what the
final table holds, so a later attempt merges only what the winner did not)."""
BACKOFF_S = (0.2, 2.0)
"""The wait before another attempt: random in [min, min * 2**attempt], at most max."""


class MergeConfigError(SettingsError):
    """The configuration cannot be merged (unknown table, disagreeing processors)."""


class MergeError(Exception):
    """A merge failed while running (catalog, Spark, a table that does not fit)."""


def final_name(table: str) -> str:
    """``stg_x`` -> ``final_x``; any other name -> ``<name>_final``."""
    if table.startswith("stg_") and len(table) > len("stg_"):
        return "final_" + table[len("stg_"):]
    return f"{table}_final"


def spark_sinks(settings: Settings, processors: Mapping[str, type[Processor]],
                ) -> Iterator[tuple[TopicSettings, type[Processor], str | None]]:
    """Each spark sink of ``settings``' topic entries: its topic, its processor's class
    (the topic's options applied) and its table's name (None: neither the sink nor the
    processor names one). A topic_pattern's tables, and a route's, are
    known only to the running process: not among them (settings refuse merge.interval_s
    and maintenance.every_s over them)."""
    for group in settings.groups:
        for topic in group.topics:
            if topic.topic_pattern is not None or topic.route is not None:
                continue
            for named in topic.named_sinks():
                sink = named.settings
                if isinstance(sink, SparkSinkSettings):
                    cls = for_options(processors[topic.processor], topic.options)
                    yield topic, cls, sink.table or cls.table


def plan(settings: Settings, processors: Mapping[str, type[Processor]],
         table: str | None = None) -> list[TablePlan]:
    """The staging tables of ``settings``' spark sinks (only ``table`` when given).

    ``processors``: the configuration's processor classes by name, as the caller resolved
    them (:func:`actors.preflight.resolve_processors`, or the running master's).
    """
    found: dict[str, TablePlan] = {}
    for topic, cls, name in spark_sinks(settings, processors):
        columns = sink_columns(topic, cls)  # the processor's, then the record's
        if not name:
            raise MergeConfigError(f"topic {topic.topic!r}: processor {cls.name!r} names no "
                                   "table; set sink.table")
        staged = cls.columns_from_schema  # its columns: the staging table's, at merge
        if staged and not cls.key:
            # Its columns come while it runs, and no key says which row is the latest:
            # nothing to merge by (not an error: the rest of the configuration merges).
            logger.info("merge: table %s (topic %s, processor %r) is staging only: its "
                        "columns come from the writer schemas and it has no key",
                        name, topic.topic, cls.name)
            continue
        if staged and cls.emits_deletes:
            columns = (*columns, Column(DELETED, "boolean"))
        if not columns and not staged:
            raise MergeConfigError(f"table {name}: processor {cls.name!r} declares no "
                                   "columns")
        missing = [] if staged else [k for k in cls.key
                                     if k not in {c.name for c in columns}]
        if missing:
            raise MergeConfigError(f"table {name}: key columns {missing} of processor "
                                   f"{cls.name!r} are not among its columns")
        partition = cls.final_partition
        if partition is not None:
            pname = partition[0]
            if not _IDENTIFIER.match(pname) or pname in {c.name for c in columns}:
                raise MergeConfigError(f"table {name}: processor {cls.name!r}: final "
                                       f"partition column {pname!r} must be a new plain "
                                       "identifier (not one of the row's columns)")
            if not cls.key:
                raise MergeConfigError(f"table {name}: processor {cls.name!r} declares a "
                                       "final partition but no key")
        # columns from writer schemas: the merge job checks them on the staging table
        order = None if cls.columns_from_schema else source_order_problem(cls, columns)
        if order is not None:
            raise MergeConfigError(f"table {name}: {order}")
        source = cls.source_order if cls.key else None
        seen = found.get(name)
        if seen is None:
            found[name] = TablePlan(name, final_name(name), columns,
                                    tuple(cls.key), (topic.topic,), partition, source,
                                    staged)
            continue
        if (seen.columns, seen.key, seen.partition, seen.source_order, seen.staged) != (
                columns, tuple(cls.key), partition, source, staged):
            raise MergeConfigError(f"table {name}: topics {list(seen.topics)} and "
                                   f"{topic.topic!r} feed it with different columns, "
                                   "key, final partition or source order")
        found[name] = TablePlan(name, seen.final_table, seen.columns, seen.key,
                                (*seen.topics, topic.topic), partition, source, staged)
    _check_names(found)
    if table is not None:
        if table not in found:
            known = ", ".join(sorted(found)) or "none"
            raise MergeConfigError(f"table {table!r} is not fed by a spark sink "
                                   f"(spark tables: {known})")
        return [found[table]]
    return list(found.values())


def _check_names(found: dict[str, TablePlan]) -> None:
    """A final table (or its deletions table) must not be one of the staging tables
    (``stg_a`` and ``final_a`` both staging tables)."""
    for name, item in found.items():
        if item.final_table in found:
            raise MergeConfigError(f"table {name}: its final table {item.final_table} is "
                                   "also a staging table of a spark sink; rename one with "
                                   "sink.table")
        deletions = final_deletions.deletions_name(item.final_table)
        if deletions in found and final_deletions.applies(
                [c.name for c in item.columns], item.key):
            raise MergeConfigError(f"table {name}: the deletions table {deletions} of its "
                                   f"final table is also a staging table of a spark sink; "
                                   "rename one with sink.table")


async def merge(settings: Settings, processors: Mapping[str, type[Processor]],
                table: str | None = None, *, actor: SparkActor) -> list[MergeResult]:
    """Merge every spark staging table of ``settings`` (or only ``table``) into its final
    table on ``actor`` (the process's) (``processors`` as for :func:`plan`); see the
    module docstring. Raises MergeConfigError for configuration problems, MergeError when
    a merge fails."""
    return [await merge_table(actor, item) for item in plan(settings, processors, table)]


async def merge_table(actor: SparkActor, item: TablePlan) -> MergeResult:
    """Merge one planned table on ``actor``'s thread (again after a conflicting commit,
    up to :data:`ATTEMPTS` times); MergeError when it fails."""
    job = MergeJob(actor.settings, item, actor.writer_id)
    where = f"merge {item.table} -> {item.final_table}"
    low, high = BACKOFF_S
    started = time.monotonic()
    for attempt in range(1, ATTEMPTS + 1):
        try:
            # retry: the job is idempotent, so a dead JVM's merge runs again in a new one
            done: MergeResult = await actor.call(job.run, retry=True)
            break
        except MergeConflict as exc:
            if attempt == ATTEMPTS:
                raise MergeError(f"{where} failed: its commit raced another commit of the "
                                 f"final table {ATTEMPTS} times; last: {exc}") from exc
            wait = random.uniform(low, min(high, low * 2 ** attempt))  # noqa: S311
            logger.warning("%s: the final table changed meanwhile (%s); merging again in "
                           "%.1fs (attempt %d of %d)", where, exc, wait, attempt + 1,
                           ATTEMPTS)
            await asyncio.sleep(wait)
        except MergeTableError as exc:
            raise MergeError(f"{where}: {exc}") from exc
        except FatalError as exc:
            raise MergeError(f"{where} failed: {exc}") from exc
        except Exception as exc:  # any Spark/catalog failure fails the merge
            raise MergeError(f"{where} failed: {describe(exc)}") from exc
    result = dataclasses.replace(done, attempts=attempt)
    logger.info("merge: %s in %.1fs%s", result.summary(), time.monotonic() - started,
                " (whole staging table read)" if result.full_read else "")
    return result


async def merge_records(settings: Settings, processors: Mapping[str, type[Processor]],
                        *, actor: SparkActor) -> dict[str, MergeRecord]:
    """Per final table (its name), what its last merge recorded in the table's commits:
    the staging snapshot merged through, the staging and final rows, the counts (final
    tables not merged yet are left out). MergeError when the catalog cannot be read."""
    items = plan(settings, processors)

    def read(spark: Any) -> dict[str, MergeRecord]:
        found = {}
        for item in items:
            if spark.catalog.tableExists(dotted(actor.settings, item.final_table)):
                record = final_table.last_record(spark, actor.settings, item.final_table)
                if record is not None:
                    found[item.final_table] = record
        return found

    try:
        return await actor.call(read, retry=True)
    except Exception as exc:  # any Spark/catalog failure
        raise MergeError(f"merge: cannot read the final tables' merge records: "
                         f"{describe(exc)}") from exc


__all__ = ["ATTEMPTS", "MergeConfigError", "MergeError", "MergeRecord", "MergeResult",
           "TablePlan", "final_name", "merge", "merge_records", "merge_table", "plan"]
