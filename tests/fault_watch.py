"""What the cluster fault tests watch while they break a cluster: a producer that
records what the cluster acknowledged, and a watcher of the invariants.

- :class:`AckedProducer` produces ``{"i": n}`` (key ``n``) with ``acks=all`` at a steady
  rate and records every ``n`` the cluster acknowledged: those must all land.
- :class:`Watch` samples, every ``interval_s``, the group's committed offsets and then
  the sink files (rows carry ``_partition`` and ``_offset``), the dead-letter file and
  the dead-letter topic (read up to its end offset). It records a violation when an
  offset below a committed one is in none of them (an offset committed ahead of the
  sink) and when a committed offset moved backwards, and it records every ``/readyz``
  answer of the kstage processes it is given (what was said while the fault lasted).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from tests.kafkautil import committed, read_jsonl


class AckedProducer:
    """Produces ``{"i": n}`` for n = 0, 1, ... until stopped; ``acked`` holds every n the
    cluster acknowledged (``acks=all``), ``failed`` every n it did not."""

    def __init__(self, bootstrap: str, topic: str, *, rate_per_s: float = 100,
                 extra: dict[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.rate_per_s = rate_per_s
        self.extra = extra or {}
        self.acked: set[int] = set()
        self.failed: set[int] = set()
        self.sent = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> AckedProducer:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None

    async def wait_acked(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            assert time.monotonic() < deadline, (
                f"only {len(self.acked)} of {count} produced records acknowledged")
            await asyncio.sleep(0.1)

    def value(self, n: int) -> bytes:
        return json.dumps({"i": n, **self.extra}).encode()

    async def _run(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all",
                                    request_timeout_ms=30000, retry_backoff_ms=200)
        await producer.start()
        pending: set[asyncio.Future[Any]] = set()
        try:
            while not self._stop.is_set():
                n = self.sent
                self.sent += 1
                try:
                    future = await producer.send(self.topic, self.value(n), key=str(n).encode())
                except KafkaError:
                    self.failed.add(n)
                    continue
                future.add_done_callback(lambda f, n=n: self._done(n, f))
                pending.add(future)
                future.add_done_callback(pending.discard)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), 1 / self.rate_per_s)
            if pending:
                await asyncio.wait(pending, timeout=60)
        finally:
            await producer.stop()

    def _done(self, n: int, future: asyncio.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            self.failed.add(n)
        else:
            self.acked.add(n)


@dataclass
class Readiness:
    """One ``/readyz`` answer (``status`` 0: no answer)."""

    at: float
    status: int
    reasons: list[str]


@dataclass
class Watch:
    """Watches a group's commits against its sinks and its members' readiness (see the
    module doc). Use ``async with``; :meth:`check` asserts what it saw."""

    bootstrap: str
    group: str
    topic: str
    partitions: int
    sinks: list[Path]
    dead_letters: Path | None = None
    status_ports: dict[str, int] = field(default_factory=dict)
    dead_letter_topic: str | None = None
    rows: Callable[[], Iterable[dict[str, Any]]] | None = None  # a sink that is not a file
    interval_s: float = 0.5
    dead_letter_read_s: float = 10  # a sample reads the dead-letter topic's new records
    dead_lettered: dict[tuple[int, int], bytes] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    history: list[dict[int, int]] = field(default_factory=list)
    readiness: dict[str, list[Readiness]] = field(default_factory=dict)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _dlq: AIOKafkaConsumer | None = None

    async def __aenter__(self) -> Watch:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
        if self._dlq is not None:
            await self._dlq.stop()

    def landed(self) -> dict[int, set[int]]:
        """Offsets per partition in the sinks or the dead letters."""
        offsets: dict[int, set[int]] = {p: set() for p in range(self.partitions)}
        for row in self._rows():
            offsets[int(row["_partition"])].add(int(row["_offset"]))
        if self.dead_letters is not None:
            for line in read_jsonl(self.dead_letters):
                if line.get("topic") == self.topic:
                    offsets[int(line["partition"])].add(int(line["offset"]))
        for part, offset in self.dead_lettered:
            offsets[part].add(offset)
        return offsets

    def dead_lettered_values(self) -> set[int]:
        """The ``i`` of every record read from the dead-letter topic."""
        return {int(json.loads(value)["i"]) for value in self.dead_lettered.values()}

    async def _read_dead_letter_topic(self) -> None:
        """Read the dead-letter topic up to its current end offset (what the broker
        acknowledged so far), keyed by the failed message's partition and offset."""
        if self.dead_letter_topic is None:
            return
        tp = TopicPartition(self.dead_letter_topic, 0)
        if self._dlq is None:
            self._dlq = AIOKafkaConsumer(bootstrap_servers=self.bootstrap,
                                         auto_offset_reset="earliest",
                                         enable_auto_commit=False)
            await self._dlq.start()
            self._dlq.assign([tp])
        end = (await self._dlq.end_offsets([tp]))[tp]
        deadline = time.monotonic() + self.dead_letter_read_s
        while await self._dlq.position(tp) < end and time.monotonic() < deadline:
            for record in (await self._dlq.getmany(tp, timeout_ms=500)).get(tp, []):
                headers = {k: v.decode() for k, v in record.headers}
                if headers.get("kstage.error.topic") == self.topic:
                    key = (int(headers["kstage.error.partition"]),
                           int(headers["kstage.error.offset"]))
                    self.dead_lettered[key] = record.value
        read_to = await self._dlq.position(tp)
        if read_to < end:
            # a read cut short is no read: the commits sampled before it may cover dead
            # letters the broker acknowledged but this consumer has not fetched yet (its
            # fetches still went to a killed leader); the next sample checks again
            raise TimeoutError(f"the dead-letter topic read to {read_to} of {end} "
                               f"in {self.dead_letter_read_s}s")

    def landed_offsets(self) -> set[tuple[int, int]]:
        """(partition, offset) of every row in the sinks or the dead letters."""
        return {(part, o) for part, offsets in self.landed().items() for o in offsets}

    def _rows(self) -> list[dict[str, Any]]:
        rows = [row for path in self.sinks for row in read_jsonl(path)]
        return rows + list(self.rows()) if self.rows is not None else rows

    def values(self) -> set[int]:
        """The ``i`` of every row in the sinks."""
        return {int(row["i"]) for row in self._rows()}

    async def sample(self, client: httpx.AsyncClient) -> None:
        try:
            offsets = await committed(self.bootstrap, self.group, self.topic, self.partitions)
        except (TimeoutError, KafkaError, OSError):
            offsets = None  # a broker is down: next time
        if offsets is not None:
            try:
                await self._read_dead_letter_topic()
            except (TimeoutError, KafkaError, OSError):
                offsets = None  # the dead-letter topic cannot be read now: next time
        if offsets is not None:
            landed = self.landed()  # read after the commits: the sink must be ahead
            for part, offset in offsets.items():
                ahead = set(range(max(offset, 0))) - landed[part]
                if ahead:
                    self.violations.append(
                        f"partition {part} committed at {offset} but offsets "
                        f"{sorted(ahead)[:10]} are not in the sink")
            if self.history:
                for part, offset in offsets.items():
                    if offset < self.history[-1][part]:
                        self.violations.append(f"partition {part} committed offset moved "
                                               f"back {self.history[-1][part]} -> {offset}")
            self.history.append(offsets)
        # a copy: a test adds members (their ports) while a sample awaits an answer
        for name, port in list(self.status_ports.items()):
            try:
                answer = await client.get(f"http://127.0.0.1:{port}/readyz")
                reasons = answer.json().get("reasons", []) if answer.status_code == 503 else []
                seen = Readiness(time.monotonic(), answer.status_code, reasons)
            except (httpx.HTTPError, ValueError):
                seen = Readiness(time.monotonic(), 0, [])
            self.readiness.setdefault(name, []).append(seen)

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=5) as client:
            while not self._stop.is_set():
                await self.sample(client)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.interval_s)
            await self.sample(client)

    def not_ready(self, name: str, since: float, until: float | None = None) -> list[Readiness]:
        """The 503 answers of member ``name`` between two monotonic times."""
        return [r for r in self.readiness.get(name, [])
                if r.status == 503 and r.at >= since and (until is None or r.at <= until)]

    def ready_again(self, name: str, since: float) -> float | None:
        """When member ``name`` answered 200 last began after ``since`` (None: not)."""
        answers = [r for r in self.readiness.get(name, []) if r.at >= since]
        if not answers or answers[-1].status != 200:
            return None
        start = answers[-1].at
        for answer in reversed(answers):
            if answer.status != 200:
                break
            start = answer.at
        return start


