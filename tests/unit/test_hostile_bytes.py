"""Hostile bytes for every decoder (issue 33; the corpus: :mod:`tests.hostile_corpus`).
Each must be poison (PoisonMessage, a clear error) at once: never a hang, a MemoryError
of the process, an exception of another kind, or a crash of the interpreter.

Each case decodes in a child interpreter under a memory limit (2 GB of address space)
and a time limit, so a case that crashes (a C decoder overflowing its stack), hangs or
eats memory fails here instead of taking the test run down.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.hostile_corpus import AVRO_EMPTIES, AVRO_LIST, AVRO_NULLS, CASES, run_case
from tests.kafkautil import CHILD_PATH


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_bytes_are_poison_at_once(name: str) -> None:
    says = CASES[name][3]
    try:
        result = run_case(name, CHILD_PATH)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: still decoding after 60 s")
    assert result["verdict"].startswith("poison: "), (name, result)
    assert says in result["verdict"], (name, result)
    assert result["cpu_s"] < 1.0, (name, result)


def test_avro_shapes() -> None:
    from actors.codecs.avro_shape import shape

    assert shape(json.loads(AVRO_LIST)) == {"recursive": True, "zero_items": False}
    assert shape(json.loads(AVRO_NULLS)) == {"recursive": False, "zero_items": True}
    assert shape(json.loads(AVRO_EMPTIES)) == {"recursive": False, "zero_items": True}
    tree = {"type": "record", "name": "Tree", "namespace": "t", "fields": [
        {"name": "kids", "type": {"type": "array", "items": "t.Tree"}}]}
    assert shape(tree)["recursive"]
    reused = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": {"type": "record", "name": "P", "fields": [
            {"name": "x", "type": "long"}]}},
        {"name": "b", "type": "P"},
        {"name": "c", "type": {"type": "array", "items": {"type": "fixed", "name": "F",
                                                          "size": 2}}},
        {"name": "d", "type": {"type": "map", "values": "null"}}]}
    assert shape(reused) == {"recursive": False, "zero_items": False}


async def test_a_key_or_value_past_the_cap_is_poison_before_decoding() -> None:
    from actors.failure import FailurePolicy
    from actors.worker.pipeline import RecordPipeline, no_wait
    from actors.worker.records import Record
    from processors.errors import PoisonMessage
    from processors.json_rows import JsonRowsProcessor
    from settings.models import FailureMode, FailureSettings, TopicSettings

    topic = TopicSettings.model_construct(topic="t", processor="json_rows",
                                          max_message_bytes=16)
    pipeline = RecordPipeline(topic=topic, processor=JsonRowsProcessor({}), group_id="g",
                              failure=FailurePolicy(FailureSettings(mode=FailureMode.THROW),
                                                    no_wait))
    fits = Record("t", 0, 4, 0, b"k" * 16, b'{"a": 1}')
    assert len(await pipeline.rows([fits], policy=False)) == 1
    for record, what, size in ((Record("t", 0, 5, 0, b"k" * 17, b'{"a": 1}'), "key", 17),
                               (Record("t", 0, 6, 0, None, b'{"a": "%s"}' % (b"x" * 99)),
                                "value", 108)):
        with pytest.raises(PoisonMessage, match=(
                rf"{what} of {size} bytes at t\[0\]@{record.offset} is over "
                "max_message_bytes 16: not decoded")):
            await pipeline.rows([fits, record], policy=False)
