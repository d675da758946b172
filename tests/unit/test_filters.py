"""Declared topic filters (``topics[].filter``): DataHub Actions' ``filter.event``
semantics, edge cases first, then the pipeline and the plugin test kit applying them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from actors.failure import FailurePolicy
from actors.worker.filters import EventFilter, lookup
from actors.worker.pipeline import RecordPipeline
from actors.worker.records import FILTERED, Collect, Record
from processors.json_rows import JsonRowsProcessor
from processors.testing import message
from service.testing import run_processor
from settings.models import FailureSettings, FilterSettings, TopicSettings

MCL = {"entityType": "dataset", "aspectName": "status", "changeType": "UPSERT",
       "aspect": {"value": b'{"removed": false, "n": 1}', "contentType": "application/json"},
       "tags": ["a", "b"], "count": 1}


def passes(value: Any, include: dict[str, list[Any]] | None = None,
           exclude: dict[str, list[Any]] | None = None) -> bool:
    return EventFilter(include, exclude).passes(value)


def test_every_include_must_match_one_of_its_values_and_no_exclude_may() -> None:
    assert passes(MCL, {"entityType": ["chart", "dataset"], "changeType": ["UPSERT"]})
    assert not passes(MCL, {"entityType": ["dataset"], "changeType": ["DELETE"]})
    assert not passes(MCL, {"entityType": ["dataset"]}, {"aspectName": ["status"]})
    assert passes(MCL, {"entityType": ["dataset"]}, {"aspectName": ["ownership"]})
    assert passes(MCL) and passes(None)  # no paths: everything passes


def test_a_missing_path_reads_as_null() -> None:
    # DataHub: body.get(key) is None; only a null value matches it
    assert not passes(MCL, {"nope": ["x"]}) and passes(MCL, exclude={"nope": ["x"]})
    assert passes(MCL, {"nope": [None]}) and not passes(MCL, exclude={"nope": [None]})
    assert not passes(MCL, {"entityType.deeper": ["x"]})  # through a plain string
    assert not passes(None, {"a": ["x"]}) and not passes(b"\xff", {"a.b": ["x"]})
    assert lookup({"a": None}, ["a"]) is None and lookup({}, ["a"]) is None


def test_no_coercion_between_strings_numbers_and_booleans() -> None:
    assert passes(MCL, {"count": [1]}) and passes(MCL, {"count": [1.0]})
    assert not passes(MCL, {"count": ["1"]})  # "1" is not 1
    assert not passes(MCL, {"count": [True]})  # true is not 1 (Python would say it is)
    assert not passes({"flag": True}, {"flag": [1]}) and passes({"flag": True}, {"flag": [True]})
    assert not passes({"s": "true"}, {"s": [True]})


def test_lists_and_mappings_in_the_event_match_no_value() -> None:
    # DataHub compares a scalar filter to the whole value: a list or dict never equals it
    assert not passes(MCL, {"tags": ["a"]}) and passes(MCL, exclude={"tags": ["a"]})
    assert not passes(MCL, {"aspect": ["x"]})
    assert not passes(MCL, {"tags.0": ["a"]})  # lists are not indexed


def test_json_strings_and_bytes_are_parsed_on_the_way_down() -> None:
    # DataHub's nested filter json.loads a string it meets (an MCL aspect's value); Avro
    # bytes (a PlatformEvent payload) read the same way
    assert passes(MCL, {"aspect.value.removed": [False]})
    assert not passes(MCL, exclude={"aspect.value.n": [1]})
    text = {"aspect": {"value": json.dumps({"removed": True})}}
    assert passes(text, {"aspect.value.removed": [True]})
    assert not passes({"aspect": {"value": "{broken"}}, {"aspect.value.removed": [True]})
    # the leaf itself is compared as it is, not parsed
    assert passes({"s": "1"}, {"s": ["1"]}) and not passes({"s": "1"}, {"s": [1]})


def test_settings_refuse_malformed_filters() -> None:
    for bad, where in (({"include": {"a..b": ["x"]}}, "include.a..b"),
                       ({"include": {".a": ["x"]}}, "include..a"),
                       ({"exclude": {"a.": ["x"]}}, "exclude.a."),
                       ({"include": {"a": "x"}}, "include.a"),
                       ({"include": {"a": []}}, "include.a"),
                       ({"include": {"a": [{"b": 1}]}}, "include.a.0"),
                       ({"inclde": {"a": ["x"]}}, "inclde")):
        with pytest.raises(ValidationError) as info:
            FilterSettings.model_validate(bad)
        assert where in {".".join(map(str, e["loc"])).replace(".[key]", "")
                         for e in info.value.errors()}, (bad, info.value.errors())
    ok = FilterSettings.model_validate({"include": {"a.b": ["1", 1, 1.5, True, None]}})
    assert ok.include == {"a.b": ["1", 1, 1.5, True, None]}
    assert [type(v) for v in ok.include["a.b"]] == [str, int, float, bool, type(None)]


def _pipeline(tmp_path: Path, topic_filter: dict[str, Any]) -> RecordPipeline:
    topic = TopicSettings.model_validate(
        {"topic": "t", "processor": "json_rows", "filter": topic_filter})
    failure = FailureSettings.model_validate({"dead_letter_path": str(tmp_path / "dead")})
    return RecordPipeline(topic=topic, processor=JsonRowsProcessor({}), group_id="g",
                          failure=FailurePolicy(failure, lambda s: None))  # type: ignore[arg-type]


async def test_the_pipeline_filters_between_decode_and_transform(tmp_path: Path) -> None:
    p = _pipeline(tmp_path, {"include": {"kind": ["keep"]}})
    values = [b'{"kind": "keep", "n": 0}', b'{"kind": "drop", "n": 1}', b"{not json",
              b'{"kind": "keep", "n": 3}', b"{}"]
    route = Collect()
    await p.walk([Record("t", 0, o, 0, None, v) for o, v in enumerate(values)], route)
    assert route.spans == [(5, 5, False)]  # every offset is accounted for
    assert [r["n"] for r in route.rows] == [0, 3]
    # undecodable values are poison as before: a filter cannot judge them
    assert (p.stats["filtered"], p.stats["dead_lettered"]) == (2, 1)
    out, _ = await p.transform(Record("t", 0, 9, 0, None, b'{"kind": "x"}'))
    assert out is FILTERED
    assert p.stats["filtered"] == 3


def test_the_plugin_test_kit_applies_the_filter() -> None:
    msgs = [message({"kind": k, "n": n}, offset=n) for n, k in enumerate(["a", "b", "a"])]
    rows = run_processor(JsonRowsProcessor, msgs, filter={"exclude": {"kind": ["b"]}})
    assert [r["n"] for r in rows] == [0, 2]
    with pytest.raises(ValidationError):
        run_processor(JsonRowsProcessor, msgs, filter={"exclude": {"kind": "b"}})


def test_the_filtered_count_is_a_metric() -> None:
    from prometheus_client import generate_latest

    from actors.metrics import Metrics

    metrics = Metrics()
    metrics.watch(lambda: [{"group": "g", "topic": "t", "stats": {"filtered": 7},
                            "restarts": 0, "paused_partitions": 0, "in_flight": 0,
                            "partitions": []}])
    text = generate_latest(metrics.registry).decode()
    assert 'kstage_messages_filtered_total{group="g",topic="t"} 7.0' in text


def test_dlq_replay_applies_the_filter_and_marks_filtered_lines_done(tmp_path: Path) -> None:
    """A replay does what the service would do with the message now: a line the topic's
    filter keeps out gives no rows and is marked replayed, not retried forever."""
    from actors.deadletters.file import dead_letter_line
    from service.ops import dlq
    from settings import load_settings

    out, dead = tmp_path / "out.jsonl", tmp_path / "dead.jsonl"
    cfg = tmp_path / "kstage.yml"
    cfg.write_text(json.dumps({"groups": [{
        "group_id": "g", "failure": {"dead_letter_path": str(dead)},
        "topics": [{"topic": "t", "processor": "json_rows",
                    "filter": {"exclude": {"kind": ["noise"]}},
                    "sink": {"type": "jsonl", "path": str(out)}}]}]}))
    dead.write_text("".join(dead_letter_line(
        group="g", topic="t", partition=0, offset=o, timestamp=0, key=None,
        value=json.dumps({"i": o, "kind": kind}).encode(), headers=(), processor="json_rows",
        exc=RuntimeError("sink down"), attempts=1) + "\n"
        for o, kind in enumerate(["event", "noise", "event"])))
    result = dlq.replay(load_settings(cfg))
    assert (len(result.replayed), result.filtered, len(result.failed)) == (3, 1, 0)
    assert "3 replayed (1 filtered by the topic's filter)" in dlq.render_replay(result)
    assert [json.loads(x)["i"] for x in out.read_text().splitlines()] == [0, 2]
    assert dlq.replay(load_settings(cfg)).already == 3
