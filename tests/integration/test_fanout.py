"""Fan-out (``topics[].sinks``) end to end: the real broker, a real jsonl file, a real
local HTTP server, real kstage runs.

Every row goes to every sink; an offset is committed only once every sink accepted its
rows; a sink that is down holds the commit back (never loses a row) while the other
writes on; a row one sink refuses for good is dead-lettered naming that sink, the other
sinks have it, and ``dlq replay`` offers it to that sink only.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.master import Master
from actors.metrics import Metrics
from actors.worker import Worker
from service.ops import dlq
from settings import load_settings
from tests.http_server import HttpTestServer
from tests.kafkautil import (
    committed,
    create_topic,
    produce,
    read_jsonl,
    unique,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.kafka


def accepted(api: HttpTestServer) -> list[int]:
    """The ``i`` of every row the API answered 2xx, in arrival order."""
    out: list[int] = []
    for r in api.requests:
        if r.answer < 300:
            body = r.json
            out.extend(e["i"] for e in (body if isinstance(body, list) else [body]))
    return out


def config(tmp_path: Path, broker: str, topic: str, group: str, api: HttpTestServer,
           http: dict[str, Any] | None = None, **cfg: Any) -> Path:
    return write_config(tmp_path / f"{group}.yml", broker, group, [{
        "topic": topic, "processor": "json_rows",
        "sinks": [{"type": "jsonl", "path": str(tmp_path / "out.jsonl")},
                  {"type": "http", "name": "api", "url": f"{api.url}/hook",
                   "min_backoff_s": 0.01, "max_backoff_s": 0.1, **(http or {})}]}], **cfg)


@pytest.mark.parametrize("fresh", [3], indirect=True)
async def test_every_row_lands_in_every_sink_and_offsets_commit_to_the_end(
        fresh, broker: str, tmp_path: Path) -> None:
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, ({"i": i} for i in range(60)), partition_of=lambda i: i % 3)
    with HttpTestServer() as api:
        path = config(tmp_path, broker, topic, group, api,
                      {"batch": {"max_events": 5, "max_interval_s": 1}})
        metrics = Metrics()
        await asyncio.wait_for(Master(load_settings(path), broker, drain=True,
                                      metrics=metrics).run(), 90)
        http_rows = accepted(api)
    assert sorted(r["i"] for r in read_jsonl(tmp_path / "out.jsonl")) == list(range(60))
    assert sorted(http_rows) == list(range(60)), "every row once in the API"
    assert await committed(broker, group, topic, 3) == {0: 20, 1: 20, 2: 20}
    for sink in ("jsonl", "api"):  # each sink's writes, labelled by its name
        count = metrics.registry.get_sample_value(
            "kstage_sink_write_seconds_count", {"group": group, "topic": topic, "sink": sink})
        assert count is not None and count >= 1, sink


async def test_a_down_sink_holds_the_commit_back_and_nothing_is_lost(
        fresh, broker: str, tmp_path: Path) -> None:
    """The API answers 503 (retried forever) while the jsonl sink writes every row: no
    offset is committed past a row the API has not accepted, /readyz names the failing
    sink; once the API is back every row is in both and the offsets reach the end."""
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, ({"i": i} for i in range(10)))
    with HttpTestServer() as api:
        api.respond(503, times=1_000_000)  # down until released
        path = config(tmp_path, broker, topic, group, api, {"max_retries": 1},
                      supervisor={"sink_unready_after_s": 0})
        master = Master(load_settings(path), broker)
        run = asyncio.create_task(master.run())
        try:
            await wait_until(lambda: len(read_jsonl(tmp_path / "out.jsonl")) == 10,
                             what="the jsonl sink wrote every row")
            seen = api.count()
            # the API sink kept failing after the jsonl sink had accepted every row
            await wait_until(lambda: api.count() >= seen + 3, what="more refused attempts")
            (worker,) = [c for c in master.supervisor.children if isinstance(c, Worker)]
            tracker = worker.parts.committer.offsets
            assert tracker.committable(TopicPartition(topic, 0)) is None, \
                "an offset became committable that the API sink has not accepted"
            assert (await committed(broker, group, topic, 1))[0] == -1
            assert accepted(api) == []
            reasons = master.readiness()
            assert any("sink 'api': sink failing" in why and "503" in why
                       for why in reasons), reasons
            assert not any("'jsonl'" in why for why in reasons), reasons
            assert worker.snapshot()["sinks"]["jsonl"] is None
            api.release()  # the API is back
            await wait_until(lambda: sorted(accepted(api)) == list(range(10)),
                             what="the API accepted every row")
            await wait_until(lambda: tracker.committed(TopicPartition(topic, 0)) == 10,
                             what="offsets committed to the end")
            assert (await committed(broker, group, topic, 1))[0] == 10
            assert master.readiness() == []
        finally:
            master.stop()
            await asyncio.wait_for(run, 60)
    rows = [r["i"] for r in read_jsonl(tmp_path / "out.jsonl")]
    assert rows == list(range(10)), "the jsonl sink wrote each row once, in order"


async def read_dead_letter_topic(broker: str, dlq_topic: str) -> list[Any]:
    consumer = AIOKafkaConsumer(dlq_topic, bootstrap_servers=broker,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        async with asyncio.timeout(30):
            while True:
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    return list(msgs)
    finally:
        await consumer.stop()


async def test_a_row_one_sink_refuses_is_dead_lettered_for_that_sink_only(
        broker: str, tmp_path: Path) -> None:
    topic, group, dlq_topic = unique("fan-400"), unique("g-fan-400"), unique("dlq-fan")
    await create_topic(broker, topic)
    await create_topic(broker, dlq_topic)
    await produce(broker, topic, ({"i": i} for i in range(8)))
    with HttpTestServer() as api:
        api.respond(200, times=3)
        api.respond(400, body="invalid event 3")  # the 4th row (one request per row)
        path = config(tmp_path, broker, topic, group, api, {"max_concurrency": 1},
                      failure={"dead_letter_topic": dlq_topic})
        settings = load_settings(path)
        await asyncio.wait_for(Master(settings, broker, drain=True).run(), 90)
        assert accepted(api) == [0, 1, 2, 4, 5, 6, 7]
        assert [r["i"] for r in read_jsonl(tmp_path / "out.jsonl")] == list(range(8)), \
            "the jsonl sink has the row the API refused"
        assert (await committed(broker, group, topic, 1))[0] == 8
        [letter] = read_jsonl(tmp_path / "dead.jsonl")
        assert (letter["sink"], letter["sink_type"], letter["status"]) == ("api", "http", 400)
        assert letter["offset"] == 3
        assert "http sink 'api' answered 400: invalid event 3" in letter["error"]
        [record] = await read_dead_letter_topic(broker, dlq_topic)
        headers = dict(record.headers)
        assert (headers["kstage.error.sink"], headers["kstage.error.sink_type"],
                headers["kstage.error.status"]) == (b"api", b"http", b"400")

        shown = dlq.render(dlq.load(settings)[0]).splitlines()  # what `dlq show` prints
        assert shown[0].split()[3] == "SINK" and shown[1].split()[2:4] == ["3", "api"]

        # replay: the refused row goes to the API only, not to the jsonl file again
        result = await asyncio.to_thread(dlq.replay, settings)
        assert (len(result.replayed), result.failed, result.skipped) == (1, [], [])
        assert accepted(api)[-1] == 3
        result = await dlq.replay_topic_async(settings, dlq_topic)
        assert (len(result.replayed), result.failed, result.skipped) == (1, [], [])
        assert accepted(api)[-2:] == [3, 3]
    assert [r["i"] for r in read_jsonl(tmp_path / "out.jsonl")] == list(range(8))
