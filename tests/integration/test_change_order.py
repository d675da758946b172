"""The order of a key's changes, and Debezium's tombstones, in both tables that fold them:
the JDBC upsert table (and its deletions table) and the Iceberg final table (and its
deletions table) must end with the same rows from the same replayed events.

The order (docs/spark.md, "Final tables: the merge"): within a partition the offset
decides, whatever the record timestamps say; across partitions the processor's source
position (``debezium``: ``_source_lsn``), else the timestamp. A tombstone (a null value)
deletes its key, also when compaction removed the ``d`` before it.

Real PostgreSQL, real Spark with Iceberg and the SQLite catalog; the rows are the
``debezium`` processor's, from Debezium's envelopes. One Spark session for the module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

import pytest

from actors.preflight import resolve_processors
from actors.sinks.jdbc import JdbcSink
from actors.sinks.jdbc_append import _WRITERS
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import qualified
from actors.tables.final_deletions import deletions_name
from actors.tables.merge import MergeConfigError, final_name, merge, plan
from processors.base import DELETED, Message, Row
from processors.debezium import DebeziumProcessor
from settings.models import Settings
from tests.integration.test_deletes import OPTIONS, TOPIC, context, jdbc, settings_for, staged
from tests.postgres import Postgres

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def event(op: str, i: int, email: str | None, *, partition: int, offset: int,
          timestamp: int, lsn: int) -> Row:
    """The row the processor makes of a Debezium event at these coordinates (as the
    worker hands it on)."""
    image = {"id": i, "email": email}
    value = {"op": op, "before": image if op == "d" else None,
             "after": None if op == "d" else image,
             "source": {"connector": "postgresql", "lsn": lsn, "txId": lsn // 10,
                        "ts_ms": timestamp}}
    [row] = DebeziumProcessor(OPTIONS).transform(Message(
        TOPIC, partition, offset, timestamp, {"id": i}, value, (), None))
    row.setdefault(DELETED, False)
    return row


def tombstone(i: int, *, partition: int, offset: int, timestamp: int) -> Row:
    """The row of the tombstone Debezium writes after a delete (a null value)."""
    [row] = DebeziumProcessor(OPTIONS).transform(Message(
        TOPIC, partition, offset, timestamp, {"id": i}, None, (), None))
    return row


def pg_state(pg: Postgres, table: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(id, email, partition, offset) of the upsert table's rows, and (id, partition,
    offset) of its deletions table's."""
    live = [(int(i), e, int(p), int(o)) for i, e, p, o in pg.psql(
        f'SELECT id, email, _partition, _offset FROM "{table}" ORDER BY id')]  # noqa: S608
    gone = [(int(i), int(p), int(o)) for i, p, o in pg.psql(
        f'SELECT id, _partition, _offset FROM "{table}_deletions" ORDER BY id')]  # noqa: S608
    return live, gone


