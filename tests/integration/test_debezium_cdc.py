"""Change data capture end to end, with events Debezium itself produced: PostgreSQL
(``wal_level=logical``) -> Debezium's PostgreSQL connector in a Kafka Connect standalone
worker (tests/debezium_connect.py, jars from Maven Central) -> the broker -> ``kstage
run`` with the ``debezium`` processor -> a JDBC upsert table and an Iceberg staging table
merged into its final table. The topic's options list no columns: they come from the
events' schema (the JSON converter's), and an ``ALTER TABLE ADD COLUMN`` at the source
while kstage runs adds the column to both tables. After a snapshot, inserts, updates and
deletes (a key deleted and inserted again, a row updated twice), with kstage killed
(SIGKILL) midway and run again with ``--drain``, both tables hold exactly the source
table, the added column included: the whole JDBC upsert table (deleted rows are gone; its
deletions table holds each deleted key's newest deletion) and the final table's rows.

Three JVMs at once (Connect, kstage's Spark, Apache Kafka's broker): ``make cdc-e2e``
runs it, apart from ``make test``'s budget.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaConsumer

from actors.tables.merge import final_name
from tests.debezium_connect import DebeziumWorker
from tests.integration.test_jdbc_sink import PASSWORD
from tests.kafkautil import create_topic, unique, write_config
from tests.lake import IcebergReader
from tests.postgres import DATABASE, JAR, USER, Postgres, postgres_server

pytestmark = [pytest.mark.slow, pytest.mark.cdc, pytest.mark.timeout(900)]

OPTIONS = {"key_columns": ["id"]}  # the columns come from the events' schema


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    """The module's server, with logical decoding for Debezium."""
    yield from postgres_server({"wal_level": "logical"})


class Source:
    """The source table, and how many records Debezium writes for what is done to it."""

    def __init__(self, pg: Postgres, database: str) -> None:
        self.pg = pg
        self.database = database
        self.events = 0

    def sql(self, statement: str, events: int) -> None:
        self.pg.psql(statement, database=self.database)
        self.events += events

    def insert(self, ids: range) -> None:
        self.sql("INSERT INTO customers SELECT i, 'u' || i || '@shop', i * 1.25 - 7, "  # noqa: S608
                 "timestamptz '2026-11-26 10:00:00.123456+00' + i * interval '1 hour', "
                 f"CASE WHEN i % 3 = 0 THEN NULL ELSE 'n' || i END FROM generate_series("
                 f"{ids.start}, {ids.stop - 1}) i", len(ids))

    def update(self, ids: range, what: str) -> None:
        self.sql(f"UPDATE customers SET email = email || '{what}', balance = balance * 2 + "  # noqa: S608
                 f"0.01, updated_at = updated_at + interval '1 day', note = '{what}' "
                 f"WHERE id BETWEEN {ids.start} AND {ids.stop - 1}", len(ids))

    def delete(self, ids: range) -> None:
        # a delete and its tombstone per row
        self.sql(f"DELETE FROM customers WHERE id BETWEEN {ids.start} AND {ids.stop - 1}",  # noqa: S608
                 2 * len(ids))

    def rows(self) -> list[tuple[Any, ...]]:
        return rows(self.pg, "customers", self.database)


def rows(pg: Postgres, table: str, database: str, where: str = "TRUE",
         ) -> list[tuple[Any, ...]]:
    """(id, email, balance, updated_at, note, tier) of every row, by id."""
    return [(int(i), e, Decimal(b), dt.datetime.fromisoformat(u),
             None if n == "<null>" else n, None if t == "<null>" else t)
            for i, e, b, u, n, t in pg.psql(
        "SELECT id, email, balance::text, to_char(updated_at AT TIME ZONE 'UTC', "  # noqa: S608
        "'YYYY-MM-DD\"T\"HH24:MI:SS.US+00:00'), coalesce(note, '<null>'), "
        f"coalesce(tier, '<null>') FROM \"{table}\" WHERE {where} ORDER BY id",
        database=database)]


def landed(pg: Postgres, table: str) -> int:
    """How many rows ``table`` holds (0 while it does not exist)."""
    [[found]] = pg.psql(f"SELECT to_regclass('\"{table}\"') IS NOT NULL")
    if found != "t":
        return 0
    return int(pg.psql(f'SELECT count(*) FROM "{table}"')[0][0])  # noqa: S608


