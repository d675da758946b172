"""The record pipeline alone: records in, rows and outcomes out (no Kafka, no sink)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from actors.errors import MessageFailedError
from actors.failure import FailurePolicy, Outcome
from actors.worker.pipeline import Record, RecordPipeline
from processors.json_rows import JsonRowsProcessor
from settings.models import FailureSettings, TopicSettings


def pipeline(tmp_path: Path, **failure: Any) -> RecordPipeline:
    async def no_sleep(seconds: float) -> bool:
        return True

    settings = FailureSettings.model_validate(
        {"dead_letter_path": str(tmp_path / "dead.jsonl"), **failure})
    topic = TopicSettings.model_validate({"topic": "t", "processor": "json_rows"})
    return RecordPipeline(topic=topic, processor=JsonRowsProcessor({}), group_id="g",
                          failure=FailurePolicy(settings, no_sleep), sleep=no_sleep)


def records(*values: bytes | None) -> list[Record]:
    return [Record("t", 0, o, 1000 + o, None, v) for o, v in enumerate(values)]


async def test_rows_per_record_and_poison_dead_lettered(tmp_path: Path) -> None:
    p = pipeline(tmp_path)
    done = await p.process(records(b'{"a": 1}', b"{not json", b'{"a": 3}'))
    assert [(d.offset, d.outcome) for d in done] == [
        (0, None), (1, Outcome.DEAD_LETTERED), (2, None)]
    assert [[r["a"] for r in d.rows] for d in done] == [[1], [], [3]]
    assert [r["_offset"] for d in done for r in d.rows] == [0, 2]
    line = json.loads((tmp_path / "dead.jsonl").read_text())
    assert (line["offset"], line["error_type"]) == (1, "processors.errors.PoisonMessage")
    assert (p.stats["failed"], p.stats["dead_lettered"]) == (1, 1)


async def test_throw_raises_and_retry_recovers(tmp_path: Path) -> None:
    with pytest.raises(MessageFailedError, match=r"t\[0\]@0 failed after 1 attempt"):
        await pipeline(tmp_path, mode="throw").process(records(b"[]"))
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
    done = await flaky.process(records(b'{"a": 1}'))
    assert [(d.outcome, [r["a"] for r in d.rows]) for d in done] == [
        (Outcome.RECOVERED, [1])]
    assert flaky.stats["retried"] == 1 and not (tmp_path / "dead.jsonl").exists()
