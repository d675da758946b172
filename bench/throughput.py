"""Throughput of ``kstage run --drain`` against a raw aiokafka consumer loop.

Usage::

    python bench/throughput.py [--format json|avro|spark] [--messages N] [--size BYTES]
                               [--rounds R] [--processor NAME] [--flush-rows N]
                               [--flush-interval-s S] [--flush-min-rows N]
                               [--warmup EVENTS] [--from-first-commit]
                               [--spark-conf KEY=VALUE ...] [--appends spark|pyiceberg]
                               [--defaults] [--keep]

``--format avro`` runs the same comparison on DataHub MetadataChangeLog events (the real
schema, Confluent wire format, writer schema served by a ``file://`` registry): the raw
loop decodes each value with ``fastavro.schemaless_reader`` and a pre-parsed schema;
kstage goes through its own decode path (header, cached schema by id, decode). For the
ratio both sides do the same per-message work: kstage runs the pass-through
``json_rows`` processor (record -> row), so the ratio measures the pipeline, not a
mapping. One extra kstage run with the real ``datahub_mcl`` processor is reported
(not in the ratio) to show what the MCL mapping costs on top.

``--format spark`` (issue 4) lands WhereHows Gobblin compaction events in a Parquet
staging table. Data: N events (``--messages``, default 200k; ``--messages 1000000`` is
the 1M-backlog memory check) of the real ``GobblinTrackingEvent`` schema made by
:func:`service.dev.samples.sample_records` (~406 B each on the wire), Confluent wire format,
schema id 1 in a ``file://`` registry. Every event maps to exactly one row.

* raw (the baseline): the loop of (a) below, and per record the same work kstage does
  before its sink: ``fastavro.schemaless_reader`` with the pre-parsed schema, then the
  very ``gobblin_compaction`` processor's ``transform`` (mapping + Kafka coordinates);
  one ``commit()`` per ``getmany`` batch of ``max_poll_records``. It does **not** write
  a table or check column types: that cost is what the target ratio allows kstage.
* kstage: ``gobblin_compaction`` -> ``sink: {type: spark}`` (Spark ``local[2]``,
  ``spark.driver.memory=512m``, a fresh warehouse per run), ``commit: {mode: batch,
  max_messages: 1}``, i.e. a commit after each durable write: a row's offset is
  committed only after the Iceberg commit holding it returned (each append one Iceberg
  commit with the Kafka offsets it covers, in a SQLite JDBC catalog beside the
  warehouse). ``flush_max_rows``
  60 000 (``--flush-rows``), ``flush_max_interval_s`` 5 (``--flush-interval-s``),
  ``flush_min_rows`` kstage's default 1 000 (``--flush-min-rows``, for experiments),
  ``max_poll_records`` kstage's default (2 000), ``max_in_flight`` ``flush_max_rows`` +
  10 000: the sink hands poll batches to the table writer without waiting (pipelined),
  so an append gathers many polls while the previous one is written; a worker at
  ``max_in_flight`` makes its table flush at once (``flush_soon``) instead of waiting
  for the interval. The sizes of the appends are printed per round.
* Spark session start-up (JVM launch, ``getOrCreate``, ``CREATE TABLE``; 6-17 s here,
  from kstage's first log line) happens when the sink opens, before the group join: it is
  **outside** the timed window (assignment -> last commit) and printed per round. The
  first append (JVM warm-up, pyspark's Python workers forked) is inside the window. One
  extra line reports kstage's rate with the start-up added to its window.
* Checks: besides those below, after all rounds every run's Iceberg staging table is
  read back through its catalog with pyiceberg (another engine than the Spark that wrote
  it): rows == distinct ``_offset`` == N, offsets 0..N-1, one topic and partition, NOT
  NULL columns filled; and the committed offset is N.
* Peak RSS: of the kstage Python process, and of the largest ``java`` descendant (Spark's
  driver JVM), both ``VmHWM`` sampled while they live (descendants found by scanning
  ``/proc`` every 0.5 s); pyspark's Python worker processes are listed apart. A
  ``PASS``/``FAIL`` line compares Python's peak with 300 MB for the N-message backlog.
* ``--spark-conf KEY=VALUE`` (repeatable) adds Spark conf to kstage's session, for
  experiments (e.g. JVM options); the default run uses none. ``--appends pyiceberg``
  runs kstage with ``spark.appends: pyiceberg`` (pyiceberg writes and commits the
  appends from the Python process; default ``spark``). ``--defaults`` runs kstage with
  its own flush settings and in-flight window (issue 35: a backlog's appends as the
  defaults size them); each round then prints ``appends_per_100k``.
* Warm (issue 14): a fresh JVM spends its first ~10-20 s of CPU compiling Spark and
  Parquet code, so the cold window above says little about a service that runs for days.
  ``--warmup W`` (default for ``spark``: half of ``--messages``; ``0`` turns it off) also
  times the *warm window* of the same runs: kstage's window starts at its first commit of
  an offset >= W (the end of the append holding event W: the same kstage process, the
  same JVM, that processed events 0..W-1 before) and ends at its last commit, so it holds
  only the processing of events W..N-1, durable appends and commits included; the raw
  loop's warm window covers the same offsets (from its first commit at or past kstage's
  start offset). Each round prints both warm rates, the CPU the kstage process and its
  JVM used in the warm window per row (``/proc/PID/stat`` of the ``java`` child, sampled
  every 50 ms), and the warm ratio. The line before the last is the cold ratio
  (``cold ratio=...``, the window from the assignment, as before); the last line is then
  the **warm** ratio, ``ratio=<kstage warm events/s over raw warm events/s>`` (target
  >= 0.75).

Every format reports the CPU seconds used inside each timed window (``/proc`` times
sampled every 50 ms): by the raw loop's process, by kstage's Python process and its JVM,
and by the broker. On 2 shared cores they tell where the time of a slower side went.

One embedded broker (Tansu) is started for the run. N JSON objects of about BYTES bytes
each (an increasing ``id`` field plus filler fields) are produced once to a new
1-partition topic (uncompressed, batched). The same data is then consumed ``--rounds``
times by each of, alternately:

(a) **raw aiokafka**: the floor any Python consumer on aiokafka pays, in this process.
    ``getmany(max_records=N)`` (N: kstage's default ``max_poll_records``), ``json.loads``
    of every value, one ``commit()`` per batch; done once the committed position reaches
    the fetch high-water mark (``consumer.highwater``: ``end_offsets`` is wrong on this
    broker for batched produce).
(b) **kstage**: ``python -m service run -c CFG --drain`` as a subprocess with the
    ``json_rows`` processor, ``json`` format, the ``null`` sink and ``batch`` commits
    (``max_messages: 1000``), i.e. the full pipeline (fetch -> decode/transform -> sink ->
    commit actors) minus any real I/O in the sink.

Each consumer uses a fresh group id with ``session_timeout_ms=6000`` and
``heartbeat_interval_ms=500`` (Tansu holds a join for ~session_timeout/2). Reported is
the median over the rounds of each side, as events/s, and as the last line
``ratio=<b/a>`` (kstage events/s over raw events/s; the target is >= 0.9).

``--from-first-commit`` (issue 23) times the processing alone on both sides: from each
side's first commit (at or past kstage's first committed offset) to its last, so start-up,
the group join, the committed-offset lookup and the first fetch are outside the window
(it is ``--warmup 1``: the warm window below, from the first commit on). Its last line is
``ratio=<kstage events/s over raw events/s>`` over the same offsets (target >= 0.95 with
``json_rows`` and the null sink, median of 5 rounds).

What is timed, and why it is the same interval on both sides:

* Process start-up, imports and the group join (~3 s on Tansu) are excluded: they are
  fixed costs that would swamp a throughput number.
* Both windows start when the partition is **assigned** (end of the join) and end when
  the **last commit returned**. The window therefore includes, on both sides, the
  committed-offset lookup, the reset to ``earliest`` and the first fetch, which is what
  "from the first message" costs a consumer anyway (the raw side also reports its
  assignment-to-first-message gap: ~20 ms, under 1% of a default run). kstage's side
  cannot observe its first message from outside without patching the code under test,
  so the raw side is timed the same way instead.
* For kstage both ends are read from its own log (``asctime``, ms resolution, one
  clock): the worker's ``assigned partitions`` line and the last ``committed ...`` line.
  The latter is a DEBUG line, so the benchmark runs kstage with ``log_level: DEBUG``;
  that adds one log line per commit (at most N/1000) and nothing per message. The INFO
  ``drained partitions`` line would also include ``--drain``'s idle detection (it
  needs an empty ``getmany`` of 200 ms, ~0.4 s in practice): that lag is printed per
  round but not counted, since the raw loop stops right after its last commit too.

Checks (the run fails loudly otherwise): every message was received by the raw loop
and its high-water mark is N; kstage exited 0, and its group's committed offset, read
back with the admin client, is N.

kstage's peak RSS is its ``VmHWM`` (``/proc/PID/status``) sampled every 50 ms while it
runs. ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` would be wrong here: Linux keeps the
high-water mark of the address space a child had before ``exec``, i.e. a copy of this
process holding all the produced messages (~350 MB instead of ~80 MB).

Timings on this 2-core machine are shared with the broker: only the ratio, measured in
one run against the same broker and data, is meaningful (see ENVIRONMENT.md). Single
rounds vary by up to ~25% on the raw side: use ``--rounds 3`` or more before comparing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from io import BytesIO
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from service.broker import EmbeddedBroker
from settings.topics import GroupSettings

FAST_GROUP = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}
# kstage's default max_poll_records: the raw loop's getmany and kstage's config
MAX_RECORDS = GroupSettings.model_fields["max_poll_records"].default
POLL_MS = 200
IDLE_TIMEOUT_S = 60.0  # raw loop: give up after this long without a message
KSTAGE_TIMEOUT_S = 600.0

_LOG_TIME = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "
_ASSIGNED = re.compile(_LOG_TIME + r".*: assigned partitions ", re.MULTILINE)
_COMMITTED = re.compile(_LOG_TIME + r".*: committed \{", re.MULTILINE)
# The committed offset of the benchmark's one partition (``{'topic[0]': 12345}``).
_COMMITTED_AT = re.compile(_LOG_TIME + r".*: committed \{'[^']*\[0\]': (\d+)\}", re.MULTILINE)
_DRAINED = re.compile(_LOG_TIME + r".*: drained partitions ", re.MULTILINE)
_REGISTERED = re.compile(_LOG_TIME + r".*spark sink: table [\w.]+ registered$", re.MULTILINE)
_FIRST_LINE = re.compile(_LOG_TIME)  # kstage's first log line: its imports are done
_APPENDED = re.compile(_LOG_TIME + r".*spark sink: [\w.]+: appended (\d+) row\(s\)",
                       re.MULTILINE)


BROKER_PID: int | None = None  # the embedded broker's pid: its CPU in each window


class BenchError(RuntimeError):
    """A run did not do what it must: the numbers would be meaningless."""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- data ------------------------------------------------------------------------------

_WORDS = ("dataset hive kafka table owner schema column partition lineage upstream "
          "downstream etl job flow audit metric event urn platform prod dev").split()


def make_values(n: int, size: int, seed: int = 42) -> list[bytes]:
    """``n`` JSON objects of ``size`` bytes each (when ``size`` allows), ids 0..n-1."""
    rng = random.Random(seed)
    filler = " ".join(rng.choice(_WORDS) for _ in range(max(64, size)))
    values = []
    for i in range(n):
        obj: dict[str, Any] = {
            "id": i,
            "ts": 1_700_000_000_000 + i,
            "type": "MetadataChangeEvent",
            "urn": f"urn:li:dataset:(urn:li:dataPlatform:hive,db.table_{i % 5000:05d},PROD)",
            "actor": "urn:li:corpuser:etl",
            "version": i % 17,
            "deleted": i % 97 == 0,
            "tags": ["pii", "gold"] if i % 3 == 0 else ["bronze"],
            "props": {"owner": f"team-{i % 40}", "retention_days": 30 + i % 300},
            "text": "",
        }
        pad = size - len(json.dumps(obj, separators=(",", ":")))
        if pad > 0:
            start = rng.randrange(0, len(filler) - pad) if len(filler) > pad else 0
            obj["text"] = filler[start:start + pad].ljust(pad)
        values.append(json.dumps(obj, separators=(",", ":")).encode())
    return values


async def create_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, compression_type=None, acks=1,
        linger_ms=20, max_batch_size=512 * 1024, max_request_size=4 * 1024 * 1024,
    )
    await producer.start()
    try:
        futures = [await producer.send(topic, value, partition=0) for value in values]
        await producer.flush()
        await asyncio.gather(*futures)  # raises if any delivery failed
    finally:
        await producer.stop()


async def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        tp = TopicPartition(topic, 0)
        offsets = await admin.list_consumer_group_offsets(group, partitions=[tp])
    finally:
        await admin.close()
    meta = offsets.get(tp)
    return -1 if meta is None else int(meta.offset)


# -- (a) raw aiokafka ------------------------------------------------------------------

@dataclass
class RawResult:
    seconds: float  # assignment -> last commit returned
    first_message_s: float  # assignment -> first message received
    cpu_s: tuple[float, float]  # CPU seconds in the window: this process, the broker
    # (monotonic time, committed offset, process CPU s, broker CPU s) after every commit
    commits: list[tuple[float, int, float, float]] = field(default_factory=list)
    start_s: float = 0.0  # consumer made -> first commit returned (start, join, fetch)

    def warm(self, offset: int, n: int) -> tuple[float, int, float]:
        """The window from the first commit at or past ``offset`` to the last commit:
        (seconds, rows, Python CPU seconds)."""
        start = next(c for c in self.commits if c[1] >= offset)
        end = self.commits[-1]
        return end[0] - start[0], n - start[1], end[2] - start[2]


class _AssignedAt(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.at: float | None = None
        self.cpu_at = (0.0, 0.0)  # process and broker CPU seconds at the assignment
        self.count = 0

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        return None

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.count += 1
        if self.at is None:
            self.at = time.monotonic()
            self.cpu_at = (time.process_time(), _broker_cpu_s())


async def run_raw(bootstrap: str, topic: str, n: int,
                  decode: Callable[[bytes], Any] = json.loads,
                  handle: Callable[[list[Any]], Awaitable[Any]] | None = None) -> RawResult:
    """The raw loop; ``await handle(records)`` per batch, when given, replaces
    ``decode(record.value)`` per record."""
    group = unique("bench-raw")
    made = time.monotonic()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", max_poll_records=MAX_RECORDS, **FAST_GROUP,
    )
    tp = TopicPartition(topic, 0)
    listener = _AssignedAt()
    await consumer.start()
    try:
        consumer.subscribe([topic], listener=listener)
        first: float | None = None
        done = 0.0
        hw: int | None = None
        cpu_done = (0.0, 0.0)
        commits: list[tuple[float, int, float, float]] = []
        received = 0
        idle_since = time.monotonic()
        while True:
            data = await consumer.getmany(timeout_ms=POLL_MS, max_records=MAX_RECORDS)
            if not data:
                if time.monotonic() - idle_since > IDLE_TIMEOUT_S:
                    raise BenchError(f"raw: no message for {IDLE_TIMEOUT_S:.0f}s "
                                     f"after {received} of {n}")
                continue
            if first is None:
                first = time.monotonic()
            next_offset = 0
            for records in data.values():
                if handle is not None:
                    await handle(records)
                else:
                    for rec in records:
                        decode(rec.value)
                received += sum(1 for _ in records)
                next_offset = records[-1].offset + 1
            await consumer.commit()
            done = time.monotonic()
            cpu_done = (time.process_time(), _broker_cpu_s())
            commits.append((done, next_offset, *cpu_done))
            idle_since = done
            hw = consumer.highwater(tp)
            if hw is not None and next_offset >= hw:
                break
    finally:
        await consumer.stop()
    if hw != n or received != n:
        raise BenchError(f"raw: high-water {hw}, received {received}, expected {n}")
    if listener.at is None or listener.count != 1:
        raise BenchError(f"raw: {listener.count} assignments (a rebalance skews the timing)")
    got = await committed_offset(bootstrap, group, topic)
    if got != n:
        raise BenchError(f"raw: committed offset {got}, expected {n}")
    assert first is not None
    return RawResult(done - listener.at, first - listener.at,
                     (cpu_done[0] - listener.cpu_at[0], cpu_done[1] - listener.cpu_at[1]),
                     commits, start_s=commits[0][0] - made)


def interpreter_start_s() -> float:
    """What a bare aiokafka loop costs before its own code runs, as a process of its
    own: the interpreter's start and the imports of asyncio, json and aiokafka."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import asyncio, json, aiokafka"], check=True)
    return time.monotonic() - started


