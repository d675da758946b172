"""``kstage merge``: fold each Spark staging table into its final table (a batch job).

For every staging table fed by topics with ``sink.type: spark`` (the sink's ``table`` or
the processor's; several topics may feed one table, their processors must then agree on
columns and key), the final table is ``final_<rest>`` for ``stg_<rest>`` (else
``<table>_final``), Parquet at ``<warehouse>/<final>``, registered by location like the
staging tables. Columns: the processor's columns, then ``_topic, _partition, _offset,
_timestamp, _ingested_at`` (no ``ingest_date``/``writer_id``).

One merge, on the SparkActor's thread:

1. list the staging table's committed Parquet files (an absent table directory: skipped
   with a note) and read the ones no earlier merge folded (all of them when the final
   table does not exist), united with the current final table (only its affected
   partitions, see below);
2. drop exact replays: rows equal in every column but ``_ingested_at`` (same Kafka
   coordinates, same content: a crash re-delivered the message), keeping the earliest
   ingest (so a final row beats its replay). The content is part of the identity
   because one message may give several rows;
3. keep the latest row per natural key (``Processor.key``, the source DDL's primary key):
   ``row_number()`` over the key ordered by ``_timestamp desc, _topic, _partition,
   _offset desc`` then the remaining columns (a total order, so the winner is
   deterministic). Windows group NULL keys as equal. A processor without a key keeps
   every distinct row;
4. write the result to ``<warehouse>/_merge_work/<final>.new``, then swap it in and
   refresh the table. A crash inside a swap is repaired by the next merge.

INSERT OVERWRITE of the affected partitions, where keys cannot move between partitions:
a processor may declare ``final_partition = (name, expression over key columns)`` (the
built-in WhereHows processors: ``log_date`` from ``log_event_time``; DataHub entity
change events: ``audit_date``). The expression is analysed against the key columns
alone at each merge (anything else is a MergeError), so a key's rows always fall into
one partition. Then only the partitions holding staging rows are read from the final
table, merged and swapped in one directory at a time (``<final>/p=v`` ->
``.old-parts/p=v``, ``.new/p=v`` -> ``<final>/p=v``); other partitions are not touched.
A crash between the two renames is undone by the next merge (the old partition is put
back, and the merge runs again over it). Without ``final_partition`` (MCL: its key,
entity urn + aspect, carries no time) or when the final table's layout does not match
(first merge, or a partition declared later), the final table is rewritten whole
(``<final>`` -> ``.old``, ``.new`` -> ``<final>``). The result is always written
elsewhere first: a table is never overwritten while it is read.

How far it merged, and idempotence: ``<warehouse>/_merge_state/<final>.json`` holds
``merged_at``, ``staging_rows`` (all of staging, from the files' footers),
``final_rows``, ``max_ingested_at`` (the newest staging row merged) and
``merged_files``: the staging files (relative paths) folded so far, written after the
swap. Files are the unit, not an ingest-time watermark: a slow append can commit rows
older than the last merge's newest row, but never a file the merge already listed (Spark
moves complete files into place). A merge without new files changes nothing; a crash
after the swap but before the state was written re-reads those files, whose rows are
then exact replays of final rows and dropped. Steps 2-3 are deterministic, so the final
table does not depend on how the files were split across merges. Files removed from
staging (retention) are forgotten; their rows stay in the final table.

Concurrency: one merge per table at a time, across processes: each merge holds an
exclusive ``flock`` on ``_merge_state/<final>.lock`` and a merge that finds it taken is
skipped ("another process is merging this table"). Sinks may append while a merge runs:
the merge reads the files listed when it starts and the rest waits for the next merge.

The warehouse is a local directory (as for the sink): the swap uses ``os.rename`` and
the lock ``flock``, so every process merging one table must see one POSIX file system.
pyspark is imported only inside functions.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.sinks.spark.actor import SparkActor, spark_actor
from actors.sinks.spark.iceberg import struct_type
from actors.sinks.spark.sink import SparkSinkSettings
from processors.base import COORDINATE_COLUMNS, Column
from settings.errors import SettingsError
from settings.models import Settings

logger = logging.getLogger(__name__)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class MergeConfigError(SettingsError):
    """The configuration cannot be merged (unknown table, disagreeing processors)."""


class MergeError(Exception):
    """A merge failed while running (Spark or file system)."""


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What one table's merge did.

    Attributes:
        table, final_table: the staging table and the final table it was folded into.
        staging_rows: rows in the staging table (replays included).
        final_rows: rows in the final table after the merge.
        new_rows: rows of the staging files this merge folded (none merged before).
        replays_dropped: of those, exact replays of another new row or of a final row.
        superseded_dropped: distinct rows dropped because a later row has their key.
        skipped: the table was not merged; ``note`` says why.
    """

    table: str
    final_table: str
    staging_rows: int = 0
    final_rows: int = 0
    replays_dropped: int = 0
    superseded_dropped: int = 0
    new_rows: int = 0
    skipped: bool = False
    note: str = ""

    def summary(self) -> str:
        """One line for the operator."""
        head = f"{self.table} -> {self.final_table}"
        if self.skipped:
            return f"{head}: skipped ({self.note})"
        return (f"{head}: {self.staging_rows} staging rows, {self.final_rows} final rows "
                f"({self.replays_dropped} replays dropped, {self.superseded_dropped} "
                f"superseded; {self.new_rows} new since last merge)")


