"""Ops tools on the real broker: ``kstage lag``, ``kstage offsets reset``, ``kstage dlq``."""

from __future__ import annotations

import asyncio
import fcntl
import io
import json
import os
import re
import signal
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from actors.codecs.avro import encode
from actors.deadletters.file import dead_letter_line
from actors.master import Master
from service.ops.dlq import Progress, replay_async
from service.ops.lag import OpsError
from settings import load_settings
from tests.kafkautil import (
    CHILD_PATH,
    committed,
    create_topic,
    produce,
    read_jsonl,
    unique,
    write_config,
)

pytestmark = pytest.mark.kafka

BASE_MS = 1_700_000_000_000  # record timestamps: BASE_MS + i * 1000


async def cli(*args: str, cwd: Path) -> tuple[int, str, str]:
    """``python -m service ARGS`` (the real entry point); (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service", *args, cwd=cwd,
        env={**os.environ, "PYTHONPATH": CHILD_PATH},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def jsonl_topic(topic: str, out: Path, processor: str = "json_rows") -> list[dict[str, object]]:
    return [{"topic": topic, "processor": processor, "sink": {"type": "jsonl", "path": str(out)}}]


@pytest.mark.parametrize("fresh", [2], indirect=True)
async def test_lag_after_partial_consumption(fresh, broker, tmp_path):
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, [{"i": i} for i in range(10)], partition_of=lambda i: i % 2)
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       jsonl_topic(topic, tmp_path / "out.jsonl"))
    await Master(load_settings(cfg), broker, drain=True).run()
    # batched produce: lag must come from the fetch high-water mark, not ListOffsets
    await produce(broker, topic, [{"i": i} for i in range(10, 15)],
                  partition_of=lambda i: 0 if i < 3 else 1)

    code, out, err = await cli("lag", "-c", str(cfg), "--json", cwd=tmp_path)
    assert code == 0, err
    rows = sorted(json.loads(out), key=lambda r: r["partition"])
    assert rows == [
        {"group": group, "topic": topic, "partition": 0, "committed": 5, "high_water": 8,
         "lag": 3},
        {"group": group, "topic": topic, "partition": 1, "committed": 5, "high_water": 7,
         "lag": 2},
    ]
    code, out, err = await cli("lag", "-c", str(cfg), cwd=tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "COMMITTED", "HIGH-WATER", "LAG"]
    assert lines[1].split() == [group, topic, "0", "5", "8", "3"]
    assert lines[-1] == "total lag: 5"

    # a group that never committed: committed "none", lag = everything from the log start
    other = write_config(tmp_path / "other.yml", broker, unique("g-new"),
                         jsonl_topic(topic, tmp_path / "x.jsonl"))
    code, out, err = await cli("lag", "-c", str(other), "--json", cwd=tmp_path)
    assert code == 0, err
    assert [(r["committed"], r["lag"]) for r in json.loads(out)] == [(None, 8), (None, 7)]


@pytest.mark.parametrize("fresh", [2], indirect=True)
async def test_offsets_reset_moves_the_group_and_refuses_live_members(
        fresh, broker, tmp_path, kstage):
    topic, group = fresh.topic, fresh.group
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:  # one record per batch, distinct timestamps; p0 gets even i, p1 odd i
        for i in range(11):
            await producer.send_and_wait(topic, json.dumps({"i": i}).encode(),
                                         partition=i % 2, timestamp_ms=BASE_MS + i * 1000)
    finally:
        await producer.stop()
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       jsonl_topic(topic, tmp_path / "out.jsonl"))

    async def reset(to: str, *extra: str) -> tuple[int, str, str]:
        return await cli("offsets", "reset", "-c", str(cfg), "--group", group, "--to", to,
                         *extra, cwd=tmp_path)

    code, out, err = await reset("latest", "--dry-run")
    assert code == 0, err
    assert out.splitlines()[1].split() == [topic, "0", "none", "6", "0", "6"]
    assert "dry run: nothing committed" in out
    assert await committed(broker, group, topic, 2) == {0: -1, 1: -1}

    code, out, err = await reset("latest")
    assert code == 0, err
    assert await committed(broker, group, topic, 2) == {0: 6, 1: 5}
    assert out.splitlines()[2].split() == [topic, "1", "none", "5", "0", "5"]

    # p0 holds i = 0,2,4,6,8,10 and p1 i = 1,3,5,7,9 (timestamps BASE_MS + i s)
    code, out, err = await reset(iso(BASE_MS + 4500))
    assert code == 0, err
    assert await committed(broker, group, topic, 2) == {0: 3, 1: 2}  # i = 6 and i = 5
    assert out.splitlines()[1].split()[2:4] == ["6", "3"]  # before, after
    code, _, err = await reset(iso(BASE_MS + 7000))  # exactly a record's timestamp (i = 7)
    assert code == 0, err
    assert await committed(broker, group, topic, 2) == {0: 4, 1: 3}
    code, _, err = await reset(iso(BASE_MS + 60_000))  # after every record: high-water
    assert code == 0, err
    assert await committed(broker, group, topic, 2) == {0: 6, 1: 5}
    code, _, err = await reset(iso(BASE_MS - 60_000), "--dry-run")
    assert code == 0, err
    assert await committed(broker, group, topic, 2) == {0: 6, 1: 5}, "dry run changed nothing"

    code, _, err = await reset("earliest")
    assert code == 0, err
    assert await committed(broker, group, topic, 2) == {0: 0, 1: 0}
    code, _, err = await reset("4")
    assert code == 0, err
    assert await committed(broker, group, topic, 2) == {0: 4, 1: 4}
    code, _, err = await reset("6")  # p1's high-water mark is 5
    assert code == 1
    assert "offset 6 is outside the valid range" in err and f"{topic}[1] [0, 5]" in err
    assert await committed(broker, group, topic, 2) == {0: 4, 1: 4}
    code, _, err = await reset("yesterday")
    assert code == 1 and "ISO-8601" in err

    proc = kstage(cfg)  # a live member of the group
    await proc.wait_for_log("assigned partitions")
    code, out, err = await reset("earliest")
    assert code == 1, out
    assert f"group {group!r} has 1 live member(s)" in err
    code, _, err = await reset("earliest", "--dry-run")
    assert code == 1 and "live member" in err
    proc.signal(signal.SIGTERM)
    assert await proc.wait() == 0, proc.output()


async def _dead_letter_run(broker: str, tmp_path: Path) -> tuple[str, str, Path]:
    """Produce 6 events (3 fail with test_flaky, one carrying a header) and run them in
    process with failure mode continue; returns (topic, group, config)."""
    topic, group = unique("dlq"), unique("g-dlq")
    await create_topic(broker, topic)
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        for i in range(6):
            fail = i in (1, 3, 4)
            await producer.send_and_wait(
                topic, json.dumps({"i": i, "fail": fail}).encode(), key=f"k{i}".encode(),
                headers=[("trace", f"t{i}".encode())] if i == 3 else [])
    finally:
        await producer.stop()
    cfg = write_config(tmp_path / "kstage.yml", broker, group,
                       jsonl_topic(topic, tmp_path / "out.jsonl", "test_flaky"))
    await Master(load_settings(cfg), broker, drain=True).run()
    assert [d["offset"] for d in read_jsonl(tmp_path / "dead.jsonl")] == [1, 3, 4]
    assert [r["i"] for r in read_jsonl(tmp_path / "out.jsonl")] == [0, 2, 5]
    return topic, group, cfg


async def test_dlq_show_and_replay_through_the_fixed_processor(broker, tmp_path):
    topic, group, cfg = await _dead_letter_run(broker, tmp_path)
    dead = tmp_path / "dead.jsonl"
    original = dead.read_bytes()

    code, out, err = await cli("dlq", "show", "-c", str(cfg), cwd=tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["TOPIC", "PARTITION", "OFFSET", "SINK", "ERROR_TYPE",
                                "ERROR", "FAILED_AT", "REPLAYED"]
    assert [ln.split()[2:4] for ln in lines[1:4]] == [["1", "-"], ["3", "-"], ["4", "-"]]
    assert "builtins.RuntimeError  flaky failure 1 at offset 3" in lines[2]
    assert all(ln.endswith(" no") for ln in lines[1:4])
    assert lines[-1] == "3 dead-lettered, 0 replayed, 3 not replayed"
    for args, count in ((("--topic", "other"), 0), (("--since", "2999-01-01T00:00:00Z"), 0),
                        (("--since", "2000-01-01T00:00:00"), 3), (("--topic", topic), 3)):
        code, out, err = await cli("dlq", "show", "-c", str(cfg), *args, cwd=tmp_path)
        assert code == 0, err
        assert out.splitlines()[-1].startswith(f"{count} dead-lettered"), (args, out)

    # Replaying with the processor still broken: every line fails again and stays.
    code, out, err = await cli("dlq", "replay", "-c", str(cfg), cwd=tmp_path)
    assert code == 1, err
    assert out.count("failed again:") == 3 and "0 replayed, 3 failed" in out
    assert [r["i"] for r in read_jsonl(tmp_path / "out.jsonl")] == [0, 2, 5]
    assert read_jsonl(tmp_path / "dead.jsonl.replayed") == []

    # The fix: the same topic with a processor that handles these events.
    fixed = write_config(tmp_path / "fixed.yml", broker, group,
                         jsonl_topic(topic, tmp_path / "out.jsonl", "json_rows"))
    code, out, err = await cli("dlq", "replay", "-c", str(fixed), cwd=tmp_path)
    assert code == 0, err + out
    assert out.splitlines()[-1] == "3 replayed, 0 failed, 0 skipped, 0 already replayed"
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert Counter(r["_offset"] for r in rows) == {o: 1 for o in range(6)}, "exactly once"
    assert sorted(r["i"] for r in rows) == list(range(6))
    assert {r["_topic"] for r in rows} == {topic}
    marks = read_jsonl(tmp_path / "dead.jsonl.replayed")
    assert [(m["topic"], m["partition"], m["offset"], m["via"]) for m in marks] == [
        (topic, 0, 1, "processor"), (topic, 0, 3, "processor"), (topic, 0, 4, "processor")]
    assert all(m["failed_at"] and m["replayed_at"] for m in marks)
    assert dead.read_bytes() == original, "the dead-letter file is never rewritten"

    code, out, err = await cli("dlq", "replay", "-c", str(fixed), cwd=tmp_path)
    assert code == 0, err
    assert out.splitlines()[-1] == "0 replayed, 0 failed, 0 skipped, 3 already replayed"
    assert len(read_jsonl(tmp_path / "out.jsonl")) == 6
    code, out, err = await cli("dlq", "show", "-c", str(fixed), cwd=tmp_path)
    assert code == 0, err
    assert out.splitlines()[-1] == "3 dead-lettered, 3 replayed, 0 not replayed"
    assert all(ln.endswith(" yes") for ln in out.splitlines()[1:4])


async def test_dlq_replay_to_kafka_reproduces_the_originals(broker, tmp_path):
    topic, _, cfg = await _dead_letter_run(broker, tmp_path)
    code, out, err = await cli("dlq", "replay", "-c", str(cfg), "--to-kafka", cwd=tmp_path)
    assert code == 0, err + out
    assert out.splitlines()[-1].startswith("3 re-produced to Kafka, 0 failed")
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=broker, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, 6)
        records = []
        while len(records) < 3:
            batch = await consumer.getmany(tp, timeout_ms=5000)
            assert batch, f"only {len(records)} re-produced records arrived"
            records.extend(batch[tp])
        await asyncio.sleep(0.3)
        assert not (await consumer.getmany(tp, timeout_ms=300)).get(tp), "nothing more"
    finally:
        await consumer.stop()
    assert [(r.key, json.loads(r.value)["i"]) for r in records] == [
        (b"k1", 1), (b"k3", 3), (b"k4", 4)]
    assert [list(r.headers) for r in records] == [[], [("trace", b"t3")], []]
    assert [m["via"] for m in read_jsonl(tmp_path / "dead.jsonl.replayed")] == ["kafka"] * 3
    code, out, err = await cli("dlq", "replay", "-c", str(cfg), "--to-kafka", cwd=tmp_path)
    assert code == 0, err
    assert out.splitlines()[-1].startswith("0 re-produced to Kafka, 0 failed, 0 skipped, 3")


EVENT = {"type": "record", "name": "Event",
         "fields": [{"name": "i", "type": "int"}, {"name": "what", "type": "string"}]}


async def test_dlq_replay_decodes_avro_and_survives_torn_lines(tmp_path):
    """No broker needed without --to-kafka: Avro values through a file:// registry; a
    sidecar line torn by a crash, an unreadable line and a line still being written."""
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "Event.avsc").write_text(json.dumps(EVENT))
    (tmp_path / "schemas" / "index.json").write_text(
        json.dumps({"7": {"subject": "ev-value", "file": "Event.avsc"}}))
    out, dead = tmp_path / "out.jsonl", tmp_path / "dead.jsonl"
    cfg = tmp_path / "kstage.yml"
    cfg.write_text(json.dumps({
        "kafka": {"bootstrap": "embedded"},
        "schema_registry": {"url": f"file://{tmp_path / 'schemas'}"},
        "groups": [{"group_id": "g", "failure": {"dead_letter_path": str(dead)}, "topics": [
            {"topic": "ev", "processor": "json_rows", "format": "avro", "key_format": "string",
             "sink": {"type": "jsonl", "path": str(out)}}]}],
    }))

    def line(offset: int, value: bytes) -> str:
        return dead_letter_line(group="g", topic="ev", partition=0, offset=offset,
                                timestamp=BASE_MS, key=f"k{offset}".encode(), value=value,
                                headers=[("h", b"v")], processor="json_rows",
                                exc=RuntimeError("registry down"), attempts=1)

    lines = [line(o, encode(EVENT, 7, {"i": o, "what": f"e{o}"})) for o in range(3)]
    lines.append(line(3, encode(EVENT, 99, {"i": 3, "what": "unknown id"})))
    dead.write_text("\n".join([*lines[:2], "not json", *lines[2:]]) + "\n"
                    + line(4, b"{}")[:40])  # the last line is still being written
    first = json.loads(lines[0])
    mark = {k: first[k] for k in ("group", "topic", "partition", "offset", "failed_at")}
    (tmp_path / "dead.jsonl.replayed").write_text(
        json.dumps(mark) + "\n" + '{"group": "g", "topic": "ev", "parti')  # torn by a crash

    settings = load_settings(cfg)
    side = os.open(tmp_path / "dead.jsonl.replayed", os.O_RDONLY)
    try:  # another replay holds the lock
        fcntl.flock(side, fcntl.LOCK_EX)
        with pytest.raises(OpsError, match="another replay"):
            await replay_async(settings)
    finally:
        os.close(side)
    writing = os.open(dead, os.O_RDONLY)
    try:  # a writer holds the file's lock while it appends its last line
        fcntl.flock(writing, fcntl.LOCK_EX)
        result = await replay_async(settings)
    finally:
        os.close(writing)
    assert [d.record["offset"] for d in result.replayed] == [1, 2]
    assert [(d.record["offset"], why.split(":")[0]) for d, why in result.failed] == [
        (3, "PoisonMessage")]
    assert (result.already, result.unreadable, result.skipped) == (1, 1, [])
    assert [(r["i"], r["what"], r["_offset"]) for r in read_jsonl(out)] == [
        (1, "e1", 1), (2, "e2", 2)]
    marks = (tmp_path / "dead.jsonl.replayed").read_text().splitlines()
    assert [json.loads(m)["offset"] for m in marks[:1] + marks[2:]] == [0, 1, 2]
    again = await replay_async(settings)
    # no writer holds the lock now: the unterminated last line is torn, and reported
    assert (len(again.replayed), len(again.failed), again.already, again.unreadable) == (
        0, 1, 3, 2)


def test_progress_bar_only_for_a_tty_or_long_replays():
    quiet = io.StringIO()
    bar = Progress(500, quiet)
    for _ in range(500):
        bar.advance()
    bar.close()
    assert quiet.getvalue() == ""
    long = io.StringIO()
    bar = Progress(2000, long)
    for _ in range(2000):
        bar.advance()
    bar.close()
    lines = long.getvalue().splitlines()
    assert len(lines) == 11 and lines[-1].startswith("replay [" + "#" * 30 + "] 2000/2000")


@pytest.mark.parametrize("fresh", [2], indirect=True)
async def test_lag_of_the_topics_a_pattern_matches(fresh, broker, tmp_path):
    """``kstage lag`` lists the topics a ``topic_pattern`` matches on the cluster now;
    the same pattern drains them in ``kstage run --drain``."""
    topic, group = fresh.topic, fresh.group
    await produce(broker, topic, [{"i": i} for i in range(10)], partition_of=lambda i: i % 2)
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
        "topic_pattern": re.escape(topic), "processor": "json_rows",
        "sink": {"type": "jsonl", "path": str(tmp_path / "{topic}.jsonl")}}])
    await asyncio.wait_for(Master(load_settings(cfg), broker, drain=True).run(), 120)
    await produce(broker, topic, [{"i": i} for i in range(10, 13)], partition_of=lambda i: 0,
                  one_per_batch=True)
    code, out, err = await cli("lag", "-c", str(cfg), "--json", cwd=tmp_path)
    assert code == 0, err
    assert sorted((r["topic"], r["partition"], r["committed"], r["lag"])
                  for r in json.loads(out)) == [(topic, 0, 5, 3), (topic, 1, 5, 0)]
