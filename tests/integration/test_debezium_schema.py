"""The ``debezium`` processor without ``options.columns``, end to end on the real broker,
a real Iceberg catalog (Spark's appends on one broker, pyiceberg's on the other:
tests/brokers.py PAIRWISE; the final table by kstage's merge) and a real
PostgreSQL (a JDBC upsert table): events in the JSON converter's format with their schema
land in tables made from that schema; a source ``ALTER TABLE ADD COLUMN`` midway (events
whose schema has one more field) adds the column to the staging and the upsert tables in
the running process (earlier rows NULL), and the merge carries it to the final table. An
event whose column changed type incompatibly is dead-lettered naming the field while the
rest flows; kstage killed (SIGKILL) once the column was added, run again with
``--drain``: nothing lost or doubled."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer

from actors.tables.merge import final_name
from processors.base import DELETED
from tests.integration.test_jdbc_sink import PASSWORD
from tests.kafkautil import (
    KstageProcess,
    create_topic,
    read_jsonl,
    unique,
    wait_until,
    write_config,
)
from tests.lake import IcebergReader, spark_section
from tests.postgres import JAR, USER, Postgres

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ID = {"type": "int32", "optional": False, "field": "id"}
EMAIL = {"type": "string", "optional": True, "field": "email"}
NOTE = {"type": "string", "optional": True, "field": "note"}
V1, V2 = [ID, EMAIL], [ID, EMAIL, NOTE]  # before and after ALTER TABLE ADD COLUMN note
BAD = [ID, {**EMAIL, "type": "int64"}]  # email's type changed: not a widening


def envelope(op: str, image: dict[str, Any], columns: list[dict[str, Any]],
             lsn: int) -> bytes:
    """A Debezium event as its JSON converter writes it (schemas.enable=true)."""
    schema = {"type": "struct", "name": "dbz.public.customers.Envelope", "fields": [
        {"type": "struct", "optional": True, "field": "before", "fields": columns,
         "name": "dbz.public.customers.Value"},
        {"type": "struct", "optional": True, "field": "after", "fields": columns,
         "name": "dbz.public.customers.Value"},
        {"type": "string", "optional": False, "field": "op"}]}
    return json.dumps({"schema": schema, "payload": {
        "before": image if op == "d" else None, "after": None if op == "d" else image,
        "source": {"connector": "postgresql", "lsn": lsn, "txId": lsn // 10,
                   "ts_ms": 1_700_000_000_000 + lsn}, "op": op,
        "ts_ms": 1_700_000_000_000 + lsn}}).encode()


def key(i: int) -> bytes:
    return json.dumps({"schema": {"type": "struct", "fields": [ID]},
                       "payload": {"id": i}}).encode()


async def send(broker: str, topic: str, events: list[tuple[int, bytes | None]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        for i, value in events:
            await producer.send_and_wait(topic, value, key=key(i), partition=0)
    finally:
        await producer.stop()


@pytest.mark.timeout(1200)
async def test_a_source_column_added_midway_reaches_staging_and_final_tables(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], running: Postgres,
        appends: str) -> None:
    pg = running
    group, topic, staging = unique("g-dbz-schema"), unique("dbz-schema"), "stg_dbz_schema"
    upserted = unique("pg_dbz_schema").replace("-", "_")
    login = {"url": pg.url, "user": USER, "password": PASSWORD, "jar": JAR}
    await create_topic(broker, topic)
    before = [(1, envelope("r", {"id": 1, "email": "a"}, V1, 10)),
              (2, envelope("r", {"id": 2, "email": "b"}, V1, 20)),
              (3, envelope("c", {"id": 3, "email": "c"}, V1, 30))]
    after = [(4, envelope("c", {"id": 4, "email": "d", "note": "new"}, V2, 40)),
             (1, envelope("u", {"id": 1, "email": "a2", "note": "n1"}, V2, 50)),
             (5, envelope("c", {"id": 5, "email": 7}, BAD, 60)),
             (2, envelope("d", {"id": 2, "email": "b", "note": None}, V2, 70)), (2, None),
             (3, envelope("u", {"id": 3, "email": "c2"}, V1, 80))]  # an older producer
    await send(broker, topic, before)
    catalog = {"uri": f"jdbc:sqlite:{tmp_path / 'lake' / 'catalog.db'}",
               "warehouse": str(tmp_path / "lake" / "wh")}
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
        "topic": topic, "processor": "debezium", "format": "json", "key_format": "json",
        "options": {"key_columns": ["id"]},  # no columns: from the events' schema
        "sinks": [{"type": "jdbc", "name": "pg", "table": upserted, "mode": "upsert",
                   **login}, {"type": "spark", "name": "lake", "table": staging}]}])
    data = yaml.safe_load(cfg.read_text())
    data["spark"] = spark_section(catalog, appends=appends)
    data["merge"] = {"interval_s": 1}
    cfg.write_text(yaml.safe_dump(data))
    reader = IcebergReader(data["spark"])

    first = kstage(cfg)
    try:
        # the v1 rows staged and merged (the staging table made from their schema)
        await wait_until(lambda: first.proc.poll() is not None
                         or len(reader.rows(final_name(staging))) == 3, 500,
                         "the first rows in the final table")
        assert first.proc.poll() is None, first.output()[-3000:]
        assert len(reader.rows(staging)) == 3, first.output()[-3000:]
        assert "note" not in reader.rows(staging)[0]
        await send(broker, topic, after)
        # the column is added in the running process, then it is killed
        await first.wait_for_log("evolved with the writer schema: added note", timeout=300)
        await first.wait_for_log(f"jdbc sink: table {upserted} evolved with the event "
                                 "schema: added note", timeout=300)
        assert not re.search(r"restarts=[1-9]", first.output()), first.output()[-3000:]
    finally:
        first.kill()
    fields = {f.name for f in reader.catalog.load_table(
        (reader.settings.catalog.namespace, staging)).schema().fields}
    assert "note" in fields
    assert pg.psql(f"SELECT 1 FROM information_schema.columns WHERE table_name = "  # noqa: S608
                   f"'{upserted}' AND column_name = 'note'") == [["1"]]

    second = kstage(cfg, "--drain")
    assert await second.wait(timeout=400) == 0, second.output()[-5000:]
    staged = sorted(reader.rows(staging), key=lambda r: r["_offset"])
    # every event once (the incompatible one dead-lettered), earlier rows NULL in note
    assert [(r["_offset"], r["id"], r["email"], r["note"], r["_op"], r[DELETED])
            for r in staged] == [
        (0, 1, "a", None, "r", False), (1, 2, "b", None, "r", False),
        (2, 3, "c", None, "c", False), (3, 4, "d", "new", "c", False),
        (4, 1, "a2", "n1", "u", False), (6, 2, None, None, "d", True),
        (7, 2, None, None, None, True), (8, 3, "c2", None, "u", False)]
    dead = read_jsonl(tmp_path / "dead.jsonl")
    # dead letters are at least once: the killed run may have written it already
    assert {d["offset"] for d in dead} == {5} and len(dead) <= 2
    assert all("the event's schema does not fit the table: field 'email' is long in the "
               "event's schema, string in the table's column" in d["error"] for d in dead)
    final = sorted((r["id"], r["email"], r["note"]) for r in reader.rows(final_name(staging)))
    assert final == [(1, "a2", "n1"), (3, "c2", None), (4, "d", "new")]
    assert [tuple(r) for r in pg.psql(
        f"SELECT id, email, coalesce(note, '<null>') FROM \"{upserted}\" "  # noqa: S608
        "ORDER BY id")] == [("1", "a2", "n1"), ("3", "c2", "<null>"), ("4", "d", "new")]
    assert pg.psql(f'SELECT id FROM "{upserted}_deletions"') == [["2"]]  # noqa: S608

    # run again, its first event from a producer of before the ALTER: the tables keep
    # note (NULL in that row), and nothing stalls
    await send(broker, topic, [(4, envelope("u", {"id": 4, "email": "d2"}, V1, 90))])
    third = kstage(cfg, "--drain")
    assert await third.wait(timeout=400) == 0, third.output()[-5000:]
    staged = sorted(reader.rows(staging), key=lambda r: r["_offset"])
    assert [(r["_offset"], r["id"], r["email"], r["note"]) for r in staged[-2:]] == [
        (8, 3, "c2", None), (9, 4, "d2", None)]
    final = sorted((r["id"], r["email"], r["note"]) for r in reader.rows(final_name(staging)))
    assert final == [(1, "a2", "n1"), (3, "c2", None), (4, "d2", None)]
