"""Deletions (a processor's rows marked ``_is_deleted``) in the real sinks: the JDBC upsert
table loses a deleted key's row, and its deletions table keeps the newest deletion of the
key, so the newest offset wins also against a delete (a replayed older upsert never brings
the row back); a JDBC append table, the
Iceberg staging table, JSONL and HTTP keep the deletion as a row with its marker; the final
table's MERGE deletes the row and records the deletion in the final table's deletions
table (more in test_final_deletions). The rows are the ``debezium`` processor's, from events in
Debezium's own JSON format; the last test runs ``kstage run --drain`` on the real broker.

One Spark session for the module (``jdbc_spark``: local[1]), for the JDBC writes, the
staging tables and the merges.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer

from actors.errors import FatalError, SinkError
from actors.preflight import resolve_processors
from actors.sinks import SinkContext
from actors.sinks.jdbc import JdbcSink, JdbcSinkSettings, create_table_sql, execute_statement
from actors.sinks.spark import iceberg
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.catalog import qualified
from actors.sinks.spark.sink import SparkSink, SparkSinkSettings
from actors.tables.final_deletions import deletions_name
from actors.tables.merge import final_name, merge
from processors.base import DELETED, Message, Processor, Row, table_columns
from processors.debezium import DebeziumProcessor
from processors.registry import for_options
from settings.models import Settings
from tests.http_server import HttpTestServer
from tests.integration.test_jdbc_sink import PASSWORD, settings
from tests.integration.test_jdbc_upsert import stop_postgres_at_statement
from tests.kafkautil import committed, create_topic, read_jsonl, unique, write_config
from tests.postgres import JAR, USER, Postgres

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

OPTIONS = {"key_columns": ["id"], "columns": [{"name": "id", "type": "int"},
                                              {"name": "email"}]}
CUSTOMERS: type[Processor] = for_options(DebeziumProcessor, OPTIONS)
TOPIC = "dbz.public.customers"


def change(op: str, i: int, email: str | None, offset: int, lsn: int = 0) -> Row:
    """The row the processor makes of a Debezium event (as the worker hands it on)."""
    image = {"id": i, "email": email}
    value = {"op": op, "before": image if op == "d" else None,
             "after": None if op == "d" else image,
             "source": {"connector": "postgresql", "lsn": lsn or offset, "txId": 500 + offset,
                        "ts_ms": 1000 + offset}}
    [row] = DebeziumProcessor(OPTIONS).transform(Message(TOPIC, 0, offset, 1000 + offset,
                                                         None, value, (), None))
    row.setdefault(DELETED, False)  # the worker's pipeline does it
    return row


def context(**extra: Any) -> SinkContext:
    return SinkContext(columns=table_columns(CUSTOMERS), processor="debezium",
                       key=CUSTOMERS.key, emits_deletes=True,
                       source_order=CUSTOMERS.source_order, **extra)


async def jdbc(actor: SparkActor, pg: Postgres, table: str, mode: str,
               **extra: Any) -> JdbcSink:
    sink = JdbcSink(settings(pg, table, mode=mode, **extra), actor)
    sink.bind(context())
    async with asyncio.timeout(90):
        await sink.open()
    return sink


def settings_for(table: str) -> JdbcSinkSettings:
    """Upsert settings of ``table`` (no database reached: for the checks)."""
    return JdbcSinkSettings(table=table, url="jdbc:postgresql://localhost/db", mode="upsert")


def pg_deletions(pg: Postgres, table: str) -> list[tuple[int, int]]:
    """The deletions table of upsert table ``table``: (id, _offset) of each key's newest."""
    return [(int(i), int(o)) for i, o in pg.psql(
        f'SELECT id, _offset FROM "{table}_deletions" ORDER BY id')]  # noqa: S608


def pg_rows(pg: Postgres, table: str) -> list[tuple[Any, ...]]:
    return [(int(i), None if e == "<null>" else e, d == "t", int(o), op)
            for i, e, d, o, op in pg.psql(
                f"SELECT id, coalesce(email, '<null>'), _is_deleted, _offset, _op "  # noqa: S608
                f'FROM "{table}" ORDER BY id, _offset')]