# -- (b) kstage run --drain ------------------------------------------------------------

@dataclass
class KstageResult:
    seconds: float  # "assigned partitions" -> last "committed" log line
    drain_lag_s: float  # last commit -> "drained partitions" log line
    wall_s: float  # process start -> exit
    commits: int
    peak_rss_kb: int  # VmHWM sampled every 50 ms while it ran
    jvm_peak_rss_kb: int = 0  # the largest VmHWM of a java descendant (Spark's driver JVM)
    workers: str = ""  # pyspark's Python worker processes seen, with their peak RSS
    spark_start_s: float = 0.0  # sink open: Spark session start + table registration
    flush_rows: tuple[int, ...] = ()  # rows per Parquet append, in order
    first_append_s: float = 0.0  # assignment -> first append done (JVM warm-up inside)
    cpu_s: tuple[float, float] = (0.0, 0.0)  # CPU seconds of the process: Python, JVM
    window_cpu_s: tuple[float, float, float] = (0.0, 0.0, 0.0)  # in the window: + broker
    # The warm window (``--warmup``): from the first commit at or past the warm-up offset
    # to the last commit, in the same process: its first offset, seconds, CPU seconds.
    warm_from: int = 0
    warm_s: float = 0.0
    warm_cpu_s: tuple[float, float, float] = (0.0, 0.0, 0.0)
    warehouse: Path | None = None
    first_commit_s: float = 0.0  # process spawned -> its first commit (log line)


