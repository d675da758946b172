"""The merge's fold of staging rows into final rows, as Spark DataFrames and SQL.

One order decides everything, so the final table does not depend on how staging rows were
split across merges (nor on merges running at once): per *group* (the processor's natural
key; without a key, the row's identity: every column but ``_ingested_at``) the final
table holds the first row of the group in :func:`order` among every row ever merged.

* Exact replays (rows equal in every column but ``_ingested_at``: same Kafka coordinates,
  same content, a re-delivered message) count once: the earliest ingest is kept, a row
  already final before a staging one of the same ingest.
* With a key, the order of a group's rows is the JDBC upsert's
  (:mod:`actors.sinks.jdbc_upsert`): within one Kafka partition (``_topic,
  _kafka_partition``) the higher ``_offset`` wins, whatever the timestamps say
  (:func:`within`); the highest offset of each partition then meets the others' by the
  processor's source position (``Processor.source_order``, e.g. ``_source_lsn``: desc,
  nulls last), then ``_timestamp desc nulls last``, ``_topic``, ``_kafka_partition``
  (:func:`across`). Remaining ties (equal coordinates, other content): the remaining
  columns (``asc nulls first``, ``_ingested_at`` last), so the winner is deterministic.
  NULL key values are one key (null-safe equality everywhere). Like the JDBC upsert's,
  the order is not transitive in one corner case (a key in several partitions whose
  positions or timestamps also went backwards within one): the row kept may then depend
  on how the rows were split across merges.

:func:`fold` ranks the new staging rows together with the final rows of their groups;
:func:`later` is the same order as a SQL condition, which the ``MERGE`` checks against
the row the final table holds when it runs (a merge that committed meanwhile may hold a
later one). pyspark is imported only inside functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SOURCE = "_kstage_src"
"""Where a folded row comes from: 0 the final table, 1 staging."""

_RANK, _COPIES, _FINALS = "_kstage_rank", "_kstage_copies", "_kstage_finals"

OrderTerm = tuple[str, bool, bool]
"""(column, descending, nulls first)."""


_COORDINATES = ("_timestamp", "_topic", "_kafka_partition", "_offset")
_STREAM = ("_topic", "_kafka_partition")
_PARTITION_RANK = "_kstage_stream_rank"


def within(names: Sequence[str], key: Sequence[str], source: str | None = None,
           ) -> list[OrderTerm]:
    """The order of a group's rows within one partition: offset desc, then the other
    columns (``names`` but the key, the coordinates and ``source``)."""
    rest = [n for n in names if n not in key and n not in _COORDINATES and n != source]
    return [("_offset", True, False), *((n, False, True) for n in rest)]


def across(source: str | None = None) -> list[OrderTerm]:
    """The order of the partitions' newest rows of a group: the source position (when
    the processor declares one), the timestamp, then the partition."""
    return [*([(source, True, False)] if source else []), ("_timestamp", True, False),
            ("_topic", False, True), ("_kafka_partition", False, True)]


def order(names: Sequence[str], key: Sequence[str], source: str | None = None,
          ) -> list[OrderTerm]:
    """The order of a group's rows once each partition's are ranked (:func:`rank`):
    the partitions' newest first, among them :func:`across`, then :func:`within`.
    Without a key: ``_ingested_at``."""
    if not key:
        return [("_ingested_at", False, True)]
    return [(_PARTITION_RANK, False, True), *across(source), *within(names, key, source)]


def rank(frame: Any, names: Sequence[str], key: Sequence[str], source: str | None,
         column: str) -> Any:
    """``frame`` with ``column``: the row's place in its group (1: the row kept)."""
    from pyspark.sql import Window  # pyspark only if used
    from pyspark.sql import functions as f

    groups = group_columns(names, key)
    if key:
        stream = Window.partitionBy(*groups, *_STREAM).orderBy(
            *(sort_column(t) for t in within(names, key, source)))
        frame = frame.withColumn(_PARTITION_RANK, f.row_number().over(stream))
    latest = Window.partitionBy(*groups).orderBy(
        *(sort_column(t) for t in order(names, key, source)))
    frame = frame.withColumn(column, f.row_number().over(latest))
    return frame.drop(_PARTITION_RANK) if key else frame


def later(names: Sequence[str], key: Sequence[str], source: str | None = None,
          s: str = "s", t: str = "t") -> str:
    """SQL: row ``s`` replaces row ``t`` of its group: within one partition by
    :func:`within`, else by :func:`across` (then :func:`within`)."""
    if not key:
        return beats(order(names, key), s, t)
    same = " AND ".join(f"{s}.`{c}` <=> {t}.`{c}`" for c in _STREAM)
    inside = within(names, key, source)
    return (f"CASE WHEN {same} THEN ({beats(inside, s, t)}) "
            f"ELSE ({beats([*across(source), *inside], s, t)}) END")