async def test_jdbc_upsert_deletes_by_key_and_a_delete_is_a_version(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    pg, table = running, "dbz_upsert"
    sink = await jdbc(jdbc_spark, pg, table, "upsert")
    # one batch mixing upserts and the delete of key 1: it folds to the newest (the
    # delete): the row is gone; key 2 stays; key 9 is deleted before it was ever seen
    async with asyncio.timeout(90):
        await sink.write([change("c", 1, "a@x", 1), change("c", 2, "b@x", 2),
                          change("u", 1, "a2@x", 3), change("d", 1, None, 4),
                          change("d", 9, None, 5)])
    assert pg_rows(pg, table) == [(2, "b@x", False, 2, "c")]
    assert pg_deletions(pg, table) == [(1, 4), (9, 5)]
    # a row written before its delete arrives in a later flush is deleted by it
    async with asyncio.timeout(90):
        await sink.write([change("d", 2, None, 7)])
    assert pg_rows(pg, table) == []
    # a replay of the older upsert (offset 3) never brings the row back; the same delete
    # replayed changes nothing
    async with asyncio.timeout(90):
        await sink.write([change("u", 1, "a2@x", 3)])
        await sink.write([change("d", 1, None, 4)])
        await sink.write([change("c", 2, "b@x", 2)])
    assert pg_rows(pg, table) == []
    assert pg_deletions(pg, table) == [(1, 4), (2, 7), (9, 5)]
    # a newer insert of the key brings it back (it was re-created in the source); an older
    # deletion replayed then does not delete it
    async with asyncio.timeout(90):
        await sink.write([change("c", 1, "again@x", 6)])
        await sink.write([change("d", 1, None, 4)])
        await sink.close()
    assert pg_rows(pg, table) == [(1, "again@x", False, 6, "c")]
    assert pg_deletions(pg, table) == [(1, 4), (2, 7), (9, 5)]


def moved(row: Row, partition: int, timestamp: int | None, lsn: int | None = None) -> Row:
    """``row`` as if read from another partition (the key's partitioning changed); its
    source position ``lsn`` if given."""
    return {**row, "_partition": partition, "_timestamp": timestamp,
            **({} if lsn is None else {"_source_lsn": lsn})}


async def test_a_replayed_older_upsert_after_a_delete_stays_out_a_newer_one_lands(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    """Each write its own flush: the deletion is the key's newest version in the deletions
    table, so no upsert older than it, or as new (equal LSNs and timestamps from another
    partition: the smaller partition wins, the deletion's), or with no LSN and no
    timestamp, lands; one newer does, and the deletion stays recorded. Across partitions
    the LSN decides before the timestamp."""
    pg, table = running, "dbz_upsert_replay"
    sink = await jdbc(jdbc_spark, pg, table, "upsert")
    async with asyncio.timeout(90):
        await sink.write([change("c", 5, "e@x", 10)])
        await sink.write([change("d", 5, None, 11)])
        assert pg_rows(pg, table) == []
        for stale in (change("c", 5, "e@x", 10), change("u", 5, "e2@x", 10),
                      moved(change("u", 5, "old@x", 3), 1, 1005),
                      moved(change("u", 5, "tie@x", 4), 1, 1011, lsn=11),
                      moved(change("u", 5, "nots@x", 5), 1, None, lsn=11),
                      moved(change("u", 5, "lsn@x", 6), 1, 2000, lsn=10)):
            await sink.write([stale])
            assert pg_rows(pg, table) == [], stale
        await sink.write([moved(change("u", 5, "later@x", 6), 1, 1012, lsn=11)])
        assert pg_rows(pg, table) == [(5, "later@x", False, 6, "u")]
        # partition 0, LSN 11 and timestamp 1012: a tie, the smaller partition wins
        await sink.write([change("u", 5, "p0@x", 12, lsn=11)])
        await sink.write([change("c", 5, "e@x", 10)])  # older than the deletion: no effect
        await sink.close()
    assert pg_rows(pg, table) == [(5, "p0@x", False, 12, "u")]
    assert pg_deletions(pg, table) == [(5, 11)]


async def test_the_server_going_down_between_the_statements_of_a_delete_rolls_it_back(
        jdbc_spark: SparkActor, running: Postgres, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flush of upserts and deletions is one transaction: the server stopped after the
    upsert and the record of the deletions, before the delete, leaves the table and the
    deletions table as they were; the retry of the batch lands it all, once."""
    pg, table = running, "dbz_upsert_inside"
    sink = await jdbc(jdbc_spark, pg, table, "upsert")
    async with asyncio.timeout(90):
        await sink.write([change("c", 1, "a@x", 1), change("c", 2, "b@x", 2)])
    statements = stop_postgres_at_statement(pg, 3, monkeypatch)
    batch = [change("d", 1, None, 3), change("c", 3, "c@x", 4)]
    with pytest.raises(SinkError, match=f"jdbc sink {table} at .*: upsert of 2 row"):
        async with asyncio.timeout(90):
            await sink.write(batch)
    assert statements == [1, 1, 1]  # the upsert, the record of the deletion, the delete
    pg.start()
    assert pg_rows(pg, table) == [(1, "a@x", False, 1, "c"), (2, "b@x", False, 2, "c")]
    assert pg_deletions(pg, table) == []
    monkeypatch.setattr("actors.sinks.jdbc_writer.execute_statement", execute_statement)
    async with asyncio.timeout(90):
        await sink.write(batch)  # the worker's retry of the same batch
        await sink.close()
    assert pg_rows(pg, table) == [(2, "b@x", False, 2, "c"), (3, "c@x", False, 4, "c")]
    assert pg_deletions(pg, table) == [(1, 3)]


def test_a_deletions_table_name_past_postgresql_limit_is_refused(tmp_path: Path) -> None:
    """PostgreSQL truncates a name longer than 63 bytes: ``kstage validate`` refuses an
    upsert table whose deletions table name would be, naming the key and the limit."""
    fine, long = "t" * 53, "t" * 54
    for table, ok in ((fine, True), (long, False)):
        sink = JdbcSink(settings_for(table), None)  # type: ignore[arg-type]
        sink.bind(context())
        problems = sink.check()
        assert (problems == []) is ok, problems
    assert problems == [(("sink", "table"), f"jdbc sink {long}: mode: upsert keeps the "
                         f"deletions of table {long} in the table {long}_deletions, longer "
                         "than PostgreSQL's 63-byte identifier limit (it would be "
                         "truncated); name the table with at most 53 characters "
                         "(sink.table)")]


async def test_an_upsert_table_made_before_deletions_is_refused_then_takes_them(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    """A JDBC table created before its processor emitted deletions has no _is_deleted:
    refused at open, naming the column and the ALTER TABLE that adds it; after it, the
    sink creates the deletions table beside it and deletes."""
    pg, table = running, "dbz_upsert_old"
    pg.psql(create_table_sql(table, CUSTOMERS.columns, CUSTOMERS.key))
    pg.psql(f'ALTER TABLE "{table}" OWNER TO {USER}')
    with pytest.raises(FatalError) as refused:
        await jdbc(jdbc_spark, pg, table, "upsert")
    message = str(refused.value)
    assert f"table {table} has no column(s) {DELETED}" in message, message
    alter = re.search(r"\(ALTER TABLE .*? adds the nullable ones\)", message)
    assert alter is not None, message
    pg.psql(alter.group(0)[1:-len(" adds the nullable ones)")])
    sink = await jdbc(jdbc_spark, pg, table, "upsert")
    async with asyncio.timeout(90):
        await sink.write([change("c", 1, "a@x", 1), change("d", 1, None, 2)])
        await sink.close()
    assert pg_rows(pg, table) == []
    assert pg_deletions(pg, table) == [(1, 2)]


async def test_jdbc_append_keeps_each_deletion_as_a_row_with_its_marker(
        jdbc_spark: SparkActor, running: Postgres) -> None:
    pg, table = running, "dbz_append"
    sink = await jdbc(jdbc_spark, pg, table, "append")
    async with asyncio.timeout(90):
        await sink.write([change("c", 1, "a@x", 1), change("d", 1, None, 2)])
        await sink.close()
    assert pg_rows(pg, table) == [(1, "a@x", False, 1, "c"), (1, None, True, 2, "d")]


async def final_deletions(actor: SparkActor, table: str) -> list[tuple[int, int]]:
    """The final table's deletions table of staging ``table``: (id, _offset) per key."""
    name = qualified(actor.settings, deletions_name(final_name(table)))
    return sorted((int(i), int(o)) for i, o in await actor.call(
        lambda spark: spark.table(name).select("id", "_offset").collect()))


async def staged(actor: SparkActor, table: str, *batches: list[Row]) -> None:
    sink = SparkSink(SparkSinkSettings(table=table), actor)
    sink.bind(context(table=table))
    await sink.open()
    for rows in batches:
        await sink.write(list(rows))
    await sink.close()


async def test_staging_keeps_deletions_and_the_final_merge_deletes_the_rows(
        jdbc_spark: SparkActor) -> None:
    actor, table = jdbc_spark, "stg_dbz"
    # a staging table written before the processor emitted deletions (no _is_deleted): the
    # sink adds the column (its old rows read NULL: not deletions)
    old = CUSTOMERS.columns

    def create_old(spark: Any) -> None:
        iceberg.create_staging(spark, actor.settings, table, old)

    await actor.call(create_old)
    await staged(actor, table, [{k: v for k, v in change("c", 5, "old@x", 0).items()
                                 if k != DELETED}])
    cfg = Settings(groups=[{"topics": [{"topic": TOPIC, "processor": "debezium",
                                        "options": OPTIONS,
                                        "sink": {"type": "spark", "table": table}}]}],
                   spark=actor.settings)

    async def final() -> list[tuple[Any, ...]]:
        name = qualified(actor.settings, final_name(table))
        return sorted(tuple(r) for r in await actor.call(
            lambda spark: spark.table(name).select("id", "email", "_offset").collect()))

    await staged(actor, table, [change("c", 1, "a@x", 1), change("c", 2, "b@x", 2)])
    [first] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert await final() == [(1, "a@x", 1), (2, "b@x", 2), (5, "old@x", 0)]
    # a batch with an update then the delete of 1 (folds to the delete), the delete of a
    # key the final table never held (inserts nothing), the delete of the old row
    await staged(actor, table, [change("u", 1, "a2@x", 3), change("d", 1, None, 4),
                                change("d", 7, None, 5), change("d", 5, None, 6)])
    [second] = await merge(cfg, resolve_processors(cfg), actor=actor)
    assert await final() == [(2, "b@x", 2)]
    # each deleted key's deletion is recorded beside the final table (so a replayed older
    # upsert stays out: tests/integration/test_final_deletions.py)
    assert await final_deletions(actor, table) == [(1, 4), (5, 6), (7, 5)]
    # merging again changes nothing
    await merge(cfg, resolve_processors(cfg), actor=actor)
    assert await final() == [(2, "b@x", 2)]
    # staging lost nothing: every row with its operation and marker
    name = qualified(actor.settings, table)
    rows = await actor.call(lambda spark: [tuple(r) for r in spark.table(name).select(
        "_offset", "id", "_op", DELETED).orderBy("_offset").collect()])
    assert rows == [(0, 5, "c", None), (1, 1, "c", False), (2, 2, "c", False),
                    (3, 1, "u", False), (4, 1, "d", True), (5, 7, "d", True),
                    (6, 5, "d", True)]


def envelope(op: str, i: int, email: str | None, lsn: int) -> dict[str, Any]:
    """A Debezium event as its JSON converter writes it, with the schema."""
    image = {"id": i, "email": email}
    columns = [{"type": "int32", "optional": False, "field": "id"},
               {"type": "string", "optional": True, "field": "email"}]
    schema = {"type": "struct", "name": "dbz.public.customers.Envelope", "fields": [
        {"type": "struct", "optional": True, "field": "before", "fields": columns},
        {"type": "struct", "optional": True, "field": "after", "fields": columns},
        {"type": "string", "optional": False, "field": "op"}]}
    return {"schema": schema, "payload": {
        "before": image if op == "d" else None, "after": None if op == "d" else image,
        "source": {"connector": "postgresql", "lsn": lsn, "txId": lsn // 10,
                   "ts_ms": 1_700_000_000_000 + lsn},
        "op": op, "ts_ms": 1_700_000_000_000 + lsn}}


def key(i: int) -> bytes:
    return json.dumps({"schema": {"type": "struct", "fields": [
        {"type": "int32", "optional": False, "field": "id"}]},
        "payload": {"id": i}}).encode()


@pytest.mark.kafka
async def test_kstage_run_lands_deletes_from_the_broker_in_every_sink(
        broker: str, running: Postgres, jdbc_spark: SparkActor, tmp_path: Path,
        kstage: Any) -> None:
    pg, warehouse = running, jdbc_spark.settings.warehouse
    group, topic = unique("g-dbz"), unique("dbz")
    upserted, staging = unique("pg_dbz").replace("-", "_"), unique("stg_dbz").replace("-", "_")
    await create_topic(broker, topic)
    events: list[tuple[int, dict[str, Any] | None]] = [
        (1, envelope("r", 1, "a@x", 10)), (2, envelope("c", 2, "b@x", 20)),
        (1, envelope("u", 1, "a2@x", 30)), (2, envelope("d", 2, "b@x", 40)), (2, None),
        (3, envelope("c", 3, "c@x", 50)), (3, envelope("d", 3, None, 60)), (3, None)]
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        for i, value in events:
            await producer.send_and_wait(topic, None if value is None else
                                         json.dumps(value).encode(), key=key(i), partition=0)
    finally:
        await producer.stop()
    login = {"url": pg.url, "user": USER, "password": PASSWORD, "jar": JAR}
    with HttpTestServer() as api:
        cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
            "topic": topic, "processor": "debezium", "format": "json", "key_format": "json",
            "options": OPTIONS,
            "sinks": [{"type": "jsonl", "path": str(tmp_path / "out.jsonl")},
                      {"type": "http", "url": f"{api.url}/customers"},
                      {"type": "jdbc", "name": "pg", "table": upserted, "mode": "upsert",
                       **login},
                      {"type": "spark", "name": "lake", "table": staging}]}])
        data = yaml.safe_load(cfg.read_text())
        data["spark"] = {"master": "local[1]", "warehouse": warehouse,
                         "flush_max_interval_s": 0.3, "conf": {"spark.driver.memory": "512m"}}
        data["merge"] = {"interval_s": 1}
        cfg.write_text(yaml.safe_dump(data))
        proc = kstage(cfg, "--drain")
        assert await proc.wait(timeout=300) == 0, proc.output()
        bodies = [r.json for r in api.requests]
    assert await committed(broker, group, topic, 1) == {0: len(events)}
    assert not (tmp_path / "dead.jsonl").exists()

    lines = read_jsonl(tmp_path / "out.jsonl")  # a tombstone: a deletion of its key
    assert [(r["_offset"], r["id"], r["_op"], r[DELETED]) for r in lines] == [
        (0, 1, "r", False), (1, 2, "c", False), (2, 1, "u", False), (3, 2, "d", True),
        (4, 2, None, True), (5, 3, "c", False), (6, 3, "d", True), (7, 3, None, True)]
    assert bodies == lines  # HTTP: each row a request body, a deletion with its marker
    assert lines[3]["_source_lsn"] == 40 and lines[3]["_source_txid"] == 4
    assert pg_rows(pg, upserted) == [(1, "a2@x", False, 2, "u")]
    assert pg_deletions(pg, upserted) == [(2, 4), (3, 7)]  # the tombstones: newer
    final = qualified(jdbc_spark.settings, final_name(staging))
    rows = await jdbc_spark.call(lambda spark: [tuple(r) for r in spark.table(final).select(
        "id", "email", "_op").collect()])
    assert rows == [(1, "a2@x", "u")]
    assert await final_deletions(jdbc_spark, staging) == [(2, 4), (3, 7)]
