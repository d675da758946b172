"""``kstage demo``: the main job on the embedded default, end to end, in one command.

Starts the embedded broker, produces sample events, runs the service with ``--drain``
semantics until every partition is processed and committed, then prints what landed
where: rows per output, dead-lettered messages and throughput.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from service.broker import EmbeddedBroker
from service.lifecycle import serve
from settings.models import Settings

logger = logging.getLogger(__name__)

DEMO_TOPIC = "events_json"


async def _produce(bootstrap: str, count: int, poison_every: int) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    rng = random.Random(42)  # noqa: S311 - sample data, not security
    try:
        for i in range(count):
            if poison_every and i % poison_every == poison_every - 1:
                value = b"{truncated"
            else:
                value = json.dumps({
                    "id": i, "user": f"user-{rng.randrange(100)}",
                    "action": rng.choice(["view", "click", "buy"]),
                    "amount": round(rng.random() * 100, 2),
                }).encode()
            await producer.send(DEMO_TOPIC, value, key=str(i % 16).encode())
        await producer.flush()
    finally:
        await producer.stop()
    return count


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def demo_settings(bootstrap: str, out: Path) -> Settings:
    return Settings(
        name="kstage-demo",
        kafka={"bootstrap": bootstrap},
        supervisor={"shutdown_grace_s": 10, "abort_grace_s": 5},
        groups=[{
            "group_id": "kstage-demo",
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 500,
            "failure": {"mode": "continue", "dead_letter_path": str(out / "failed_events.log")},
            "topics": [{
                "topic": DEMO_TOPIC, "processor": "json_rows", "format": "json",
                "sink": {"type": "jsonl", "path": str(out / "events.jsonl")},
            }],
        }],
    )


def run_demo(out: Path, events: int = 5000) -> int:
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("events.jsonl", "failed_events.log"):
        (out / stale).unlink(missing_ok=True)
    with EmbeddedBroker() as broker:
        produced = asyncio.run(_produce(broker.bootstrap, events, poison_every=500))
        print(f"produced {produced} events to {DEMO_TOPIC} on {broker.bootstrap}", flush=True)
        started = time.monotonic()
        code = asyncio.run(serve(demo_settings(broker.bootstrap, out), broker.bootstrap,
                                 drain=True))
        elapsed = time.monotonic() - started
    rows = _count_lines(out / "events.jsonl")
    dead = _count_lines(out / "failed_events.log")
    table: list[tuple[str, Any]] = [
        ("output", "rows"),
        (str(out / "events.jsonl"), rows),
        (str(out / "failed_events.log") + " (dead letters)", dead),
    ]
    width = max(len(str(a)) for a, _ in table)
    for name, value in table:
        print(f"{name:<{width}}  {value}")
    print(f"{produced} events in {elapsed:.1f}s (incl. group join): "
          f"{produced / elapsed:.0f} events/s; exit code {code}")
    if code == 0 and rows + dead != produced:
        print(f"MISMATCH: {rows} rows + {dead} dead letters != {produced} produced")
        return 1
    return code
