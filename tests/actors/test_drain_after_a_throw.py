"""``--drain`` after processing threw commits nothing past the failed message.

Seen in a fresh-clone ``make test`` (2026-12-02, ``test_schema_rows.py::
test_on_incompatible_stop_fails_the_worker_and_commits_nothing_past_it[tansu]``): a
batch of offsets 0-2 whose offset 1 stops the topic (``on_incompatible: stop``) ended
with offset 3 committed, so offsets 1 and 2 were skipped by the next run. Processing had
thrown and dropped 1 and 2; while the worker waited for its sink and its last commit, the
fetcher's next empty poll found nothing in flight, the consumer's position (3) at the
high-water mark, and took the partition for drained: everything before the position
committable, committed. Whether it happened was a race (the commit after the throw
usually ended the worker first); here the worker's commit is held, so the fetcher polls
on while the worker ends, as it did in that run.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from actors.errors import MessageFailedError
from tests.fake_consumer import FakeConsumer
from tests.kit import (
    TOPIC,
    TP,
    FailingRows,
    RecordingSink,
    make_worker,
    until,
    values,
    worker_settings,
)


class HeldCommits(FakeConsumer):
    """A consumer whose commits wait until the test releases them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked, self.release = asyncio.Event(), asyncio.Event()

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.asked.set()
        await self.release.wait()
        await super().commit(offsets)


async def test_a_drain_after_a_throw_commits_nothing_past_the_failed_message(
        tmp_path: Path) -> None:
    consumer = HeldCommits(TOPIC, {0: values({"i": 0}, {"fail": True}, {"i": 2})})
    drained = asyncio.Event()
    sink = RecordingSink()
    worker = make_worker(worker_settings(tmp_path, failure={"mode": "throw"},
                                         max_poll_records=10),
                         consumer, sink, processor_cls=FailingRows, drain=True,
                         on_drained=lambda _w: drained.set())
    run = asyncio.create_task(worker.run())
    try:
        await until(lambda: consumer.asked.is_set(), "a commit after offset 0's write")
        assert sink.written == [0]
        # Two turns of the fetch loop, each an empty poll. Before the fix the first one
        # took the partition for drained and its commit waited behind the held one, so
        # the loop did not turn again: the commits below show it.
        fetcher = worker.parts.fetcher
        turns = 0
        with contextlib.suppress(AssertionError):
            while turns < 2:
                turned = fetcher.turned_at
                await until(lambda: fetcher.turned_at > turned, "a turn", 10)  # noqa: B023
                turns += 1
        consumer.release.set()
        done, _ = await asyncio.wait([run], timeout=30)
        assert run in done, "the worker did not end after its throw"
    finally:
        worker.stop()
        consumer.release.set()
        await asyncio.wait([run], timeout=30)
    failure = run.exception()
    assert isinstance(failure, MessageFailedError) or (
        isinstance(failure, BaseExceptionGroup)
        and failure.subgroup(MessageFailedError) is not None), repr(failure)
    assert consumer.committed_offsets[TP] == 1, consumer.commits
    assert all(offsets[TP] <= 1 for offsets in consumer.commits), consumer.commits
    assert not drained.is_set()
    assert turns == 2, "the fetch loop stopped turning after the throw"