def _log_times(pattern: re.Pattern[str], text: str) -> list[datetime]:
    return [datetime.strptime(m, "%Y-%m-%d %H:%M:%S,%f") for m in pattern.findall(text)]


@dataclass
class Workload:
    """What is produced and how each side reads it."""

    name: str
    values: list[bytes]
    raw_decode: Callable[[bytes], Any]
    format: str = "json"
    processor: str = "json_rows"
    extra_config: dict[str, Any] | None = None
    # raw loop: per batch instead of decode per record
    raw_handle: Callable[[list[Any]], Awaitable[Any]] | None = None
    sink: dict[str, Any] = field(default_factory=lambda: {"type": "null"})
    group_config: dict[str, Any] = field(default_factory=dict)  # overrides of the group's
    spark: dict[str, Any] | None = None  # the ``spark:`` section (warehouse set per run)


def json_workload(n: int, size: int) -> Workload:
    return Workload("JSON", make_values(n, size), json.loads)


def avro_workload(n: int, workdir: Path) -> Workload:
    """n DataHub MCL events in the Confluent wire format, schema id 1, file:// registry."""
    from decode import mcl  # bench/decode.py: the same MCL events as the decode benchmark
    from fastavro import parse_schema, schemaless_reader

    from actors.codecs.avro import encode
    from processors.base import SCHEMA_DIR

    text = (SCHEMA_DIR / "datahub/MetadataChangeLog.avsc").read_text()
    registry = workdir / "registry"
    registry.mkdir()
    (registry / "MetadataChangeLog.avsc").write_text(text)
    (registry / "index.json").write_text(json.dumps(
        {"1": {"subject": "MetadataChangeLog_Versioned_v1-value",
               "file": "MetadataChangeLog.avsc"}}))
    parsed = parse_schema(json.loads(text))
    rng = random.Random(1)
    values = [encode(parsed, 1, mcl(i, rng)) for i in range(n)]

    def raw_decode(value: bytes) -> Any:
        fo = BytesIO(value)
        fo.seek(5)  # magic byte + 4-byte schema id: the raw loop knows its one schema
        return schemaless_reader(fo, parsed, None)

    return Workload("Avro MCL", values, raw_decode, format="avro",
                    extra_config={"schema_registry": {"url": f"file://{registry}"}})


