"""The test kit of kstage's own worker and sink tests: one recording sink, one batch, one
worker builder, one bounded wait.

* :class:`RecordingSink`: records what it wrote; a write can be held until the test
  releases it, gated per row, or failed (always, by a predicate, or once).
* :func:`batch`: a :class:`~actors.sinks.SinkBatch` of one row for one offset.
* :func:`make_worker`: a :class:`~actors.worker.Worker` over a fake consumer
  (:class:`tests.fake_consumer.FakeConsumer`) or the real one, and the test's sinks,
  handed in as the worker's ``consumer_factory`` and ``sink_factory``: no module path is
  monkeypatched.
  Its settings are built from a mapping (:func:`settings.settings_from`), no file.
* :func:`assembled`: a worker's parts over a test's consumer, built as its run builds
  them, for a test that drives a part (the fetcher, the rebalance listener, the
  pipeline) without running the worker.
* :func:`until`: wait, bounded, until a predicate holds (never ``sleep(1)`` and hope).
* :class:`FailingRows` and :class:`HeldSleep`: a processor that fails where asked and a
  retry wait the test releases, for retry lanes.

Integration tests get a fresh topic and group from the ``fresh`` fixture
(``tests/conftest.py``). docs/plugins.md shows how a plugin's own tests use the kit of
:mod:`processors.testing` and :mod:`service.testing`; this one is for tests of the worker
itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from actors.errors import SinkError
from actors.offsets import Entry, OffsetTracker
from actors.sinks import Sink, SinkBatch, SinkCapabilities
from actors.worker import Worker
from actors.worker.parts import WorkerParts
from processors.base import Message, Processor, Row
from processors.json_rows import JsonRowsProcessor
from settings import Settings, SinkSettings, settings_from
from tests.fake_consumer import FakeConsumer
from tests.kafkautil import FAST_GROUP

TOPIC = "t"
TP = TopicPartition(TOPIC, 0)


class RecordingSink(Sink):
    """A sink that records what it wrote and that a test can hold, gate or fail.

    Args:
        hold: the ``hold``-th write waits until :attr:`release` is set (:attr:`held` is
            set while it waits).
        key: the row key :attr:`written` records (default ``_offset``).
        fails: a write whose rows it holds true for fails (SinkError, after a short
            pause: the runner retries it); :attr:`down` fails every write.
        fail_once: the first write whose first row's ``key`` is this fails once.
        gated: each write waits for the gate of its first row's ``key`` (:meth:`gate`).
        clears: empty the list of rows it was given, as the table sinks may.
        capabilities: what the sink declares (default: the base's).

    Attributes:
        written: ``key`` of every row written, in write order.
        rows: every row written.
        writes: write calls (attempts included); attempts: first ``key`` of each.
        attempted: set at every write call.
    """

    type = "recording"

    def __init__(self, hold: int | None = None, *, key: str = "_offset",
                 fails: Callable[[Sequence[Row]], bool] | None = None,
                 fail_once: Hashable | None = None, gated: bool = False,
                 clears: bool = False, capabilities: SinkCapabilities | None = None) -> None:
        self.hold, self.key, self.fails = hold, key, fails
        self.fail_once, self.gated, self.clears = fail_once, gated, clears
        if capabilities is not None:
            self.capabilities = capabilities
        self.down = False
        self.written: list[Any] = []
        self.rows: list[Row] = []
        self.attempts: list[Any] = []
        self.writes = 0
        self.held, self.release, self.attempted = asyncio.Event(), asyncio.Event(), \
            asyncio.Event()
        self._gates: dict[Any, asyncio.Event] = {}

    def __repr__(self) -> str:
        state = "down" if self.down else "held" if self.held.is_set() and not \
            self.release.is_set() else "up"
        return f"<RecordingSink {state} writes={self.writes} written={len(self.written)}>"

    def gate(self, key: Any) -> asyncio.Event:
        """The gate a ``gated`` write of a batch whose first row has ``key`` waits on."""
        return self._gates.setdefault(key, asyncio.Event())

    async def write(self, rows: Sequence[Row]) -> None:
        self.writes += 1
        self.attempted.set()
        first = rows[0][self.key] if rows else None
        self.attempts.append(first)
        if self.gated:
            await self.gate(first).wait()
        if self.fail_once is not None and first == self.fail_once:
            self.fail_once = None
            raise SinkError("refused once")
        if self.down or (self.fails is not None and self.fails(rows)):
            await asyncio.sleep(0.005)
            raise SinkError("down")
        if self.writes == self.hold:
            self.held.set()
            await self.release.wait()
        self.rows.extend(rows)
        self.written.extend(row[self.key] for row in rows)
        if self.clears and isinstance(rows, list):
            rows.clear()


class FailingRows(JsonRowsProcessor):
    """json_rows, failing (retriably) on values with ``fail``: a processor whose
    failures the worker retries (``failure.mode: retry``)."""

    def transform(self, message: Message) -> Sequence[Row]:
        if isinstance(message.value, dict) and message.value.get("fail"):
            raise RuntimeError(f"failing at offset {message.offset}")
        return super().transform(message)


class HeldSleep:
    """The retry wait: returns when the test releases it (True) or the worker stops
    (False, as the worker's own wait does)."""

    def __init__(self) -> None:
        self.calls: list[float] = []
        self.waiting, self.release = asyncio.Event(), asyncio.Event()
        self.stopped = asyncio.Event()  # the worker's intake_stopped, once it exists

    async def __call__(self, seconds: float) -> bool:
        self.calls.append(seconds)
        self.waiting.set()
        released = asyncio.ensure_future(self.release.wait())
        stopped = asyncio.ensure_future(self.stopped.wait())
        try:
            await asyncio.wait([released, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            released.cancel()
            stopped.cancel()
        return not self.stopped.is_set()


def batch(tp: TopicPartition, n: int, *, tracker: OffsetTracker | None = None,
          **row: Any) -> SinkBatch:
    """A batch of the one row ``{"n": n, "p": partition, **row}`` for offset ``n`` of
    ``tp``: tracked by ``tracker`` when given (as the worker ships it), else untracked."""
    entry = tracker.add(tp, n + 1, 1) if tracker is not None else Entry(tp, n + 1, 1)
    return SinkBatch([{"n": n, "p": tp.partition, **row}], entry)


def values(*items: Any) -> list[bytes | None]:
    """Message values: bytes as they are, anything else as JSON."""
    return [v if isinstance(v, bytes) else json.dumps(v).encode() for v in items]


def worker_settings(tmp_path: Path, *, topic: Mapping[str, Any] | None = None,
                    commit: Mapping[str, Any] | None = None,
                    failure: Mapping[str, Any] | None = None,
                    supervisor: Mapping[str, Any] | None = None, **group: Any) -> Settings:
    """Settings of one group ``g-fake`` with one topic (``t``, ``json_rows``; ``topic``
    adds or overrides keys), as the integration tests' config files are
    (:func:`tests.kafkautil.write_config`) but for a worker alone: a commit after every
    ack (``commit`` overrides), failures continued and dead-lettered under ``tmp_path``
    (``failure``), a 1 s shutdown grace (``supervisor``), polls of 2 records; ``group``
    overrides the group's other keys."""
    return settings_from({
        "name": "g-fake",
        "kafka": {"bootstrap": "127.0.0.1:9"},
        "service": {"http_port": 0},
        "supervisor": {"shutdown_grace_s": 1, "abort_grace_s": 5, "max_restarts": 3,
                       "restart_window_s": 60, "min_backoff_s": 0.1, "max_backoff_s": 1,
                       **(supervisor or {})},
        "groups": [{
            "group_id": "g-fake", "max_poll_records": 2, **FAST_GROUP,
            "commit": {"mode": "batch", "max_messages": 1, "max_interval_s": 0.2,
                       **(commit or {})},
            "failure": {"mode": "continue", "dead_letter_path": str(tmp_path / "dead.jsonl"),
                        **(failure or {})},
            "topics": [{"topic": TOPIC, "processor": "json_rows", **(topic or {})}],
            **group,
        }],
    })


def make_worker(settings: Settings, consumer: FakeConsumer | None,
                sinks: Sink | Callable[[SinkSettings], Sink], *,
                processor_cls: type[Processor] = JsonRowsProcessor,
                bootstrap: str = "127.0.0.1:9", **kwargs: Any) -> Worker:
    """A worker of the first topic of ``settings`` (e.g. :func:`worker_settings`) whose
    consumer is ``consumer`` (None: the real aiokafka consumer of ``bootstrap``) and
    whose sinks are ``sinks`` (one sink for every sink of the topic, or a function of
    each sink's settings); ``kwargs`` go to :class:`~actors.worker.Worker`."""
    group = settings.groups[0]
    factory = sinks if not isinstance(sinks, Sink) else (lambda _settings: sinks)
    if consumer is not None:
        kwargs["consumer_factory"] = lambda *args: consumer
        kwargs.setdefault("log_bounds", consumer)  # its logs' bounds, no broker
    return Worker(settings=settings, group=group, topic=group.topics[0],
                  processor_cls=processor_cls, bootstrap=bootstrap,
                  sink_factory=factory, **kwargs)


@contextlib.asynccontextmanager
async def assembled(worker: Worker, consumer: Any, processor: Processor | None = None
                    ) -> AsyncIterator[WorkerParts]:
    """``worker``'s parts, built as :meth:`Worker.run` builds them (the pipeline with
    ``processor``, default ``json_rows``, then the rest over ``consumer``, no sink),
    inside a task group that ends with the block; the pipeline is closed after it."""
    pipeline = worker.pipeline_for(processor or JsonRowsProcessor({}))
    try:
        async with asyncio.TaskGroup() as tg:
            yield worker.assemble(consumer, [], pipeline, tg)
    finally:
        await pipeline.close()


async def until(predicate: Callable[[], object], what: str, timeout: float = 10) -> None:
    """Wait (bounded) until ``predicate`` holds."""
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def turns(worker: Worker, count: int, timeout: float = 30) -> None:
    """Wait until the worker's fetch loop turned ``count`` more times (each within
    ``timeout`` s)."""
    for _ in range(count):
        seen = worker.parts.fetcher.turned_at
        await until(lambda seen=seen: worker.parts.fetcher.turned_at != seen,  # type: ignore[misc]
                    "a turn of the fetch loop", timeout)


async def stop_in_phase_two(worker: Worker, run: asyncio.Task[None]) -> None:
    """A two-phase stop during a write that hangs: phase 1 (stop intake) must keep
    waiting for it; phase 2 cancels the worker."""
    worker.stop()
    await asyncio.wait([run], timeout=0.5)
    assert not run.done(), "phase 1 waits for the write under way"
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


__all__ = ["TOPIC", "TP", "FailingRows", "HeldSleep", "RecordingSink", "assembled", "batch",
           "make_worker", "stop_in_phase_two", "until", "values", "worker_settings"]
