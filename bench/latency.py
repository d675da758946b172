"""Freshness: how long an event takes from its producer to a visible row (issue 14).

Usage::

    python bench/latency.py [--sink jsonl|spark|both] [--messages N | --duration-s S]
                            [--rate R] [--max-messages M] [--flush-idle-s S]
                            [--fold-files N | --no-fold] [--appends spark|pyiceberg]
                            [--commit-latency-s S]
                            [--fetch-max-wait-ms MS] [--broker tansu|kafka] [--dump CSV]
                            [--keep]

For each sink, on one embedded broker (Tansu; ``--broker kafka``: one Apache Kafka node,
whose fetches keep up with paced rates where Tansu's fell behind, e.g. 10 000 events/s for
150 s), each step on a new 1-partition topic:

1. **kstage's maximum rate** (skipped when ``--rate`` is given): ``--max-messages``
   events (default 100 000 JSONL, 30 000 Spark) are produced as a backlog and drained by
   ``kstage run --drain`` with the same sink settings as step 3, timed from the
   partition's assignment to the last commit (the method and helpers of
   ``bench/throughput.py``). A short run: for Spark it includes the JVM's warm-up, so
   the figure is a floor of the steady-state rate.
2. **Baseline**: a raw aiokafka consumer (same ``fetch_max_wait_ms``) receives the same
   number of paced JSON events at the same rate; its figure is receipt - stamp, what
   the broker and the client take before any sink could write.
3. **Latency run** at half the maximum (or ``--rate``): ``kstage run`` (no ``--drain``)
   starts with a fresh group; once its partition is assigned, a producer **in a process
   of its own** sends ``--messages`` events (default: ``--duration-s`` 30 s worth)
   paced at the rate (event ``i`` is due ``i / rate`` s after the start;
   confluent-kafka's producer with its defaults, ``linger.ms`` 5, and ``acks=1``), each
   **stamped with the wall clock when it is handed to the producer**, inside its value
   (the linger counts in the latency). A reader in this process records the wall-clock time
   at which each event's row becomes visible; latency = visible - stamp. When every row
   is visible kstage gets SIGTERM and must exit 0.

The consumers' ``fetch_max_wait_ms`` is 10 (``--fetch-max-wait-ms``; kstage's default is
500): Tansu answers a fetch only at about its max wait even when records arrived
(measured with raw aiokafka at 200 events/s: receipt p50 127 ms at 500, 25 ms at 100,
6 ms at 10), where Apache Kafka answers once ``fetch_min_bytes`` (1) is there.

What "visible" means:

* ``jsonl``: JSON values ``{"id", "stamp" (float seconds), filler}`` (~200 B),
  processor ``json_rows``, ``sink: {type: jsonl}`` (fsync on, the default). The reader
  tails the file every 2 ms and takes each complete line's arrival time: a line is
  visible once kstage's ``write(2)`` returned (readers see the page cache; the fsync
  after it delays the next batch).
* ``spark``: WhereHows Gobblin compaction events (the Avro events of
  ``bench/throughput.py --format spark``) whose event ``timestamp`` is the stamp (ms,
  mapped to ``log_event_time``), processor ``gobblin_compaction``, ``sink: {type: spark}``
  with the ``spark:`` defaults (``flush_max_rows`` 10 000, ``flush_min_rows`` 1 000,
  ``flush_max_interval_s`` 5, ``flush_idle_s`` 1; ``--flush-idle-s`` overrides the
  last: 5 turns the idle flush off) and the group's (``max_in_flight`` 10 000). A row
  is visible once the Iceberg commit holding it is in the catalog: every 100 ms the
  reader loads the table through its catalog with pyiceberg (another engine, as a data
  engineer's reader would) and reads the ``_offset`` and ``log_event_time`` of the data
  files each new snapshot added. The poll adds up to 100 ms to each figure (50 ms on
  average). After the run the table is read whole and must hold every event once.

``--appends pyiceberg`` (Spark only): the staging appends are pyiceberg's
(``spark.appends: pyiceberg``), written and committed from kstage's process, with no JVM;
the background fold is pyiceberg's then (``spark.maintenance.fold_files``, beside the
appends: ``--no-fold`` for a run without it).

**A REST catalog with slow commits** (``--commit-latency-s S``, Spark only, with
``--rate``): kstage writes through Project Nessie's Iceberg REST catalog (the tests' one,
tests/rest_catalog.py: a JVM of its own, its warehouse in a moto S3 bucket on loopback)
behind a proxy that holds every table commit for ``S`` seconds (tests/catalog_proxy.py),
as a remote catalog answers; the reader polls the same catalog (not through the proxy)
and reads the data files from the bucket. kstage's appends follow the measured commit
latency (``spark.freshness_target_s``, ``spark.max_commits_per_s``: their defaults).
The last line's target is then 2 500 ms (issue 35's for 1 s of commit latency).

Reported per sink: the baseline's and kstage's p50, p99 and max in ms, kstage's p99 per
5 s of stamps (warm-up and stalls show there), the CPU seconds kstage (Python, JVM), the
producer and the broker used during the run, and the last line
``<sink>: p99_ms=<p99> target_ms=<target> PASS|FAIL`` (JSONL target 100 ms; Spark
2000 ms, issue 21's for a staged row visible to a reader of the Iceberg table). With
``--sink both`` (the default) the two sinks run one after the other and print one such
line each, JSONL first.
``--dump CSV`` appends ``sink,stamp,latency_ms`` per event.

On the shared 2-core machine the producer, the reader, kstage, its JVM and the broker
share the cores (with whatever else runs): the figures are upper bounds of what a
quiet machine gives.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import throughput
from aiokafka import AIOKafkaConsumer
from throughput import (
    FAST_GROUP,
    BenchError,
    Workload,
    _import_stdlib_http,
    create_topic,
    json_workload,
    read_back,
    run_kstage,
    spark_workload,
    unique,
    write_config,
)

from service.broker import EmbeddedBroker

JSONL_TARGET_MS = 100.0
SPARK_TARGET_MS = 2000.0  # issue 21: a staged row visible to a reader within 2 s (p99)
REST_TARGET_MS = 2500.0  # issue 35: the same through a REST catalog answering commits in 1 s
JSONL_POLL_S = 0.002
SPARK_POLL_S = 0.1
START_TIMEOUT_S = 120.0  # kstage start (Spark session included) + group join
VISIBLE_TIMEOUT_S = 60.0  # after the last event was produced
WINDOW_S = 5.0  # the p99 per window of stamps shows warm-up and stalls
_ASSIGNED = re.compile(r": assigned partitions ")


@dataclass
class SinkRun:
    """One sink's latency run."""

    sink: str
    rate: float
    target_ms: float
    latencies_ms: list[float] = field(default_factory=list)
    max_rate: float | None = None
    produced: int = 0
    late_start_ms: float = 0.0  # the producer's worst lag behind its schedule
    raw_ms: list[float] = field(default_factory=list)  # the baseline's latencies
    windows: list[float] = field(default_factory=list)  # p99 (ms) per WINDOW_S of stamps
    cpu_s: tuple[float, ...] = ()  # see Visible.cpu_s

    def percentile(self, q: float, raw: bool = False) -> float:
        values = sorted(self.raw_ms if raw else self.latencies_ms)
        return values[min(len(values) - 1, max(0, round(q * len(values) + 0.5) - 1))]