async def final_state(actor: SparkActor, table: str,
                      ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The same of the final table of staging ``table`` and its deletions table."""
    final = qualified(actor.settings, final_name(table))
    gone = qualified(actor.settings, deletions_name(final_name(table)))

    def read(spark: Any) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        return (sorted(tuple(r) for r in spark.table(final).select(
                    "id", "email", "_kafka_partition", "_offset").collect()),
                sorted(tuple(r) for r in spark.table(gone).select(
                    "id", "_kafka_partition", "_offset").collect()))

    return await actor.call(read)


async def both(actor: SparkActor, pg: Postgres, name: str, batches: list[list[Row]],
               ) -> tuple[Any, Any]:
    """Feed ``batches`` to a JDBC upsert table (a flush each) and to a staging table (an
    append each, a merge after each): the state of both."""
    sink = await jdbc(actor, pg, name, "upsert")
    staging = f"stg_{name}"
    cfg = Settings(groups=[{"topics": [{"topic": TOPIC, "processor": "debezium",
                                        "options": OPTIONS,
                                        "sink": {"type": "spark", "table": staging}}]}],
                   spark=actor.settings)
    async with asyncio.timeout(300):
        for batch in batches:
            await sink.write([dict(r) for r in batch])
            await staged(actor, staging, [dict(r) for r in batch])
            await merge(cfg, resolve_processors(cfg), actor=actor)
        await sink.close()
        return pg_state(pg, name), await final_state(actor, staging)


async def test_within_a_partition_the_offset_decides_across_them_the_lsn(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    # key 1: its delete's producer clock stepped back (timestamp before the update's)
    # key 2: the same key in two partitions, the LSNs saying the opposite of the clocks
    # key 3: likewise, the later change (by LSN) a delete
    # key 4: an update whose clock stepped back, within one partition
    first = [event("c", 1, "a@x", partition=0, offset=1, timestamp=1001, lsn=100),
             event("u", 1, "a2@x", partition=0, offset=2, timestamp=1005, lsn=200),
             event("u", 2, "p0@x", partition=0, offset=4, timestamp=2000, lsn=500),
             event("c", 3, "c@x", partition=1, offset=1, timestamp=3000, lsn=700),
             event("c", 4, "d@x", partition=0, offset=6, timestamp=4000, lsn=900)]
    second = [event("d", 1, None, partition=0, offset=3, timestamp=1003, lsn=300),
              event("u", 2, "p1@x", partition=1, offset=0, timestamp=1500, lsn=600),
              event("d", 3, None, partition=0, offset=5, timestamp=2500, lsn=800),
              event("u", 4, "d2@x", partition=0, offset=7, timestamp=3900, lsn=1000)]
    # the older changes replayed (an offset reset, a dlq replay): nothing comes back
    replay = [*first, *second]
    pg, gone = await both(jdbc_spark, running, "order_upsert", [first, second, replay])
    assert pg == ([(2, "p1@x", 1, 0), (4, "d2@x", 0, 7)], [(1, 0, 3), (3, 0, 5)])
    assert gone == pg


async def test_a_tombstone_deletes_its_key_also_without_its_delete(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    """On a compacted topic a consumer that fell behind sees a key's tombstone without
    the ``d`` before it: the tombstone deletes the row; after a ``d`` it changes nothing
    more; a replay of the older insert does not bring the row back."""
    inserts = [event("c", 5, "e@x", partition=0, offset=10, timestamp=5000, lsn=100),
               event("c", 6, "f@x", partition=0, offset=11, timestamp=5001, lsn=110),
               event("c", 7, "g@x", partition=0, offset=12, timestamp=5002, lsn=120)]
    gone = [tombstone(5, partition=0, offset=14, timestamp=5004),  # its d compacted away
            event("d", 6, None, partition=0, offset=15, timestamp=5005, lsn=150),
            tombstone(6, partition=0, offset=16, timestamp=5006)]
    pg, final = await both(jdbc_spark, running, "tombstone_upsert",
                           [inserts, gone, inserts])
    assert pg == ([(7, "g@x", 0, 12)], [(5, 0, 14), (6, 0, 16)])
    assert final == pg


async def test_deletions_tables_made_before_get_the_source_position_column(
        jdbc_spark: SparkActor, running: Postgres, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deletions tables made when the processor declared no source position: the next
    open (JDBC) or merge (final table) adds the column, NULL in the old deletions, and
    orders by it from then on."""
    old = [event("c", 8, "h@x", partition=0, offset=20, timestamp=6000, lsn=100),
           event("d", 8, None, partition=0, offset=21, timestamp=6001, lsn=110)]
    with monkeypatch.context() as before:
        before.setattr(DebeziumProcessor, "source_order", None)
        await both(jdbc_spark, running, "before_lsn", [old])
    columns = running.psql("SELECT column_name FROM information_schema.columns WHERE "
                           "table_name = 'before_lsn_deletions' ORDER BY ordinal_position")
    assert ["_source_lsn"] not in columns
    _WRITERS[jdbc_spark].clear()  # kstage started again, upgraded
    # the same key in partition 1: an older change by its LSN, though later by its clock
    # (the old deletion's NULL LSN loses to any), then a later one by its LSN
    later = [event("c", 9, "i@x", partition=0, offset=22, timestamp=6002, lsn=120),
             event("d", 9, None, partition=0, offset=23, timestamp=6003, lsn=130),
             event("u", 9, "old@x", partition=1, offset=0, timestamp=7000, lsn=125),
             event("u", 8, "back@x", partition=1, offset=1, timestamp=5000, lsn=140)]
    pg, final = await both(jdbc_spark, running, "before_lsn", [later])
    assert pg == ([(8, "back@x", 1, 1)], [(8, 0, 21), (9, 0, 23)])
    assert final == pg


def test_a_source_order_that_is_not_a_long_column_is_refused() -> None:
    """``Processor.source_order`` must name a long column of the rows: the merge's plan
    and the JDBC upsert sink's check refuse another (before anything starts)."""
    class ByOp(DebeziumProcessor):
        source_order = "_op"  # a string

    cfg = Settings(groups=[{"topics": [{"topic": TOPIC, "processor": "debezium",
                                        "options": OPTIONS,
                                        "sink": {"type": "spark", "table": "stg_by_op"}}]}])
    why = ("processor 'debezium' orders changes across partitions by '_op' "
           "(Processor.source_order), which is not a long column of its rows")
    with pytest.raises(MergeConfigError, match=re.escape(f"table stg_by_op: {why}")):
        plan(cfg, {"debezium": ByOp})
    sink = JdbcSink(settings_for("by_op"), None)  # type: ignore[arg-type]
    sink.bind(dataclasses.replace(context(), source_order="_op"))
    assert sink.check() == [(("processor",), (
        "jdbc sink by_op: processor 'debezium' orders changes across partitions by '_op' "
        "(Processor.source_order), which is not a long column of its rows"))]
