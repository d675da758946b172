"""Helpers for tests on the real embedded broker: topics, producing, offsets, processes."""

from __future__ import annotations

import asyncio
import codecs
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = ROOT / "tests" / "plugins"
# PYTHONPATH of a child process (kstage, a tool): the test processors and this checkout,
# so the child runs the code under test, not the checkout the venv was installed from
# (a git worktree shares the main checkout's venv).
CHILD_PATH = os.pathsep.join((str(PLUGINS), str(ROOT)))

# Tansu holds a group join for ~session_timeout/2 (ENVIRONMENT.md): keep it short.
FAST_GROUP = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}

# The default deadline of a wait for a kstage process (a log line, a condition, its
# status port, a /readyz answer): a process start and a group join take seconds, and
# several times that on the 2-core machine running the suite beside JVMs. Only a wait
# that fails takes this long.
DEADLINE_S = 60


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def create_topic(bootstrap: str, topic: str, partitions: int = 1,
                       replication: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, replication)])
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, values: Iterable[Any], *,
                  partition_of: Callable[[int], int] | None = None,
                  one_per_batch: bool = False) -> int:
    """Produce JSON values (bytes are sent as they are); returns the count.
    ``one_per_batch``: each waits for its ack, a record batch of its own (Tansu's end
    offsets are right only then: ../shared/ENVIRONMENT.md)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    n = 0
    try:
        for i, value in enumerate(values):
            raw = value if isinstance(value, bytes) else json.dumps(value).encode()
            part = partition_of(i) if partition_of else None
            sent = await producer.send(topic, raw, key=str(i).encode(), partition=part)
            if one_per_batch:
                await sent
            n += 1
        await producer.flush()
    finally:
        await producer.stop()
    return n


async def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """Committed next-offsets of ``group`` per partition (-1 when none). Errors (Apache
    Kafka creating its offsets topic, a coordinator moving or loading) are retried for
    up to 30 s."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    deadline = time.monotonic() + 30
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        while True:
            try:
                offsets = await admin.list_consumer_group_offsets(group, partitions=tps)
                if set(offsets) >= set(tps):
                    break
                # A partition the coordinator answered with an error (offsets of a
                # group being loaded after a coordinator move) is left out: ask again.
                if time.monotonic() > deadline:
                    missing = sorted(set(tps) - set(offsets))
                    raise AssertionError(f"no committed offsets of {missing}")
            except KafkaError:  # aiokafka raises a partition's error as the response's
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
    return {tp.partition: (meta.offset if meta is not None else -1)
            for tp, meta in offsets.items()}


async def read_all(bootstrap: str, topic: str, expected: int, timeout: float = 30) -> list[Any]:
    """The first ``expected`` records of ``topic``'s partition 0 (bounded wait)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.seek_to_beginning()
        got: list[Any] = []
        async with asyncio.timeout(timeout):
            while len(got) < expected:
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(msgs)
        return got
    finally:
        await consumer.stop()


def write_config(path: Path, bootstrap: str, group: str, topics: list[dict[str, Any]], *,
                 commit: dict[str, Any] | None = None, failure: dict[str, Any] | None = None,
                 supervisor: dict[str, Any] | None = None,
                 service: dict[str, Any] | None = None, **group_keys: Any) -> Path:
    cfg = {
        "name": group,
        "kafka": {"bootstrap": bootstrap},
        "service": {"http_port": 0, **(service or {})},
        "supervisor": {"shutdown_grace_s": 10, "abort_grace_s": 5, "max_restarts": 3,
                       "restart_window_s": 60, "min_backoff_s": 0.1, "max_backoff_s": 1,
                       **(supervisor or {})},
        "groups": [{
            "group_id": group,
            **FAST_GROUP,
            "commit": {"mode": "batch", "max_messages": 100, "max_interval_s": 0.5,
                       **(commit or {})},
            "failure": {"mode": "continue",
                        "dead_letter_path": str(path.parent / "dead.jsonl"),
                        **(failure or {})},
            "topics": topics,
            **group_keys,
        }],
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete lines of ``path``: a line a running process is still writing (no
    newline yet) is left for the next read."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().split("\n")[:-1] if line]


class KstageProcess:
    """``kstage run`` as a child process, with its output captured to a file."""

    def __init__(self, config: Path, *args: str, env: dict[str, str] | None = None,
                 log: Path | None = None) -> None:
        self.log = log or config.with_suffix(f".{uuid.uuid4().hex[:6]}.log")
        full_env = {**os.environ, "PYTHONPATH": CHILD_PATH, **(env or {})}
        self._fh = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service", "run", "-c", str(config), *args],
            stdout=self._fh, stderr=subprocess.STDOUT, env=full_env, cwd=config.parent,
        )
        # output() reads only what was written since its last call: a test polls it
        # every 0.1 s, and a run's log grows to megabytes.
        self._read = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._text = ""

    def output(self) -> str:
        """Everything the process wrote so far."""
        with open(self.log, "rb") as log:
            log.seek(self._read)
            new = log.read()
        self._read += len(new)
        if new:
            self._text += self._decoder.decode(new)
        return self._text

    async def wait_for_log(self, text: str, timeout: float = DEADLINE_S, count: int = 1) -> None:
        deadline = time.monotonic() + timeout
        while self.output().count(text) < count:
            if self.proc.poll() is not None:
                raise AssertionError(f"kstage exited {self.proc.returncode} before logging "
                                     f"{text!r}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} within {timeout}s:\n{self.output()}")
            await asyncio.sleep(0.1)

    async def wait(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"kstage did not exit within {timeout}s:\n{self.output()}")
            await asyncio.sleep(0.1)
        return self.proc.returncode

    def peak_rss_kb(self) -> int:
        """The process's peak RSS so far, in KiB: the kernel's high-water mark of its
        memory (``VmHWM``), kept since its exec (no sampling)."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
        assert found is not None, status
        return int(found.group(1))

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.kill()
        self._fh.close()


