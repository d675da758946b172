"""The walk of the record pipeline alone: records in, shipped spans, rows and dead letters
out (no Kafka, no sink)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from actors.errors import MessageFailedError
from actors.failure import FailurePolicy
from actors.worker.pipeline import RecordPipeline
from actors.worker.records import Collect, Record
from processors.base import Message, Row
from processors.json_rows import JsonRowsProcessor
from settings.models import FailureSettings, TopicSettings


def pipeline(tmp_path: Path, *, savepoints: bool = False, **failure: Any) -> RecordPipeline:
    async def no_sleep(seconds: float) -> bool:
        return True

    settings = FailureSettings.model_validate(
        {"dead_letter_path": str(tmp_path / "dead.jsonl"), **failure})
    topic = TopicSettings.model_validate({"topic": "t", "processor": "json_rows"})
    return RecordPipeline(topic=topic, processor=JsonRowsProcessor({}), group_id="g",
                          failure=FailurePolicy(settings, no_sleep), sleep=no_sleep,
                          savepoints=savepoints)


def records(*values: bytes | None) -> list[Record]:
    return [Record("t", 0, o, 1000 + o, None, v) for o, v in enumerate(values)]


async def walk(p: RecordPipeline, recs: list[Record], **kwargs: Any) -> Collect:
    route = Collect()
    await p.walk(recs, route, **kwargs)
    return route


async def test_rows_per_record_and_poison_dead_lettered(tmp_path: Path) -> None:
    p = pipeline(tmp_path)
    route = await walk(p, records(b'{"a": 1}', b"{not json", b'{"a": 3}'))
    assert route.spans == [(3, 3, False)], "one span: every offset accounted for"
    assert [(r["a"], r["_offset"]) for r in route.rows] == [(1, 0), (3, 2)]
    line = json.loads((tmp_path / "dead.jsonl").read_text())
    assert (line["offset"], line["error_type"]) == (1, "processors.errors.PoisonMessage")
    assert (p.stats["processed"], p.stats["failed"], p.stats["dead_lettered"]) == (3, 1, 1)


async def test_throw_raises_and_retry_recovers(tmp_path: Path) -> None:
    thrown = pipeline(tmp_path, mode="throw")
    route = Collect()
    with pytest.raises(MessageFailedError, match=r"t\[0\]@1 failed after 1 attempt"):
        await thrown.walk(records(b'{"a": 0}', b"[]", b'{"a": 2}'), route)
    assert (route.spans, route.dropped) == ([(1, 1, False)], 2), \
        "what came before the failed message is shipped, the rest dropped"
    flaky = pipeline(tmp_path, mode="retry", max_retries=2, min_backoff_ms=0,
                     max_backoff_ms=0)
    calls = []
    transform = flaky.processor.transform

    def once_broken(msg: Any) -> Any:
        calls.append(msg.offset)
        if len(calls) == 1:
            raise RuntimeError("flaky")
        return transform(msg)

    flaky.processor.transform = once_broken  # type: ignore[method-assign]
    route = await walk(flaky, records(b'{"a": 1}'))
    assert [r["a"] for r in route.rows] == [1]
    assert flaky.stats["retried"] == 1 and not (tmp_path / "dead.jsonl").exists()


async def test_per_message_ships_after_each_message(tmp_path: Path) -> None:
    route = await walk(pipeline(tmp_path), records(b'{"a": 1}', b"{bad", b'{"a": 3}'),
                       each=True)
    assert route.spans == [(1, 1, True), (2, 1, True), (3, 1, True)]


async def test_savepoints_split_the_span(tmp_path: Path) -> None:
    p = pipeline(tmp_path, savepoints=True)
    p.processor.wants_savepoint = lambda msg: msg.offset == 1  # type: ignore[method-assign]
    route = await walk(p, records(b'{"a": 0}', b'{"a": 1}', b'{"a": 2}'))
    assert route.spans == [(2, 2, True), (3, 1, False)]


async def test_a_failure_with_retries_ahead_parks_the_rest(tmp_path: Path) -> None:
    class Parking(Collect):
        parked: Sequence[Any] = ()

        def parks(self, exc: Exception) -> bool:
            return True

        def park(self, rest: Sequence[Any], exc: Exception) -> None:
            self.parked = rest

    route = Parking()
    assert await pipeline(tmp_path, mode="retry").walk(
        records(b'{"a": 0}', b"{bad", b'{"a": 2}'), route)
    assert route.spans == [(1, 1, False)]
    assert [r.offset for r in route.parked] == [1, 2]


async def test_without_the_policy_a_failure_is_raised_as_it_is(tmp_path: Path) -> None:
    def boom(msg: Message) -> list[Row]:
        raise KeyError("boom")

    p = pipeline(tmp_path)
    p.processor.transform = boom  # type: ignore[method-assign]
    with pytest.raises(KeyError, match="boom"):
        await walk(p, records(b"{}"), policy=False)
    assert p.stats["failed"] == 0
