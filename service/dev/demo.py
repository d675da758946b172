"""``kstage demo``: the main job on the embedded default, end to end, in one command.

Starts the embedded broker, writes a ``file://`` schema registry holding the real
WhereHows and DataHub schemas, produces sample events of those schemas (plus a few poison
values) in the Confluent wire format, runs the service until every partition is
processed and committed (``--drain``) with Spark staging sinks (Spark local mode,
Apache Iceberg tables under ``DIR/warehouse`` in the embedded default catalog, a SQLite
file there), merges each staging table into its final table (the service's final merge
after ``--drain``, :mod:`actors.tables.merge`), and prints what landed where: per
staging and final table its rows and snapshots (read by ``kstage tables show``'s
:func:`service.ops.tables.show` in a new session), dead-lettered messages (in the
dead-letter file and in the dead-letter topic :data:`DEAD_LETTER_TOPIC`), the messages
the ``PlatformEvent_v1`` topic's declared filter kept from its processor (documentation
changes, :data:`DEMO_FILTER`), throughput.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from fastavro import parse_schema

from actors.codecs.avro import encode
from actors.master import Master
from actors.preflight import resolve_processors
from actors.resources import Resources
from actors.sinks.checks import missing_packages
from actors.sinks.spark.actor import short
from actors.tables import final_name
from actors.worker import Worker
from processors.base import SCHEMA_DIR
from service.broker import EmbeddedBroker
from service.dev.samples import (
    POISON_SCHEMA_ID,
    SAMPLE_TOPICS,
    poison_values,
    sample_records,
)
from service.dev.schema_demo import (
    SCHEMA_TOPIC,
    V1_FILE,
    SchemaTable,
    add_v2,
    read_table,
    topic_settings,
)
from service.dev.schema_demo import summary_rows as schema_summary_rows
from service.dev.schema_demo import values as schema_values
from service.exits import EXIT_CONFIG
from service.lifecycle import serve
from service.ops.dlq import load_topic
from service.ops.tables import TableView, show
from settings.models import Settings

logger = logging.getLogger(__name__)

POISON_TOPIC = "MetadataChangeLog_Versioned_v1"
FILTER_TOPIC = "PlatformEvent_v1"
DEMO_FILTER: dict[str, Any] = {"exclude": {"payload.value.category": ["DOCUMENTATION"]}}
"""The filter of :data:`FILTER_TOPIC`: entity changes other than documentation ones."""


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
    ids[SCHEMA_TOPIC] = POISON_SCHEMA_ID + len(files)  # the schema-driven topic's version 2
    add_v2(directory, index, ids[SCHEMA_TOPIC])
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
        changing = values_of_schema_topic(events, ids)
        for i, value in enumerate(changing):
            await producer.send(SCHEMA_TOPIC, value, key=str(i % 64).encode(),
                                partition=0)  # in order: the change comes midway
        counts[SCHEMA_TOPIC] = len(changing)
        await producer.flush()
    finally:
        await producer.stop()
    return counts


def values_of_schema_topic(events: int, ids: dict[str, int]) -> list[bytes]:
    """The schema-driven topic's events: version 1 of the Gobblin schema, then 2."""
    return schema_values(events, ids[V1_FILE], ids[SCHEMA_TOPIC])


DEAD_LETTER_TOPIC = "kstage-demo.dead-letters"
"""The demo's dead-letter topic (beside the file): its records are counted in the summary."""


def demo_settings(bootstrap: str, out: Path) -> Settings:
    return Settings(
        name="kstage-demo",
        kafka={"bootstrap": bootstrap},
        supervisor={"shutdown_grace_s": 10, "abort_grace_s": 5},
        service={"http_port": 0},
        schema_registry={"url": f"file://{out / 'registry'}"},
        spark={"master": "local[2]", "warehouse": str(out / "warehouse"),
               "flush_max_rows": 5000, "flush_max_interval_s": 1},
        # The merge the demo shows is the one after --drain; none runs on the interval.
        merge={"interval_s": 3600},
        groups=[{
            "group_id": "kstage-demo",
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 500,
            "failure": {"mode": "continue", "dead_letter_path": str(out / "failed_events.log"),
                        "dead_letter_topic": DEAD_LETTER_TOPIC},
            "topics": [{"topic": t.topic, "processor": t.processor, "format": "avro",
                        "sink": {"type": "spark"},
                        **({"filter": DEMO_FILTER} if t.topic == FILTER_TOPIC else {})}
                       for t in SAMPLE_TOPICS] + [topic_settings()],
        }],
    )


