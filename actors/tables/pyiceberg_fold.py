"""The background fold without a JVM: a staging table's small data files compacted by
pyiceberg beside its appends (``spark.appends: pyiceberg``).

With ``appends: pyiceberg`` and ``spark.maintenance.every_s`` unset, a process starts no
JVM, so Spark's ``rewrite_data_files`` (:mod:`actors.tables.fold`) is not there to fold
the one small file each caught-up append adds. Every :data:`~actors.tables.fold.CHECK_S`
the process reads how many data files the current snapshot of each staging table it
maintains has (the holder of the topic's partition 0:
:func:`~actors.tables.maintenance_loop.holder`); once that is
``spark.maintenance.fold_files`` more than its last fold here left
(:func:`~actors.tables.fold.due`), it folds, by the rule of Spark's fold:

1. **plan** (on the lake's second thread, with its own catalog connection: the appends
   never wait for it): the table loaded, the manifests the appends added since the last
   check read, and, when a fold is due, the current snapshot's data files of the current
   partition spec under ``target_file_mb /`` :data:`~actors.tables.fold.SMALL_PART`, per
   partition, oldest first, up to
   :data:`INPUT_MAX_PART` of ``target_file_mb`` of them in all (a fold's memory stays
   bounded); a partition with fewer than ``min_input_files`` of them is left;
2. **rewrite** (on the second thread too, at a lower CPU priority than the appends':
   :mod:`~actors.sinks.spark.background_cpu`; Arrow reads, on that thread alone, and
   writes Parquet without the GIL): the files read and written again as one table per
   partition, in their order, conformed to the table's current schema (a column added
   after a file was written is NULL in it, as a reader sees it), under the partition's
   known key (:func:`written_files`: no grouping of the rows through Arrow's shared pool);
3. **commit** (on the lake thread, between two appends: the table loaded again, its
   snapshot the commit's base): one snapshot that deletes the files read and
   adds the files written, of operation ``replace`` (what Spark's rewrite commits:
   readers of appends skip it, Iceberg's incremental append scan of the merge among
   them). It records no offsets of its own: the catalog's commit gives it the current
   snapshot's (:func:`~actors.sinks.spark.carried_offsets.onto`), so the newest snapshot
   still holds every partition's. Another process's append committed meanwhile is no
   conflict (pyiceberg's retry applies the fold on the new snapshot; only a file of the
   fold deleted meanwhile refuses it, as Iceberg's ``RewriteFiles`` does: another
   writer folded it, the fold is :class:`~actors.tables.fold.Superseded`, its files
   deleted, and the next check plans again).

Every row stays once: the commit replaces files with files of the same rows, atomically.
A process killed before the commit committed nothing of the fold (its new files are
orphans: ``kstage tables maintain`` removes them once older than ``orphan_min_age_s``,
as it removes the files the fold replaced once their snapshots expired; pyiceberg's
expiry deletes no file). A failure is logged with the table, counted in
``kstage_maintenance_failures{table}`` and tried again after a wait that doubles with each
failure in a row (:data:`~actors.tables.fold.CHECK_S` to
:data:`~actors.tables.fold.RETRY_MAX_S`), by the loop of Spark's fold
(:func:`~actors.tables.fold.fold_tables`); the appends go on. pyiceberg is imported only
inside functions.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.metrics import Metrics
from actors.sinks.spark.background_cpu import writes_on_this_thread
from actors.sinks.spark.catalog import dotted
from actors.sinks.spark.pyiceberg_appends import Lake, conformed
from actors.sinks.spark.pyiceberg_transaction import transaction
from actors.tables.fold import CHECK_S, SMALL_PART, Due, Folded, Superseded, due, fold_tables
from actors.tables.maintenance_loop import Statuses, holder
from actors.tables.merge_job import TablePlan
from actors.tables.pyiceberg_expiry import staging_tables
from processors.base import Processor
from settings.models import Settings, SparkSettings

logger = logging.getLogger(__name__)

INPUT_MAX_PART = 2
"""A fold reads at most ``target_file_mb`` / this of small files (compressed), so that
its memory stays bounded whatever a table holds."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What one fold rewrites: the table as loaded, its data files before, the small
    files of each partition it folds (oldest first), and the live entries of each data
    manifest the plan read (the commit's, on the appends' thread, need not read them
    again)."""

    loaded: Any
    before: int
    groups: tuple[tuple[Any, ...], ...]
    entries: Mapping[str, list[Any]] = field(default_factory=dict)

    @property
    def files(self) -> int:
        return sum(len(group) for group in self.groups)


def data_files(loaded: Any) -> int:
    """The data files of the pyiceberg table ``loaded``'s current snapshot (its summary's
    ``total-data-files``; 0 without a snapshot)."""
    current = loaded.current_snapshot()
    if current is None or current.summary is None:
        return 0
    total = current.summary.additional_properties.get("total-data-files")
    return 0 if total is None else int(total)


def plan(lake: Lake, settings: SparkSettings, name: str, after_last: int | None,
         seen: dict[str, list[Any]] | None = None) -> tuple[int, Plan | None]:
    """The lake's second thread: the table ``name``'s data files now, and what a fold
    rewrites when one is due (None: not due, or nothing small enough in a partition to
    fold). ``seen``: the live entries of each manifest read at earlier checks (a manifest
    never changes), kept up to date here: each check reads only the manifests the appends
    added since the one before, so a fold's plan reads few."""
    loaded = lake.aside_table(name)
    count = data_files(loaded)
    current = loaded.current_snapshot()
    if current is None:
        return count, None
    seen = {} if seen is None else seen
    manifests = _data_manifests(loaded, current, seen)
    limit = settings.maintenance.fold_files
    if limit is None or not due(count, after_last, limit):
        return count, None
    target = settings.maintenance.target_file_mb * 1024 * 1024
    small, budget = target // SMALL_PART, target // INPUT_MAX_PART
    from pyiceberg.manifest import DataFileContent  # with pyiceberg

    found = sorted(((entry.sequence_number or 0, entry.data_file)
                    for path in manifests for entry in seen[path]
                    if entry.data_file.content == DataFileContent.DATA
                    and entry.data_file.file_size_in_bytes < small),
                   key=lambda item: (item[0], item[1].file_path))  # oldest first
    partitions: dict[Any, list[Any]] = {}
    taken = 0
    for _sequence, data in found:
        if taken + data.file_size_in_bytes > budget and taken:
            break
        partitions.setdefault(data.partition, []).append(data)
        taken += data.file_size_in_bytes
    groups = tuple(tuple(files) for files in partitions.values()
                   if len(files) >= settings.maintenance.min_input_files)
    return count, (Plan(loaded, count, groups, {path: seen[path] for path in manifests})
                   if groups else None)


