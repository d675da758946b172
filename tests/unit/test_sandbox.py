"""The JSON Schema validation sandbox (actors/codecs/sandbox.py) with real child processes:
verdicts in order, a value past its budget killed and isolated while the event loop keeps
running, a child that dies by itself retried (never a verdict), and no child left behind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator

import pytest

from actors.codecs.sandbox import OVER_BUDGET, SandboxUnavailable, ValidationSandbox

OBJECT = (json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}}), {})
PATTERN = (json.dumps({"type": "string", "pattern": "^(a+)+$"}), {})
UNIQUE = (json.dumps({"type": "array", "uniqueItems": True, "items": {"type": "object"}}), {})
HOSTILE = json.dumps("a" * 39 + "!").encode()  # ^(a+)+$ backtracks 2^39 ways
GOOD = json.dumps("aaaa").encode()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(")")[-1].split()[0] != "Z"


@pytest.fixture
async def sandbox() -> AsyncIterator[ValidationSandbox]:
    box = ValidationSandbox(1.0)
    try:
        yield box
    finally:
        pid = box.pid
        await box.close()
        assert pid is None or not _alive(pid)


class _Ticks:
    """A task on the event loop noting the longest gap between its turns."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.longest = max(self.longest, now - last)
            last = now

    def stop(self) -> float:
        self.task.cancel()
        return self.longest


async def test_verdicts_in_order_from_one_child(sandbox: ValidationSandbox) -> None:
    bodies = [b'{"n": 1}', b'{"n": "x"}', b"[1]", b"not json", b"{}"]
    verdicts = await sandbox.validate(7, OBJECT, bodies)
    assert verdicts[0] is None and verdicts[3] is None and verdicts[4] is None
    assert verdicts[1] == "$.n: 'x' is not of type 'integer'"
    assert verdicts[2] == "$: [1] is not of type 'object'"
    assert await sandbox.validate(7, OBJECT, [b'{"n": 2}']) == [None]
    assert (sandbox.started, sandbox.killed, sandbox.crashes) == (1, 0, 0)


async def test_a_value_past_its_budget_is_killed_isolated_and_the_rest_go_on(
        sandbox: ValidationSandbox) -> None:
    ticks = _Ticks()
    verdicts = await sandbox.validate("p", PATTERN, [GOOD, HOSTILE, GOOD, b'"ab"'])
    longest = ticks.stop()
    assert verdicts[:3] == [None, OVER_BUDGET, None]
    assert verdicts[3] == "$: 'ab' does not match '^(a+)+$'"
    # killed once in the batch, once more when tried alone; a third child took the rest
    assert (sandbox.started, sandbox.killed, sandbox.crashes) == (3, 2, 0)
    assert longest < sandbox.budget_s, f"the event loop was blocked for {longest:.2f}s"
    assert await sandbox.validate("p", PATTERN, [GOOD]) == [None]  # the child is reused
    assert sandbox.started == 3


async def test_unique_items_of_many_objects_is_over_budget(sandbox: ValidationSandbox) -> None:
    hostile = json.dumps([{"i": i} for i in range(4000)]).encode()
    verdicts = await sandbox.validate("u", UNIQUE, [b"[{}, {\"a\": 1}]", hostile, b"[{}, {}]"])
    assert verdicts[0] is None and verdicts[1] is OVER_BUDGET
    assert verdicts[2] is not None and "non-unique" in verdicts[2]


async def test_a_value_that_was_slow_once_is_not_poison(sandbox: ValidationSandbox) -> None:
    """The child stopped (SIGSTOP: a machine that stalled) past the budget on a good value:
    it is killed, the value validated again alone, and valid."""
    await sandbox.validate(7, OBJECT, [b"{}"])  # a child running
    pid = sandbox.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    assert await sandbox.validate(7, OBJECT, [b'{"n": 1}', b'{"n": 2}']) == [None, None]
    assert (sandbox.killed, sandbox.crashes) == (1, 0) and not _alive(pid)