def progress_display(total: int, workers: dict[str, Worker] | None = None,
                     ) -> Callable[[Master], Coroutine[Any, Any, None]]:
    """A one-line progress display on stderr: messages processed of ``total``; every
    worker seen is kept in ``workers`` (by label), for its final counters."""
    async def show(master: Master) -> None:
        started = time.monotonic()
        tty = sys.stderr.isatty()
        shown = -1  # the count of the last line written
        try:
            while True:
                if workers is not None:
                    workers.update((c.label, c) for c in master.supervisor.children
                                   if isinstance(c, Worker))
                done = sum(w["stats"]["processed"] for w in master.snapshot())
                rate = done / max(time.monotonic() - started, 1e-9)
                width = 30
                bar = "#" * (width * min(done, total) // max(total, 1))
                line = f"  [{bar:<{width}}] {done}/{total} messages ({rate:.0f}/s)"
                # A terminal gets one line redrawn in place; a log gets a line a second
                # while the count moves, none while it stands (Spark flush, merge).
                if tty or done != shown:
                    sys.stderr.write(f"\r{line}" if tty else f"{line}\n")
                    sys.stderr.flush()
                    shown = done
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


def table_views(settings: Settings) -> tuple[dict[str, TableView], SchemaTable]:
    """Table name -> what ``kstage tables show`` says of it, and what the schema-driven
    topic's table holds (one new Spark session, stopped after)."""
    async def read() -> tuple[list[TableView], SchemaTable]:
        async with Resources(settings.spark) as resources:  # stops the SparkActor after
            actor = resources.spark()
            views = await show(settings, resolve_processors(settings), actor=actor)
            return views, await actor.call(lambda spark: read_table(spark, settings.spark))

    views, schema_table = asyncio.run(read())
    return {view.table.rsplit(".", 1)[-1]: view for view in views}, schema_table


def _counts(view: TableView | None) -> tuple[int, int]:
    """Rows and snapshots of a table (0, 0 when it was not created)."""
    return (view.rows, view.snapshots) if view is not None and view.exists else (0, 0)


def summary_rows(views: dict[str, TableView], tables: list[str]) -> list[tuple[str, ...]]:
    """The summary's table lines: per staging table, its rows and snapshots and its final
    table's."""
    rows: list[tuple[str, ...]] = [
        ("staging table -> final table", "rows", "snapshots", "final rows", "snapshots")]
    for table in tables:
        final = final_name(table)
        merged = _counts(views.get(final)) != (0, 0)
        rows.append((f"{table} -> {final if merged else '(not merged)'}",
                     *map(str, (*_counts(views.get(table)), *_counts(views.get(final))))))
    return rows


def run_demo(out: Path, events: int = 500) -> int:
    # The demo writes Spark tables: say what to install before starting anything.
    missing = missing_packages(["spark"])
    if missing:
        print(f"kstage demo: {'; '.join(missing)}", file=sys.stderr)
        return EXIT_CONFIG
    out.mkdir(parents=True, exist_ok=True)
    (out / "failed_events.log").unlink(missing_ok=True)
    shutil.rmtree(out / "warehouse", ignore_errors=True)
    ids = write_registry(out / "registry")
    with EmbeddedBroker() as broker:
        counts = asyncio.run(produce(broker.bootstrap, events, ids))
        produced = sum(counts.values())
        print(f"produced {produced} events of the real WhereHows/DataHub schemas to "
              f"{len(counts)} topics on the embedded broker {broker.bootstrap}; "
              "starting Spark (local mode)", flush=True)
        started = time.monotonic()
        workers: dict[str, Worker] = {}
        settings = demo_settings(broker.bootstrap, out)
        code = asyncio.run(serve(settings, broker.bootstrap,
                                 drain=True, progress=progress_display(produced, workers)))
        elapsed = time.monotonic() - started
        dead_in_topic = len(asyncio.run(load_topic(settings, DEAD_LETTER_TOPIC))[0])
    try:
        views, schema_table = table_views(settings)
    except Exception as exc:  # noqa: BLE001 - the summary says it and the demo fails
        print(f"kstage demo: cannot read the tables: {short(exc)}", file=sys.stderr)
        views, schema_table, code = {}, SchemaTable(), code or 1
    dead = _count_lines(out / "failed_events.log")
    tables = sorted({t.table for t in SAMPLE_TOPICS})
    rows = summary_rows(views, tables) + schema_summary_rows(schema_table, events)
    rows += [(f"dead letters ({out / 'failed_events.log'})", str(dead), "", "", "")]
    rows += [(f"dead letters (topic {DEAD_LETTER_TOPIC})", str(dead_in_topic), "", "", "")]
    filtered = sum(w.stats["filtered"] for w in workers.values() if w.topic.topic == FILTER_TOPIC)
    rows += [(f"filtered ({FILTER_TOPIC}: exclude payload.value.category DOCUMENTATION)",
              str(filtered), "", "", "")]
    width = max(len(row[0]) for row in rows)
    for name, *numbers in rows:
        print(f"  {name:<{width}}  " + "  ".join(
            f"{n:>{len(head)}}" for n, head in zip(numbers, rows[0][1:], strict=True)).rstrip())
    print(f"{produced} events in {elapsed:.1f}s including the group join, Spark start-up "
          f"and the merge ({produced / elapsed:.0f} events/s); Iceberg tables under "
          f"{out / 'warehouse'} (catalog {out / 'warehouse' / 'catalog.db'}); exit code {code}")
    empty = [t for t in tables if not _counts(views.get(final_name(t)))[0]]
    evolved = (schema_table.rows, schema_table.filled) == (events, events - events // 2)
    if code == 0 and (empty or dead != 6 or dead_in_topic != 6 or not filtered
                      or not evolved):
        print(f"UNEXPECTED: empty tables {empty}, {dead} dead letters (expected 6), "
              f"{dead_in_topic} in the dead-letter topic (expected 6), "
              f"{filtered} filtered (expected some), {schema_table.rows} rows in "
              f"{SCHEMA_TOPIC}'s table ({schema_table.filled} with the new column; "
              f"expected {events}, {events - events // 2})")
        return 1
    return code
