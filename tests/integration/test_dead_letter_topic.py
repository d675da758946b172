"""``failure.dead_letter_topic`` on the real broker: the dead-letter record, the commit
after its acknowledgement, a broker outage during the write, ``dlq show|replay
--from-topic``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest
import yaml
from aiokafka import AIOKafkaProducer

from actors.master import Master
from service.ops.dlq import load_topic, replay_group, replay_topic_async
from settings import load_settings
from tests.brokers import dedicated_broker
from tests.integration.test_ops_tools import cli
from tests.kafkautil import (
    committed,
    create_topic,
    read_all,
    read_jsonl,
    unique,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.kafka

ERROR_HEADERS = ("group", "topic", "partition", "offset", "processor", "type", "message",
                 "attempts", "failed_at")


async def produce_with_headers(bootstrap: str, topic: str,
                               records: list[tuple[bytes, bytes,
                                                   list[tuple[str, bytes | None]]]]
                               ) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, value, headers in records:
            await producer.send_and_wait(topic, value, key=key, headers=headers)
    finally:
        await producer.stop()


async def test_poison_lands_in_the_dead_letter_topic_with_its_context(broker: str,
                                                                     tmp_path: Path) -> None:
    topic, group, dlq = unique("dlt"), unique("g-dlt"), unique("dlq")
    await create_topic(broker, topic)
    await create_topic(broker, dlq)
    await produce_with_headers(broker, topic, [
        (b"k0", b'{"i": 0}', []),
        (b"k1", b"\xffnot json", [("trace", b"abc"), ("bin", b"\x00\x01"), ("nil", None)]),
        (b"k2", b'{"i": 2}', []),
    ])
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "test_flaky",
                         "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}],
                       failure={"dead_letter_topic": dlq})
    await asyncio.wait_for(Master(load_settings(cfg), broker, drain=True).run(), 90)
    assert [r["i"] for r in read_jsonl(tmp_path / "out.jsonl")] == [0, 2]
    assert (await committed(broker, group, topic, 1))[0] == 3
    # both: the file (written first) and the topic
    assert [d["offset"] for d in read_jsonl(tmp_path / "dead.jsonl")] == [1]
    [rec] = await read_all(broker, dlq, 1)
    assert (rec.key, rec.value) == (b"k1", b"\xffnot json")
    headers = list(rec.headers)
    assert headers[:3] == [("trace", b"abc"), ("bin", b"\x00\x01"), ("nil", None)], \
        "own headers kept, first"
    errors = {k.removeprefix("kstage.error."): v.decode("utf-8")
              for k, v in headers if k.startswith("kstage.error.")}
    assert sorted(errors) == sorted(ERROR_HEADERS)
    assert (errors["group"], errors["topic"], errors["partition"], errors["offset"]) == (
        group, topic, "0", "1")
    assert errors["processor"] == "test_flaky"
    assert errors["type"] == "processors.errors.PoisonMessage"
    assert errors["message"] and errors["attempts"] == "1"
    assert errors["failed_at"].endswith("Z")


async def test_topic_instead_of_the_file(broker: str, tmp_path: Path) -> None:
    topic, group, dlq = unique("dlti"), unique("g-dlti"), unique("dlqi")
    await create_topic(broker, topic)
    await create_topic(broker, dlq)
    await produce_with_headers(broker, topic, [(b"k0", b"[]", []), (b"k1", b'{"i": 1}', [])])
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "test_flaky",
                         "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}],
                       failure={"dead_letter_topic": dlq, "dead_letter_path": None})
    await asyncio.wait_for(Master(load_settings(cfg), broker, drain=True).run(), 90)
    assert (await committed(broker, group, topic, 1))[0] == 2
    assert not (tmp_path / "dead.jsonl").exists()
    [rec] = await read_all(broker, dlq, 1)
    assert (rec.key, rec.value) == (b"k0", b"[]")


async def test_broker_outage_during_the_dead_letter_write_commits_nothing_and_recovers(
        broker_kind: str, tmp_path: Path) -> None:
    """The broker freezes (SIGSTOP) while the poison message is being handled: the
    dead-letter write fails (no acks within the request timeout), the snapshot and
    /readyz say so, nothing is committed; after SIGCONT the record is written and only
    then the offset committed, nothing lost."""
    topic, group, dlq = unique("dlto"), unique("g-dlto"), unique("dlqo")
    with dedicated_broker(broker_kind, tmp_path / "broker") as own:
        bootstrap = own.bootstrap
        await create_topic(bootstrap, topic)
        await create_topic(bootstrap, dlq)
        await produce_with_headers(bootstrap, topic, [(b"k0", b'{"i": 0, "fail": true}', []),
                                                      (b"k1", b'{"i": 1}', [])])
        cfg = write_config(tmp_path / "kstage.yml", bootstrap, group,
                           [{"topic": topic, "processor": "test_flaky",
                             "options": {"fail_times": 99},
                             "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}],
                           failure={"mode": "retry", "max_retries": 1, "min_backoff_ms": 0,
                                    "max_backoff_ms": 0, "then": "continue",
                                    "dead_letter_topic": dlq},
                           # The send fails (request timeout, 10 s) well before the
                           # session of the frozen broker's member is lost, when the worker
                           # would fence the message and rejoin instead: 16 s less a
                           # heartbeat from the last answered one, at most 0.5 s before the
                           # freeze (with 12 s and heartbeats every 3 s the two raced: the
                           # membership was lost first in a fresh-clone run).
                           session_timeout_ms=16000, heartbeat_interval_ms=500)
        config = yaml.safe_load(cfg.read_text())
        config["kafka"]["consumer_config"] = {"request.timeout.ms": 10000}  # > the join hold
        cfg.write_text(yaml.safe_dump(config))
        settings = load_settings(cfg)
        pid = own.pid
        assert pid is not None
        frozen = asyncio.Event()

        async def freeze_then_retry(seconds: float) -> bool:
            os.kill(pid, signal.SIGSTOP)
            frozen.set()
            return True

        master = Master(settings, bootstrap, drain=True, retry_sleep=freeze_then_retry)
        run = asyncio.create_task(master.run())
        try:
            await asyncio.wait_for(frozen.wait(), 60)

            def error() -> str:
                return next((w["dead_letter_error"] or "" for w in master.snapshot()), "")

            await wait_until(lambda: "dead-letter topic" in error(), 60,
                             "the dead-letter topic write to fail")
            assert dlq in error()
            assert master.readiness(), "not ready while the dead letter is not written"
            stats = master.snapshot()[0]["stats"]
            assert stats["committed"] == 0, "nothing committed meanwhile"
            assert stats["dead_lettered"] == 0
            assert read_jsonl(tmp_path / "out.jsonl") == []
        finally:
            os.kill(pid, signal.SIGCONT)
        await asyncio.wait_for(run, 120)
        assert (await committed(bootstrap, group, topic, 1))[0] == 2
        assert [r["i"] for r in read_jsonl(tmp_path / "out.jsonl")] == [1]
        letters = await read_all(bootstrap, dlq, 1)
        # at least once: a send the frozen broker accepted late may be there twice
        assert {(r.key, r.value) for r in letters} == {(b"k0", b'{"i": 0, "fail": true}')}
        assert all(dict(r.headers)["kstage.error.attempts"] == b"2" for r in letters)


async def test_dlq_show_and_replay_from_topic(broker: str, tmp_path: Path) -> None:
    topic, group, dlq = unique("dltr"), unique("g-dltr"), unique("dlqr")
    await create_topic(broker, topic)
    await create_topic(broker, dlq)
    await produce_with_headers(broker, topic, [
        (b"k0", b'{"i": 0, "fail": true}', [("h", b"v")]),
        (b"k1", b'{"i": 1}', []),
        (b"k2", b'{"i": 2, "fail": true}', []),
    ])
    out = tmp_path / "out.jsonl"
    failing = write_config(tmp_path / "kstage.yml", broker, group,
                           [{"topic": topic, "processor": "test_flaky",
                             "options": {"fail_times": 99},
                             "sink": {"type": "jsonl", "path": str(out)}}],
                           failure={"dead_letter_topic": dlq})
    await asyncio.wait_for(Master(load_settings(failing), broker, drain=True).run(), 90)
    assert [r["i"] for r in read_jsonl(out)] == [1]

    code, out_text, err = await cli("dlq", "show", "-c", str(failing), "--from-topic", dlq,
                                    cwd=tmp_path)
    assert code == 0, err
    assert f"{topic}  0" in out_text and "2 dead-lettered, 0 replayed, 2 not replayed" in out_text
    code, out_text, err = await cli("dlq", "replay", "-c", str(failing), "--from-topic", dlq,
                                    "--topic", topic, cwd=tmp_path)
    assert code == 1 and "--topic and --since do not apply" in err, (code, err)

    settings = load_settings(failing)
    letters, bad = await load_topic(settings, dlq)
    assert bad == 0
    assert [(d.record["topic"], d.record["offset"], d.replayed) for d in letters] == [
        (topic, 0, False), (topic, 2, False)]
    assert letters[0].record["headers"] == [["h", "dg=="]]
    assert letters[0].record["error_type"] == "builtins.RuntimeError"

    # Still failing: nothing replayed, and the second waits behind the first.
    result = await replay_topic_async(settings, dlq)
    assert len(result.failed) == 1 and len(result.skipped) == 1 and not result.replayed
    assert (await committed(broker, replay_group(dlq), dlq, 1))[0] == -1

    # The processor fixed (it fails no more): both replayed, marked by the group's offset.
    fixed = write_config(tmp_path / "fixed.yml", broker, group,
                         [{"topic": topic, "processor": "test_flaky",
                           "options": {"fail_times": 0},
                           "sink": {"type": "jsonl", "path": str(out)}}],
                         failure={"dead_letter_topic": dlq})
    result = await replay_topic_async(load_settings(fixed), dlq)
    assert [d.record["offset"] for d in result.replayed] == [0, 2] and not result.failed
    assert sorted(r["i"] for r in read_jsonl(out)) == [0, 1, 2]
    assert (await committed(broker, replay_group(dlq), dlq, 1))[0] == 2
    # Idempotent: a second replay replays nothing; show says replayed.
    again = await replay_topic_async(load_settings(fixed), dlq)
    assert not again.replayed and again.already == 2
    assert sorted(r["i"] for r in read_jsonl(out)) == [0, 1, 2]
    letters, _ = await load_topic(settings, dlq)
    assert [d.replayed for d in letters] == [True, True]
    code, out_text, err = await cli("dlq", "show", "-c", str(fixed), "--from-topic", dlq,
                                    "--json", cwd=tmp_path)
    assert code == 0, err
    shown = [json.loads(line) for line in out_text.splitlines()]
    assert [(r["offset"], r["replayed"], r["dead_letter_offset"]) for r in shown] == [
        (0, True, 0), (2, True, 1)]


async def test_dlq_show_from_a_topic_the_client_has_not_seen_yet(broker: str,
                                                                 tmp_path: Path) -> None:
    """The reading consumer finds the topic's partitions from a metadata request for it:
    a fresh client knows no topics on Apache Kafka 4 (its bootstrap asks for none; older
    brokers and Tansu answer such a request with every topic)."""
    topic, dlq = unique("dltf"), unique("dlqf")
    await create_topic(broker, dlq, partitions=2)
    await produce_with_headers(broker, dlq, [(b"k", b'{"i": 0}', [
        ("kstage.error.topic", topic.encode()), ("kstage.error.partition", b"0"),
        ("kstage.error.offset", b"7")])])
    cfg = write_config(tmp_path / "kstage.yml", broker, unique("g-dltf"),
                       [{"topic": topic, "processor": "json_rows",
                         "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}],
                       failure={"dead_letter_topic": dlq})
    letters, bad = await load_topic(load_settings(cfg), dlq)
    assert bad == 0
    assert [(d.record["topic"], d.record["offset"]) for d in letters] == [(topic, 7)]
    missing = unique("nothere")
    with pytest.raises(Exception, match=f"dead-letter topic '{missing}' does not exist"):
        await load_topic(load_settings(cfg), missing)