# wait_until's pause between two checks: at least POLL_S, and POLL_SHARE times the CPU
# the last check took, at most POLL_MAX_S. A check that reads a table (its metadata, its
# files) costs tens of milliseconds, growing with the table: polled every 0.1 s it took
# a quarter of a core from the processes under test (measured: 3.7 CPU s of a 15 s
# wait); with the share it takes at most a ninth.
POLL_S, POLL_SHARE, POLL_MAX_S = 0.1, 8, 1.0


async def wait_until(predicate: Callable[[], Any], timeout: float = DEADLINE_S,
                     what: str = "condition") -> None:
    """Return once ``predicate()`` is true; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        began = time.thread_time()
        if predicate():
            return
        took = time.thread_time() - began
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(poll_pause(took))


def poll_pause(check_cpu_s: float) -> float:
    """wait_until's pause after a check that took ``check_cpu_s`` of CPU."""
    return min(max(POLL_S, POLL_SHARE * check_cpu_s), POLL_MAX_S)


def last_assignment(proc: KstageProcess) -> set[int]:
    """The partitions ``proc`` logged it was assigned last (empty before its first)."""
    found = re.findall(r"assigned partitions \[([0-9, ]*)\]", proc.output())
    return {int(p) for p in found[-1].split(",") if p.strip()} if found else set()


def split_between(a: KstageProcess, b: KstageProcess, partitions: int) -> bool:
    """Whether the last assignments of ``a`` and ``b`` split ``partitions`` between them."""
    mine, yours = last_assignment(a), last_assignment(b)
    return bool(mine and yours and not mine & yours
                and mine | yours == set(range(partitions)))


async def status_port(proc: KstageProcess, timeout: float = DEADLINE_S) -> int:
    """The port the status server of ``proc`` took (its log says; it may not be
    ``service.http_port`` when another process on this host holds that)."""
    await proc.wait_for_log("status server on port ", timeout=timeout)
    found = re.search(r"status server on port (\d+):", proc.output())
    assert found, proc.output()
    return int(found.group(1))


async def readyz(base: str) -> tuple[int, dict[str, Any]]:
    """``GET base/readyz``: its status and JSON body; (0, {}) while nothing answers."""
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.get(f"{base}/readyz")
    except httpx.TransportError:
        return 0, {}  # the status server is not up yet
    return response.status_code, response.json()


async def wait_readyz(base: str, proc: KstageProcess, code: int, text: str = "",
                      timeout: float = DEADLINE_S) -> dict[str, Any]:
    """The first /readyz answer with ``code`` whose JSON contains ``text`` (failing with
    kstage's output when it exits or ``timeout`` passes)."""
    deadline = time.monotonic() + timeout
    seen: tuple[int, dict[str, Any]] = (0, {})
    while True:
        seen = await readyz(base)
        if seen[0] == code and text in json.dumps(seen[1]):
            return seen[1]
        assert proc.proc.poll() is None, proc.output()
        assert time.monotonic() < deadline, (f"/readyz never {code} with {text!r}: {seen}; "
                                             f"kstage's output:\n{proc.output()[-4000:]}")
        await asyncio.sleep(0.1)