@dataclass(frozen=True, slots=True)
class TablePlan:
    """One staging table to merge: its columns, natural key and the topics feeding it."""

    table: str
    final_table: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    topics: tuple[str, ...]
    partition: tuple[str, str] | None = None


def final_name(table: str) -> str:
    """``stg_x`` -> ``final_x``; any other name -> ``<name>_final``."""
    if table.startswith("stg_") and len(table) > len("stg_"):
        return "final_" + table[len("stg_"):]
    return f"{table}_final"


def plan(settings: Settings, table: str | None = None) -> list[TablePlan]:
    """The staging tables of ``settings``' spark sinks (only ``table`` when given)."""
    from actors.master import resolve_processors  # noqa: PLC0415 - loads the processors

    classes = resolve_processors(settings)
    found: dict[str, TablePlan] = {}
    for group in settings.groups:
        for topic, sink in ((t, n.settings) for t in group.topics for n in t.named_sinks()):
            if not isinstance(sink, SparkSinkSettings):
                continue
            cls = classes[topic.processor]
            name = sink.table or cls.table
            if not name:
                raise MergeConfigError(f"topic {topic.topic!r}: processor {cls.name!r} names no "
                                       "table; set sink.table")
            if not cls.columns:
                raise MergeConfigError(f"table {name}: processor {cls.name!r} declares no "
                                       "columns")
            missing = [k for k in cls.key if k not in {c.name for c in cls.columns}]
            if missing:
                raise MergeConfigError(f"table {name}: key columns {missing} of processor "
                                       f"{cls.name!r} are not among its columns")
            partition = cls.final_partition
            if partition is not None:
                pname = partition[0]
                if not _IDENTIFIER.match(pname) or pname in {c.name for c in cls.columns}:
                    raise MergeConfigError(f"table {name}: processor {cls.name!r}: final "
                                           f"partition column {pname!r} must be a new plain "
                                           "identifier (not one of the row's columns)")
                if not cls.key:
                    raise MergeConfigError(f"table {name}: processor {cls.name!r} declares a "
                                           "final partition but no key")
            seen = found.get(name)
            if seen is None:
                found[name] = TablePlan(name, final_name(name), tuple(cls.columns),
                                        tuple(cls.key), (topic.topic,), partition)
                continue
            if (seen.columns, seen.key, seen.partition) != (tuple(cls.columns),
                                                            tuple(cls.key), partition):
                raise MergeConfigError(f"table {name}: topics {list(seen.topics)} and "
                                       f"{topic.topic!r} feed it with different columns, key "
                                       "or final partition")
            found[name] = TablePlan(name, seen.final_table, seen.columns, seen.key,
                                    (*seen.topics, topic.topic), partition)
    if table is not None:
        if table not in found:
            known = ", ".join(sorted(found)) or "none"
            raise MergeConfigError(f"table {table!r} is not fed by a spark sink "
                                   f"(spark tables: {known})")
        return [found[table]]
    return list(found.values())


