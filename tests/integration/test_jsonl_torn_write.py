"""A JSONL write cut short leaves a partial last line; what is written next must not be glued
to it (the glued row would be unreadable while its offset is committed: lost).

The fault is real: kstage runs under ``RLIMIT_FSIZE``, so the kernel writes a batch only up
to the limit and the rest fails with EFBIG (CPython ignores SIGXFSZ), as a full disk
fails with ENOSPC. The sink retries the batch; then either the limit is lifted
(``prlimit``, like space freed) and the retry succeeds in the same process, or the
process is SIGKILLed while retrying and a new one writes the batch again after it.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kafkautil import (
    CHILD_PATH,
    KstageProcess,
    committed,
    produce,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

LIMIT = 60  # bytes: the first write is cut inside its first row (~130 bytes)
EVENTS = 50


def start_limited(config: Path) -> subprocess.Popen[bytes]:
    """``kstage run`` whose files may not grow past LIMIT bytes (its log goes to a pipe)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.RLIM_INFINITY))

    return subprocess.Popen(
        [sys.executable, "-m", "service", "run", "-c", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=config.parent,
        env={**os.environ, "PYTHONPATH": CHILD_PATH, "PYTHONDONTWRITEBYTECODE": "1"},
        preexec_fn=limit,
    )


def readable(path: Path) -> tuple[list[dict[str, object]], list[bytes]]:
    """The file's rows, and its lines that are not JSON."""
    rows, unreadable = [], []
    for line in path.read_bytes().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            unreadable.append(line)
    return rows, unreadable


@pytest.mark.parametrize("then", ["retry", "restart"])
async def test_rows_after_a_partial_write_stay_readable(
        fresh, broker: str, tmp_path: Path, kstage: type[KstageProcess], then: str) -> None:
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, ({"i": i, "pad": "x" * 40} for i in range(EVENTS)))
    out = tmp_path / "out.jsonl"
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "json_rows",
                         "sink": {"type": "jsonl", "path": str(out)}}])
    limited = start_limited(cfg)
    try:
        await wait_until(lambda: out.exists() and out.stat().st_size == LIMIT, timeout=60,
                         what="the first write to be cut at the limit")
        torn = out.read_bytes()
        assert not torn.endswith(b"\n"), "the write was cut inside a line"
        fragment = torn.rsplit(b"\n", 1)[-1]
        await asyncio.sleep(1.0)  # the sink is retrying against the limit
        assert limited.poll() is None
        assert (await committed(broker, group, topic, 1))[0] == -1, "nothing committed"
        if then == "retry":  # room again: the same process's retry succeeds
            resource.prlimit(limited.pid, resource.RLIMIT_FSIZE,
                             (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            deadline = time.monotonic() + 60
            while (await committed(broker, group, topic, 1))[0] != EVENTS:
                assert time.monotonic() < deadline, "the retry never committed"
                await asyncio.sleep(0.2)
            limited.send_signal(signal.SIGTERM)
            log = limited.communicate(timeout=60)[0].decode(errors="replace")
            assert limited.returncode == 0, log
        else:  # killed while retrying: the next process writes the batch again
            limited.kill()
            log = limited.communicate(timeout=60)[0].decode(errors="replace")
            again = kstage(cfg, "--drain")
            assert await again.wait(60) == 0, again.output()
            log = again.output()
    finally:
        if limited.poll() is None:
            limited.kill()
            limited.communicate()

    rows, unreadable = readable(out)
    assert {r["i"] for r in rows} == set(range(EVENTS)), "every event is readable"
    # The only unreadable line is the cut write's fragment, on a line of its own.
    assert unreadable == [fragment], unreadable
    assert "partial last line" in log, log
    assert (await committed(broker, group, topic, 1))[0] == EVENTS
