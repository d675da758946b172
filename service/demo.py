"""``kstage demo``: the main job on the embedded default, end to end, in one command.

Starts the embedded broker, writes a ``file://`` schema registry holding the real
WhereHows and DataHub schemas, produces sample events of those schemas (plus a few poison
values) in the Confluent wire format, runs the service until every partition is
processed and committed (``--drain``), and prints what landed where: rows per staging
table, dead-lettered messages and throughput.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from fastavro import parse_schema

from actors.master import Master
from processors.avro import encode
from processors.base import SCHEMA_DIR
from service.broker import EmbeddedBroker
from service.lifecycle import serve
from service.samples import (
    POISON_SCHEMA_ID,
    SAMPLE_TOPICS,
    SampleTopic,
    poison_values,
    sample_records,
)
from settings.models import Settings

logger = logging.getLogger(__name__)

POISON_TOPIC = "MetadataChangeLog_Versioned_v1"


def write_registry(directory: Path) -> dict[str, int]:
    """A ``file://`` registry with one id per schema file; the MCL schema gets the id the
    poison values name, so their defects are the only thing wrong with them."""
    directory.mkdir(parents=True, exist_ok=True)
    files = sorted({t.schema_file for t in SAMPLE_TOPICS},
                   key=lambda f: (f != "datahub/MetadataChangeLog.avsc", f))
    ids: dict[str, int] = {}
    index: dict[str, dict[str, str]] = {}
    for n, schema_file in enumerate(files, start=POISON_SCHEMA_ID):
        name = schema_file.replace("/", "_")
        (directory / name).write_text((SCHEMA_DIR / schema_file).read_text())
        ids[schema_file] = n
        index[str(n)] = {"subject": f"{Path(schema_file).stem}-value", "file": name}
    (directory / "index.json").write_text(json.dumps(index, indent=2))
    return ids


async def produce(bootstrap: str, events: int, ids: dict[str, int]) -> dict[str, int]:
    """Produce ``events`` records per sample topic; returns the count per topic."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    counts: dict[str, int] = {}
    try:
        for topic in SAMPLE_TOPICS:
            schema = parse_schema(json.loads((SCHEMA_DIR / topic.schema_file).read_text()))
            values = [encode(schema, ids[topic.schema_file], r)
                      for r in sample_records(topic, events)]
            if topic.topic == POISON_TOPIC:
                values += poison_values(6)
            for i, value in enumerate(values):
                await producer.send(topic.topic, value, key=str(i % 64).encode())
            counts[topic.topic] = len(values)
        await producer.flush()
    finally:
        await producer.stop()
    return counts


def sink_path(out: Path, topic: SampleTopic) -> Path:
    return out / "staging" / topic.table / f"{topic.topic}.jsonl"


def demo_settings(bootstrap: str, out: Path) -> Settings:
    return Settings(
        name="kstage-demo",
        kafka={"bootstrap": bootstrap},
        supervisor={"shutdown_grace_s": 10, "abort_grace_s": 5},
        service={"http_port": 0},
        schema_registry={"url": f"file://{out / 'registry'}"},
        groups=[{
            "group_id": "kstage-demo",
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 500,
            "failure": {"mode": "continue", "dead_letter_path": str(out / "failed_events.log")},
            "topics": [{
                "topic": t.topic, "processor": t.processor, "format": "avro",
                "sink": {"type": "jsonl", "path": str(sink_path(out, t))},
            } for t in SAMPLE_TOPICS],
        }],
    )


def progress_display(total: int) -> Callable[[Master], Coroutine[Any, Any, None]]:
    """A one-line progress display on stderr: messages processed of ``total``."""
    async def show(master: Master) -> None:
        started = time.monotonic()
        tty = sys.stderr.isatty()
        try:
            while True:
                done = sum(w["stats"]["processed"] for w in master.snapshot())
                rate = done / max(time.monotonic() - started, 1e-9)
                width = 30
                bar = "#" * (width * min(done, total) // max(total, 1))
                line = f"  [{bar:<{width}}] {done}/{total} messages ({rate:.0f}/s)"
                # A terminal gets one line redrawn in place; a log gets a line a second.
                sys.stderr.write(f"\r{line}" if tty else f"{line}\n")
                sys.stderr.flush()
                await asyncio.sleep(0.25 if tty else 1.0)
        finally:
            if tty:
                sys.stderr.write("\n")
    return show


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def run_demo(out: Path, events: int = 500) -> int:
    out.mkdir(parents=True, exist_ok=True)
    for stale in [out / "failed_events.log", *(sink_path(out, t) for t in SAMPLE_TOPICS)]:
        stale.unlink(missing_ok=True)
    ids = write_registry(out / "registry")
    with EmbeddedBroker() as broker:
        counts = asyncio.run(produce(broker.bootstrap, events, ids))
        produced = sum(counts.values())
        print(f"produced {produced} events of the real WhereHows/DataHub schemas to "
              f"{len(counts)} topics on the embedded broker {broker.bootstrap}", flush=True)
        started = time.monotonic()
        code = asyncio.run(serve(demo_settings(broker.bootstrap, out), broker.bootstrap,
                                 drain=True, progress=progress_display(produced)))
        elapsed = time.monotonic() - started
    tables: dict[str, int] = {}
    for topic in SAMPLE_TOPICS:
        tables[topic.table] = tables.get(topic.table, 0) + _count_lines(sink_path(out, topic))
    dead = _count_lines(out / "failed_events.log")
    rows = [("staging table", "rows")] + [(t, str(n)) for t, n in tables.items()]
    rows += [("dead letters (" + str(out / "failed_events.log") + ")", str(dead))]
    width = max(len(a) for a, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value:>6}")
    print(f"{produced} events in {elapsed:.1f}s including the group join "
          f"({produced / elapsed:.0f} events/s); rows under {out / 'staging'}; "
          f"exit code {code}")
    empty = [t for t, n in tables.items() if n == 0]
    if code == 0 and (empty or dead != 6):
        print(f"UNEXPECTED: empty tables {empty}, {dead} dead letters (expected 6)")
        return 1
    return code