async def test_a_child_that_dies_is_retried_not_a_verdict() -> None:
    box = ValidationSandbox(30.0)
    slow = json.dumps([{"i": i} for i in range(1200)]).encode()  # valid, ~1 s to check
    try:
        await box.validate("u", UNIQUE, [b"[]"])
        first = box.pid
        assert first is not None
        task = asyncio.create_task(box.validate("u", UNIQUE, [slow, b"[{}]"]))
        for _ in range(1000):  # until the request is with the child
            if box.busy:
                break
            await asyncio.sleep(0.005)
        assert box.busy
        os.kill(first, signal.SIGKILL)  # e.g. the kernel's OOM killer
        assert await asyncio.wait_for(task, 60) == [None, None]
        assert (box.crashes, box.killed) == (1, 0) and box.pid != first
    finally:
        await box.close()


async def test_a_child_that_keeps_dying_is_unavailable_not_poison() -> None:
    """Under a memory limit a value too big to hold kills its child (MemoryError) each time:
    retried, then SandboxUnavailable (retriable), never a verdict."""
    box = ValidationSandbox(30.0, crash_retries=2, memory_limit_bytes=100 << 20)
    huge = json.dumps([{"a": i} for i in range(1_500_000)]).encode()
    try:
        with pytest.raises(SandboxUnavailable, match="died 3 times in a row") as caught:
            await box.validate(7, OBJECT, [huge])
        assert caught.value.retriable and box.crashes == 3
        assert await box.validate("u", UNIQUE, [b"[]"]) == [None]  # a new child works
    finally:
        await box.close()


async def test_a_cancelled_request_never_leaks_its_answers(sandbox: ValidationSandbox) -> None:
    task = asyncio.create_task(sandbox.validate("p", PATTERN, [HOSTILE]))
    for _ in range(1000):
        if sandbox.busy:
            break
        await asyncio.sleep(0.005)
    pid = sandbox.pid
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pid is not None and sandbox.pid is None
    assert await sandbox.validate("p", PATTERN, [b'"b"']) == ["$: 'b' does not match '^(a+)+$'"]


async def test_a_batch_waits_while_the_child_cannot_run_and_says_why() -> None:
    """A child that dies at start every time (10 MB of address space): the batch is not
    poison, it waits (``waiting_for`` for /readyz) until a stop abandons it."""
    from actors.codecs.json_schema import JsonSchemaDecoder
    from actors.codecs.schema_registry import RegisteredSchema
    from actors.failure import FailurePolicy
    from actors.worker.pipeline import RecordPipeline, no_wait
    from actors.worker.records import Collect, Record
    from processors.json_rows import JsonRowsProcessor
    from settings.models import FailureMode, FailureSettings, TopicSettings

    class Source:
        async def get_registered(self, schema_id: int | str) -> RegisteredSchema:
            return RegisteredSchema(OBJECT[0], "JSON", ())

    box = ValidationSandbox(1.0, crash_retries=0, memory_limit_bytes=10 << 20)
    topic = TopicSettings.model_construct(topic="t", processor="json_rows",
                                          format="json_schema")
    pipeline = RecordPipeline(
        topic=topic, processor=JsonRowsProcessor({}), group_id="g",
        avro=JsonSchemaDecoder(Source(), sandbox=box),  # type: ignore[arg-type]
        failure=FailurePolicy(FailureSettings(mode=FailureMode.THROW), no_wait))
    waits: list[str | None] = []

    async def sleep(seconds: float) -> bool:
        waits.append(pipeline.screen.waiting_for)
        return len(waits) < 2  # then a stop

    pipeline.sleep = sleep
    route = Collect()
    records = [Record("t", 0, i, 0, None, b"\x00\x00\x00\x00\x01{}") for i in range(3)]
    try:
        assert await pipeline.walk(records, route) is False
    finally:
        await pipeline.close()
    assert (route.dropped, route.rows, box.crashes) == (3, [], 2)
    assert len(waits) == 2 and all(
        w is not None and w.startswith("JSON Schema validation: the JSON Schema validation "
                                       "process died 1 times in a row") for w in waits), waits
    assert pipeline.screen.waiting_for is None and pipeline.stats["dead_lettered"] == 0
