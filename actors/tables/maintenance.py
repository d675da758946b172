"""Maintenance of the Iceberg tables of the spark sinks: ``kstage tables maintain`` and,
with ``spark.maintenance.every_s``, inside ``kstage run``.

Every append to a staging table is a commit: a snapshot, a manifest list, a manifest and
a small data file. A day of 1-second flushes is 86,400 of each, and every commit rewrites
the table's metadata file listing every snapshot. Maintenance, per staging table and then
its final table, on the process's Spark thread (:class:`SparkActor`), with Iceberg's
procedures (and, for a final table that keeps one, its deletions table: compacted and
expired like the final table, keeping no snapshot but by age and count):

1. **compact** small data files (``rewrite_data_files``, binpack): a partition (a day of
   ``_ingested_at``) with at least ``min_input_files`` files, or more small files than
   one target file holds, is rewritten into files of about ``target_file_mb``. The old
   files stay on disk while a kept snapshot still references them;
2. **rewrite manifests** (``rewrite_manifests``) when the current snapshot has at least
   ``min_input_files`` of them;
3. **expire snapshots** (``expire_snapshots``) older than ``snapshot_max_age_s``, keeping
   the newest ``snapshot_min_keep`` and everything offset recovery and the merge still
   need (see :mod:`actors.tables.expiry`; the Kafka offsets are read through the
   caller's :data:`Committed`). When Kafka's committed offsets cannot be read, no
   snapshot of a staging table is expired, and the result says why. Before it, when the
   current snapshot (a compaction's) does not record every partition's offset, the
   table's offsets are committed again in a snapshot of no data (:data:`CARRIED`): the
   current snapshot holds them all, as after every append, and expiry cannot take the
   last record of a partition. Files no kept snapshot references (the compacted small
   files) are deleted here;
4. **remove orphan files** (``remove_orphan_files``) older than ``orphan_min_age_s``:
   files in the table's directory that no snapshot references, e.g. what a killed JVM
   wrote but never committed. Never younger than a day: a running append, merge or
   compaction has written files its commit does not yet reference.

Appends of other processes may run meanwhile: Iceberg retries a commit that lost the
race, compaction only replaces files (a compaction or manifest rewrite that Iceberg
refuses because an append changed what it replaces runs again, up to :data:`ATTEMPTS`
times), and expiry keeps every snapshot newer than its bound.
A failure of one table's maintenance is reported with the table and the other tables are
still maintained. pyspark is imported only inside functions.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from actors.sinks.spark import iceberg
from actors.sinks.spark.actor import SparkActor, short
from actors.sinks.spark.catalog import dotted
from actors.sinks.spark.ledger import Stream
from actors.tables import final_deletions, snapshots
from actors.tables.expiry import Bound, Keep, bound, missing, offset_keeps
from actors.tables.merge import TablePlan, plan
from actors.tables.merge_job import conflict
from processors.base import Processor
from settings.models import MaintenanceSettings, Settings, SparkSettings

logger = logging.getLogger(__name__)

T = TypeVar("T")

ATTEMPTS = 4
"""How many times compaction or a manifest rewrite runs when its commit raced another."""

CARRIED = "kstage.offsets-carried"
"""Summary key of maintenance's commit that records the offsets again (no data)."""

Committed = Callable[[Collection[Stream]], Awaitable[Mapping[Stream, int | None]]]
"""Reads Kafka's committed offsets of (group, topic, partition)s (None: nothing
committed); raises when Kafka cannot be read."""