# -- the events ------------------------------------------------------------------------

def _filler(size: int) -> str:
    return ("kafka table owner schema column partition lineage " * (size // 40 + 1))[:size]


class JsonlEvents:
    """``{"id": i, "stamp": wall clock, "text": filler}`` of about ``size`` bytes."""

    def __init__(self, size: int = 200) -> None:
        self.text = _filler(max(0, size - 60))

    def value(self, i: int, stamp: float) -> bytes:
        return json.dumps({"id": i, "stamp": stamp, "text": self.text},
                          separators=(",", ":")).encode()


class GobblinEvents:
    """Gobblin compaction events whose ``timestamp`` is the stamp (ms)."""

    def __init__(self, count: int) -> None:
        from fastavro import parse_schema  # only for the Spark sink

        from actors.codecs.avro import encode
        from processors.base import SCHEMA_DIR
        from service.dev.samples import SAMPLE_TOPICS, sample_records

        sample = next(t for t in SAMPLE_TOPICS if t.processor == "gobblin_compaction")
        self.schema = parse_schema(json.loads((SCHEMA_DIR / sample.schema_file).read_text()))
        self.records = sample_records(sample, count, seed=7)
        self.encode = encode

    def value(self, i: int, stamp: float) -> bytes:
        record = self.records[i]
        record["timestamp"] = int(stamp * 1000)
        return self.encode(self.schema, 1, record)

    def json_value(self, i: int, stamp: float) -> bytes:
        """The same event as a JSON object (for consumers without an Avro converter)."""
        record = self.records[i]
        record["timestamp"] = int(stamp * 1000)
        return orjson.dumps(record)


class MclEvents:
    """DataHub MetadataChangeLogs (those of bench/decode.py) whose ``created.time`` is the
    stamp (ms, mapped to ``created_time``)."""

    def __init__(self, count: int) -> None:
        import random

        from decode import mcl
        from fastavro import parse_schema

        from actors.codecs.avro import encode
        from processors.base import SCHEMA_DIR

        text = (SCHEMA_DIR / "datahub/MetadataChangeLog.avsc").read_text()
        self.schema = parse_schema(json.loads(text))
        rng = random.Random(1)
        self.records = [mcl(i, rng) for i in range(count)]
        self.encode = encode

    def value(self, i: int, stamp: float) -> bytes:
        record = self.records[i]
        record["created"]["time"] = int(stamp * 1000)
        return self.encode(self.schema, 1, record)


EVENTS: dict[str, Callable[[int], Callable[[int, float], bytes]]] = {
    "jsonl": lambda n: JsonlEvents().value,
    "gobblin": lambda n: GobblinEvents(n).value,
    "gobblin-json": lambda n: GobblinEvents(n).json_value,
    "mcl": lambda n: MclEvents(n).value,
}
"""The events :func:`produce_apart` can send, by name: ``n`` -> ``value(i, stamp)``."""


# -- the readers -----------------------------------------------------------------------

class JsonlReader:
    """Tails one JSONL file: ``seen[id] = (wall clock when its line was read, stamp)``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen: dict[int, tuple[float, float]] = {}
        self._offset = 0
        self._rest = b""

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        now = time.time()
        self._offset += len(data)
        *lines, self._rest = (self._rest + data).split(b"\n")
        for line in lines:
            row = orjson.loads(line)
            self.seen.setdefault(row["id"], (now, row["stamp"]))


class IcebergReader:
    """Reads the Iceberg table's new commits through its catalog (pyiceberg, as another
    engine would): ``seen[offset] = (wall clock, stamp)`` of the rows of every data file
    a snapshot added since the last poll; ``files``: ``(wall clock, data files)`` of the
    table's current snapshot (its summary's ``total-data-files``) each time it changed."""

    def __init__(self, table: str, stamp_column: str = "log_event_time") -> None:
        self.table = table
        self.stamp_column = stamp_column  # the event's stamp, epoch ms
        self.warehouse = Path()
        self.seen: dict[int, tuple[float, float]] = {}
        self.files: list[tuple[float, int]] = []
        self.namespace = "kstage"
        self.open_catalog: Callable[[], Any] | None = None  # else the run's SQLite catalog
        self._manifests: set[str] = set()  # manifest files read
        self.added_by: set[int] = set()  # the snapshots whose added files were read
        self._current: int | None = None
        self._catalog: Any = None

    def poll(self) -> None:
        import pyarrow.parquet as pq  # only for the Spark sink
        from pyiceberg.exceptions import NoSuchTableError
        from pyiceberg.manifest import ManifestEntryStatus

        if self._catalog is None:
            if self.open_catalog is not None:
                self._catalog = self.open_catalog()
            elif not (self.warehouse / "catalog.db").exists():
                return
            else:
                self._catalog = throughput.run_catalog(self.warehouse)
        try:
            table = self._catalog.load_table(f"{self.namespace}.{self.table}")
        except NoSuchTableError:
            return
        except Exception:  # noqa: BLE001 - the catalog's tables not created yet
            return
        now = time.time()
        current = table.current_snapshot()
        if current is not None and current.snapshot_id != self._current:
            self._current = current.snapshot_id
            total = (current.summary or {}).get("total-data-files")
            if total is not None:
                self.files.append((now, int(total)))
        # The current snapshot's manifests not read yet: each append's (and a fold's)
        # added files, also those of snapshots the catalog no longer serves (a REST
        # catalog such as Nessie keeps only the current one in the metadata it serves)
        # or that came and went between two polls.
        if current is None:
            return
        for manifest in current.manifests(table.io):
            if manifest.manifest_path in self._manifests:
                continue
            self._manifests.add(manifest.manifest_path)
            if manifest.added_files_count == 0:
                continue
            self.added_by.add(manifest.added_snapshot_id)
            for entry in manifest.fetch_manifest_entry(table.io):
                if entry.status != ManifestEntryStatus.ADDED:
                    continue
                with table.io.new_input(entry.data_file.file_path).open() as file:
                    data = pq.read_table(file, columns=["_offset", self.stamp_column])
                for offset, stamp_ms in zip(data.column("_offset").to_pylist(),
                                            data.column(self.stamp_column).to_pylist(),
                                            strict=True):
                    self.seen.setdefault(offset, (now, stamp_ms / 1000))


# -- the baseline ----------------------------------------------------------------------

async def raw_run(bootstrap: str, n: int, rate: float, fetch_max_wait_ms: int) -> list[float]:
    """Raw aiokafka: the same paced JSON events, latency = receipt by ``getmany`` - stamp
    (ms): what the broker and the client take before any sink could write."""
    topic = unique("latency-raw")
    await create_topic(bootstrap, topic)
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=unique("latency-raw"),
        auto_offset_reset="earliest", fetch_max_wait_ms=fetch_max_wait_ms, **FAST_GROUP)
    await consumer.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not consumer.assignment():
            if time.monotonic() > deadline:
                raise BenchError("raw: no assignment")
            await consumer.getmany(timeout_ms=100)
        producing = asyncio.ensure_future(produce_apart(bootstrap, topic, n, rate, "jsonl"))
        latencies: list[float] = []
        received_at = time.monotonic()  # the last poll that returned records
        while len(latencies) < n:
            data = await consumer.getmany(timeout_ms=200)
            now = time.time()
            if data:
                received_at = time.monotonic()
            latencies += [(now - orjson.loads(r.value)["stamp"]) * 1000
                          for records in data.values() for r in records]
            if producing.done() and not data:
                producing.result()
                # Gives up only once nothing came for a while after the producer ended
                # (a consumer behind the producer keeps receiving: not a failure).
                if time.monotonic() - received_at > VISIBLE_TIMEOUT_S:
                    raise BenchError(f"raw: {len(latencies)} of {n} received, nothing "
                                     f"for {VISIBLE_TIMEOUT_S:.0f}s")
        await producing
    finally:
        await consumer.stop()
    return latencies


# -- a run -----------------------------------------------------------------------------

def _log_text(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


async def _wait_for_log(log: Path, pattern: re.Pattern[str], proc: Any,
                        timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not pattern.search(_log_text(log)):
        if proc.returncode is not None:
            raise BenchError(f"kstage exited {proc.returncode} before its assignment; "
                             f"log {log}:\n{_log_text(log)[-3000:]}")
        if time.monotonic() > deadline:
            raise BenchError(f"kstage not assigned within {timeout_s:.0f} s; log {log}")
        await asyncio.sleep(0.05)


def _produce_main(bootstrap: str, topic: str, n: int, rate: float, events: str,
                  worst: Any) -> None:
    """The producer process: builds its events, then :func:`produce_paced`."""
    value = EVENTS[events](n)
    started = time.process_time()
    worst[0] = produce_paced(bootstrap, topic, n, rate, value)
    worst[1] = time.process_time() - started


async def produce_apart(bootstrap: str, topic: str, n: int, rate: float, events: str
                        ) -> tuple[float, float]:
    """:func:`produce_paced` in a process of its own (``events``: a name of
    :data:`EVENTS`), so that it neither slows the reader down nor waits for it; the worst
    lag behind the schedule, in ms, and the CPU seconds it used producing."""
    context = multiprocessing.get_context("spawn")
    worst = context.Array("d", [-1.0, 0.0])
    proc = context.Process(target=_produce_main, args=(bootstrap, topic, n, rate, events,
                                                       worst), daemon=True)
    proc.start()
    try:
        await asyncio.to_thread(proc.join)
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
    if proc.exitcode != 0 or worst[0] < 0:
        raise BenchError(f"the producer process exited {proc.exitcode}")
    return float(worst[0]), float(worst[1])


def produce_paced(bootstrap: str, topic: str, n: int, rate: float,
                  value: Callable[[int, float], bytes]) -> float:
    """Send ``n`` events at ``rate`` per second, each stamped when handed to the producer;
    the worst lag behind the schedule, in ms.

    The producer is confluent-kafka's (librdkafka, in C) with its defaults but
    ``acks=1``: it batches what waits up to ``linger.ms`` (5 ms), as Kafka's own clients
    do, and costs a few us of CPU an event, where aiokafka with ``linger_ms=0`` cost ~20
    us and one produce request per event (the broker then used as much CPU as kstage),
    which made the load generator, not the consumer, the bound on the two cores. The
    stamp is taken before the linger, so the wait counts in every latency.
    """
    from confluent_kafka import KafkaException, Producer  # dev dependency

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1})
    failed: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    worst = 0.0
    start = time.monotonic()
    i = 0
    while i < n:
        now = time.monotonic()
        due = start + i / rate
        if due > now:
            # Waits at least 1 ms (shorter waits would spin): the events due meanwhile
            # go together, each stamped when it is handed over.
            producer.poll(max(due - now, 0.001))  # serves delivery reports meanwhile
            continue
        worst = max(worst, now - due)
        while i < n and start + i / rate <= now:  # every event due by now
            try:
                producer.produce(topic, value(i, time.time()), partition=0,
                                 on_delivery=delivered)
            except BufferError:  # the local queue is full: let it drain, then retry
                producer.poll(0.01)
                continue
            i += 1
        producer.poll(0)
    left = producer.flush(60)
    if left or failed:
        raise KafkaException(f"{left} events not delivered, {len(failed)} failed: "
                             f"{failed[:3]}")
    return worst * 1000


async def latency_run(bootstrap: str, workdir: Path, work: Workload, n: int, rate: float,
                      events: str,
                      reader: JsonlReader | IcebergReader, poll_s: float) -> Visible:
    """kstage run (no --drain) on a new topic; paced events once it is assigned; the
    reader polled until every row is visible."""
    topic = unique("latency")
    await create_topic(bootstrap, topic)
    group = unique("latency-kstage")
    run_dir = workdir / group
    run_dir.mkdir()
    cfg = write_config(run_dir / "kstage.yml", bootstrap, group, topic, work, work.processor)
    log_path = run_dir / "kstage.log"
    if isinstance(reader, JsonlReader):
        reader.path = run_dir / reader.path
    else:
        reader.warehouse = run_dir / "warehouse"
    with open(log_path, "wb") as log:  # noqa: ASYNC230 - opened once, before the run
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "service", "run", "-c", str(cfg),
            cwd=run_dir, stdout=log, stderr=log)
    try:
        await _wait_for_log(log_path, _ASSIGNED, proc, START_TIMEOUT_S)
        producing = asyncio.ensure_future(produce_apart(bootstrap, topic, n, rate, events))
        cpu_at = _cpu_now(proc.pid)
        worst, producer_cpu = await await_visible(proc, reader, producing, n, poll_s,
                                                  log_path)
        cpu = [b - a for a, b in zip(cpu_at, _cpu_now(proc.pid), strict=True)]
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    if proc.returncode != 0:
        raise BenchError(f"kstage exited {proc.returncode} after SIGTERM; log {log_path}")
    if sorted(reader.seen) != list(range(n)):
        raise BenchError(f"rows seen are not ids/offsets 0..{n - 1}; log {log_path}")
    return Visible(reader.seen, worst, (producer_cpu, *cpu))


async def await_visible(proc: Any, reader: JsonlReader | IcebergReader,
                        producing: asyncio.Future[tuple[float, float]], n: int,
                        poll_s: float, log_path: Path, what: str = "kstage"
                        ) -> tuple[float, float]:
    """Poll ``reader`` every ``poll_s`` until ``n`` rows are visible, while ``producing``
    (:func:`produce_apart`) sends them and ``proc`` (the system under test, an asyncio
    subprocess) runs; what the producer returned."""
    deadline: float | None = None
    while len(reader.seen) < n:
        reader.poll()
        if producing.done():
            producing.result()  # raises if the producer failed
            deadline = deadline or time.monotonic() + VISIBLE_TIMEOUT_S
            if time.monotonic() > deadline:
                raise BenchError(f"{what}: {len(reader.seen)} of {n} rows visible "
                                 f"{VISIBLE_TIMEOUT_S:.0f} s after the last event; "
                                 f"log {log_path}")
        if proc.returncode is not None:
            raise BenchError(f"{what} exited {proc.returncode}; log {log_path}")
        await asyncio.sleep(poll_s)
    return await producing


@dataclass
class Visible:
    """What a latency run saw."""

    seen: dict[int, tuple[float, float]]  # id -> (visible at, stamp), wall clock
    worst_lag_ms: float  # the producer's worst lag behind its schedule
    cpu_s: tuple[float, ...]  # CPU s from the producer's start to the last row seen: the
    # producer (until its last event), kstage's Python, its JVM, the broker, wall time


def _cpu_now(pid: int) -> tuple[float, float, float, float]:
    """CPU seconds so far of ``pid``, of its java descendants, of the broker; the
    monotonic clock."""
    jvm = sum(throughput._cpu_s(child) or 0.0 for child, comm in
              throughput._descendants(pid).items() if comm == "java")
    return (throughput._cpu_s(pid) or 0.0, jvm, throughput._broker_cpu_s(), time.monotonic())


async def verify_spark(reader: IcebergReader, n: int) -> None:
    """The table read whole through its catalog: every offset once."""
    catalog = reader.open_catalog() if reader.open_catalog is not None else None
    got = await asyncio.to_thread(read_back, reader.warehouse, reader.table, catalog,
                                  reader.namespace)
    if not (got["rows"] == got["offsets"] == n and got["first"] == 0
            and got["last"] == n - 1):
        raise BenchError(f"spark: table {reader.table} read back: {got}, expected "
                         f"{n} rows, offsets 0..{n - 1} once each")
    print(f"spark: table read back whole with pyiceberg: {n} rows, offsets "
          f"0..{n - 1} once each", flush=True)
    files, appends = await asyncio.to_thread(table_files, reader.warehouse, reader.table,
                                             catalog, reader.namespace)
    # A catalog that serves only the current snapshot (Nessie) counts one append: the
    # commits the reader saw adding files say more.
    seen = len(reader.added_by)
    commits = f"{appends} appends" if seen <= appends else \
        f"{seen} commits that added files (the catalog serves {appends} snapshot(s))"
    print(f"spark: the table holds {files} data files after {commits}: "
          f"{files * 100_000 / n:.1f} per 100k events (kstage's background fold: "
          "spark.maintenance.fold_files)", flush=True)


def table_files(warehouse: Path, table: str, catalog: Any = None,
                namespace: str = "kstage") -> tuple[int, int]:
    """The data files of the table's current snapshot, and its appends (snapshots whose
    operation is append), read through the run's catalog (or ``catalog``)."""
    loaded = (catalog or throughput.run_catalog(warehouse)).load_table(f"{namespace}.{table}")
    current = loaded.current_snapshot()
    total = current.summary.get("total-data-files") if current and current.summary else None
    files = int(total) if total is not None else 0
    appends = sum(1 for s in loaded.snapshots()
                  if s.summary is not None and s.summary.operation.value == "append")
    return files, appends


