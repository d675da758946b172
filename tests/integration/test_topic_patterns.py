"""``topic_pattern`` on the real broker (both): a pattern picks up the 3 topics that
match (and not the one that does not), each into its own file named from ``{topic}``;
a 4th topic created while kstage runs is picked up within ``kafka.metadata_refresh_s``
(its worker appears in ``/status``); a deleted one stops its worker cleanly (it leaves
``/status``, the rows it landed are committed, the others flow on).

Apache Kafka runs here with ``auto.create.topics.enable`` off, as production clusters
often do: with it on, the deleted topic's own consumer re-creates it at once (aiokafka's
metadata requests allow auto-creation), which docs/operations.md says."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from service.broker import free_port
from tests.apache_kafka import KafkaCluster
from tests.brokers import KAFKA
from tests.integration.test_topic_recreated import delete_topic
from tests.kafkautil import (
    KstageProcess,
    committed,
    create_topic,
    produce,
    read_jsonl,
    unique,
    wait_until,
    write_config,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TOKEN = "patterns-test-token"  # noqa: S105 - a test's control token


def out(tmp_path: Path, topic: str) -> Path:
    return tmp_path / "out" / f"{topic.replace('.', '_').replace('-', '_').lower()}.jsonl"


async def status(base: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=5) as client:
        answer = await client.get(f"{base}/status",
                                  headers={"Authorization": f"Bearer {TOKEN}"})
    body: dict[str, Any] = answer.json()
    return body


def running(body: dict[str, Any]) -> set[str]:
    return {t["topic"] for g in body.get("groups", []) for t in g["topics"] if t["running"]}


@contextlib.contextmanager
def pattern_broker(broker_kind: str, tmp_path: Path,
                   request: pytest.FixtureRequest) -> Iterator[str]:
    """The shared Tansu broker, or an Apache Kafka of its own without auto-creation."""
    if broker_kind == KAFKA:
        with KafkaCluster(tmp_path / "kafka", 1,
                          properties={"auto.create.topics.enable": "false"}) as cluster:
            yield cluster.bootstrap
    else:
        yield request.getfixturevalue("tansu_broker")


@pytest.mark.timeout(400)
async def test_a_pattern_follows_the_topics_created_and_deleted_while_it_runs(
        broker_kind: str, tmp_path: Path, kstage: type[KstageProcess],
        request: pytest.FixtureRequest) -> None:
    with pattern_broker(broker_kind, tmp_path, request) as broker:
        await follow_topics(broker, tmp_path, kstage)


async def follow_topics(broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    prefix, group = unique("pat").replace("-", ""), unique("g-pat")
    topics = [f"{prefix}.src.T{k}" for k in range(3)]
    for topic in [*topics, f"{prefix}.other"]:
        await create_topic(broker, topic)
        await produce(broker, topic, ({"topic": topic, "i": i} for i in range(5)))
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [{
        "topic_pattern": f"{prefix}\\.src\\..*", "processor": "json_rows",
        "sink": {"type": "jsonl", "path": str(tmp_path / "out" / "{topic}.jsonl")}}],
        service={"control_token": TOKEN, "http_port": (port := free_port()),
                 "http_host": "127.0.0.1"})
    data = yaml.safe_load(cfg.read_text())
    data["kafka"]["metadata_refresh_s"] = 0.5
    cfg.write_text(yaml.safe_dump(data))
    proc = kstage(cfg)
    await proc.wait_for_log("status server on port", timeout=60)
    base = f"http://127.0.0.1:{port}"

    # The 3 matching topics, each into its own file; the 4th not.
    for topic in topics:
        await wait_until(rows_are(out(tmp_path, topic), 5), 90, f"the rows of {topic}")
        assert {r["topic"] for r in read_jsonl(out(tmp_path, topic))} == {topic}
    assert not out(tmp_path, f"{prefix}.other").exists()
    body = await status(base)
    [patterns] = [g["patterns"] for g in body["groups"]]
    assert patterns == [{"pattern": f"{prefix}\\.src\\..*", "topics": sorted(topics),
                         "count": 3, "refused": []}]

    # A 4th, created while it runs: its worker appears, its rows land.
    late = f"{prefix}.src.late"
    await create_topic(broker, late)
    await produce(broker, late, ({"topic": late, "i": i} for i in range(7)))
    await proc.wait_for_log(f"{group}/{late}: topic matches pattern", timeout=60)
    await wait_until(lambda: len(read_jsonl(out(tmp_path, late))) == 7, 90,
                     f"the rows of {late}")

    # One deleted: its worker stops (committed what it landed) and leaves /status.
    gone = topics[0]
    await wait_until_committed(broker, group, gone, 5)
    await delete_topic(broker, gone)
    await proc.wait_for_log(f"{group}/{gone}: stopped and removed (its topic was deleted)",
                            timeout=60)
    body = await status(base)
    assert gone not in {t["topic"] for g in body["groups"] for t in g["topics"]}, body
    [patterns] = [g["patterns"] for g in body["groups"]]
    assert patterns[0]["topics"] == sorted([*topics[1:], late])

    # The others flow on and commit.
    await produce(broker, topics[1], ({"topic": topics[1], "i": i} for i in range(5, 9)))
    await wait_until(lambda: len(read_jsonl(out(tmp_path, topics[1]))) == 9, 90,
                     f"the later rows of {topics[1]}")
    await wait_until_committed(broker, group, topics[1], 9)
    await wait_until_committed(broker, group, late, 7)
    proc.signal(signal.SIGTERM)
    assert await proc.wait(60) == 0, proc.output()
    assert "Traceback" not in proc.output()


def rows_are(path: Path, count: int) -> Callable[[], bool]:
    return lambda: len(read_jsonl(path)) == count


async def wait_until_committed(broker: str, group: str, topic: str, offset: int) -> None:
    for _ in range(300):  # bounded: 300 reads, each a round trip to the broker
        if (await committed(broker, group, topic, 1))[0] == offset:
            return
    raise AssertionError(f"{group} never committed {topic}[0] at {offset}")