@dataclass(slots=True)
class Maintained:
    """What maintenance did to one table.

    Attributes:
        table: the table (``catalog.namespace.table``); ``role``: staging, final or
            deletions (of a final table).
        exists: False when the catalog has no such table (nothing done).
        files_before, files_after: data files of the current snapshot.
        compacted, compacted_into: data files rewritten, and the files written.
        manifests, manifests_into: manifests rewritten, and the manifests written.
        snapshots_before, expired: snapshots before expiry, and how many expired.
        deleted_files: data files expiry deleted (no kept snapshot referenced them).
        kept: the snapshots expiry had to keep, each with why.
        carried: partitions whose offsets were recorded again in a new snapshot (the
            current one, a compaction's, recorded none).
        not_expired: why nothing was expired (when it was not tried).
        orphans: orphan files removed.
        error: what failed (the steps before it are done).
    """

    table: str
    role: str
    exists: bool = True
    files_before: int = 0
    files_after: int = 0
    compacted: int = 0
    compacted_into: int = 0
    manifests: int = 0
    manifests_into: int = 0
    snapshots_before: int = 0
    expired: int = 0
    deleted_files: int = 0
    kept: list[Keep] = field(default_factory=list)
    not_expired: str = ""
    orphans: int = 0
    carried: int = 0
    error: str = ""

    def summary(self, settings: MaintenanceSettings) -> list[str]:
        """Lines for the operator: what was done, what was kept and why."""
        head = f"{self.table} ({self.role})"
        if not self.exists:
            return [f"{head}: no such table yet (nothing to maintain)"]
        if self.error:
            done = [f"compacted {self.compacted} data files into {self.compacted_into}"
                    ] if self.compacted else []
            return [f"{head}: " + "; ".join([*done, f"FAILED: {self.error}"])]
        done = [f"data files {self.files_before} -> {self.files_after}"]
        if self.compacted:
            done.append(f"compacted {self.compacted} into {self.compacted_into}")
        if self.manifests:
            done.append(f"rewrote {self.manifests} manifests into {self.manifests_into}")
        if self.carried:
            done.append(f"recorded the offsets of {self.carried} partitions in a new "
                        "snapshot")
        if self.not_expired:
            done.append(f"expired no snapshot: {self.not_expired}")
        else:
            done.append(f"expired {self.expired} of {self.snapshots_before} snapshots "
                        f"(older than {settings.snapshot_max_age_s:g}s, newest "
                        f"{settings.snapshot_min_keep} kept), deleting "
                        f"{self.deleted_files} data files")
        done.append(f"removed {self.orphans} orphan files older than "
                    f"{settings.orphan_min_age_s:g}s")
        lines = [f"{head}: " + "; ".join(done)]
        lines += [f"  kept snapshot {k.snapshot} and newer: {k.why}" for k in self.kept]
        return lines


class MaintenanceError(Exception):
    """A Spark call of maintenance failed; ``str()`` describes it (see :func:`on_spark`)."""


def on_spark(fn: Callable[[Any], T]) -> Callable[[Any], T]:
    """``fn`` (for the Spark thread) whose failure is described there, while the JVM can
    still say what the Java exception and its cause were (:func:`short`), as a
    MaintenanceError chained to it (a dead JVM behind it is still recognised)."""
    def run(spark: Any) -> T:
        try:
            return fn(spark)
        except MaintenanceError:
            raise
        except Exception as exc:
            raise MaintenanceError(short(exc)) from exc
    return run


def _said(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, MaintenanceError) else short(exc)


def _call(spark: Any, settings: SparkSettings, procedure: str, args: str) -> list[Any]:
    """Spark thread: ``CALL <catalog>.system.<procedure>(<args>)``'s result rows."""
    rows: list[Any] = spark.sql(
        f"CALL `{settings.catalog.name}`.system.{procedure}({args})").collect()
    return rows


def compact(spark: Any, settings: SparkSettings, table: str,
            min_file_bytes: int | None = None) -> tuple[int, int]:
    """Spark thread: binpack the table's small data files (those under ``min_file_bytes``
    when given; Iceberg's default: 75 % of the target size); (rewritten, written)."""
    m = settings.maintenance
    smaller = "" if min_file_bytes is None else f", 'min-file-size-bytes', '{min_file_bytes}'"
    options = (f"map('target-file-size-bytes', '{m.target_file_mb * 1024 * 1024}', "
               f"'min-input-files', '{m.min_input_files}'{smaller})")
    rows = _call(spark, settings, "rewrite_data_files",
                 f"table => '{dotted(settings, table)}', strategy => 'binpack', "
                 f"options => {options}")
    return (int(rows[0]["rewritten_data_files_count"]), int(rows[0]["added_data_files_count"]))


def rewrite_manifests(spark: Any, settings: SparkSettings, table: str) -> tuple[int, int]:
    """Spark thread: rewrite the current snapshot's manifests when it has at least
    ``min_input_files``; (rewritten, written)."""
    loaded = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, dotted(settings, table))
    current = loaded.currentSnapshot()
    count = 0 if current is None else int(current.allManifests(loaded.io()).size())
    if count < settings.maintenance.min_input_files:
        return 0, 0
    rows = _call(spark, settings, "rewrite_manifests", f"table => '{dotted(settings, table)}'")
    return (int(rows[0]["rewritten_manifests_count"]), int(rows[0]["added_manifests_count"]))


def expire(spark: Any, settings: SparkSettings, table: str, where: Bound,
           ) -> tuple[int, int, int]:
    """Spark thread: expire the snapshots before ``where``; (snapshots before, snapshots
    expired, data files deleted)."""
    before = snapshots.content(spark, settings, table).snapshots
    rows = _call(spark, settings, "expire_snapshots",
                 f"table => '{dotted(settings, table)}', "
                 f"older_than => timestamp_millis({where.older_than_ms}), "
                 f"retain_last => {where.retain_last}")
    after = snapshots.content(spark, settings, table).snapshots
    return before, before - after, int(rows[0]["deleted_data_files_count"])