SPARK_FLUSH_ROWS = 60_000
SPARK_FLUSH_INTERVAL_S = 5.0
SPARK_RSS_LIMIT_MB = 300
_SAMPLE_CHUNK = 50_000  # records generated (and encoded) at a time: 1M dicts would be ~2 GB


def _import_stdlib_http() -> None:
    """Import the standard library's ``http`` package before kstage's actors (their
    metrics import prometheus_client, which imports ``http.server``): run as a script,
    this directory comes first on sys.path and its http.py (the HTTP benchmark) would
    shadow it."""
    here = Path(__file__).parent.resolve()
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    try:
        import http.server  # noqa: F401
    finally:
        sys.path[:] = saved


def spark_workload(n: int, workdir: Path, flush_rows: int | None = SPARK_FLUSH_ROWS,
                   flush_interval_s: float = SPARK_FLUSH_INTERVAL_S,
                   conf: dict[str, str] | None = None,
                   flush_min_rows: int | None = None, appends: str = "spark") -> Workload:
    """n WhereHows Gobblin compaction events (real schema, :func:`service.dev.samples.
    sample_records`) in the Confluent wire format, schema id 1, ``file://`` registry; kstage
    maps them with ``gobblin_compaction`` into a Parquet staging table (spark sink).
    ``flush_rows`` None: kstage's defaults for the flushes and the in-flight window
    (``--defaults``)."""
    from fastavro import parse_schema, schemaless_reader

    _import_stdlib_http()
    from actors.codecs.avro import encode
    from actors.worker.pipeline import RecordPipeline
    from processors.base import SCHEMA_DIR
    from processors.gobblin import GobblinCompactionProcessor
    from service.dev.samples import SAMPLE_TOPICS, sample_records

    sample = next(t for t in SAMPLE_TOPICS if t.processor == "gobblin_compaction")
    text = (SCHEMA_DIR / sample.schema_file).read_text()
    registry = workdir / "registry"
    registry.mkdir()
    (registry / "GobblinTrackingEvent.avsc").write_text(text)
    (registry / "index.json").write_text(json.dumps(
        {"1": {"subject": f"{sample.topic}-value", "file": "GobblinTrackingEvent.avsc"}}))
    parsed = parse_schema(json.loads(text))
    values: list[bytes] = []
    for chunk, start in enumerate(range(0, n, _SAMPLE_CHUNK)):
        records = sample_records(sample, min(_SAMPLE_CHUNK, n - start), seed=chunk)
        values += [encode(parsed, 1, r) for r in records]

    def raw_decode(value: bytes) -> Any:
        fo = BytesIO(value)
        fo.seek(5)  # magic byte + 4-byte schema id: the raw loop knows its one schema
        return schemaless_reader(fo, parsed, None)

    # The same decode + mapping as kstage (the walk of its record pipeline), no Parquet.
    pipeline = RecordPipeline.for_processor(GobblinCompactionProcessor({}), decode=raw_decode)

    async def raw_handle(records: list[Any]) -> None:
        await pipeline.rows(records)

    return Workload(
        "Avro Gobblin compaction", values, raw_decode, format="avro", raw_handle=raw_handle,
        processor="gobblin_compaction", sink={"type": "spark"},
        extra_config={"schema_registry": {"url": f"file://{registry}"}},
        spark={"master": "local[2]", "appends": appends,
               **({} if flush_rows is None else {
                   "flush_max_rows": flush_rows, "flush_max_interval_s": flush_interval_s}),
               **({} if flush_min_rows is None else {"flush_min_rows": flush_min_rows}),
               "conf": {"spark.driver.memory": "512m", **(conf or {})}},
        group_config={
            "max_poll_records": MAX_RECORDS,
            # Commit after every durable write: each ack (= the end of the Spark append
            # holding the batch) makes a commit due; commits are single-flight, so acks
            # arriving during one commit are committed by the next.
            "commit": {"mode": "batch", "max_messages": 1, "max_interval_s": 10,
                       **({} if flush_rows is None else {
                           "max_in_flight": flush_rows + 10_000})},
        },
    )


