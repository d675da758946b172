"""``failure.mode: retry`` waits of a whole ``kstage run`` on the real broker: a revoke
ends the wait within the rebalance (timed from the process's log) without committing
past the message, and ``then: throw`` after the retries stops the run without
committing it. That a wait blocks only its partition, which goes on in order after the
dead letter, is tests/behaviour's (fake consumer and both brokers)."""

from __future__ import annotations

import asyncio
import re
import signal
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


def rows_of(path: Path, partition: int) -> list[int]:
    return [r["i"] for r in read_jsonl(path) if r["_partition"] == partition]


def logged_at(output: str, text: str) -> datetime:
    for line in output.splitlines():
        if text in line:
            return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    raise AssertionError(f"no {text!r} in:\n{output}")


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
