"""Failure policies, abort of hanging work and offset-reset refusal, on the real broker."""

from __future__ import annotations

import asyncio
import base64
import signal

import pytest

from actors.master import Master
from settings import load_settings
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


async def test_throw_exits_nonzero_and_leaves_failed_offset_uncommitted(
        fresh, broker, tmp_path, kstage):
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, [{"i": 0}, {"i": 1}, {"i": 2, "fail": True}, {"i": 3}])
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "test_flaky",
                         "sink": {"type": "jsonl", "path": "out.jsonl"}}],
                       failure={"mode": "throw"})
    proc = kstage(cfg, "--drain")
    assert await proc.wait() == 1, proc.output()
    assert f"{topic}[0]@2 failed" in proc.output()
    assert [r["i"] for r in read_jsonl(tmp_path / "out.jsonl")] == [0, 1]
    assert (await committed(broker, group, topic, 1))[0] == 2, "failed offset not committed"
    assert not (tmp_path / "dead.jsonl").exists()


async def test_continue_dead_letters_and_moves_on(fresh, broker, tmp_path, kstage):
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, [{"i": 0}, b"\xffnot json", {"i": 2, "fail": True}, {"i": 3}])
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "test_flaky",
                         "sink": {"type": "jsonl", "path": "out.jsonl"}}])
    proc = kstage(cfg, "--drain")
    assert await proc.wait() == 0, proc.output()
    assert [r["i"] for r in read_jsonl(tmp_path / "out.jsonl")] == [0, 3]
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [d["offset"] for d in dead] == [1, 2]
    first = dead[0]
    for field in ("group", "topic", "partition", "offset", "timestamp", "key", "value",
                  "headers", "processor", "error_type", "error", "traceback", "attempts",
                  "failed_at"):
        assert field in first, field
    assert (first["group"], first["topic"], first["partition"]) == (group, topic, 0)
    assert base64.b64decode(first["value"]) == b"\xffnot json"
    assert base64.b64decode(first["key"]) == b"1"
    assert first["error_type"] == "processors.errors.PoisonMessage"
    assert dead[1]["error_type"] == "builtins.RuntimeError" and dead[1]["attempts"] == 1
    assert (await committed(broker, group, topic, 1))[0] == 4, "partition moved on"


async def test_retry_follows_schedule_then_recovers_or_dead_letters(fresh, broker, tmp_path):
    """In-process, with a fake clock: the waits are recorded, not slept."""
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, [{"i": 0, "fail": True}, {"i": 1}])
    waits: list[float] = []

    async def fake_sleep(seconds: float) -> bool:
        waits.append(seconds)
        return True

    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "test_flaky",
                         "options": {"fail_times": 2},
                         "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}],
                       failure={"mode": "retry", "max_retries": 3, "min_backoff_ms": 60000,
                                "max_backoff_ms": 100000, "then": "continue"})
    master = Master(load_settings(cfg), broker, drain=True, retry_sleep=fake_sleep)
    await asyncio.wait_for(master.run(), 60)
    assert waits == [60.0, 80.0], "two failures: waits of 60 s and 80 s, then success"
    assert [r["i"] for r in read_jsonl(tmp_path / "out.jsonl")] == [0, 1]

    # Always failing: all three waits, then `then: continue` dead-letters with attempts=4.
    waits.clear()
    topic2 = unique("retry2")
    await create_topic(broker, topic2)
    await produce(broker, topic2, [{"i": 0, "fail": True}, {"i": 1}])
    cfg2 = write_config(tmp_path / "kstage2.yml", broker, unique("g-retry2"),
                        [{"topic": topic2, "processor": "test_flaky",
                          "sink": {"type": "jsonl", "path": str(tmp_path / "out2.jsonl")}}],
                        failure={"mode": "retry", "max_retries": 3, "min_backoff_ms": 60000,
                                 "max_backoff_ms": 100000, "then": "continue"})
    await asyncio.wait_for(
        Master(load_settings(cfg2), broker, drain=True, retry_sleep=fake_sleep).run(), 60)
    assert waits == [60.0, 80.0, 100.0]
    assert [r["i"] for r in read_jsonl(tmp_path / "out2.jsonl")] == [1]
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [(d["topic"], d["offset"], d["attempts"]) for d in dead] == [(topic2, 0, 4)]


async def test_hanging_processor_is_cancelled_and_not_committed(fresh, broker, tmp_path, kstage):
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, [{"i": 0}, {"i": 1}, {"i": 2, "hang": True}, {"i": 3}])
    marker = tmp_path / "hanging"
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "test_hang",
                         "options": {"marker": str(marker)},
                         "sink": {"type": "jsonl", "path": "out.jsonl"}}],
                       supervisor={"shutdown_grace_s": 1, "abort_grace_s": 2},
                       max_poll_records=1)
    proc = kstage(cfg)
    await wait_until(marker.exists, what="the processor to hang")
    await wait_until(lambda: len(read_jsonl(tmp_path / "out.jsonl")) == 2, what="2 rows")
    proc.signal(signal.SIGTERM)
    code = await proc.wait(timeout=20)
    assert code == 1, proc.output()  # work was abandoned: not a clean stop
    assert "shutdown grace of 1s expired; cancelling" in proc.output()
    # The abandoned work is named: worker, partition, offsets (from the committed one).
    assert (f"abandoned, not committed (re-read on the next start): {group}/{topic}#0: "
            f"{topic}[0] offsets 2-") in proc.output(), proc.output()
    assert (await committed(broker, group, topic, 1))[0] == 2


@pytest.mark.parametrize("fresh", [2], indirect=True)
async def test_offset_reset_none_refuses_to_start(fresh, broker, tmp_path, kstage):
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, [{"i": 0}])
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "json_rows"}],
                       auto_offset_reset="none")
    proc = kstage(cfg)
    assert await proc.wait() == 1, proc.output()
    out = proc.output()
    assert f"group {group!r} has no committed offset" in out
    assert topic in out and "refusing to start" in out


async def test_second_sigint_aborts_at_once(fresh, broker, tmp_path, kstage):
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, [{"i": 0}, {"i": 1, "hang": True}])
    marker = tmp_path / "hanging"
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "test_hang",
                         "options": {"marker": str(marker)},
                         "sink": {"type": "jsonl", "path": "out.jsonl"}}],
                       supervisor={"shutdown_grace_s": 60, "abort_grace_s": 60})
    proc = kstage(cfg)
    await wait_until(marker.exists, what="the processor to hang")
    proc.signal(signal.SIGINT)
    await proc.wait_for_log("received SIGINT: stopping")
    proc.signal(signal.SIGINT)
    assert await proc.wait(timeout=15) == 130, proc.output()
    assert "second SIGINT: aborting now" in proc.output()
    assert (await committed(broker, group, topic, 1))[0] in (-1, 1), "hanging work uncommitted"