def group_columns(names: Sequence[str], key: Sequence[str]) -> list[str]:
    """The columns that group rows: the key, else every column but ``_ingested_at``."""
    return list(key) or [n for n in names if n != "_ingested_at"]


def sort_column(term: OrderTerm) -> Any:
    """``term`` as a Spark sort column."""
    from pyspark.sql import functions as f  # pyspark only if used

    name, descending, nulls_first = term
    column = f.col(name)
    if descending:
        return column.desc_nulls_first() if nulls_first else column.desc_nulls_last()
    return column.asc_nulls_first() if nulls_first else column.asc_nulls_last()


def beats(terms: Sequence[OrderTerm], s: str = "s", t: str = "t") -> str:
    """SQL: row ``s`` comes strictly before row ``t`` in ``terms``' order."""
    alternatives = []
    for i, (name, descending, nulls_first) in enumerate(terms):
        a, b = f"{s}.`{name}`", f"{t}.`{name}`"
        ties = [f"{s}.`{n}` <=> {t}.`{n}`" for n, _, _ in terms[:i]]
        null_first = (f"({a} IS NULL AND {b} IS NOT NULL)" if nulls_first
                      else f"({a} IS NOT NULL AND {b} IS NULL)")
        before = f"(coalesce({a} {'>' if descending else '<'} {b}, false) OR {null_first})"
        alternatives.append("(" + " AND ".join([*ties, before]) + ")")
    return " OR ".join(alternatives)


def null_safe(columns: Sequence[str], s: str = "s", t: str = "t") -> str:
    """SQL: rows ``s`` and ``t`` agree on ``columns`` (NULL equals NULL)."""
    return " AND ".join(f"{t}.`{c}` <=> {s}.`{c}`" for c in columns)


@dataclass(frozen=True, slots=True)
class Folded:
    """A fold: ``ranked`` (persisted; unpersist it) and what it counted.

    Attributes:
        changes: the rows the final table must take (new groups, or later rows than the
            final table's), with every final column.
        new_rows: staging rows folded; replays_dropped, superseded_dropped: of the
            staging and final rows folded, the exact replays and the rows a later row of
            their group replaced; changed: how many rows ``changes`` holds.
    """

    ranked: Any
    changes: Any
    new_rows: int
    replays_dropped: int
    superseded_dropped: int
    changed: int


def fold(staging: Any, current: Any, names: Sequence[str], key: Sequence[str],
         columns: Sequence[str], source: str | None = None) -> Folded:
    """Fold the new ``staging`` rows with the ``current`` final rows of their groups
    (both with every final column, ``columns``; ``names``: the columns but the final
    partition one; ``source``: the processor's source position column, if any)."""
    from pyspark.sql import Window  # pyspark only if used
    from pyspark.sql import functions as f

    identity = [n for n in names if n != "_ingested_at"]
    groups = group_columns(names, key)
    # One shuffle for both windows: rows of one identity are rows of one group.
    union = (staging.select(*columns).withColumn(SOURCE, f.lit(1))
             .unionByName(current.select(*columns).withColumn(SOURCE, f.lit(0)))
             .repartition(*groups))
    same = Window.partitionBy(*identity)
    once = same.orderBy(f.col("_ingested_at").asc(), f.col(SOURCE).asc())
    distinct = (union.withColumn("_n", f.row_number().over(once))
                .withColumn(_COPIES, f.count(f.lit(1)).over(same))
                .withColumn(_FINALS, f.sum(1 - f.col(SOURCE)).over(same))
                .filter("_n = 1").drop("_n"))
    ranked = rank(distinct, names, key, source, _RANK).persist()
    try:
        stats = ranked.agg(
            f.count(f.lit(1)).alias("distinct"), f.sum(_COPIES).alias("union"),
            f.sum(_FINALS).alias("finals"),
            f.sum(f.when(f.col(_RANK) == 1, 1).otherwise(0)).alias("kept"),
            f.sum(f.when((f.col(_RANK) == 1) & (f.col(SOURCE) == 1), 1).otherwise(0))
            .alias("changed")).first()
    except BaseException:
        ranked.unpersist()
        raise
    union_rows, finals = int(stats["union"] or 0), int(stats["finals"] or 0)
    distinct_rows, kept = int(stats["distinct"]), int(stats["kept"] or 0)
    changes = ranked.filter((f.col(_RANK) == 1) & (f.col(SOURCE) == 1)).select(*columns)
    return Folded(ranked, changes, new_rows=union_rows - finals,
                  replays_dropped=union_rows - distinct_rows,
                  superseded_dropped=distinct_rows - kept,
                  changed=int(stats["changed"] or 0))


__all__ = ["SOURCE", "Folded", "OrderTerm", "across", "beats", "fold", "group_columns",
           "later", "null_safe", "order", "rank", "sort_column", "within"]