def write_config(path: Path, bootstrap: str, group: str, topic: str,
                 work: Workload, processor: str) -> Path:
    cfg: dict[str, Any] = {
        "name": group,
        "kafka": {"bootstrap": bootstrap},
        # DEBUG only adds the per-commit line that marks the end of the timed window.
        "service": {"log_level": "DEBUG", "http_port": 0},
        "groups": [{
            "group_id": group,
            "auto_offset_reset": "earliest",
            "max_poll_records": MAX_RECORDS,
            **FAST_GROUP,
            "commit": {"mode": "batch", "max_messages": 1000, "max_interval_s": 10},
            "topics": [{"topic": topic, "processor": processor, "format": work.format,
                        "sink": work.sink}],
            **work.group_config,
        }],
        **(work.extra_config or {}),
    }
    if work.spark is not None:  # each run writes its own warehouse (read back afterwards)
        cfg["spark"] = {"warehouse": str(path.parent / "warehouse"), **work.spark}  # unless set
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _peak_rss_kb(pid: int) -> int | None:
    """The process's peak RSS so far (``VmHWM``), None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) if match else None


_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system, all threads) the process used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14, 15


def _broker_cpu_s() -> float:
    return (_cpu_s(BROKER_PID) or 0.0) if BROKER_PID is not None else 0.0


def _descendants(pid: int) -> dict[int, str]:
    """Every live descendant of ``pid``: pid -> command name (from ``/proc/*/stat``)."""
    parents: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        head, _, tail = stat.rpartition(")")
        fields = tail.split()
        if len(fields) > 1:
            parents[int(entry.name)] = (int(fields[1]), head.partition("(")[2])
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, comm) in parents.items():
            if ppid == parent and child not in found:
                found[child] = comm
                todo.append(child)
    return found


class _RssSampler:
    """Peak RSS of a process and of its descendants, sampled while they live.

    ``VmHWM`` is the kernel's high-water mark of the process's resident set since its
    ``exec``, so sampling it often enough to catch each process alive is exact; children
    are looked up every ``scan_every`` samples (a full ``/proc`` scan)."""

    def __init__(self, pid: int, scan_every: int = 10) -> None:
        self.pid = pid
        self.peak_kb = 0
        self.children: dict[int, str] = {}
        self.child_peak_kb: dict[int, int] = {}
        self.cpu_s = 0.0  # the last CPU time read (the process is gone after its exit)
        self.child_cpu_s: dict[int, float] = {}
        # (wall clock, CPU s of the process, of its java children, of the broker) per
        # sample: the CPU each used inside the timed window (log times are wall clock).
        self.timeline: list[tuple[float, float, float, float]] = []
        self._scan_every = scan_every
        self._samples = 0

    def sample(self) -> None:
        self.peak_kb = max(self.peak_kb, _peak_rss_kb(self.pid) or 0)
        self.cpu_s = _cpu_s(self.pid) or self.cpu_s
        if self._samples % self._scan_every == 0:
            self.children.update(_descendants(self.pid))
        self._samples += 1
        for child in self.children:
            kb = _peak_rss_kb(child)
            if kb is not None:
                self.child_peak_kb[child] = max(self.child_peak_kb.get(child, 0), kb)
            cpu = _cpu_s(child)
            if cpu is not None:
                self.child_cpu_s[child] = cpu
        self.timeline.append((time.time(), self.cpu_s, self.cpu_of("java"), _broker_cpu_s()))

    def cpu_between(self, start: datetime, end: datetime) -> tuple[float, float, float]:
        """CPU seconds of the process, its JVM and the broker from ``start`` to ``end``
        (the samples nearest to each; they are 50 ms apart)."""
        def at(when: datetime) -> tuple[float, float, float, float]:
            stamp = when.timestamp()
            return min(self.timeline, key=lambda sample: abs(sample[0] - stamp))

        first, last = at(start), at(end)
        return (last[1] - first[1], last[2] - first[2], last[3] - first[3])

    def cpu_of(self, comm: str) -> float:
        return sum(cpu for pid, cpu in self.child_cpu_s.items()
                   if self.children[pid] == comm)

    def peak_of(self, comm: str) -> int:
        return max((kb for pid, kb in self.child_peak_kb.items()
                    if self.children[pid] == comm), default=0)

    def python_workers(self) -> str:
        """pyspark's daemon and worker processes (forks of one Python). Other descendants
        are left out: ``bash`` launchers, and the JVM's short-lived forks before ``exec``
        of ``chmod`` (Hadoop's local file system), whose VmHWM counts the JVM's pages."""
        kbs = [kb for pid, kb in self.child_peak_kb.items()
               if self.children[pid].startswith("python")]
        return f"{len(kbs)} of <= {max(kbs) / 1024:.0f} MB" if kbs else "none"


async def run_kstage(bootstrap: str, topic: str, n: int, workdir: Path, work: Workload,
                     processor: str, warmup: int = 0,
                     command: tuple[str, ...] = (sys.executable, "-m", "service")
                     ) -> KstageResult:
    group = unique("bench-kstage")
    run_dir = workdir / group
    run_dir.mkdir()
    cfg = write_config(run_dir / "kstage.yml", bootstrap, group, topic, work, processor)
    log_path = run_dir / "kstage.log"
    started = time.monotonic()
    spawned = datetime.now()  # the log lines' clock (local time)
    with open(log_path, "wb") as log:  # noqa: ASYNC230 - opened once, before the run
        proc = await asyncio.create_subprocess_exec(
            *command, "run", "-c", str(cfg), "--drain",
            cwd=run_dir, stdout=log, stderr=log,
        )
        waiter = asyncio.ensure_future(proc.wait())
        rss = _RssSampler(proc.pid)
        try:
            while not waiter.done():
                if time.monotonic() - started > KSTAGE_TIMEOUT_S:
                    raise BenchError(f"kstage did not exit within {KSTAGE_TIMEOUT_S:.0f}s; "
                                     f"log: {log_path}")
                # Sample the peak RSS while it runs: the child's rusage after exit would
                # also count this (large) process's pages it inherited before exec.
                rss.sample()
                await asyncio.wait([waiter], timeout=0.05)
        finally:
            if not waiter.done():
                proc.kill()
                await waiter
        code = waiter.result()
    wall = time.monotonic() - started
    text = log_path.read_text(errors="replace")
    if code != 0:
        raise BenchError(f"kstage exited {code}; log {log_path}:\n{text[-4000:]}")
    assigned = _log_times(_ASSIGNED, text)
    commits = _log_times(_COMMITTED, text)
    drained = _log_times(_DRAINED, text)
    if len(assigned) != 1 or not commits or len(drained) != 1:
        raise BenchError(f"kstage log: {len(assigned)} assignment(s), {len(commits)} "
                         f"commit line(s), {len(drained)} drained line(s), expected 1/>0/1 "
                         f"(a rebalance skews the timing); log {log_path}")
    got = await committed_offset(bootstrap, group, topic)
    if got != n:
        raise BenchError(f"kstage: committed offset {got}, expected {n}; log {log_path}")
    result = KstageResult(
        seconds=(commits[-1] - assigned[0]).total_seconds(),
        drain_lag_s=(drained[0] - commits[-1]).total_seconds(),
        wall_s=wall,
        commits=len(commits),
        peak_rss_kb=rss.peak_kb,
        jvm_peak_rss_kb=rss.peak_of("java"),
        workers=rss.python_workers(),
        cpu_s=(rss.cpu_s, rss.cpu_of("java")),
        window_cpu_s=rss.cpu_between(assigned[0], commits[-1]),
        first_commit_s=(commits[0] - spawned).total_seconds(),
    )
    if warmup:
        at = [(datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f"), int(offset))
              for stamp, offset in _COMMITTED_AT.findall(text)]
        start = next(((when, offset) for when, offset in at if offset >= warmup), None)
        if len(at) != len(commits) or start is None or start[1] >= n:
            raise BenchError(f"kstage log: no commit line between the warm-up offset "
                             f"{warmup} and {n} ({len(at)} of {len(commits)} commit lines "
                             f"name an offset): too few appends for a warm window; "
                             f"raise --messages or pass --warmup 0 (cold only); "
                             f"log {log_path}")
        result.warm_from = start[1]
        result.warm_s = (commits[-1] - start[0]).total_seconds()
        result.warm_cpu_s = rss.cpu_between(start[0], commits[-1])
    if work.spark is not None:
        first = _log_times(_FIRST_LINE, text)[:1]
        registered = _log_times(_REGISTERED, text)
        if len(registered) != 1 or not first:
            raise BenchError(f"kstage log: {len(registered)} table registration line(s), "
                             f"expected 1; log {log_path}")
        result.spark_start_s = (registered[0] - first[0]).total_seconds()
        appends = _APPENDED.findall(text)
        result.flush_rows = tuple(int(rows) for _, rows in appends)
        if appends:
            first_append = datetime.strptime(appends[0][0], "%Y-%m-%d %H:%M:%S,%f")
            result.first_append_s = (first_append - assigned[0]).total_seconds()
        result.warehouse = run_dir / "warehouse"
    return result


# -- spark: read the staging tables back ------------------------------------------------

def run_catalog(warehouse: Path) -> Any:
    """The run's Iceberg catalog (SQLite in ``warehouse``), as kstage's Spark made it,
    opened with pyiceberg: another engine reading the tables, as a user's would."""
    from pyiceberg.catalog.sql import SqlCatalog  # only for the Spark runs

    return SqlCatalog("kstage", uri=f"sqlite:///{warehouse / 'catalog.db'}",
                      warehouse=f"file://{warehouse}", init_catalog_tables="false")


def read_back(warehouse: Path, table: str, catalog: Any = None,
              namespace: str = "kstage") -> dict[str, Any]:
    """What a reader of the Iceberg table sees through the run's catalog (pyiceberg, not
    the Spark that wrote it; ``catalog``: another one than the run's SQLite catalog):
    rows, distinct offsets, first and last offset, topics, partitions and the non-null
    counts of two NOT NULL columns."""
    import pyarrow.compute as pc  # only for the Spark runs

    loaded = (catalog or run_catalog(warehouse)).load_table(f"{namespace}.{table}")
    data = loaded.scan(selected_fields=(
        "_offset", "_topic", "_kafka_partition", "cluster", "dataset")).to_arrow()
    offsets = data.column("_offset")
    return {"rows": data.num_rows, "offsets": len(pc.unique(offsets)),
            "first": pc.min(offsets).as_py(), "last": pc.max(offsets).as_py(),
            "topics": pc.unique(data.column("_topic")).to_pylist(),
            "parts": pc.unique(data.column("_kafka_partition")).to_pylist(),
            "cluster": data.num_rows - data.column("cluster").null_count,
            "dataset": data.num_rows - data.column("dataset").null_count}


def staging_tables(warehouse: Path) -> list[str]:
    """The tables of the run's catalog (namespace ``kstage``)."""
    return sorted(name for _, name in run_catalog(warehouse).list_tables("kstage"))


async def verify_staging(runs: list[KstageResult], topic: str, n: int) -> None:
    """Read every run's Iceberg staging table through its catalog (after all rounds) and
    check that it holds exactly one row per event: rows == distinct offsets == n,
    offsets 0..n-1, one topic and partition, NOT NULL columns filled."""
    started = time.monotonic()
    for ks in runs:
        assert ks.warehouse is not None
        tables = staging_tables(ks.warehouse)
        if len(tables) != 1:
            raise BenchError(f"spark: expected one staging table in {ks.warehouse}, "
                             f"found {tables}")
        got = await asyncio.to_thread(read_back, ks.warehouse, tables[0])
        want = {"rows": n, "offsets": n, "first": 0, "last": n - 1, "topics": [topic],
                "parts": [0], "cluster": n, "dataset": n}
        wrong = {k: (got[k], v) for k, v in want.items() if got[k] != v}
        if wrong:
            raise BenchError(f"spark: staging table {tables[0]} in {ks.warehouse} does not "
                             f"hold one row per event (got, expected): {wrong}")
    print(f"staging tables read back with pyiceberg: {len(runs)} x {n} rows, offsets "
          f"0..{n - 1} each exactly once, committed offset {n} "
          f"({time.monotonic() - started:.1f} s)", flush=True)


# -- main ------------------------------------------------------------------------------

async def produce_workload(bootstrap: str, work: Workload) -> tuple[str, int]:
    """Produce the workload's values once to a new 1-partition topic (then drop them from
    memory); returns the topic and the message count."""
    topic = unique("bench")
    n = len(work.values)
    avg = sum(map(len, work.values)) / n
    t1 = time.monotonic()
    await create_topic(bootstrap, topic)
    await produce(bootstrap, topic, work.values)
    t2 = time.monotonic()
    work.values = []
    print(f"broker {bootstrap}, topic {topic} (1 partition): {n} {work.name} messages of "
          f"{avg:.0f} B avg, produced in {t2 - t1:.1f} s", flush=True)
    return topic, n


async def bench(bootstrap: str, work: Workload, rounds: int, workdir: Path,
                extra_processor: str | None, warmup: int = 0) -> float:
    topic, n = await produce_workload(bootstrap, work)

    raw_s: list[float] = []
    kstage_s: list[float] = []
    runs: list[KstageResult] = []
    raws: list[RawResult] = []
    raw_warm: list[float] = []  # events/s in the warm window, per round
    ks_warm: list[float] = []
    for r in range(1, rounds + 1):
        raw = await run_raw(bootstrap, topic, n, work.raw_decode, work.raw_handle)
        raw_s.append(raw.seconds)
        raws.append(raw)
        print(f"round {r}: raw aiokafka    {raw.seconds:6.2f} s ({n / raw.seconds:6.0f}/s; "
              f"first message {raw.first_message_s * 1000:.0f} ms after assignment; CPU "
              f"in the window: Python {raw.cpu_s[0]:.1f} s, broker {raw.cpu_s[1]:.1f} s)",
              flush=True)
        ks = await run_kstage(bootstrap, topic, n, workdir, work, work.processor, warmup)
        kstage_s.append(ks.seconds)
        runs.append(ks)
        print(f"round {r}: kstage --drain  {ks.seconds:6.2f} s ({n / ks.seconds:6.0f}/s; "
              f"{ks.commits} commits, drain detected {ks.drain_lag_s * 1000:.0f} ms after "
              f"the last commit, process wall {ks.wall_s:.1f} s, exit 0, committed {n}; CPU in "
              f"the window: Python {ks.window_cpu_s[0]:.1f} s, JVM {ks.window_cpu_s[1]:.1f} s, "
              f"broker {ks.window_cpu_s[2]:.1f} s)", flush=True)
        if work.spark is not None:
            sizes = sorted(ks.flush_rows)
            print(f"round {r}:   spark: start-up {ks.spark_start_s:.1f} s (before the "
                  f"window); {len(sizes)} appends of {sizes[0] if sizes else 0}.."
                  f"{sizes[-1] if sizes else 0} rows (median "
                  f"{statistics.median(sizes) if sizes else 0:.0f}), the first done "
                  f"{ks.first_append_s:.1f} s after assignment; peak RSS Python "
                  f"{ks.peak_rss_kb / 1024:.0f} MB, JVM {ks.jvm_peak_rss_kb / 1024:.0f} MB, "
                  f"pyspark Python workers: {ks.workers}; CPU over the process wall: "
                  f"Python {ks.cpu_s[0]:.0f} s, JVM {ks.cpu_s[1]:.0f} s; load average "
                  f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
            print(f"round {r}:   appends_per_100k={len(sizes) / n * 1e5:.1f}", flush=True)
            print(f"round {r}:   JVM CPU per row over the window: "
                  f"{ks.window_cpu_s[1] / n * 1e6:.1f} us", flush=True)
        if warmup:
            # The same offsets on both sides: from kstage's first commit at or past the
            # warm-up (a flush boundary) to the end; raw from its first commit there.
            raw_w_s, raw_w_rows, raw_w_cpu = raw.warm(ks.warm_from, n)
            ks_w_rows = n - ks.warm_from
            raw_warm.append(raw_w_rows / raw_w_s)
            ks_warm.append(ks_w_rows / ks.warm_s)
            print(f"round {r}:   warm (offsets {ks.warm_from}..{n - 1}, after {ks.warm_from} "
                  f"events in the same process): raw {raw_warm[-1]:.0f}/s (Python "
                  f"{raw_w_cpu:.1f} s CPU), kstage {ks_warm[-1]:.0f}/s ({ks.warm_s:.2f} s; "
                  f"CPU Python {ks.warm_cpu_s[0]:.1f} s, JVM {ks.warm_cpu_s[1]:.1f} s = "
                  f"{ks.warm_cpu_s[1] / ks_w_rows * 1e6:.1f} us/row, Python "
                  f"{ks.warm_cpu_s[0] / ks_w_rows * 1e6:.1f} us/row, broker "
                  f"{ks.warm_cpu_s[2]:.1f} s); ratio {ks_warm[-1] / raw_warm[-1]:.2f}",
                  flush=True)

    interpreter_s = interpreter_start_s()
    raw_start = interpreter_s + statistics.median(r.start_s for r in raws)
    ks_start = statistics.median(ks.first_commit_s for ks in runs)
    print(f"start to first commit: raw aiokafka {raw_start:.2f} s (interpreter and imports "
          f"{interpreter_s:.2f} s, then start, join, first fetch and commit), kstage "
          f"{ks_start:.2f} s (process spawned to its first commit); kstage "
          f"{ks_start - raw_start:+.2f} s{' (median)' if rounds > 1 else ''}")
    raw_med = statistics.median(raw_s)
    ks_med = statistics.median(kstage_s)
    raw_rate, ks_rate = n / raw_med, n / ks_med
    label = "" if rounds == 1 else f", median of {rounds}"
    peak_kb = max(ks.peak_rss_kb for ks in runs)
    print(f"raw aiokafka: {raw_rate:.0f} events/s ({raw_med:.2f} s{label})")
    print(f"kstage run --drain: {ks_rate:.0f} events/s ({ks_med:.2f} s{label})")
    if work.spark is None:
        print(f"kstage peak RSS: {peak_kb / 1024:.0f} MB (VmHWM, max over the kstage runs)")
    else:
        await verify_staging(runs, topic, n)
        with_start = statistics.median(ks.seconds + ks.spark_start_s for ks in runs)
        print(f"kstage incl. Spark start-up: {n / with_start:.0f} events/s "
              f"({with_start:.2f} s{label}; ratio {raw_med / with_start:.2f}, not the "
              f"ratio below, which excludes the start-up)")
        jvm_kb = max(ks.jvm_peak_rss_kb for ks in runs)
        print(f"kstage peak RSS: Python {peak_kb / 1024:.0f} MB, JVM {jvm_kb / 1024:.0f} MB "
              f"(VmHWM of the kstage process and of its java child, max over the runs)")
        verdict = "PASS" if peak_kb < SPARK_RSS_LIMIT_MB * 1024 else "FAIL"
        print(f"Python peak RSS {peak_kb / 1024:.0f} MB vs {SPARK_RSS_LIMIT_MB} MB with a "
              f"{n}-message backlog: {verdict}")
    if extra_processor:
        ks = await run_kstage(bootstrap, topic, n, workdir, work, extra_processor)
        print(f"kstage run --drain with {extra_processor} (not in the ratio): "
              f"{n / ks.seconds:.0f} events/s ({ks.seconds:.2f} s; ratio "
              f"{n / ks.seconds / raw_rate:.2f}; CPU in the window: Python "
              f"{ks.window_cpu_s[0]:.1f} s, broker {ks.window_cpu_s[2]:.1f} s)")
    if warmup:
        raw_w, ks_w = statistics.median(raw_warm), statistics.median(ks_warm)
        jvm_us = statistics.median(ks.warm_cpu_s[1] / (n - ks.warm_from) * 1e6 for ks in runs)
        print(f"warm (after >= {warmup} events in the same kstage process){label}: raw "
              f"{raw_w:.0f} events/s, kstage {ks_w:.0f} events/s"
              + (f", JVM CPU {jvm_us:.1f} us/row" if work.spark is not None else ""))
        print(f"cold ratio={ks_rate / raw_rate:.2f} (from the assignment"
              + (", JVM JIT-cold)" if work.spark is not None else ")"))
        return ks_w / raw_w
    return ks_rate / raw_rate


@contextmanager
def bench_run(keep: bool, prefix: str = "kstage-bench-") -> Iterator[tuple[EmbeddedBroker, Path]]:
    """A new work directory and a started embedded broker for one benchmark run. The
    broker is stopped (by its pid) at the end; the directory (configs, logs, tables) is
    removed unless ``keep`` or the run failed."""
    global BROKER_PID
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    broker = EmbeddedBroker()
    try:
        broker.start()
        BROKER_PID = broker.pid
        yield broker, workdir
    except BaseException:
        print(f"configs and logs kept in {workdir}", file=sys.stderr)
        raise
    else:
        if keep:
            print(f"configs, logs and tables kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1000, help="bytes per JSON message")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--format", choices=("json", "avro", "spark"), default="json")
    parser.add_argument("--defaults", action="store_true",
                        help="spark: kstage's defaults for the flushes and max_in_flight "
                        "(--flush-rows and --flush-interval-s ignored)")
    parser.add_argument("--flush-rows", type=int, default=SPARK_FLUSH_ROWS,
                        help="spark: flush_max_rows of the staging table writer")
    parser.add_argument("--flush-interval-s", type=float, default=SPARK_FLUSH_INTERVAL_S,
                        help="spark: flush_max_interval_s of the staging table writer")
    parser.add_argument("--flush-min-rows", type=int, default=None,
                        help="spark: flush_min_rows of the staging table writer (default: "
                             "kstage's)")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="spark: extra Spark conf for kstage's session (repeatable)")
    parser.add_argument("--appends", choices=("spark", "pyiceberg"), default="spark",
                        help="spark: what writes kstage's staging appends (spark.appends)")
    parser.add_argument("--warmup", type=int, default=None, metavar="EVENTS",
                        help="also report the warm window: from the first commit at or "
                             "past this offset to the end, in the same runs (default for "
                             "spark: half of --messages; 0: cold only)")
    parser.add_argument("--from-first-commit", action="store_true",
                        help="time each side from its first commit to its last (the "
                             "processing rate; same as --warmup 1)")
    parser.add_argument("--processor", default=None,
                        help="kstage processor for the ratio (default json_rows)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (configs, logs, staging tables)")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.size < 1 or args.rounds < 1:
        parser.error("--messages, --size and --rounds must be positive")
    if args.from_first_commit:
        args.warmup = 1
    warmup = args.warmup if args.warmup is not None else (
        args.messages // 2 if args.format == "spark" else 0)
    if not 0 <= warmup < args.messages:
        parser.error("--warmup must be at least 0 and below --messages")

    with bench_run(args.keep) as (broker, workdir):
        if args.format == "avro":
            work, extra = avro_workload(args.messages, workdir), "datahub_mcl"
        elif args.format == "spark":
            work, extra = spark_workload(args.messages, workdir,
                                         None if args.defaults else args.flush_rows,
                                         args.flush_interval_s,
                                         dict(kv.split("=", 1) for kv in args.spark_conf),
                                         args.flush_min_rows, args.appends), None
        else:
            work, extra = json_workload(args.messages, args.size), None
        work.processor = args.processor or work.processor
        ratio = asyncio.run(bench(broker.bootstrap, work, args.rounds, workdir, extra,
                                  warmup))
    print(f"ratio={ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