def remove_orphans(spark: Any, settings: SparkSettings, table: str) -> int:
    """Spark thread: remove the files no snapshot references, older than
    ``orphan_min_age_s``; how many."""
    older_than = int((time.time() - settings.maintenance.orphan_min_age_s) * 1000)
    return len(_call(spark, settings, "remove_orphan_files",
                     f"table => '{dotted(settings, table)}', "
                     f"older_than => timestamp_millis({older_than})"))


def again_on_conflict(step: Callable[[], T], what: str, table: str) -> T:
    """Spark thread: ``step()``, run again (planned anew on the latest snapshot) when
    Iceberg refused its commit because another commit raced it (an append merging the
    manifests a manifest rewrite replaces), up to :data:`ATTEMPTS` times."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return step()
        except Exception as exc:
            if attempt == ATTEMPTS or not conflict(exc):
                raise
            logger.warning("maintenance: %s: %s raced another commit (%s); again (attempt %d "
                           "of %d)", table, what, short(exc), attempt + 1, ATTEMPTS)
            time.sleep(random.uniform(0.2, 1.0) * attempt)  # noqa: S311 - a backoff
    raise AssertionError("not reached")  # pragma: no cover


def _reshape(spark: Any, settings: SparkSettings, table: str, result: Maintained) -> None:
    """Spark thread: compaction and manifests (nothing to keep for them)."""
    result.files_before = snapshots.content(spark, settings, table).data_files
    result.compacted, result.compacted_into = again_on_conflict(
        lambda: compact(spark, settings, table), "compaction", table)
    result.manifests, result.manifests_into = again_on_conflict(
        lambda: rewrite_manifests(spark, settings, table), "the manifest rewrite", table)


def record_offsets(spark: Any, settings: SparkSettings, table: str,
                   offsets: dict[Stream, int]) -> None:
    """Spark thread: commit ``offsets`` (``kstage.offsets``) in a snapshot of no data."""
    util = spark._jvm.org.apache.iceberg.spark.Spark3Util
    loaded = util.loadIcebergTable(spark._jsparkSession, dotted(settings, table))
    loaded.newAppend().set(iceberg.OFFSETS, iceberg.format_offsets(offsets)).set(
        CARRIED, "true").commit()


def _finish(spark: Any, settings: SparkSettings, table: str, where: Bound | None,
            result: Maintained) -> None:
    """Spark thread: expiry (unless ``where`` is None), orphans, and the files left."""
    if where is not None:
        result.kept = list(where.kept)
        result.snapshots_before, result.expired, result.deleted_files = expire(
            spark, settings, table, where)
    result.orphans = remove_orphans(spark, settings, table)
    result.files_after = snapshots.content(spark, settings, table).data_files


async def on(actor: SparkActor, fn: Callable[[Any], T], aside: bool) -> T:
    """``fn`` on the Spark thread, or beside the appends (:meth:`SparkActor.call_aside`)."""
    if aside:
        return await actor.call_aside(fn, "the maintenance round")
    return await actor.call(fn)


async def maintain_pair(actor: SparkActor, staging: str, final: str, committed: Committed,
                        *, aside: bool = False) -> list[Maintained]:
    """Maintain a staging table, then its final table (see the module docstring); a
    failure is recorded in that table's result. ``aside``: beside the appends (:func:`on`)."""
    settings = actor.settings
    results = [Maintained(dotted(settings, staging), "staging"),
               Maintained(dotted(settings, final), f"final of {staging}")]
    merged: int | None = None
    try:
        found = await on(actor, on_spark(lambda spark: (
            snapshots.exists(spark, settings, staging), snapshots.exists(spark, settings, final))),
            aside)
    except Exception as exc:  # noqa: BLE001 - reported per table, never raised
        for result in results:
            result.error = f"cannot look the table up in the catalog: {_said(exc)}"
        return results
    results[0].exists, results[1].exists = found
    unknown = ""  # why the staging snapshot the final table merged through is unknown
    if results[1].exists:
        try:  # read first, whatever becomes of the final table's own maintenance
            merged = await on(actor, on_spark(lambda spark: _merged(spark, settings, final)),
                              aside)
        except Exception as exc:  # noqa: BLE001 - reported per table, never raised
            unknown = _said(exc)
        try:
            await _maintain_final(actor, final, results[1], aside)
        except Exception as exc:  # noqa: BLE001 - reported per table, never raised
            results[1].error = _said(exc)
    if results[0].exists:
        try:
            await _maintain_staging(actor, staging, final, merged, unknown, committed,
                                    results[0], aside)
        except Exception as exc:  # noqa: BLE001 - reported per table, never raised
            results[0].error = _said(exc)
    return results


def _merged(spark: Any, settings: SparkSettings, final: str) -> int | None:
    """Spark thread: the staging snapshot the final table's last merge folded through."""
    last = snapshots.merged_through(snapshots.history(spark, settings, final))
    return None if last is None else last.merged