def spark_latency_workload(workdir: Path, n: int, flush_idle_s: float | None = None,
                           fold_files: int | None = None, no_fold: bool = False,
                           lake: SlowLake | None = None,
                           appends: str = "spark") -> Workload:
    """The Gobblin workload of ``n`` events (see :func:`throughput.spark_workload`, its
    registry in a new directory of ``workdir``) with the ``spark:`` defaults (unlike the
    throughput benchmark's) and the group's (``max_in_flight`` 10 000); through ``lake``'s
    REST catalog when given; ``appends``: ``spark.appends``."""
    sink_dir = workdir / f"spark-{len(os.listdir(workdir))}"
    sink_dir.mkdir()
    work = spark_workload(n, sink_dir)
    spark: dict[str, Any] = {"master": "local[2]", "conf": {"spark.driver.memory": "512m"}}
    if lake is not None:
        spark |= lake.spark()
    if appends != "spark":
        spark["appends"] = appends
    if flush_idle_s is not None:
        spark["flush_idle_s"] = flush_idle_s
    if no_fold or fold_files is not None:
        spark["maintenance"] = {"fold_files": None if no_fold else fold_files}
    work.spark = spark
    work.group_config = {}
    return work


async def bench_sink(sink: str, bootstrap: str, workdir: Path, args: argparse.Namespace,
                     lake: SlowLake | None = None) -> SinkRun:
    if sink == "jsonl":
        max_n = args.max_messages or 100_000
        work = json_workload(max_n if args.rate is None else 0, 200)
        work.sink = {"type": "jsonl", "path": "out.jsonl"}
        target_ms = JSONL_TARGET_MS
    else:
        max_n = args.max_messages or 30_000
        work = spark_latency_workload(workdir, max_n if args.rate is None else 0,
                                      args.flush_idle_s, args.fold_files, args.no_fold, lake,
                                      args.appends)
        target_ms = SPARK_TARGET_MS if lake is None else REST_TARGET_MS
    work.group_config["fetch_max_wait_ms"] = args.fetch_max_wait_ms
    max_rate = None
    if args.rate is None:
        topic = unique("latency-max")
        await create_topic(bootstrap, topic)
        from throughput import produce

        await produce(bootstrap, topic, work.values)
        work.values = []
        ks = await run_kstage(bootstrap, topic, max_n, workdir, work, work.processor)
        max_rate = max_n / ks.seconds
        print(f"{sink}: kstage run --drain of {max_n} events: {max_rate:.0f} events/s "
              f"(assignment -> last commit {ks.seconds:.2f} s)", flush=True)
    rate = args.rate if args.rate is not None else max_rate / 2  # type: ignore[operator]
    n = args.messages or max(200, round(rate * args.duration_s))
    if sink == "jsonl":
        events = "jsonl"
        reader: JsonlReader | IcebergReader = JsonlReader(Path("out.jsonl"))
        poll_s = JSONL_POLL_S
    else:
        events = "gobblin"
        reader = IcebergReader("stg_kafka_gobblin_compaction")
        if lake is not None:
            reader.open_catalog, reader.namespace = lake.rest.reader, lake.namespace
        poll_s = SPARK_POLL_S
    print(f"{sink}: producing {n} events at {rate:.0f}/s ({n / rate:.1f} s)", flush=True)
    raw = await raw_run(bootstrap, n, rate, args.fetch_max_wait_ms)
    visible = await latency_run(bootstrap, workdir, work, n, rate, events, reader, poll_s)
    seen = visible.seen
    if sink == "spark":
        assert isinstance(reader, IcebergReader)
        await verify_spark(reader, n)
    result = SinkRun(sink, rate, target_ms, max_rate=max_rate, produced=n,
                     late_start_ms=visible.worst_lag_ms, raw_ms=raw, cpu_s=visible.cpu_s)
    result.latencies_ms = [(at - stamp) * 1000 for at, stamp in seen.values()]
    first = min(stamp for _, stamp in seen.values())
    windows: dict[int, list[float]] = {}
    for at, stamp in seen.values():
        windows.setdefault(int((stamp - first) // WINDOW_S), []).append((at - stamp) * 1000)
    result.windows = [max(sorted(w)[int(0.99 * (len(w) - 1))], 0) for _, w in
                      sorted(windows.items())]
    if args.dump:
        with open(args.dump, "a") as out:  # noqa: ASYNC230 - once, after the run
            out.writelines(f"{sink},{stamp:.6f},{(at - stamp) * 1000:.3f}\n"
                           for at, stamp in sorted(seen.values(), key=lambda v: v[1]))
    return result


def report(run: SinkRun) -> str:
    p50, p99 = run.percentile(0.50), run.percentile(0.99)
    print(f"{run.sink}: raw aiokafka baseline, {len(run.raw_ms)} JSON events at "
          f"{run.rate:.0f}/s: receipt p50 {run.percentile(0.5, raw=True):.0f} ms, p99 "
          f"{run.percentile(0.99, raw=True):.0f} ms, max {max(run.raw_ms):.0f} ms", flush=True)
    print(f"{run.sink}: {run.produced} events at {run.rate:.0f}/s: latency p50 {p50:.0f} ms, "
          f"p99 {p99:.0f} ms, max {max(run.latencies_ms):.0f} ms (the producer lagged its "
          f"schedule by at most {run.late_start_ms:.0f} ms)", flush=True)
    print(f"{run.sink}: p99 per {WINDOW_S:.0f} s of stamps (ms): "
          + " ".join(f"{p:.0f}" for p in run.windows), flush=True)
    producer, python, jvm, broker, wall = run.cpu_s
    print(f"{run.sink}: CPU over the {wall:.0f} s from the producer's start to the last row: "
          f"kstage Python {python:.1f} s" + (f", its JVM {jvm:.1f} s" if jvm else "")
          + f", the producer {producer:.1f} s, the broker {broker:.1f} s; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    verdict = "PASS" if p99 < run.target_ms else "FAIL"
    return f"{run.sink}: p99_ms={p99:.0f} target_ms={run.target_ms:.0f} {verdict}"


async def bench(args: argparse.Namespace, bootstrap: str, workdir: Path,
                lake: SlowLake | None = None) -> list[str]:
    sinks = ("jsonl", "spark") if args.sink == "both" else (args.sink,)
    lines = []
    for sink in sinks:
        lines.append(report(await bench_sink(sink, bootstrap, workdir, args, lake)))
    return lines


@dataclass
class SlowLake:
    """Nessie's REST catalog (``rest``) behind a proxy holding each table commit
    (``proxy``); the run's tables in ``namespace``."""

    rest: Any  # tests.rest_catalog.RestCatalog
    proxy: Any  # tests.catalog_proxy.CatalogProxy
    namespace: str = "latency"

    def spark(self) -> dict[str, Any]:
        """The ``spark:`` keys that write through the proxy."""
        section: dict[str, Any] = self.rest.spark()
        del section["master"]
        section["catalog"] |= {"uri": self.proxy.uri, "namespace": self.namespace}
        return section


@contextlib.contextmanager
def slow_lake(workdir: Path, latency_s: float | None) -> Iterator[SlowLake | None]:
    """The REST catalog and its proxy of ``--commit-latency-s`` (None without)."""
    if latency_s is None:
        yield None
        return
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:  # the tests' catalog and proxy (bench/ is sys.path[0])
        sys.path.append(root)
    from tests.catalog_proxy import CatalogProxy
    from tests.rest_catalog import RestCatalog

    where = workdir / "rest"
    where.mkdir()
    with RestCatalog(where) as rest, CatalogProxy(rest.uri, latency_s) as proxy:
        print(f"spark: through a REST catalog (Nessie) whose table commits take "
              f"{latency_s:g} s more", flush=True)
        yield SlowLake(rest, proxy)


def apache_kafka_node(workdir: Path) -> Any:
    """One Apache Kafka node (tests/apache_kafka.py, its jars from ``make kafka-jars``),
    not started yet; its data under ``workdir``."""
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.append(root)  # the repository's tests/, after bench/ and the venv
    from tests.apache_kafka import KafkaCluster

    return KafkaCluster(workdir / "kafka", 1, heap_mb=512)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sink", choices=("jsonl", "spark", "both"), default="both")
    parser.add_argument("--messages", type=int, default=None,
                        help="events of the latency run (default: --duration-s at the rate)")
    parser.add_argument("--duration-s", type=float, default=30.0,
                        help="length of the latency run when --messages is not given")
    parser.add_argument("--rate", type=float, default=None,
                        help="events/s of the latency run (default: half of kstage's "
                        "maximum, measured first)")
    parser.add_argument("--max-messages", type=int, default=None,
                        help="events of the maximum-rate run (default 20 000 JSONL, "
                        "30 000 Spark)")
    parser.add_argument("--flush-idle-s", type=float, default=None,
                        help="spark: spark.flush_idle_s of kstage (default: the setting's)")
    parser.add_argument("--fold-files", type=int, default=None,
                        help="spark: spark.maintenance.fold_files of kstage (default: the "
                             "setting's)")
    parser.add_argument("--no-fold", action="store_true",
                        help="spark: no background fold (spark.maintenance.fold_files null)")
    parser.add_argument("--appends", choices=("spark", "pyiceberg"), default="spark",
                        help="spark: what writes the staging appends (spark.appends; "
                             "default spark)")
    parser.add_argument("--commit-latency-s", type=float, default=None,
                        help="spark: write through a REST catalog (Nessie) whose table "
                             "commits are held this long (needs --rate)")
    parser.add_argument("--fetch-max-wait-ms", type=int, default=10,
                        help="the consumers' fetch_max_wait_ms (kstage's group and the "
                        "baseline; default 10: Tansu answers a fetch only at its max wait)")
    parser.add_argument("--dump", default=None, metavar="CSV",
                        help="append sink,stamp,latency_ms per event to this file")
    parser.add_argument("--broker", choices=("tansu", "kafka"), default="tansu",
                        help="the embedded Tansu, or one Apache Kafka node (make kafka-jars), "
                        "which keeps up with paced rates past Tansu's")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (configs, logs, outputs)")
    args = parser.parse_args(argv)
    if (args.messages is not None and args.messages < 1) or (
            args.rate is not None and args.rate <= 0):
        parser.error("--messages and --rate must be positive")
    if args.commit_latency_s is not None and (args.sink != "spark" or args.rate is None):
        parser.error("--commit-latency-s: with --sink spark and --rate")
    _import_stdlib_http()
    workdir = Path(tempfile.mkdtemp(prefix="kstage-latency-"))
    broker = EmbeddedBroker() if args.broker == "tansu" else apache_kafka_node(workdir)
    try:
        broker.start()
        throughput.BROKER_PID = (broker.pid if isinstance(broker, EmbeddedBroker)
                                 else broker.nodes[0].pid)
        with slow_lake(workdir, args.commit_latency_s) as lake:
            lines = asyncio.run(bench(args, broker.bootstrap, workdir, lake))
    except BaseException:
        print(f"kstage configs and logs kept in {workdir}", file=sys.stderr)
        raise
    else:
        if args.keep:
            print(f"kstage configs, logs and outputs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    finally:
        if isinstance(broker, EmbeddedBroker):
            broker.stop()
        else:
            broker.kill()
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