async def merge(settings: Settings, table: str | None = None,
                actor: SparkActor | None = None) -> list[MergeResult]:
    """Merge every spark staging table of ``settings`` (or only ``table``) into its final
    table; see the module docstring. Raises MergeConfigError (or the processor registry's
    error) for configuration problems, MergeError when a merge fails."""
    actor = actor or spark_actor(settings.spark)
    return [await merge_table(actor, item) for item in plan(settings, table)]


async def merge_table(actor: SparkActor, item: TablePlan) -> MergeResult:
    """Merge one planned table on ``actor``'s thread; MergeError when it fails."""
    job = _Job(actor.warehouse, item)
    try:
        result = await actor.call(job.run)
    except MergeError:
        raise
    except Exception as exc:  # noqa: BLE001 - any Spark/file failure fails the merge
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise MergeError(f"merge {item.table} -> {item.final_table} failed: "
                         f"{type(exc).__name__}: {first}") from exc
    logger.info("merge: %s", result.summary())
    return result


def _micros_to_iso(micros: int) -> str:
    return (_EPOCH + dt.timedelta(microseconds=micros)).isoformat()


def _iso_to_micros(text: str) -> int:
    delta = dt.datetime.fromisoformat(text) - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


class _Job:
    """One table's merge; :meth:`run` runs on the Spark thread."""

    def __init__(self, warehouse: Path, item: TablePlan) -> None:
        self.item = item
        self.staging = warehouse / item.table
        self.final = warehouse / item.final_table
        work = warehouse / "_merge_work"
        self.new, self.old = work / f"{item.final_table}.new", work / f"{item.final_table}.old"
        self.old_parts = work / f"{item.final_table}.old-parts"
        self.state = warehouse / "_merge_state" / f"{item.final_table}.json"
        self.names = [c.name for c in item.columns] + [*COORDINATE_COLUMNS, "_ingested_at"]

    def _previous(self) -> tuple[int | None, set[str]]:
        """The last merge's ``max_ingested_at`` (micros) and the staging files it had
        merged (relative paths)."""
        try:
            state = json.loads(self.state.read_text(encoding="utf-8"))
            top = state["max_ingested_at"]
            return (_iso_to_micros(top) if top else None,
                    set(state.get("merged_files", ())))
        except FileNotFoundError:
            return None, set()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("merge: %s: unreadable state (%s); merging every staging file "
                           "again (replays are dropped)", self.state, exc)
            return None, set()

    def _staging_files(self) -> list[str]:
        """The staging table's committed Parquet files, relative to its directory (files
        being written sit under ``_temporary`` and are not listed)."""
        found = []
        for path in self.staging.rglob("*.parquet"):
            relative = path.relative_to(self.staging)
            if not any(part.startswith(("_", ".")) for part in relative.parts):
                found.append(relative.as_posix())
        return sorted(found)

    def _repair(self) -> None:
        """Finish or undo a swap a crash interrupted; drop a half-written result."""
        if self.old.exists():
            if self.final.exists():
                shutil.rmtree(self.old)
            else:
                os.rename(self.old, self.final)
        if self.old_parts.exists():
            for part in sorted(self.old_parts.iterdir()):
                target = self.final / part.name
                if target.exists():  # swapped: the old partition is garbage
                    shutil.rmtree(part)
                else:  # taken out, not yet replaced: put it back
                    os.rename(part, target)
            shutil.rmtree(self.old_parts)
        if self.new.exists():
            shutil.rmtree(self.new)

    def run(self, spark: Any) -> MergeResult:
        """Merge under an exclusive lock on ``_merge_state/<final>.lock``: a merge of the
        same table by another process (``kstage merge`` beside a service merging on an
        interval) is skipped, never run twice at once."""
        if not self.staging.exists():
            return MergeResult(self.item.table, self.item.final_table, skipped=True,
                               note=f"no staging data at {self.staging}")
        self.state.parent.mkdir(parents=True, exist_ok=True)
        with open(self.state.with_suffix(".lock"), "a+b") as lock:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return MergeResult(self.item.table, self.item.final_table, skipped=True,
                                   note="another process is merging this table")
            try:
                return self._run(spark)
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _partition_type(self, spark: Any, schema: Any) -> Any:
        """The Spark type of the final partition column; MergeError when its expression
        uses anything but the key columns."""
        from pyspark.sql.types import StructType  # noqa: PLC0415 - pyspark only if used

        assert self.item.partition is not None  # noqa: S101 - caller checked
        name, expression = self.item.partition
        keys = spark.createDataFrame([], StructType([schema[k] for k in self.item.key]))
        try:
            return keys.selectExpr(f"{expression} AS `{name}`").schema[name].dataType
        except Exception as exc:  # noqa: BLE001 - Spark's analysis error, reworded
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            raise MergeError(f"merge {self.item.table}: final partition {name!r} = "
                             f"{expression!r} must be an expression over the key columns "
                             f"{list(self.item.key)} only: {first}") from exc

    def _partitioned_layout(self, name: str) -> bool:
        """Is the existing final table laid out in ``name=...`` directories (and nothing
        else holding data)?"""
        entries = [e for e in self.final.iterdir() if not e.name.startswith(("_", "."))]
        return all(e.is_dir() and e.name.startswith(f"{name}=") for e in entries)

    def _run(self, spark: Any) -> MergeResult:
        from pyspark.sql import Window  # noqa: PLC0415 - pyspark only if used
        from pyspark.sql import functions as f  # noqa: PLC0415
        from pyspark.sql.types import StructType  # noqa: PLC0415

        item = self.item
        self._repair()
        schema = struct_type(item.columns)
        previous_max, merged = self._previous()
        files = self._staging_files()
        file_schema = StructType([schema[n] for n in self.names])
        total = (spark.read.schema(file_schema).parquet(*(str(self.staging / x) for x in files))
                 .count() if files else 0)  # from the files' footers
        if self.final.exists():
            new_files = [x for x in files if x not in merged]
        else:  # first merge, or the final table was removed: fold everything
            new_files = files
        final_schema = self._final_schema(spark, schema)
        if not new_files and self.final.exists():  # nothing new: the final table stays
            self._register(spark, final_schema)
            kept = spark.read.schema(final_schema).parquet(str(self.final)).count()
            self._record(total, kept, previous_max, files)
            return MergeResult(item.table, item.final_table, staging_rows=total,
                               final_rows=kept)
        if new_files:
            staging = spark.read.schema(file_schema).parquet(
                *(str(self.staging / x) for x in new_files)).select(*self.names)
        else:
            staging = spark.createDataFrame([], file_schema)
        identity = [n for n in self.names if n != "_ingested_at"]
        stats = staging.agg(f.count(f.lit(1)).alias("rows"),
                            f.max(f.unix_micros("_ingested_at")).alias("max_micros")).first()
        new = int(stats["rows"])
        newest = max((m for m in (previous_max, stats["max_micros"]) if m is not None),
                     default=None)

        columns = list(self.names)
        incremental = False
        if item.partition is not None:
            pname, expression = item.partition
            staging = staging.withColumn(pname, f.expr(expression))
            columns.append(pname)
            incremental = self.final.exists() and self._partitioned_layout(pname)
        union = staging
        if self.final.exists():
            if incremental:
                current = spark.read.schema(final_schema).parquet(str(self.final))
                affected = staging.select(f.col(pname).alias("_affected")).distinct()
                current = current.join(affected, current[pname].eqNullSafe(
                    affected["_affected"]), "left_semi")
            else:  # whole table; a final table written before its partition was declared
                current = spark.read.schema(StructType(
                    [schema[n] for n in self.names])).parquet(str(self.final))
                if item.partition is not None:
                    current = current.withColumn(pname, f.expr(expression))
            union = staging.unionByName(current.select(*columns))
        once = Window.partitionBy(*identity).orderBy(f.col("_ingested_at").asc())
        distinct = (union.withColumn("_n", f.row_number().over(once))
                    .filter("_n = 1").drop("_n"))
        if item.key:
            rest = [n for n in self.names if n not in item.key and n not in COORDINATE_COLUMNS]
            order = [f.col("_timestamp").desc_nulls_last(), f.col("_topic").asc(),
                     f.col("_partition").asc(), f.col("_offset").desc(),
                     *(f.col(n).asc_nulls_first() for n in rest)]
            latest = Window.partitionBy(*item.key).orderBy(*order)
            ranked = distinct.withColumn("_rank", f.row_number().over(latest))
        else:
            ranked = distinct.withColumn("_rank", f.lit(1))
        ranked = ranked.persist()
        try:
            counted = ranked.agg(f.count(f.lit(1)).alias("all"),
                                 f.sum(f.when(f.col("_rank") == 1, 1).otherwise(0)).alias("kept"),
                                 ).first()
            replays = int(union.count()) - int(counted["all"])
            superseded = int(counted["all"]) - int(counted["kept"] or 0)
            result = (ranked.filter("_rank = 1").select(*columns)
                      .orderBy(*(item.key or identity), "_topic", "_partition", "_offset"))
            self.new.parent.mkdir(parents=True, exist_ok=True)
            writer = result.write.mode("overwrite")
            if item.partition is not None:
                writer = writer.partitionBy(item.partition[0])
            writer.parquet(str(self.new))
        finally:
            ranked.unpersist()
        if incremental:
            self._swap_partitions()
        else:
            self._swap()
        self._register(spark, final_schema)
        kept = spark.read.schema(final_schema).parquet(str(self.final)).count()
        self._record(total, kept, newest, files)
        return MergeResult(item.table, item.final_table, staging_rows=total, final_rows=kept,
                           replays_dropped=replays, superseded_dropped=superseded, new_rows=new)

    def _final_schema(self, spark: Any, schema: Any) -> Any:
        """The final table's schema: the row's columns and coordinates, then the final
        partition column if the processor declares one."""
        from pyspark.sql.types import StructField, StructType  # noqa: PLC0415

        fields = [schema[n] for n in self.names]
        if self.item.partition is not None:
            fields.append(StructField(self.item.partition[0],
                                      self._partition_type(spark, schema), True))
        return StructType(fields)

    def _swap(self) -> None:
        if self.final.exists():
            os.rename(self.final, self.old)
        os.rename(self.new, self.final)
        if self.old.exists():
            shutil.rmtree(self.old)

    def _swap_partitions(self) -> None:
        """Replace the final table's partitions that the merge rewrote, one at a time."""
        self.old_parts.mkdir(parents=True, exist_ok=True)
        for part in sorted(p for p in self.new.iterdir() if p.is_dir()
                           and not p.name.startswith(("_", "."))):
            target = self.final / part.name
            if target.exists():
                os.rename(target, self.old_parts / part.name)
            os.rename(part, target)
        shutil.rmtree(self.old_parts)
        shutil.rmtree(self.new)

    def _register(self, spark: Any, final_schema: Any) -> None:
        name = self.item.final_table
        cols = ", ".join(f"`{field.name}` {field.dataType.simpleString().upper()}"
                         for field in final_schema.fields)
        partitioned = (f"PARTITIONED BY (`{self.item.partition[0]}`) "
                       if self.item.partition is not None else "")
        location = str(self.final).replace("\\", "\\\\").replace("'", "\\'")
        spark.sql(f"CREATE TABLE IF NOT EXISTS `{name}` ({cols}) USING parquet "
                  f"{partitioned}LOCATION '{location}'")
        if partitioned:
            spark.sql(f"ALTER TABLE `{name}` RECOVER PARTITIONS")
        spark.sql(f"REFRESH TABLE `{name}`")

    def _record(self, staging_rows: int, final_rows: int, max_micros: int | None,
                files: list[str]) -> None:
        state = {
            "staging_table": self.item.table,
            "merged_at": dt.datetime.now(dt.UTC).isoformat(),
            "staging_rows": staging_rows,
            "final_rows": final_rows,
            "max_ingested_at": None if max_micros is None else _micros_to_iso(int(max_micros)),
            "merged_files": files,
        }
        self.state.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.state)


__all__ = ["MergeConfigError", "MergeError", "MergeResult", "TablePlan",
           "final_name", "merge", "merge_table", "plan"]