async def _maintain_final(actor: SparkActor, final: str, result: Maintained, aside: bool,
                          ) -> None:
    """The final table: keep its newest merge commit (it records where the next merge
    starts)."""
    settings = actor.settings

    def run(spark: Any) -> None:
        _reshape(spark, settings, final, result)
        history = snapshots.history(spark, settings, final)
        last = snapshots.merged_through(history)
        keeps = [] if last is None else [
            Keep(last.id, f"records the staging snapshot {last.merged} the last merge "
                          "folded through")]
        where = bound(history, keeps, int(time.time() * 1000),
                      settings.maintenance.snapshot_max_age_s,
                      settings.maintenance.snapshot_min_keep)
        _finish(spark, settings, final, where, result)

    await on(actor, on_spark(run), aside)


async def _maintain_staging(actor: SparkActor, staging: str, final: str, merged: int | None,
                            unknown: str, committed: Committed, result: Maintained,
                            aside: bool) -> None:
    """The staging table: keep what offset recovery and the next merge need (nothing is
    expired when either is ``unknown``)."""
    settings = actor.settings

    def reshape(spark: Any) -> list[snapshots.Snapshot]:
        _reshape(spark, settings, staging, result)
        history = snapshots.history(spark, settings, staging)
        carry = missing(history)
        if carry:  # the current snapshot must hold every partition's offset
            record_offsets(spark, settings, staging, carry)
            result.carried = len(carry)
            history = snapshots.history(spark, settings, staging)
        return history

    history = await on(actor, on_spark(reshape), aside)
    keeps: list[Keep] = []
    if merged is not None:
        keeps.append(Keep(merged, f"the final table {final} merged through it"))
    where: Bound | None = None
    streams = snapshots.offsets(history)
    try:
        done = await committed(list(streams)) if streams else {}
    except Exception as exc:  # noqa: BLE001 - any failure: expire nothing
        result.not_expired = (f"Kafka's committed offsets cannot be read ({short(exc)}), "
                              "so which snapshots offset recovery needs is unknown")
    else:
        if unknown:
            result.not_expired = (f"the staging snapshot the final table {final} merged "
                                  f"through cannot be read ({unknown})")
        keeps += offset_keeps(history, done)
        where = None if unknown else bound(history, keeps, int(time.time() * 1000),
                                           settings.maintenance.snapshot_max_age_s,
                                           settings.maintenance.snapshot_min_keep)
    await on(actor, on_spark(lambda spark: _finish(spark, settings, staging, where, result)),
             aside)


async def maintain(settings: Settings, processors: Mapping[str, type[Processor]],
                   committed: Committed, table: str | None = None, *,
                   actor: SparkActor, owned: Callable[[TablePlan], bool] | None = None,
                   aside: bool = False) -> list[Maintained]:
    """Maintain every spark staging table of ``settings`` (only ``table`` when given;
    only those ``owned`` says this process maintains, when given) and its final table on
    ``actor`` (the process's; ``processors`` as for :func:`~actors.tables.merge.plan`),
    on its Spark thread or, ``aside``, beside the appends (:func:`on`); a table's failure
    is in its result."""
    results: list[Maintained] = []
    for item in plan(settings, processors, table):
        if owned is not None and not owned(item):
            continue
        results += await maintain_pair(actor, item.table, item.final_table, committed,
                                       aside=aside)
        if final_deletions.applies([c.name for c in item.columns], item.key):
            results.append(await _maintain_deletions(actor, item.final_table, aside))
    return results


async def _maintain_deletions(actor: SparkActor, final: str, aside: bool) -> Maintained:
    """The deletions table of ``final``: no snapshot of it is needed but the current
    one (each holds every key's newest deletion), so only age and the newest
    ``snapshot_min_keep`` bound expiry; a failure is recorded in the result."""
    settings = actor.settings
    name = final_deletions.deletions_name(final)
    result = Maintained(dotted(settings, name), f"deletions of {dotted(settings, final)}")

    def run(spark: Any) -> None:
        if not snapshots.exists(spark, settings, name):
            result.exists = False
            return
        _reshape(spark, settings, name, result)
        where = bound(snapshots.history(spark, settings, name), [], int(time.time() * 1000),
                      settings.maintenance.snapshot_max_age_s,
                      settings.maintenance.snapshot_min_keep)
        _finish(spark, settings, name, where, result)

    try:
        await on(actor, on_spark(run), aside)
    except Exception as exc:  # noqa: BLE001 - reported per table, never raised
        result.error = _said(exc)
    return result


__all__ = ["CARRIED", "Committed", "Maintained", "MaintenanceError", "again_on_conflict",
           "compact", "expire", "maintain", "maintain_pair", "on", "on_spark", "record_offsets",
           "remove_orphans", "rewrite_manifests"]