def _data_manifests(loaded: Any, current: Any, seen: dict[str, list[Any]]) -> list[str]:
    """The data manifests of the current spec in ``current`` (a snapshot of ``loaded``),
    each one's live data files in ``seen`` (read when not there yet; those of manifests
    no longer in the snapshot dropped)."""
    from pyiceberg.manifest import ManifestContent  # with pyiceberg

    spec = loaded.metadata.default_spec_id
    paths = []
    for manifest in current.manifests(loaded.io):
        if manifest.content != ManifestContent.DATA or manifest.partition_spec_id != spec:
            continue
        paths.append(manifest.manifest_path)
        if manifest.manifest_path not in seen:
            seen[manifest.manifest_path] = manifest.fetch_manifest_entry(
                loaded.io, discard_deleted=True)
    for gone in set(seen) - set(paths):
        del seen[gone]
    return paths


def rewrite(fold: Plan) -> list[Any]:
    """The lake's second thread: each group's files read and written again as target-size
    files of the table (:func:`plan`'s rule); the data files written."""
    import pyarrow as pa  # only with the spark extra
    import pyarrow.parquet as pq

    loaded = fold.loaded
    schema = loaded.schema()
    written: list[Any] = []
    for group in fold.groups:
        parts = []
        for data in group:
            with loaded.io.new_input(data.file_path).open() as stream:
                # read on this thread: pq.read_table's dataset scan hands the reading and
                # decoding to Arrow's shared thread pools, at the appends' priority
                read = pq.ParquetFile(stream, pre_buffer=False).read(use_threads=False)
                parts.append(conformed(read, schema))
        rows = pa.concat_tables(parts)
        with writes_on_this_thread():  # at this thread's lower priority
            written.extend(written_files(loaded, rows, group[0].partition))
    return written


def known_key(metadata: Any, partition: Any) -> Any:
    """The pyiceberg ``PartitionKey`` of the current spec of ``metadata`` whose record is
    ``partition`` (a data file's), or None when the spec is unpartitioned or the key made
    from it does not give that record back."""
    from pyiceberg.partitioning import PartitionFieldValue, PartitionKey  # with pyiceberg

    spec = metadata.spec()
    if spec.is_unpartitioned() or len(partition) != len(spec.fields):
        return None
    key = PartitionKey(field_values=[PartitionFieldValue(field=f, value=partition[i])
                                     for i, f in enumerate(spec.fields)],
                       partition_spec=spec, schema=metadata.schema())
    try:
        return key if key.partition == partition else None
    except ValueError:  # pyiceberg's refusal of a spec it cannot make a key of
        return None