async def wait_ready(watch: Watch, name: str, since: float, timeout: float) -> float:
    """Until member ``name`` answered 200 after ``since``; when it began."""
    deadline = time.monotonic() + timeout
    while (again := watch.ready_again(name, since)) is None:
        if time.monotonic() > deadline:
            last = watch.readiness.get(name, [])[-1:]
            raise AssertionError(f"{name} not ready within {timeout}s: {last}")
        await asyncio.sleep(0.2)
    return again


async def high_waters(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    return {tp.partition: offset for tp, offset in ends.items()}


async def settle(watch: Watch, acked: Iterable[int], timeout: float) -> float:
    """Wait, while ``watch`` runs, until every acknowledged value is in the sinks and the
    group committed every partition up to its high-water mark (both read afresh);
    returns the seconds it took."""
    assert watch._task is not None and not watch._task.done(), "the watch is not running"
    started = time.monotonic()
    want = set(acked)
    while True:
        missing = want - watch.values()
        if not missing:
            ends = await high_waters(watch.bootstrap, watch.topic, watch.partitions)
            done = await committed(watch.bootstrap, watch.group, watch.topic,
                                   watch.partitions)
            if done == ends:
                return time.monotonic() - started
            last = f"committed {done}, high-water marks {ends}"
        else:
            last = f"{len(missing)} acknowledged values missing, e.g. {sorted(missing)[:10]}"
        assert time.monotonic() - started < timeout, f"not settled within {timeout}s: {last}"
        await asyncio.sleep(0.5)
