"""A registry's 404 for a schema id is a window to wait out, not poison (issue 11).

Against the fake Confluent registry (a real HTTP server, real httpx client): it answers
``404 40403`` for ids that exist while "reloading", like Karapace after a restart. The
decoder's clock is fake; the worker's wait goes through a recorder that advances it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import ConsumerRecord

from actors.codecs.avro import AvroDecoder, encode
from actors.codecs.schema_registry import SchemaNotFoundYet, SchemaRegistryClient
from actors.worker import Worker
from actors.worker.pipeline import RecordPipeline
from processors.errors import PoisonMessage
from processors.log import LogProcessor
from settings import SchemaRegistrySettings, Settings
from tests.fake_consumer import FakeConsumer
from tests.fake_registry import FakeRegistry
from tests.kit import assembled

EVENT = {"type": "record", "name": "Event", "fields": [{"name": "id", "type": "long"}]}
WINDOW_S = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def registry() -> Iterator[FakeRegistry]:
    with FakeRegistry() as reg:
        yield reg


@pytest.fixture
async def client(registry: FakeRegistry) -> AsyncIterator[SchemaRegistryClient]:
    async def no_sleep(_: float) -> None:
        return None

    settings = SchemaRegistrySettings(url=registry.url, max_retries=0)
    async with SchemaRegistryClient(settings, sleep=no_sleep) as c:
        yield c


def register_until(registry: FakeRegistry, schema_id: int) -> None:
    """Register distinct schemas until ``schema_id`` exists (the fake counts from 1)."""
    n = 0
    while True:
        n += 1
        schema = {**EVENT, "name": f"Event{n}"}
        if registry.register(f"s{n}-value", json.dumps(schema)) == schema_id:
            return


def value(schema_id: int, n: int = 7) -> bytes:
    return encode(EVENT, schema_id, {"id": n})


# ------------------------------------------------------------------------ decoder


async def test_a_404_inside_the_window_is_retriable_and_caches_nothing(
    registry: FakeRegistry, client: SchemaRegistryClient
) -> None:
    sid = registry.register("e-value", json.dumps(EVENT))
    clock = Clock()
    decoder = AvroDecoder(client, not_found_retry_s=WINDOW_S, clock=clock)
    registry.start_reloading()  # Karapace after a restart: 404 40403 for a known id
    (id_bytes,) = decoder.missing([value(sid)])
    with pytest.raises(SchemaNotFoundYet) as caught:
        await decoder.fetch(id_bytes)
    assert caught.value.retriable and caught.value.schema_id == sid
    assert caught.value.error_code == 40403 and caught.value.remaining_s == WINDOW_S
    clock.now += 9.5
    with pytest.raises(SchemaNotFoundYet) as caught:
        await decoder.fetch(id_bytes)
    assert caught.value.waited_s == 9.5 and caught.value.remaining_s == 0.5
    assert decoder.missing([value(sid)]) == {id_bytes}, "nothing cached during the window"
    registry.finish_reloading()
    await decoder.fetch(id_bytes)
    assert decoder.decode(value(sid, 42)) == {"id": 42}
    assert registry.count("GET", f"/schemas/ids/{sid}") == 3


async def test_after_the_window_the_id_is_poison_for_one_batch_then_asked_again(
    registry: FakeRegistry, client: SchemaRegistryClient
) -> None:
    clock = Clock()
    decoder = AvroDecoder(client, not_found_retry_s=WINDOW_S, clock=clock)
    raw = value(3)
    (id_bytes,) = decoder.missing([raw])
    with pytest.raises(SchemaNotFoundYet):
        await decoder.fetch(id_bytes)
    clock.now += WINDOW_S
    await decoder.fetch(id_bytes)  # the window is over: unknown, for this batch
    with pytest.raises(PoisonMessage, match="unknown schema id 3") as caught:
        decoder.decode(raw)
    assert caught.value.details["schema_id"] == 3
    # The next batch with the id asks the registry again; still a 404 right after the
    # window (same run of 404s): poison at once, no second window.
    clock.now += 1
    assert decoder.missing([raw]) == {id_bytes}
    await decoder.fetch(id_bytes)
    with pytest.raises(PoisonMessage):
        decoder.decode(raw)
    # Once the registry has the id, a later message with it decodes.
    register_until(registry, 3)
    assert decoder.missing([raw]) == {id_bytes}
    await decoder.fetch(id_bytes)
    assert decoder.decode(value(3, 5)) == {"id": 5}


async def test_without_a_window_an_unknown_id_is_not_remembered_forever(
    registry: FakeRegistry, client: SchemaRegistryClient
) -> None:
    decoder = AvroDecoder(client)  # not_found_retry_s 0: poison at once
    raw = value(2)
    (id_bytes,) = decoder.missing([raw])
    await decoder.fetch(id_bytes)
    with pytest.raises(PoisonMessage, match="unknown schema id 2"):
        decoder.decode(raw)
    register_until(registry, 2)
    assert decoder.missing([raw]) == {id_bytes}, "the miss was cached past its batch"
    await decoder.fetch(id_bytes)
    assert decoder.decode(raw) == {"id": 7}


async def test_a_run_of_404s_that_went_quiet_for_a_window_opens_a_new_window(
    client: SchemaRegistryClient,
) -> None:
    clock = Clock()
    decoder = AvroDecoder(client, not_found_retry_s=WINDOW_S, clock=clock)
    (id_bytes,) = decoder.missing([value(9)])
    with pytest.raises(SchemaNotFoundYet):
        await decoder.fetch(id_bytes)
    clock.now += WINDOW_S
    await decoder.fetch(id_bytes)  # unknown
    clock.now += WINDOW_S + 1  # no 404 for it for longer than a window
    decoder.missing([value(9)])
    with pytest.raises(SchemaNotFoundYet) as caught:
        await decoder.fetch(id_bytes)
    assert caught.value.waited_s == 0


async def test_an_impossible_id_is_poison_at_once_even_with_a_window(
    registry: FakeRegistry,
) -> None:
    settings = SchemaRegistrySettings(url=registry.url, id_type="long")
    async with SchemaRegistryClient(settings) as long_client:
        decoder = AvroDecoder(long_client, "long", not_found_retry_s=WINDOW_S, clock=Clock())
        raw = b"\x00" + b"\xff" * 8 + b"\x02"  # id -1: registries hand out no negative id
        (id_bytes,) = decoder.missing([raw])
        await decoder.fetch(id_bytes)
        with pytest.raises(PoisonMessage, match="unknown schema id -1"):
            decoder.decode(raw)
    assert registry.count() == 0


# ------------------------------------------------------------------------- worker


@contextlib.asynccontextmanager
async def avro_worker(tmp_path: Path, registry: FakeRegistry, client: SchemaRegistryClient,
                      clock: Clock) -> AsyncIterator[tuple[Worker, RecordPipeline, list[float]]]:
    """A worker of an Avro topic and its pipeline, built as its run builds them
    (:func:`tests.kit.assembled`), and the list of its retry waits."""
    settings = Settings.model_validate({
        "name": "t",
        "schema_registry": {"url": registry.url, "not_found_retry_s": WINDOW_S},
        "groups": [{"group_id": "g", "topics": [{
            "topic": "events", "processor": LogProcessor.name, "format": "avro",
            "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}]}],
    })
    group = settings.groups[0]
    worker = Worker(settings=settings, group=group, topic=group.topics[0],
                    processor_cls=LogProcessor, bootstrap="127.0.0.1:1",
                    avro=AvroDecoder(client, not_found_retry_s=WINDOW_S, clock=clock))
    waits: list[float] = []
    async with assembled(worker, FakeConsumer("events", {0: []}),
                         LogProcessor(group.topics[0].options)) as parts:
        yield worker, parts.pipeline, waits


def advancing_sleep(clock: Clock, waits: list[float]) -> Any:
    """A worker ``_sleep`` that records the wait and advances the fake clock by it."""
    async def sleep(seconds: float) -> bool:
        waits.append(seconds)
        clock.now += seconds
        return True
    return sleep


def records(values: list[bytes], first_offset: int = 40) -> list[Any]:
    return [ConsumerRecord("events", 0, first_offset + i, 0, 0, None, v, None, 0, len(v), ())
            for i, v in enumerate(values)]


async def test_worker_waits_out_a_404_window_with_capped_backoff_and_shows_why(
    tmp_path: Path, registry: FakeRegistry, client: SchemaRegistryClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The warning's own logger at WARNING: a test run before this one in the same
    # process may have left the root logger above it (service.logs' configuration).
    caplog.set_level(logging.WARNING, logger="actors.worker.screen")
    known = registry.register("e-value", json.dumps(EVENT))
    clock = Clock()
    async with avro_worker(tmp_path, registry, client, clock) as (worker, pipeline, waits):
        shown: list[str | None] = []

        async def sleep(seconds: float) -> bool:
            waits.append(seconds)
            shown.append(worker.snapshot()["waiting_for"])
            clock.now += seconds
            if len(waits) == 4:  # the registry is back after 3.5 s
                registry.finish_reloading()
            return True

        pipeline.sleep = sleep
        registry.start_reloading()
        batch = records([value(known, n) for n in range(3)])
        assert await pipeline.fetch_schemas(batch) is True
        assert waits == [0.5, 1.0, 2.0, 4.0]
        assert worker.snapshot()["waiting_for"] is None
        assert all(s is not None and f"404 for schema id {known} (events[0]@40)" in s
                   for s in shown), shown
        assert [pipeline.decode(r.value) for r in batch] == [{"id": n} for n in range(3)]
        warning = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any(f"404 for schema id {known} of events[0]@40" in m for m in warning), warning


async def test_worker_stops_waiting_when_the_window_ends(
    tmp_path: Path, registry: FakeRegistry, client: SchemaRegistryClient,
) -> None:
    clock = Clock()
    async with avro_worker(tmp_path, registry, client, clock) as (worker, pipeline, waits):
        pipeline.sleep = advancing_sleep(clock, waits)
        batch = records([value(1), value(4)])  # id 4 is unknown; id 1 gets known later
        register_until(registry, 1)
        assert await pipeline.fetch_schemas(batch) is True
        assert sum(waits) == WINDOW_S and max(waits) <= 30
        assert waits == [0.5, 1.0, 2.0, 4.0, 2.5], "the last wait ends with the window"
        assert pipeline.decode(batch[0].value) == {"id": 7}
        with pytest.raises(PoisonMessage, match="unknown schema id 4"):
            pipeline.decode(batch[1].value)


async def test_many_unknown_ids_in_a_batch_wait_one_window_not_one_each(
    tmp_path: Path, registry: FakeRegistry, client: SchemaRegistryClient,
) -> None:
    clock = Clock()
    async with avro_worker(tmp_path, registry, client, clock) as (worker, pipeline, waits):
        pipeline.sleep = advancing_sleep(clock, waits)
        batch = records([value(sid) for sid in (11, 12, 13, 14)])  # garbage ids, say
        assert await pipeline.fetch_schemas(batch) is True
        assert sum(waits) == WINDOW_S
        for rec in batch:
            with pytest.raises(PoisonMessage, match="unknown schema id"):
                pipeline.decode(rec.value)
        asked = [registry.count("GET", f"/schemas/ids/{sid}") for sid in (11, 12, 13, 14)]
        assert asked == [len(waits) + 1] * 4


async def test_a_stop_during_the_wait_abandons_the_batch(
    tmp_path: Path, registry: FakeRegistry, client: SchemaRegistryClient,
) -> None:
    known = registry.register("e-value", json.dumps(EVENT))
    registry.start_reloading()
    async with avro_worker(tmp_path, registry, client, Clock()) as (worker, pipeline, _):
        task = asyncio.create_task(pipeline.fetch_schemas(records([value(known)])))
        async with asyncio.timeout(10):
            while worker.snapshot()["waiting_for"] is None:
                await asyncio.sleep(0.01)
        worker.stop()
        async with asyncio.timeout(10):
            assert await task is False
        assert worker.snapshot()["waiting_for"] is None


async def test_the_wait_starts_afresh_when_unreachable_turns_into_404(
    tmp_path: Path, registry: FakeRegistry, client: SchemaRegistryClient,
) -> None:
    """A registry restarting answers first nothing (503s), then 404 for ids that exist:
    the 404 window's waits start at the first backoff step, not where the outage's
    backoff had got to (with a real Karapace restarting, one worker landed 5.7 s after
    the others; after a long outage the first 404 wait was the 30 s cap)."""
    known = registry.register("e-value", json.dumps(EVENT))
    clock = Clock()
    async with avro_worker(tmp_path, registry, client, clock) as (worker, pipeline, waits):
        shown: list[str | None] = []

        async def sleep(seconds: float) -> bool:
            waits.append(seconds)
            shown.append(worker.snapshot()["waiting_for"])
            clock.now += seconds
            if len(waits) == 6:  # up again, still reloading
                registry.start_reloading()
            if len(waits) == 8:
                registry.finish_reloading()
            return True

        pipeline.sleep = sleep
        registry.fail_next(6)  # max_retries 0: one request per round
        batch = records([value(known)])
        assert await pipeline.fetch_schemas(batch) is True
        assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 0.5, 1.0]
        assert all("unavailable" in str(s) for s in shown[:6]), shown
        assert all("404 for schema id" in str(s) for s in shown[6:]), shown
        assert pipeline.decode(batch[0].value) == {"id": 7}


async def test_the_wait_starts_afresh_when_404_turns_into_unreachable(
    tmp_path: Path, registry: FakeRegistry, client: SchemaRegistryClient,
) -> None:
    known = registry.register("e-value", json.dumps(EVENT))
    clock = Clock()
    async with avro_worker(tmp_path, registry, client, clock) as (worker, pipeline, waits):

        async def sleep(seconds: float) -> bool:
            waits.append(seconds)
            clock.now += seconds
            if len(waits) == 3:
                registry.finish_reloading()
                registry.fail_next(2)
            return True

        pipeline.sleep = sleep
        registry.start_reloading()
        assert await pipeline.fetch_schemas(records([value(known)])) is True
        assert waits == [0.5, 1.0, 2.0, 0.5, 1.0]