def written_files(loaded: Any, rows: Any, partition: Any) -> list[Any]:
    """``rows`` of one partition of the table ``loaded`` (``partition``: the record of the
    files they were read from) written as its target-size data files. pyiceberg's write of
    a table's rows (``_dataframe_to_data_files``) finds the partitions by grouping and
    filtering the rows through Acero, which runs on Arrow's shared CPU pool at the
    appends' priority (about a core for a second in the middle of a fold); a fold's group
    is one partition, whose key is known: its rows are written as they are, bin-packed by
    the table's ``write.target-file-size-bytes``. A key that does not give the files'
    record back (a transform this code does not know) goes pyiceberg's way."""
    import itertools
    import uuid

    from pyiceberg.io.pyarrow import (  # pinned <0.13
        _dataframe_to_data_files,
        bin_pack_arrow_table,
        pyarrow_to_schema,
        write_file,
    )
    from pyiceberg.table import DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE, TableProperties, WriteTask
    from pyiceberg.utils.config import Config
    from pyiceberg.utils.properties import property_as_int

    metadata = loaded.metadata
    key = known_key(metadata, partition)
    if key is None and not metadata.spec().is_unpartitioned():
        return list(_dataframe_to_data_files(metadata, rows, loaded.io))
    default = TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT
    target = property_as_int(metadata.properties, TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                             default)
    schema = pyarrow_to_schema(
        rows.schema, name_mapping=metadata.schema().name_mapping,
        downcast_ns_timestamp_to_us=Config().get_bool(DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE)
        or False, format_version=metadata.format_version)
    write_uuid, counter = uuid.uuid4(), itertools.count(0)
    return list(write_file(io=loaded.io, table_metadata=metadata, tasks=(
        WriteTask(write_uuid=write_uuid, task_id=next(counter), record_batches=batches,
                  partition_key=key, schema=schema)
        for batches in bin_pack_arrow_table(rows, default if target is None else target))))


@functools.cache
def _rewrite_class() -> type[Any]:
    from pyiceberg.manifest import DataFileContent, ManifestEntry, ManifestEntryStatus
    from pyiceberg.table.snapshots import Operation, Summary  # only with appends: pyiceberg
    from pyiceberg.table.update.snapshot import _OverwriteFiles
    from pyiceberg.table.update.validate import _validate_data_files_exist

    class RewriteFiles(_OverwriteFiles):
        """pyiceberg's overwrite of named files as Iceberg's ``RewriteFiles``: a
        ``replace`` snapshot, refused on a retry only when a file it replaces was deleted
        meanwhile (appends of others are no conflict). The live entries of the manifests
        the fold's plan read (:attr:`entries`, on the second thread) are not read again
        here, on the appends' thread: only the manifests added since are (pyiceberg's
        own overwrite reads every manifest twice, about half a second for a fold of 50
        appends' files, during which the appends wait)."""

        entries: Mapping[str, list[Any]] = {}

        def _live(self, manifest: Any) -> list[Any]:
            found = self.entries.get(manifest.manifest_path)
            return (manifest.fetch_manifest_entry(self._io, discard_deleted=True)
                    if found is None else found)

        def _existing_manifests(self) -> list[Any]:
            """pyiceberg's, with the entries read once: the parent's manifests, but those
            holding files the fold deletes (dropped, or written again without them)."""
            kept_manifests: list[Any] = []
            snapshot = self._transaction.table_metadata.snapshot_by_name(
                name=self._target_branch)
            if snapshot is None:
                return kept_manifests
            for manifest in snapshot.manifests(io=self._io):
                entries = self._live(manifest)
                kept = [e for e in entries if e.data_file not in self._deleted_data_files]
                if len(kept) == len(entries):
                    kept_manifests.append(manifest)
                    continue
                if not kept:
                    continue
                with self.new_manifest_writer(self.spec(manifest.partition_spec_id)) as out:
                    for entry in kept:
                        out.add_entry(ManifestEntry.from_args(
                            status=ManifestEntryStatus.EXISTING, snapshot_id=entry.snapshot_id,
                            sequence_number=entry.sequence_number,
                            file_sequence_number=entry.file_sequence_number,
                            data_file=entry.data_file))
                kept_manifests.append(out.to_manifest_file())
            return kept_manifests

        def _deleted_entries(self) -> list[Any]:
            """pyiceberg's, with the entries read once: the parent's live entries of the
            files the fold deletes, as deleted in this snapshot (each one required)."""
            parent = None if self._parent_snapshot_id is None else \
                self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
            deleted = [] if parent is None else [ManifestEntry.from_args(
                status=ManifestEntryStatus.DELETED, snapshot_id=self._snapshot_id,
                sequence_number=entry.sequence_number,
                file_sequence_number=entry.file_sequence_number, data_file=entry.data_file)
                for manifest in parent.manifests(self._io) for entry in self._live(manifest)
                if entry.data_file.content == DataFileContent.DATA
                and entry.data_file in self._deleted_data_files]
            self._validate_required_deletes(deleted)
            return deleted

        def _summary(self, snapshot_properties: Any = None) -> Any:
            summary = super()._summary(snapshot_properties or {})
            return Summary(Operation.REPLACE, **summary.additional_properties)

        def _validate_concurrency(self) -> None:
            window = self._commit_window
            if window is None or window.is_empty() or window.head is None:
                return
            _validate_data_files_exist(self._transaction._table, window.head,
                                       self._deleted_data_files, window.base)

    return RewriteFiles


