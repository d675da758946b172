"""``failure.mode: retry`` waits block only the failing message's partition, on the real
broker: the other partitions keep landing and committing during the wait, a revoke ends
the wait at once without committing past the message, and after the retries the message
is dead-lettered and its partition goes on in order."""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from tests.conftest import Fresh
from tests.kafkautil import (
    KstageProcess,
    committed,
    produce,
    read_jsonl,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


async def wait_committed(broker: str, group: str, topic: str, want: dict[int, int],
                         timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = await committed(broker, group, topic, 2)
        if all(got[p] == n for p, n in want.items()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}: {got}")
        await asyncio.sleep(0.2)


def rows_of(path: Path, partition: int) -> list[int]:
    return [r["i"] for r in read_jsonl(path) if r["_partition"] == partition]


def logged_at(output: str, text: str) -> datetime:
    for line in output.splitlines():
        if text in line:
            return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    raise AssertionError(f"no {text!r} in:\n{output}")


@pytest.mark.parametrize("commit_mode", ["batch", "per_message"])
@pytest.mark.parametrize("fresh", [2], indirect=True)
async def test_retry_wait_blocks_only_its_partition_then_dead_letters_in_order(
        fresh: Fresh, broker: str, tmp_path: Path, kstage: Callable[..., KstageProcess],
        commit_mode: str) -> None:
    """In both commit modes that own the offsets: per_message commits every message
    before the next, and its retry wait still holds only the failing partition."""
    backoff_s = 25
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, [{"i": 0}, {"i": 1, "fail": True}, {"i": 2}],
                  partition_of=lambda i: 0)
    cfg = write_config(
        tmp_path / "kstage.yml", broker, group,
        [{"topic": topic, "processor": "test_flaky",
          "sink": {"type": "jsonl", "path": "out.jsonl"}}],
        commit={"mode": commit_mode},
        failure={"mode": "retry", "max_retries": 1, "min_backoff_ms": backoff_s * 1000,
                 "max_backoff_ms": backoff_s * 1000, "then": "continue"})
    out, dead = tmp_path / "out.jsonl", tmp_path / "dead.jsonl"
    proc = kstage(cfg)
    await proc.wait_for_log(f"{topic}[0]@1 failed (attempt 1", timeout=60)
    waiting_since = time.monotonic()
    # Produced once partition 0 waits: they can only land during the wait if it does
    # not block them.
    await produce(broker, topic, [{"i": 10 + i} for i in range(5)], partition_of=lambda i: 1)
    await produce(broker, topic, [{"i": 3}], partition_of=lambda i: 0)  # queued behind 1
    await wait_until(lambda: rows_of(out, 1) == [10, 11, 12, 13, 14], timeout=backoff_s * 0.6,
                     what="partition 1 landing during partition 0's retry wait")
    await wait_committed(broker, group, topic, {1: 5}, backoff_s * 0.6 - 1,
                         "partition 1 committed during the wait")
    assert time.monotonic() - waiting_since < backoff_s, "landed only after the wait"
    assert not dead.exists(), "dead-lettered before its retry"
    assert rows_of(out, 0) == [0], "nothing of partition 0 past the waiting message"
    assert (await committed(broker, group, topic, 2))[0] <= 1, "committed past the wait"

    # After the retry: dead-lettered (then: continue), partition 0 goes on in order.
    await wait_until(lambda: rows_of(out, 0) == [0, 2, 3], timeout=backoff_s + 30,
                     what="partition 0 going on after the dead letter")
    assert [(d["partition"], d["offset"], d["attempts"]) for d in read_jsonl(dead)] == [
        (0, 1, 2)]
    await wait_committed(broker, group, topic, {0: 4, 1: 5}, 30, "everything committed")
    assert rows_of(out, 1) == [10, 11, 12, 13, 14]
    proc.signal(signal.SIGTERM)
    assert await proc.wait() == 0, proc.output()


@pytest.mark.parametrize("commit_mode", ["batch", "per_message"])
@pytest.mark.parametrize("fresh", [2], indirect=True)
async def test_revoke_cancels_a_retry_wait_at_once_and_commits_nothing_past_it(
        fresh: Fresh, broker: str, tmp_path: Path, kstage: Callable[..., KstageProcess],
        commit_mode: str) -> None:
    rebalance_timeout_s = 40  # before: the revoke waited out the retry, up to 20 s
    topic, group = fresh.topic, fresh.group
    cfg = write_config(
        tmp_path / "kstage.yml", broker, group,
        [{"topic": topic, "processor": "test_flaky",
          "sink": {"type": "jsonl", "path": "out.jsonl"}}],
        commit={"mode": commit_mode},
        failure={"mode": "retry", "max_retries": 2, "min_backoff_ms": 60_000,
                 "max_backoff_ms": 60_000, "then": "continue"},
        supervisor={"shutdown_grace_s": 30})
    config = yaml.safe_load(cfg.read_text())
    config["kafka"]["consumer_config"] = {"rebalance.timeout.ms": rebalance_timeout_s * 1000}
    cfg.write_text(yaml.safe_dump(config))
    out = tmp_path / "out.jsonl"

    history: list[dict[int, int]] = []
    watching = True

    async def watch_commits() -> None:
        while watching:
            history.append(await committed(broker, group, topic, 2))
            await asyncio.sleep(0.3)

    a = kstage(cfg)
    await a.wait_for_log("assigned partitions [0, 1]", timeout=60)
    watcher = asyncio.create_task(watch_commits())
    try:
        await produce(broker, topic, [{"i": 0}, {"i": 1}, {"i": 2, "fail": True}, {"i": 3}],
                      partition_of=lambda i: 0)
        await a.wait_for_log(f"{topic}[0]@2 failed (attempt 1", timeout=30)
        await produce(broker, topic, [{"i": 10}, {"i": 11}], partition_of=lambda i: 1)
        await wait_until(lambda: rows_of(out, 1) == [10, 11], timeout=20,
                         what="partition 1 landing during the wait")
        b = kstage(cfg)
        await b.wait_for_log("assigned partitions [", timeout=60)
        await a.wait_for_log("revoked partitions [0, 1]", timeout=60)
        out_a = a.output()
        revoke_took = (logged_at(out_a, "revoked partitions [0, 1]")
                       - logged_at(out_a, "because it is rebalancing"))
        assert revoke_took.total_seconds() < 8, out_a
        assert not re.search(r"\[0\]@2 failed after", out_a + b.output()), "not retried yet"
        assert rows_of(out, 0) == [0, 1], "nothing of partition 0 past the waiting message"
        for proc in (a, b):
            proc.signal(signal.SIGTERM)
        # A stop abandons the waiting message (whoever waits now) without committing it.
        assert await a.wait() == 0, a.output()
        assert await b.wait() == 0, b.output()
    finally:
        watching = False
        await watcher
    final = await committed(broker, group, topic, 2)
    assert final == {0: 2, 1: 2}, (final, history)
    assert all(h[0] <= 2 for h in history), history
    assert not (tmp_path / "dead.jsonl").exists()


@pytest.mark.parametrize("commit_mode", ["batch", "per_message"])
@pytest.mark.parametrize("fresh", [2], indirect=True)
async def test_retries_then_throw_stop_the_worker_without_committing_the_message(
        fresh: Fresh, broker: str, tmp_path: Path, kstage: Callable[..., KstageProcess],
        commit_mode: str) -> None:
    """``then: throw`` after the retries of a parked partition: the run fails as before,
    the other partition's work is committed, the failed message and what follows it on
    its partition are not."""
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, [{"i": 0}, {"i": 1, "fail": True}, {"i": 2}],
                  partition_of=lambda i: 0)
    await produce(broker, topic, [{"i": 10}, {"i": 11}], partition_of=lambda i: 1)
    cfg = write_config(
        tmp_path / "kstage.yml", broker, group,
        [{"topic": topic, "processor": "test_flaky",
          "sink": {"type": "jsonl", "path": "out.jsonl"}}],
        commit={"mode": commit_mode},
        failure={"mode": "retry", "max_retries": 1, "min_backoff_ms": 3000,
                 "max_backoff_ms": 3000, "then": "throw"})
    proc = kstage(cfg, "--drain")
    assert await proc.wait() == 1, proc.output()
    assert f"{topic}[0]@1 failed after 2 attempt(s)" in proc.output()
    out = tmp_path / "out.jsonl"
    assert rows_of(out, 0) == [0]
    assert rows_of(out, 1) == [10, 11]
    assert await committed(broker, group, topic, 2) == {0: 1, 1: 2}, proc.output()
    assert not (tmp_path / "dead.jsonl").exists()
