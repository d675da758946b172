"""The ``csv`` sink through kstage itself: ``kstage run --drain`` on the embedded broker, and
``sink:`` settings checked against the sink's model.

The broker is kstage's embedded one (``service.broker.EmbeddedBroker``, as
``service.testing.run_pipeline`` starts it); events are produced to a fresh topic with
three partitions and consumed by the built-in ``json_rows`` processor.
"""

from __future__ import annotations

import asyncio
import csv
import json
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from actors.sinks import build_sink
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from pydantic import ValidationError
from service.broker import EmbeddedBroker

EVENTS = 300
PARTITIONS = 3
FILE_NAME = re.compile(r"(?P<topic>.+)-(?P<partition>\d+)-(?P<first>\d{19})-(?P<last>\d{19})\.csv")


def kstage(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """The ``kstage`` command installed next to this Python (``python -m service`` is the
    same entry point)."""
    script = Path(sys.executable).with_name("kstage")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "service"]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=timeout_s,
                          check=False)


def write_config(path: Path, bootstrap: str, topic: str, sink: dict[str, Any]) -> Path:
    group = f"csv-{uuid.uuid4().hex[:8]}"
    path.write_text(yaml.safe_dump({
        "name": group,
        "kafka": {"bootstrap": bootstrap},
        "service": {"http_port": 0},
        "supervisor": {"shutdown_grace_s": 10, "abort_grace_s": 5, "max_restarts": 0},
        "groups": [{
            "group_id": group,
            # The embedded broker holds a join for ~session_timeout/2: keep it short.
            "session_timeout_ms": 6000, "heartbeat_interval_ms": 500,
            "commit": {"mode": "batch", "max_messages": 50, "max_interval_s": 0.2},
            "failure": {"mode": "continue",
                        "dead_letter_path": str(path.parent / "dead.jsonl")},
            "topics": [{"topic": topic, "processor": "json_rows", "format": "json",
                        "sink": sink}],
        }],
    }), encoding="utf-8")
    return path


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[str]:
    embedded = EmbeddedBroker(log_path=tmp_path / "broker.log")
    await asyncio.to_thread(embedded.start)
    try:
        yield embedded.bootstrap
    finally:
        await asyncio.to_thread(embedded.stop)


async def produce(bootstrap: str, topic: str, events: list[dict[str, Any]]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for event in events:
            await producer.send(topic, json.dumps(event).encode("utf-8"),
                                partition=event["i"] % PARTITIONS)
        await producer.flush()
    finally:
        await producer.stop()


def event(i: int) -> dict[str, Any]:
    return {"i": i, "text": f'row {i}, "quoted"\nnext line', "note": None if i % 7 else "7s"}


async def test_kstage_run_drain_writes_every_event_exactly_once(
        broker: str, tmp_path: Path) -> None:
    topic = f"csv-e2e-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "out"
    async with asyncio.timeout(60):
        await produce(broker, topic, [event(i) for i in range(EVENTS)])
    cfg = write_config(tmp_path / "kstage.yml", broker, topic, {"type": "csv", "dir": str(out)})

    done = await asyncio.to_thread(kstage, "run", "-c", str(cfg), "--drain")
    assert done.returncode == 0, done.stdout + done.stderr

    files = sorted(out.iterdir())
    assert files and all(FILE_NAME.fullmatch(f.name) for f in files), \
        "only final files, no temporary ones: " + ", ".join(f.name for f in files)
    seen: list[int] = []
    partitions: set[int] = set()
    for path in files:
        match = FILE_NAME.fullmatch(path.name)
        assert match is not None
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        assert rows, path.name
        # A file holds one partition's rows, in offset order, named by their range.
        assert {r["_topic"] for r in rows} == {match["topic"]} == {topic}
        assert {int(r["_partition"]) for r in rows} == {int(match["partition"])}
        partitions.add(int(match["partition"]))
        offsets = [int(r["_offset"]) for r in rows]
        assert offsets == sorted(offsets)
        assert (offsets[0], offsets[-1]) == (int(match["first"]), int(match["last"]))
        for r in rows:
            i = int(r["i"])
            assert i % PARTITIONS == int(r["_partition"])
            assert r["text"] == event(i)["text"]
            assert r["note"] == (event(i)["note"] or "")
            seen.append(i)
    assert sorted(seen) == list(range(EVENTS)), "every event exactly once"
    assert partitions == set(range(PARTITIONS))
    assert not (tmp_path / "dead.jsonl").exists()


def test_a_typo_in_a_csv_sink_key_is_refused_with_the_key(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "kstage.yml", "127.0.0.1:9092", "orders",
                       {"type": "csv", "dir": str(tmp_path / "out"), "delimter": ";"})
    # `kstage validate` does not check sink settings against the sink's model on this
    # branch yet (it says OK); the worker builds its sink with build_sink, which refuses
    # the key, so that is what is asserted here.
    sink = yaml.safe_load(cfg.read_text(encoding="utf-8"))["groups"][0]["topics"][0]["sink"]
    with pytest.raises(ValidationError, match="delimter") as raised:
        build_sink(sink)
    assert raised.value.errors()[0]["type"] == "extra_forbidden"