def commit(lake: Lake, name: str, fold: Plan, written: list[Any]) -> int:
    """Lake thread: one ``replace`` snapshot of the table ``name``, the files ``fold``
    read deleted and ``written`` added (the module doc); its data files after. Raises
    :class:`~actors.tables.fold.Superseded` when another writer folded or removed some of
    the files meanwhile (pyiceberg refused the commit), the files written deleted (no
    snapshot ever named them)."""
    from pyiceberg.exceptions import ValidationException  # only with appends: pyiceberg
    from pyiceberg.table.snapshots import Operation

    loaded = lake.table(name)  # the snapshot the appends left: the commit's base
    try:
        with transaction(loaded) as folding:
            # an overwrite whose summary becomes a replace (pyiceberg sums up no replace)
            rewriting = _rewrite_class()(operation=Operation.OVERWRITE, transaction=folding,
                                         io=loaded.io)
            rewriting.entries = fold.entries  # read on the second thread by the plan
            with rewriting:
                for group in fold.groups:
                    for data in group:
                        rewriting.delete_data_file(data)
                for data in written:
                    rewriting.append_data_file(data)
    except ValidationException:
        live = {task.file.file_path for task in lake.table(name).scan().plan_files()}
        gone = sum(data.file_path not in live for group in fold.groups for data in group)
        if not gone or any(data.file_path in live for data in written):
            raise  # not another writer's fold (or, never seen, this one's files are live)
        _delete(loaded.io, written)
        raise Superseded(f"{gone} of its {fold.files} files were folded or removed by "
                         "another writer meanwhile (nothing of it committed; its "
                         f"{len(written)} new file(s) deleted)") from None
    return data_files(loaded)


def _delete(io: Any, written: list[Any]) -> None:
    """The files of a fold that was not committed removed (one that cannot be is left
    for the orphan cleanup, logged)."""
    for data in written:
        try:
            io.delete(data.file_path)
        except Exception as exc:  # noqa: BLE001 - an orphan, removed by the cleanup
            logger.warning("maintenance: %s, written by a fold that was not committed, "
                           "not removed (the orphan cleanup will): %s", data.file_path, exc)


async def fold_periodically(settings: Settings, processors: Mapping[str, type[Processor]],
                            lake: Lake, metrics: Metrics | None = None,
                            statuses: Statuses | None = None) -> None:
    """Check every :data:`CHECK_S` and fold the staging tables this process maintains
    (given its workers' ``statuses``), until cancelled (the loop of Spark's fold:
    :func:`~actors.tables.fold.fold_tables`)."""
    spark = settings.spark
    limit = spark.pyiceberg_fold_files()
    if limit is None:
        return
    owned: Callable[[TablePlan], bool] = (lambda _: True) if statuses is None \
        else holder(statuses)
    tables = staging_tables(settings, processors)
    if not tables:
        return
    logger.info("maintenance: a staging table pyiceberg appends to is folded at %d more "
                "data files than its last fold left (no JVM)", limit)
    seen: dict[str, dict[str, list[Any]]] = {}  # each table's manifests read

    async def check(name: str, after_last: int | None) -> tuple[int, Due | None]:
        count, fold = await lake.aside(functools.partial(
            plan, lake, spark, name, after_last, seen.setdefault(name, {})))
        if fold is None:
            return count, None

        async def run() -> Folded:
            started = time.monotonic()
            written = await lake.aside(functools.partial(rewrite, fold))
            after = await lake.call(functools.partial(commit, lake, name, fold, written))
            return Folded(dotted(spark, name), count, fold.files, len(written), after,
                          time.monotonic() - started)

        return count, Due(run, f"; rewriting {fold.files} small ones")

    await fold_tables(tables, owned, spark, check, metrics, every=CHECK_S, log=logger,
                      engine="; pyiceberg", forget=lambda name: seen.pop(name, None))


__all__ = ["INPUT_MAX_PART", "Plan", "commit", "data_files", "fold_periodically",
           "plan", "rewrite"]
