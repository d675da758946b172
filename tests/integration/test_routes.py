"""``route:`` on the real broker, into files (cheap): each message's rows land in
the file of the table its value field, header or key routes it to, the others in the
default's; a message with no route and no default, and one past ``max_tables``, are
poison naming their topic, partition, offset and value (or the limit); every offset is
committed. The routing by a header or key runs on both brokers (the broker carries them),
and so does a failing table retried alone (a row of docs/operations.md's fault table); the
poison route on Tansu alone (tests/brokers.py: the route's own work)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from service.broker import free_port
from tests.integration.test_topic_patterns import wait_until_committed
from tests.kafkautil import (
    KstageProcess,
    committed,
    create_topic,
    read_jsonl,
    unique,
    wait_readyz,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

KINDS = ["click", "view", "buy", "click", "other", "view", "click", "zzz", "buy", "view"]
TABLES = {"click": "stg_clicks", "view": "stg_views", "buy": "stg_buys"}


async def send(broker: str, topic: str, items: Iterable[tuple[bytes | None, Any,
                                                             list[tuple[str, bytes]]]]) -> None:
    """Produce (key, JSON value, headers) records, in order, to partition 0."""
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        for key, value, headers in items:
            await producer.send(topic, json.dumps(value).encode(), key=key,
                                headers=headers, partition=0)
        await producer.flush()
    finally:
        await producer.stop()


def routed(tmp_path: Path, name: str, by: str, **route: Any) -> dict[str, Any]:
    return {"topic": name, "processor": "json_rows", "key_format": "string",
            "route": {"by": by, **route},
            "sink": {"type": "jsonl", "path": str(tmp_path / name / "{table}.jsonl")}}


def landed(tmp_path: Path, topic: str) -> dict[str, list[int]]:
    """Each table's file of ``topic``: the ``i`` of its rows, in order."""
    folder = tmp_path / topic
    return {p.stem: [r["i"] for r in read_jsonl(p)]
            for p in sorted(folder.glob("*.jsonl"))} if folder.exists() else {}


@pytest.mark.timeout(300)
async def test_rows_go_to_the_table_of_their_value_field_header_or_key(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    group, prefix = unique("g-route"), unique("route")
    topics = {by: f"{prefix}-{by.split('.')[0]}" for by in ("value.kind", "header.kind",
                                                            "key")}
    for topic in topics.values():
        await create_topic(broker, topic)
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [
        routed(tmp_path, topic, by, tables=TABLES, default="stg_other")
        for by, topic in topics.items()])
    proc = kstage(cfg)
    for by, topic in topics.items():
        await send(broker, topic, (
            (kind.encode() if by == "key" else b"k",
             {"i": i, "kind": kind if by == "value.kind" else "none"},
             [("kind", kind.encode())] if by == "header.kind" else [])
            for i, kind in enumerate(KINDS)))
    expected = {"stg_clicks": [0, 3, 6], "stg_views": [1, 5, 9], "stg_buys": [2, 8],
                "stg_other": [4, 7]}
    for by, topic in topics.items():
        await wait_until(lambda t=topic: landed(tmp_path, t) == expected, 90,
                         f"the rows of {topic} (route by {by}) in their tables: "
                         f"{landed(tmp_path, topics[by])}")
        await wait_until_committed(broker, group, topic, len(KINDS))
        rows = read_jsonl(tmp_path / topic / "stg_clicks.jsonl")
        assert all("_kstage_route" not in r and r["_offset"] == r["i"] for r in rows), rows
    assert not (tmp_path / "dead.jsonl").exists()
    proc.kill()


@pytest.mark.timeout(300)
async def test_a_message_with_no_route_or_past_max_tables_is_poison(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    group, prefix = unique("g-route"), unique("route")
    strict, capped = f"{prefix}-strict", f"{prefix}-capped"
    for topic in (strict, capped):
        await create_topic(broker, topic)
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [
        routed(tmp_path, strict, "value.kind", tables=TABLES),
        routed(tmp_path, capped, "value.kind", template="t_{value}", max_tables=2)])
    proc = kstage(cfg)
    await send(broker, strict, ((b"k", {"i": i, "kind": kind}, [])
                                for i, kind in enumerate(["click", "nope", "view"])))
    await send(broker, capped, ((b"k", {"i": i, "kind": kind}, [])
                                for i, kind in enumerate(["A.b", "c", "A.b", "d", "c"])))
    await wait_until(lambda: landed(tmp_path, strict) == {"stg_clicks": [0],
                                                          "stg_views": [2]}, 90,
                     f"the rows of {strict} in their tables")
    await wait_until(lambda: landed(tmp_path, capped) == {"t_a_b": [0, 2], "t_c": [1, 4]},
                     90, f"the rows of {capped} in their tables")
    await wait_until_committed(broker, group, strict, 3)
    await wait_until_committed(broker, group, capped, 5)
    letters = {(d["topic"], d["offset"]): d["error"] for d in read_jsonl(tmp_path / "dead.jsonl")}
    assert set(letters) == {(strict, 1), (capped, 3)}, letters
    assert (f"{strict}[0]@1: route by value.kind: value 'nope': no table routes it "
            "(tables: buy, click, view) and the route has no default") in letters[strict, 1]
    assert (f"{capped}[0]@3: route by value.kind: value 'd': it would make table 't_d', "
            "past the route's max_tables (2) of this topic") in letters[capped, 3]
    proc.kill()


@pytest.mark.timeout(300)
async def test_a_failing_table_is_retried_alone_the_others_not_written_twice(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    """One table cannot be opened for a while (its directory's name taken by a file):
    the batch is retried, /readyz names the table, the other table's rows are written
    once however many retries; once the table can be opened its rows land and every
    offset is committed."""
    group, topic = unique("g-route"), unique("route-fail")
    await create_topic(broker, topic)
    blocker = tmp_path / "out" / "t_b"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("not a directory")
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
        "topic": topic, "processor": "json_rows",
        "route": {"by": "value.kind", "tables": {"a": "t_a", "b": "t_b"}},
        "sink": {"type": "jsonl", "path": str(tmp_path / "out" / "{table}" / "rows.jsonl")}}],
        service={"http_port": (port := free_port()), "http_host": "127.0.0.1"},
        supervisor={"max_restarts": 0})
    proc = kstage(cfg)
    await send(broker, topic, ((b"k", {"i": i, "kind": "ab"[i % 2]}, []) for i in range(10)))
    rows_a = tmp_path / "out" / "t_a" / "rows.jsonl"
    await wait_readyz(f"http://127.0.0.1:{port}", proc, 503, "table t_b", timeout=90)
    await proc.wait_for_log("sink write failed", count=3, timeout=60)  # retried, again
    assert [r["i"] for r in read_jsonl(rows_a)] == [0, 2, 4, 6, 8]  # once, not per retry
    assert (await committed(broker, group, topic, 1))[0] in (-1, 0)

    blocker.unlink()  # the table can be opened: its rows land, the batch is acked
    await wait_until(lambda: len(read_jsonl(tmp_path / "out" / "t_b" / "rows.jsonl")) == 5,
                     90, "the rows of t_b")
    await wait_until_committed(broker, group, topic, 10)
    assert [r["i"] for r in read_jsonl(rows_a)] == [0, 2, 4, 6, 8]
    assert [r["i"] for r in read_jsonl(tmp_path / "out" / "t_b" / "rows.jsonl")] == [
        1, 3, 5, 7, 9]
    proc.kill()
