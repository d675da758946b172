"""A registry's 404 window for existing ids on the real broker (issue 11).

Karapace answers ``404 {"error_code": 40403}`` for ids that exist for ~5 s after a
restart, while it re-reads its ``_schemas`` topic. The fake registry does the same
(:meth:`FakeRegistry.start_reloading`); kstage must wait it out: nothing dead-lettered,
nothing committed past the waiting messages, no lasting negative cache.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from actors.codecs.avro import encode
from actors.master import Master
from settings import load_settings
from tests.conftest import Fresh
from tests.fake_registry import FakeRegistry
from tests.integration.test_avro_pipeline import registry_yaml
from tests.kafkautil import committed, produce, read_jsonl, write_config

pytestmark = pytest.mark.kafka

EVENT = {"type": "record", "name": "Event", "fields": [{"name": "n", "type": "long"}]}


def config(tmp_path: Path, broker: str, group: str, topic: str, registry: FakeRegistry,
           retry_s: float, **group_keys: object) -> Path:
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [
        {"topic": topic, "processor": "json_rows", "format": "avro",
         "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}], **group_keys)
    cfg.write_text(cfg.read_text() + registry_yaml(registry.url, not_found_retry_s=retry_s))
    return cfg


async def wait_for(predicate: object, what: str, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.05)


async def test_a_404_window_after_a_registry_restart_loses_and_dead_letters_nothing(
    fresh: Fresh, broker: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="actors.worker")
    topic, group = fresh.topic, fresh.group
    with FakeRegistry() as registry:
        sid = registry.register(f"{topic}-value", json.dumps(EVENT))
        await produce(broker, topic, [encode(EVENT, sid, {"n": n}) for n in range(20)])
        registry.start_reloading()  # restarted: 404 40403 for the id the producer used
        # max_poll_interval_ms shorter than the wait: the member must not be evicted.
        cfg = config(tmp_path, broker, group, topic, registry, 120, max_poll_interval_ms=3000)
        master = Master(load_settings(cfg), broker, drain=True)
        run = asyncio.create_task(master.run())
        try:
            path = f"/schemas/ids/{sid}"
            # 0.5 + 1 + 2 + 4 s of backoff: longer than max_poll_interval_ms.
            await wait_for(lambda: run.done() or registry.count("GET", path) >= 5,
                           "five 404s")
            assert not (tmp_path / "dead.jsonl").exists(), "dead-lettered during the window"
            waiting = [w["waiting_for"] for w in master.snapshot()]
            assert waiting and f"404 for schema id {sid} ({topic}[0]@0)" in str(waiting[0])
            # /readyz tells the truth: not ready, and why.
            assert any(f"waiting for schema registry: 404 for schema id {sid}" in reason
                       for reason in master.readiness()), master.readiness()
            assert (await committed(broker, group, topic, 1))[0] == -1, "committed past them"
            assert read_jsonl(tmp_path / "out.jsonl") == []
            registry.finish_reloading()
            await asyncio.wait_for(asyncio.shield(run), 90)
        finally:
            master.stop()
            await asyncio.wait_for(run, 60)
    assert not (tmp_path / "dead.jsonl").exists(), (tmp_path / "dead.jsonl").read_text()
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert sorted(r["n"] for r in rows) == list(range(20))
    assert (await committed(broker, group, topic, 1))[0] == 20
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("actors.worker")]
    assert sum("assigned partitions" in m for m in messages) == 1, "member was evicted"
    assert any(f"schema registry answers 404 for schema id {sid} of {topic}[0]@0" in m
               for m in messages), messages


async def test_an_id_unknown_beyond_the_window_is_dead_lettered_and_not_remembered(
    fresh: Fresh, broker: str, tmp_path: Path
) -> None:
    topic, group = fresh.topic, fresh.group
    with FakeRegistry() as registry:
        # Id 1 is not registered yet: the fake hands it to the first schema registered.
        await produce(broker, topic, [encode(EVENT, 1, {"n": n}) for n in range(3)])
        cfg = config(tmp_path, broker, group, topic, registry, 2)
        master = Master(load_settings(cfg), broker)
        run = asyncio.create_task(master.run())
        dead_path = tmp_path / "dead.jsonl"
        try:
            await wait_for(lambda: len(read_jsonl(dead_path)) == 3, "3 dead letters")
            assert registry.count("GET", "/schemas/ids/1") >= 2, "not retried"
            assert registry.register(f"{topic}-value", json.dumps(EVENT)) == 1
            await produce(broker, topic, [encode(EVENT, 1, {"n": 3})])
            await wait_for(lambda: read_jsonl(tmp_path / "out.jsonl"), "the later message")
            await wait_for(lambda: master.snapshot()[0]["partitions"][0]["committed"] == 4,
                           "commit of all four")
        finally:
            master.stop()
            await asyncio.wait_for(run, 60)
    dead = read_jsonl(dead_path)
    assert [d["offset"] for d in dead] == [0, 1, 2]
    assert all("unknown schema id 1" in d["error"] and d["schema_id"] == 1 for d in dead)
    assert [(r["_offset"], r["n"]) for r in read_jsonl(tmp_path / "out.jsonl")] == [(3, 3)]
    assert (await committed(broker, group, topic, 1))[0] == 4