async def records(broker: str, topic: str) -> int:
    """How many records the topic holds (read from the start: Tansu's end offsets are
    not exact)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        count, idle = 0, 0
        while idle < 3:
            batch = await consumer.getmany(timeout_ms=500)
            found = sum(len(v) for v in batch.values())
            count, idle = count + found, 0 if found else idle + 1
        return count
    finally:
        await consumer.stop()


async def all_events(broker: str, topic: str, source: Source, worker: DebeziumWorker,
                     timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while (found := await records(broker, topic)) < source.events:
        if time.monotonic() > deadline or (worker.proc and worker.proc.poll() is not None):
            raise AssertionError(f"{found} of {source.events} Debezium events:\n"
                                 f"{worker.output()[-5000:]}")
        await asyncio.sleep(1)
    assert found == source.events, worker.output()[-3000:]


@pytest.mark.kafka
async def test_debezium_changes_land_equal_to_the_source_also_after_a_kill(
        broker: str, pg: Postgres, tmp_path: Path, kstage: Any) -> None:
    prefix = unique("dbz").replace("-", "_")
    topic = f"{prefix}.public.customers"
    upserted, staging = f"{prefix}_customers", f"stg_{prefix}"
    # a source database per test: the module's server serves both brokers' runs
    pg.psql(f"CREATE DATABASE {prefix}", database="postgres")
    pg.psql("CREATE TABLE customers (id INT PRIMARY KEY, email TEXT NOT NULL, "
            "balance NUMERIC(12,2), updated_at TIMESTAMPTZ, note TEXT)", database=prefix)
    source = Source(pg, prefix)
    source.insert(range(1, 21))  # the snapshot reads these (op r)
    await create_topic(broker, topic)
    run_dir = tmp_path / "connect"
    run_dir.mkdir()
    worker = DebeziumWorker(run_dir, broker, pg.port, prefix, ["public.customers"], prefix)
    worker.start()
    try:
        await all_events(broker, topic, source, worker)

        warehouse = tmp_path / "warehouse"
        login = {"url": pg.url, "user": USER, "password": PASSWORD, "jar": JAR}
        cfg = write_config(tmp_path / "kstage.yml", broker, unique("g-dbz"), [{
            "topic": topic, "processor": "debezium", "format": "json", "key_format": "json",
            "options": OPTIONS,
            "sinks": [{"type": "jdbc", "name": "pg", "table": upserted, "mode": "upsert",
                       **login},
                      {"type": "spark", "name": "lake", "table": staging}]}])
        data = yaml.safe_load(cfg.read_text())
        data["spark"] = {"master": "local[1]", "warehouse": str(warehouse),
                         "flush_max_interval_s": 0.5,
                         "conf": {"spark.driver.memory": "512m"}}
        data["merge"] = {"interval_s": 2}
        cfg.write_text(yaml.safe_dump(data))

        first = kstage(cfg)
        source.insert(range(21, 41))
        source.update(range(1, 11), "-a")
        source.delete(range(11, 16))
        # a column added at the source while kstage runs: the tables gain it
        source.sql("ALTER TABLE customers ADD COLUMN tier TEXT", 0)
        source.sql("UPDATE customers SET tier = 'gold' WHERE id BETWEEN 5 AND 8", 4)
        # killed once some of it landed (the snapshot and some of the inserts)
        deadline = time.monotonic() + 300
        while landed(pg, upserted) < 30:
            assert time.monotonic() < deadline, first.output()[-5000:]
            assert first.proc.poll() is None, first.output()[-5000:]
            await asyncio.sleep(0.5)
        first.kill()

        source.update(range(21, 31), "-b")
        source.update(range(21, 31), "-c")
        source.delete(range(31, 36))
        source.delete(range(1, 4))
        source.insert(range(11, 12))  # deleted, then inserted again
        source.insert(range(41, 51))
        await all_events(broker, topic, source, worker)

        second = kstage(cfg, "--drain")
        assert await second.wait(timeout=600) == 0, second.output()[-5000:]
    finally:
        worker.stop()

    expected = source.rows()
    assert len(expected) == 50 - 5 - 5 - 3 + 1
    assert rows(pg, upserted, DATABASE) == expected  # the whole table: live rows only
    deleted = pg.psql(f'SELECT id FROM "{upserted}_deletions" ORDER BY id',  # noqa: S608
                      database=DATABASE)
    # 11 was deleted, then inserted again (newer): its deletion stays, its row is back
    assert [int(i) for [i] in deleted] == [1, 2, 3, 11, 12, 13, 14, 15, *range(31, 36)]

    reader = IcebergReader({"warehouse": str(warehouse)})
    final = sorted((r["id"], r["email"], r["balance"], r["updated_at"], r["note"],
                    r["tier"]) for r in reader.rows(final_name(staging)))
    assert final == expected
    staged = reader.rows(staging)
    # a tombstone is a deletion of its record key too, its _op NULL (processors/debezium.py)
    assert {r["_op"] for r in staged} == {"r", "c", "u", "d", None}
    assert {r["tier"] for r in staged} == {None, "gold"}  # added at the source midway
    assert sum(1 for r in staged if r["_is_deleted"]) >= 13  # replays may add copies
