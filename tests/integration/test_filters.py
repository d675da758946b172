"""Declared topic filters on the real broker: filtered messages give no rows, yet every
offset is committed in order, in batch and per-message commit modes."""

from __future__ import annotations

import re

import pytest

from tests.kafkautil import committed, produce, read_jsonl, write_config

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("mode", ["batch", "per_message"])
@pytest.mark.parametrize("fresh", [3], indirect=True)
async def test_filtered_messages_are_committed_and_only_matching_rows_land(
        fresh, broker, tmp_path, kstage, mode):
    topic, group = fresh.topic, fresh.group
    # partition 2 holds only filtered messages (its batches give zero rows); the other
    # partitions mix kept ones, excluded ones and ones the include does not match
    values = [{"i": i, "kind": "drop" if i % 3 == 2 or i % 5 == 0 else "keep",
               "meta": {"skip": i % 7 == 0}} for i in range(60)]
    await produce(broker, topic, values, partition_of=lambda i: i % 3)
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "json_rows",
                         "filter": {"include": {"kind": ["keep"]},
                                    "exclude": {"meta.skip": [True]}},
                         "sink": {"type": "jsonl", "path": str(tmp_path / "out.jsonl")}}],
                       commit={"mode": mode})
    proc = kstage(cfg, "--drain")
    assert await proc.wait() == 0, proc.output()
    wanted = [v["i"] for v in values if v["kind"] == "keep" and not v["meta"]["skip"]]
    assert sorted(r["i"] for r in read_jsonl(tmp_path / "out.jsonl")) == wanted
    assert await committed(broker, group, topic, 3) == {0: 20, 1: 20, 2: 20}
    stopped = re.search(r"stopped \(\{.*'processed': (\d+).*'filtered': (\d+)", proc.output())
    assert stopped is not None, proc.output()
    assert (int(stopped[1]), int(stopped[2])) == (60, 60 - len(wanted))
    assert not (tmp_path / "dead.jsonl").exists(), "filtered messages are never dead-lettered"
