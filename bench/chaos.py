"""The chaos run: kstage processes of one group SIGKILLed and restarted while a producer writes.

    python bench/chaos.py --sink jsonl --kills 100            # 3 processes, JSONL sink
    python bench/chaos.py --sink spark --kills 10             # 2 processes, Spark + merge
    python bench/chaos.py --sink spark --appends pyiceberg --kills 10 --freezes 8  # zombies
    python bench/chaos.py --sink spark --appends pyiceberg --format avro --freezes 2  # columns

What it does, on its own embedded broker (Tansu, memory storage; SIGKILLed at the end):

1. creates one topic (``--partitions``, default 6) and starts a producer (aiokafka, in
   this process) writing numbered JSON events with unique ids at ``--rate`` events/s,
   partition ``id % partitions``, for the whole run. An id counts as *produced* once the
   broker acknowledged it (its offset is recorded); a send that failed is counted apart
   (``send_failed``) and is not expected anywhere.
2. starts ``--processes`` ``kstage run`` processes (``python -m service run -c FILE``,
   each in its own process group) sharing one config: one consumer group, the status
   server off (``http_port: 0``). Every process *incarnation* writes its own output
   (``${OUT}`` in the config): ``out/p<slot>-<n>.jsonl`` for the JSONL sink, or with
   ``--jsonl-per-slot`` one file per slot, ``out/p<slot>.jsonl``, that each restart
   appends to (as a deployment with a fixed path does); the Spark
   sink writes one Iceberg staging table in one warehouse (its SQLite catalog), every
   process appending to it.
3. every ``--interval-s`` seconds SIGKILLs the process group of a random live process (the
   kstage process and, for Spark, its JVM), waits for it to die and starts it again, until
   ``--kills`` kills were made. The first kill comes once every member was assigned
   partitions (so kills hit members at work, not only members joining).

   With ``--freezes N`` (Spark sink; meanwhile, :func:`freeze_members`), N times: a live
   member (each in turn) is watched until one of its appends of the staging table starts
   (its DEBUG line ``<table>: appending``: the members log at DEBUG), and its whole process
   tree (kstage and its Spark JVM) is SIGSTOPped at once, kept stopped ``--freeze-s``
   seconds (default: the session timeout, 6 s, + 8 s), then SIGCONTed: a *zombie*, evicted
   from the group while frozen, whose partitions another member took over and appended,
   wakes up with its append in flight. The member kills pass over a frozen member, and one
   thawed less than ``--freeze-interval-s`` ago.
4. stops producing, lets the members drain: waits (up to ``--drain-timeout-s``) until the
   group's committed offset equals the high-water mark of every partition (as a fetch
   reports it: ``end_offsets`` is wrong on this broker), then SIGTERMs them (exit 0
   expected) and, for Spark, runs ``kstage merge`` once (not with ``--no-merge``).
5. reads every output and counts, against the produced ids:

   * ``lost``: produced ids found in no output; ``dup``: occurrences beyond the first
     (all rows of every JSONL file, or every row of the Spark staging table). The
     duplicate ratio is ``dup / produced``: the at-least-once price of the kills (JSONL);
     the Iceberg staging table is exactly once, so for Spark a ``dup`` fails the run.
   * ``final_lost`` / ``final_dup``: the same, after the deduplication a downstream
     consumer applies. Spark: the final table written by ``kstage merge`` (``-`` with
     ``--no-merge``). JSONL: the
     rows deduplicated by Kafka coordinates (``_topic, _partition, _offset``, what the
     merge calls an exact replay), so ``final_dup`` counts ids stored at more than one
     offset (a producer retry), which no consumer can remove.
   * ``torn``: JSONL lines that do not parse (a SIGKILL in the middle of a sink's
     ``write(2)``). Their events are not counted as delivered there: the offset of a row
     is committed only after the whole write and its fsync returned, so a torn row must
     be re-delivered and show up elsewhere (``lost`` stays 0).
   * ``uncovered``: offsets below the high-water mark present in no output (should be
     0: every record in the log, producer duplicates included, is landed).
   * ``dead``: dead-lettered messages (none expected: every event is valid).

``--format avro`` (Spark sink) writes the events as registry Avro instead of JSON (the
WhereHows ``GobblinTrackingEvent`` schema, served by a registry of the run,
tests/fake_registry.py) and lets a member poll up to 1 000 records at once: a batch of a
backlog (a member's start, the partitions a frozen member lost) is then decoded and
mapped as Arrow columns (actors/worker/columns.py), a live topic's small batches one
message at a time. ``as_columns=<n>`` in the report counts the batches that went as
columns (the members' DEBUG lines; with ``--freezes``).

``--appends spark|pyiceberg`` is the Spark sink's ``spark.appends``: what writes the staging
appends (pyiceberg: no JVM in the members, only in the merge). Catalog faults, beside
(:func:`restart_catalog`, :func:`s3_faults`): ``--catalog postgres`` puts the Iceberg JDBC
catalog in a PostgreSQL server of the run (tests/postgres.py), which
``--catalog-restarts`` stops (fast) and starts again; ``--s3`` puts the warehouse on S3
(moto's server, tests/s3_server.py) behind a proxy (tests/tcp_proxy.py's), which
``--s3-faults`` makes answer every request ``503 SlowDown``, then slow.

With ``--cluster`` (either sink) the broker is a 3-node Apache Kafka cluster instead
(KRaft, replication factor 3, ``min.insync.replicas=2``, the producer idempotent with
``acks=all``; ``make kafka-jars`` fetches its jars): besides the member kills, a node is
SIGKILLed every ``--broker-interval-s`` seconds, kept down ``--broker-down-s`` seconds,
restarted, and the next kill waits until every partition is in sync again, until
``--broker-kills`` kills were made (:func:`chaos_on_cluster`). The high-water marks are
the cluster's end offsets.

Last lines: the duplicate ratio, then exactly
``lost=<n> dup=<n> final_lost=<n> final_dup=<n> kills=<k>`` (with ``--cluster``, then
`` broker_kills=<b>``; with ``--freezes``, then `` freezes=<f>``). The exit code is 0
when lost, final_lost and final_dup are 0 (and dup, for Spark), every partition drained
and every member stopped cleanly; 1 otherwise.
The tables are read with pyiceberg through the run's catalog.
``tests/integration/test_chaos.py`` runs a 10-kill JSONL variant, a cluster variant and
a 2-freeze pyiceberg variant.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "chaos"
GROUP = "chaos"
SPARK_TABLE = "stg_kafka_gobblin_compaction"
SPARK_FINAL = "final_kafka_gobblin_compaction"
T0_MS = 1_717_000_000_000
# Tansu holds a join for ~session_timeout/2 (ENVIRONMENT.md): a short session keeps
# rebalances after a kill at a few seconds.
_GROUP_TIMING = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}
# A frozen member stays stopped past its session (the coordinator evicts it, another
# member takes its partitions over and appends them) and a few seconds more.
FREEZE_S = _GROUP_TIMING["session_timeout_ms"] / 1000 + 8
# The DEBUG line a member logs when an append of the staging table starts, before its
# rows are written and committed (StagingWriter._write in actors/sinks/spark/staging.py,
# on the thread that appends, in both append modes): the freeze trigger.
APPENDING = f".{SPARK_TABLE}: appending "
# The DEBUG line of a batch decoded and mapped as columns (actors/worker/columns.py).
AS_COLUMNS = " as columns ("
# What a thawed member logs once it learns the group evicted it (actors/worker/rebalance.py).
EVICTED = "lost its group membership"


@dataclass
class Options:
    """The run's knobs (``main``'s command line)."""

    sink: str = "jsonl"
    kills: int = 100
    processes: int = 3
    partitions: int = 6
    interval_s: float = 4.0
    rate: float = 200.0
    work_dir: Path | None = None
    seed: int = 1
    drain_timeout_s: float = 180.0
    jsonl_per_slot: bool = False
    cluster: bool = False
    broker_kills: int = 30
    broker_interval_s: float = 10.0
    broker_down_s: float = 3.0
    appends: str = "spark"  # spark.appends of the Spark sink: spark or pyiceberg
    freezes: int = 0
    freeze_s: float = FREEZE_S
    freeze_interval_s: float = 5.0
    freeze_wait_s: float = 120.0
    merge: bool = True  # Spark: kstage merge after the drain, the final table counted
    catalog: str = "sqlite"  # the Iceberg JDBC catalog's database: sqlite or postgres
    catalog_restarts: int = 0
    catalog_interval_s: float = 20.0
    catalog_down_s: float = 3.0
    s3: bool = False  # the warehouse on S3 (moto's server, tests/s3_server.py) via a proxy
    s3_faults: int = 0
    s3_interval_s: float = 20.0
    s3_fault_s: float = 5.0
    s3_delay_s: float = 0.2
    format: str = "json"  # the events' format: json, or avro (registry Avro, Spark sink)


@dataclass
class Result:
    """What the run counted (see the module docstring)."""

    produced: int = 0
    send_failed: int = 0
    lost: int = 0
    dup: int = 0
    final_lost: int | None = 0  # None: not counted (Spark with --no-merge)
    final_dup: int | None = 0
    kills: int = 0
    broker_kills: int | None = None  # the cluster mode's
    freezes: int | None = None  # with --freezes
    catalog_restarts: int | None = None  # with --catalog-restarts
    s3_faults: int | None = None  # with --s3-faults
    evicted: int = 0  # freezes after which the thawed member said it lost its membership
    as_columns: int | None = None  # --format avro: batches decoded and mapped as columns
    torn: int = 0
    uncovered: int = 0
    dead: int = 0
    drained: bool = False
    clean_exits: bool = False
    exactly_once: bool = False  # the sink promises no duplicate (Spark: Iceberg staging)
    notes: list[str] = field(default_factory=list)

    @property
    def dup_ratio(self) -> float:
        return self.dup / self.produced if self.produced else 0.0

    @property
    def ok(self) -> bool:
        return (self.lost == 0 and self.final_lost in (0, None)
                and self.final_dup in (0, None)
                and (self.dup == 0 or not self.exactly_once)
                and self.uncovered == 0 and self.drained and self.clean_exits)

    def last_line(self) -> str:
        final = ("final_lost=- final_dup=-" if self.final_lost is None else
                 f"final_lost={self.final_lost} final_dup={self.final_dup}")
        line = f"lost={self.lost} dup={self.dup} {final} kills={self.kills}"
        if self.broker_kills is not None:
            line = f"{line} broker_kills={self.broker_kills}"
        if self.freezes is not None:
            line = f"{line} freezes={self.freezes}"
        if self.catalog_restarts is not None:
            line = f"{line} catalog_restarts={self.catalog_restarts}"
        if self.s3_faults is not None:
            line = f"{line} s3_faults={self.s3_faults}"
        return line


# -- the producer -------------------------------------------------------------------------

class Values:
    """How the events are written: JSON, or registry Avro (``--format avro``: the Gobblin
    schema registered in a registry of the run, which serves the members)."""

    def __init__(self, registry: Any = None) -> None:
        self.registry = registry
        self._schema: Any = None
        self._sid = 0
        if registry is not None:
            from fastavro import parse_schema

            from processors.base import SCHEMA_DIR
            from processors.gobblin import GobblinCompactionProcessor

            text = (SCHEMA_DIR / str(GobblinCompactionProcessor.reader_schema)).read_text()
            self._sid = registry.register(f"{TOPIC}-value", text)
            self._schema = parse_schema(json.loads(text))

    def encode(self, value: dict[str, Any]) -> bytes:
        if self.registry is None:
            return json.dumps(value).encode()
        from actors.codecs.avro import encode

        return encode(self._schema, self._sid, value)

    def topic(self) -> dict[str, Any]:
        """The topic's ``format`` (and the members' ``schema_registry``) in the config."""
        if self.registry is None:
            return {"format": "json"}
        return {"format": "avro"}


@contextlib.contextmanager
def event_values(opts: Options) -> Iterator[Values]:
    """The run's :class:`Values` (its registry, with ``--format avro``, stopped after)."""
    if opts.format != "avro":
        yield Values()
        return
    from tests.fake_registry import FakeRegistry

    with FakeRegistry() as registry:
        yield Values(registry)


class Producer:
    """Writes ``{"id": n, ...}`` events at a steady rate; remembers what the broker acked."""

    def __init__(self, bootstrap: str, partitions: int, rate: float, spark: bool,
                 acks: int | str = 1, idempotent: bool = False,
                 values: Values | None = None) -> None:
        self.values = values or Values()
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.rate = rate
        self.spark = spark
        self.acks = acks
        self.idempotent = idempotent
        self.acked: dict[int, tuple[int, int]] = {}  # id -> (partition, offset)
        self.failed = 0
        self._stop = asyncio.Event()

    def value(self, i: int) -> dict[str, Any]:
        if not self.spark:
            return {"id": i, "payload": f"event-{i:08d}"}
        # A WhereHows Gobblin compaction event (gobblin_compaction's JSON shape); its
        # natural key (dataset, cluster, log_event_time) is unique per id.
        return {"timestamp": T0_MS + i, "namespace": "compaction.tracking.events",
                "name": "CompactionCompleted",
                "metadata": {"clusterIdentifier": "chaos", "datasetUrn": f"/chaos/{i}",
                             "recordCount": str(i), "partition": "2024/05/29"}}

    def high_water(self) -> dict[int, int]:
        marks = dict.fromkeys(range(self.partitions), 0)
        for part, offset in self.acked.values():
            marks[part] = max(marks[part], offset + 1)
        return marks

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5,
                                    acks=self.acks, enable_idempotence=self.idempotent)
        await producer.start()
        pending: set[asyncio.Future[Any]] = set()
        try:
            i, start = 0, time.monotonic()
            while not self._stop.is_set():
                due = int((time.monotonic() - start) * self.rate)
                while i < due:
                    fut = await producer.send(TOPIC, self.values.encode(self.value(i)),
                                              key=str(i).encode(),
                                              partition=i % self.partitions)
                    fut.add_done_callback(self._acked_callback(i))
                    pending.add(fut)
                    fut.add_done_callback(pending.discard)
                    i += 1
                await asyncio.sleep(0.02)
            await producer.flush()
            if pending:
                await asyncio.wait(pending, timeout=30)
        finally:
            await producer.stop()

    def _acked_callback(self, i: int) -> Any:
        def done(fut: asyncio.Future[Any]) -> None:
            if fut.cancelled() or fut.exception() is not None:
                self.failed += 1
                return
            meta = fut.result()
            self.acked[i] = (meta.partition, meta.offset)
        return done


# -- the kstage processes -----------------------------------------------------------------

class Member:
    """One slot of the group: a ``kstage run`` process, replaced after each kill."""

    def __init__(self, slot: int, config: Path, work: Path, per_slot: bool = False) -> None:
        self.slot = slot
        self.per_slot = per_slot
        self.config = config
        self.work = work
        self.incarnation = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit_codes: list[int] = []
        self.frozen: list[int] = []  # the pids stopped by a freeze, until its thaw
        self.freezes = 0  # of this slot, every incarnation
        self.spared_until = 0.0  # monotonic: no kill before (a zombie's late append)

    def start(self) -> None:
        self.incarnation += 1
        name = f"p{self.slot}-{self.incarnation}"
        out = f"p{self.slot}.jsonl" if self.per_slot else f"{name}.jsonl"
        env = {**os.environ, "OUT": str(self.work / "out" / out),
               "DEAD": str(self.work / "dead" / f"{name}.jsonl"),
               "SPARK_LOCAL_IP": "127.0.0.1"}
        with open(self.work / "logs" / f"{name}.log", "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service", "run", "-c", str(self.config)],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.work,
                start_new_session=True,  # its own process group: the JVM dies with it
            )

    def log(self) -> str:
        path = self.log_path()
        return path.read_text(errors="replace") if path.exists() else ""

    def log_path(self) -> Path:
        return self.work / "logs" / f"p{self.slot}-{self.incarnation}.log"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_size(self) -> int:
        path = self.log_path()
        return path.stat().st_size if path.exists() else 0

    async def next_append(self, timeout_s: float) -> bool:
        """Wait until this incarnation logs an append of the staging table starting (the
        :data:`APPENDING` line) after now: True; False when it dies or is replaced first,
        or after ``timeout_s``."""
        return await self.wait_log(APPENDING, self.log_size(), timeout_s)

    async def wait_log(self, text: str, pos: int, timeout_s: float) -> bool:
        """Wait until this incarnation's log holds ``text`` after byte ``pos``: True;
        False when it dies or is replaced first, or after ``timeout_s``. Read every
        5 ms."""
        incarnation, path, marker = self.incarnation, self.log_path(), text.encode()
        tail = b""
        deadline = time.monotonic() + timeout_s
        while (time.monotonic() < deadline and self.alive()
               and self.incarnation == incarnation):
            chunk = read_from(path, pos)
            pos += len(chunk)
            if marker in tail + chunk:
                return True
            tail = (tail + chunk)[-len(marker):]
            await asyncio.sleep(0.005)
        return False

    def freeze(self) -> None:
        """SIGSTOP the whole process tree: the process group at once (kstage and its
        Spark JVM), then every descendant (tests/process_tree.py) in case one left it."""
        from tests.process_tree import descendants

        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)
        self.frozen = [self.proc.pid, *descendants(self.proc.pid)]
        for pid in self.frozen[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT what :meth:`freeze` stopped (nothing when the tree died meanwhile)."""
        assert self.proc is not None
        for pid in self.frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGCONT)
        self.frozen = []

    def kill(self) -> None:
        """SIGKILL the whole process group and reap the kstage process."""
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def terminate(self, timeout_s: float) -> int:
        """SIGTERM, wait for a clean exit; SIGKILL after ``timeout_s``. The exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        with_group = self.proc.returncode
        try:  # whatever the process left behind in its group (a JVM) goes too
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return with_group


def read_from(path: Path, pos: int) -> bytes:
    """The bytes of ``path`` from ``pos`` on (a log being written)."""
    with path.open("rb") as log:
        log.seek(pos)
        return log.read()


def write_config(path: Path, opts: Options, bootstrap: str,
                 catalog: Catalog | None = None, values: Values | None = None) -> Path:
    spark = opts.sink == "spark"
    values = values or Values()
    topic: dict[str, Any] = {"topic": TOPIC, **values.topic()}
    if spark:
        topic.update(processor="gobblin_compaction", sink={"type": "spark"})
    else:
        topic.update(processor="json_rows", sink={"type": "jsonl", "path": "${OUT}"})
    cfg: dict[str, Any] = {
        "name": GROUP,
        "kafka": {"bootstrap": bootstrap},
        # DEBUG with freezes: the append lines (APPENDING) that time them.
        # DEBUG with --format avro: the lines of the batches that went as columns.
        "service": {"http_port": 0,
                    "log_level": "DEBUG" if opts.freezes or values.registry else "INFO"},
        "supervisor": {"shutdown_grace_s": 30, "abort_grace_s": 10},
        "groups": [{
            "group_id": GROUP,
            "auto_offset_reset": "earliest",
            # avro: a backlog's batches large enough to go as columns
            "max_poll_records": 200 if values.registry is None else 1000,
            **_GROUP_TIMING,
            "commit": {"mode": "batch", "max_messages": 100, "max_interval_s": 0.5},
            "failure": {"mode": "continue", "dead_letter_path": "${DEAD}"},
            "topics": [topic],
        }],
    }
    if values.registry is not None:
        cfg["schema_registry"] = {"url": values.registry.url}
    if spark:
        cfg["spark"] = {"master": "local[1]", "warehouse": str(path.parent / "warehouse"),
                        "appends": opts.appends,
                        "flush_max_rows": 5000, "flush_max_interval_s": 1.0,
                        "conf": {"spark.driver.memory": "512m", "spark.ui.enabled": "false"}}
        if catalog is not None and catalog.settings:
            cfg["spark"]["catalog"] = catalog.settings
            if "warehouse" in catalog.settings:  # S3: one warehouse, the catalog's
                del cfg["spark"]["warehouse"]
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


async def wait_assigned(members: list[Member], timeout_s: float) -> None:
    """Wait until every member was assigned partitions once (kills start after that)."""
    deadline = time.monotonic() + timeout_s
    while not all("assigned partitions [" in m.log() for m in members):
        if time.monotonic() > deadline or not all(m.alive() for m in members):
            raise RuntimeError("the members did not all join the group: see "
                               f"{members[0].work / 'logs'}")
        await asyncio.sleep(0.2)


async def committed(admin: Any, partitions: int) -> dict[int, int]:
    """The group's committed next-offset per partition (0 when none)."""
    from aiokafka import TopicPartition

    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    offsets = await admin.list_consumer_group_offsets(GROUP, partitions=tps)
    return {tp.partition: max(meta.offset, 0) if meta is not None else 0
            for tp, meta in offsets.items()}


async def wait_drained(bootstrap: str, marks: dict[int, int], timeout_s: float,
                       members: list[Member]) -> bool:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout_s
        last: dict[int, int] = {}
        while time.monotonic() < deadline:
            for m in members:  # a member that crashed on its own is restarted, and said
                if not m.alive():
                    assert m.proc is not None
                    print(f"member p{m.slot}-{m.incarnation} exited {m.proc.returncode} "
                          "during the drain; restarted", flush=True)
                    m.start()
            try:
                last = await committed(admin, len(marks))
            except Exception as exc:  # noqa: BLE001 - the broker is busy: ask again
                print(f"committed offsets: {exc!r}", flush=True)
            if last == marks:
                return True
            await asyncio.sleep(0.5)
        behind = {p: (last.get(p), hw) for p, hw in marks.items() if last.get(p) != hw}
        print(f"not drained within {timeout_s:g} s: (committed, high-water) {behind}",
              flush=True)
        return False
    finally:
        await admin.close()


# -- counting -----------------------------------------------------------------------------

def count(ids: Counter[int], produced: set[int]) -> tuple[int, int]:
    """(lost, dup) of the occurrences ``ids`` against the ``produced`` ids."""
    lost = len(produced - ids.keys())
    dup = sum(n - 1 for n in ids.values())
    return lost, dup


def read_jsonl_outputs(work: Path, result: Result) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted((work / "out").glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                result.torn += 1
                result.notes.append(f"torn line in {path.name}: {line[:80]!r}")
                continue
            rows.append(row)
    return rows


def read_spark_tables(work: Path, url: str | None = None,
                      s3_catalog: dict[str, Any] | None = None,
                      ) -> dict[str, list[list[Any]] | None]:
    """The staging and final tables' (dataset, Kafka partition, offset) rows, read with
    pyiceberg through the run's catalog (``url``, SQLAlchemy's; default: the SQLite one in
    the warehouse) (None: no such table)."""
    from pyiceberg.catalog.sql import SqlCatalog  # dev dependency
    from pyiceberg.exceptions import NoSuchTableError

    warehouse = work / "warehouse"
    if s3_catalog is not None:  # an S3 warehouse: tests/lake.py's reader knows its keys
        from tests.lake import IcebergReader

        catalog = IcebergReader({"catalog": s3_catalog}).catalog
    else:
        catalog = SqlCatalog("kstage", uri=url or f"sqlite:///{warehouse / 'catalog.db'}",
                             warehouse=f"file://{warehouse}", init_catalog_tables="false")
    tables: dict[str, list[list[Any]] | None] = {}
    for name in (SPARK_TABLE, SPARK_FINAL):
        try:
            table = catalog.load_table(f"kstage.{name}")
        except NoSuchTableError:
            tables[name] = None
            continue
        rows = table.scan(selected_fields=("dataset", "_kafka_partition", "_offset")
                          ).to_arrow().to_pylist()
        tables[name] = [[r["dataset"], r["_kafka_partition"], r["_offset"]] for r in rows]
    return tables


def spark_id(dataset: str) -> int:
    return int(dataset.rsplit("/", 1)[1])


def tally(opts: Options, work: Path, producer: Producer, result: Result,
          marks: dict[int, int], catalog: Catalog | None = None) -> None:
    """Count (module doc); ``marks``: the high-water mark of every partition (the
    cluster's end offsets cover the records of sends whose acknowledgement was lost)."""
    produced = set(producer.acked)
    result.dead = sum(len(p.read_bytes().splitlines()) for p in (work / "dead").glob("*"))
    if opts.sink == "jsonl":
        rows = read_jsonl_outputs(work, result)
        result.lost, result.dup = count(Counter(int(r["id"]) for r in rows), produced)
        by_coords = {(r["_topic"], r["_partition"], r["_offset"]): int(r["id"]) for r in rows}
        result.final_lost, result.final_dup = count(Counter(by_coords.values()), produced)
        seen = {(p, o) for _, p, o in by_coords}
    else:
        result.exactly_once = True
        tables = read_spark_tables(work, catalog.url if catalog else None,
                                   catalog.settings if catalog and opts.s3 else None)
        staging, final = tables[SPARK_TABLE] or [], tables[SPARK_FINAL]
        result.lost, result.dup = count(Counter(spark_id(d) for d, _, _ in staging), produced)
        if not opts.merge:
            result.final_lost = result.final_dup = None
        else:
            if final is None:
                result.notes.append("no final table: did kstage merge run?")
                final = []
            result.final_lost, result.final_dup = count(
                Counter(spark_id(d) for d, _, _ in final), produced)
        seen = {(p, o) for _, p, o in staging}
    result.uncovered = sum(1 for p, hw in marks.items() for o in range(hw)
                           if (p, o) not in seen)


# -- the catalog ---------------------------------------------------------------------------

@dataclass
class Catalog:
    """The staging table's Iceberg JDBC catalog: SQLite in the warehouse (the default), or
    with ``--catalog postgres`` a PostgreSQL server of this run (tests/postgres.py)."""

    settings: dict[str, Any] = field(default_factory=dict)  # spark.catalog ({}: SQLite)
    url: str | None = None  # SQLAlchemy's, for pyiceberg (None: the SQLite file)
    server: Any = None  # tests.postgres.Postgres
    proxy: Any = None  # with --s3: s3_fault_proxy()'s, in front of the S3 server


@contextlib.contextmanager
def catalog_database(opts: Options, work: Path) -> Iterator[Catalog]:
    with contextlib.ExitStack() as stack:
        catalog = Catalog()
        if opts.catalog == "postgres":
            from tests.postgres import DATABASE, USER, postgres_server

            server = stack.enter_context(contextlib.contextmanager(postgres_server)())
            catalog = Catalog(
                settings={"uri": server.url, "user": USER, "password": "secret"},
                url=f"postgresql+psycopg2://{USER}:secret@127.0.0.1:{server.port}/"
                    f"{DATABASE}", server=server)
        if opts.s3:
            from tests.s3_server import S3Server

            (work / "logs").mkdir(parents=True, exist_ok=True)
            s3 = stack.enter_context(S3Server(work / "logs" / "s3.log"))
            proxy = stack.enter_context(s3_fault_proxy()(("127.0.0.1", s3.port)))
            catalog.proxy = proxy
            catalog.settings = {
                "uri": f"jdbc:sqlite:{work / 'catalog.db'}", **catalog.settings,
                "warehouse": f"s3://{s3.new_bucket('chaos')}/warehouse",
                "s3": s3.catalog_s3(proxy.url)}
        yield catalog


def s3_fault_proxy() -> Any:
    """The proxy class of ``--s3`` (a subclass of tests/tcp_proxy.py's, made when
    asked: ``tests`` is imported only by the modes that need it)."""
    from tests.tcp_proxy import TcpProxy

    class Proxy(TcpProxy):
        """A :class:`~tests.tcp_proxy.TcpProxy` that can also answer every request with
        S3's ``503 SlowDown`` (:attr:`unavailable`; each connection gets one answer and is
        closed) and be slow (``delay_s``)."""

        unavailable = False
        answered_503 = 0

        async def _serve(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
            if not self.unavailable:
                await super()._serve(reader, writer)
                return
            try:
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                writer.write(SLOW_DOWN)
                await writer.drain()
                self.answered_503 += 1
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    TimeoutError):
                pass
            finally:
                writer.close()

        def answer_503(self, on: bool) -> None:
            """On: every request answered 503 (open connections reset, so that their
            next request comes on a new one); off: forwarded again."""
            self.unavailable = on
            if on:
                self.down()
                self.up()

    return Proxy


SLOW_DOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                  b"<Message>Please reduce your request rate.</Message></Error>")
SLOW_DOWN = (b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
             b"Content-Length: " + str(len(SLOW_DOWN_BODY)).encode() +
             b"\r\nConnection: close\r\n\r\n" + SLOW_DOWN_BODY)


async def s3_faults(catalog: Catalog, opts: Options, result: Result) -> None:
    """``opts.s3_faults`` times, every ``opts.s3_interval_s``: S3 answers every request
    503 for ``opts.s3_fault_s``, then is slow (each chunk held ``opts.s3_delay_s``) as
    long."""
    if not opts.s3_faults:
        return
    proxy = catalog.proxy
    result.s3_faults = 0
    while result.s3_faults < opts.s3_faults:
        await asyncio.sleep(opts.s3_interval_s)
        await asyncio.to_thread(proxy.answer_503, True)
        try:
            await asyncio.sleep(opts.s3_fault_s)
        finally:
            await asyncio.to_thread(proxy.answer_503, False)
        proxy.delay_s = opts.s3_delay_s
        try:
            await asyncio.sleep(opts.s3_fault_s)
        finally:
            proxy.delay_s = 0.0
        result.s3_faults += 1
        print(f"s3 fault {result.s3_faults}: {opts.s3_fault_s:g} s of 503 "
              f"({proxy.answered_503} answered so far), {opts.s3_fault_s:g} s slow",
              flush=True)


async def restart_catalog(catalog: Catalog, opts: Options, result: Result) -> None:
    """``opts.catalog_restarts`` times, every ``opts.catalog_interval_s``: stop the
    PostgreSQL catalog (``pg_ctl stop -m fast``: its sessions are terminated), keep it down
    ``opts.catalog_down_s``, start it again."""
    if not opts.catalog_restarts:
        return
    result.catalog_restarts = 0
    while result.catalog_restarts < opts.catalog_restarts:
        await asyncio.sleep(opts.catalog_interval_s)
        await asyncio.to_thread(catalog.server.stop, "fast")
        try:
            await asyncio.sleep(opts.catalog_down_s)
        finally:
            await asyncio.to_thread(catalog.server.start)
        result.catalog_restarts += 1
        print(f"catalog restart {result.catalog_restarts}: PostgreSQL down "
              f"{opts.catalog_down_s:g} s", flush=True)


# -- the run ------------------------------------------------------------------------------

async def kill_members(members: list[Member], opts: Options, rng: random.Random,
                       result: Result, producer: Producer, producing: asyncio.Task[None],
                       others: list[asyncio.Task[None]]) -> None:
    """Every ``opts.interval_s`` SIGKILL a random member that is not frozen (nor thawed
    less than ``opts.freeze_interval_s`` ago) and start it again, until ``opts.kills`` kills
    were made and ``others`` (the broker kills, the freezes) are done; raise when the
    producer or one of them failed."""
    started = time.monotonic()
    while result.kills < opts.kills or not all(t.done() for t in others):
        running = [t for t in (producing, *others) if not t.done()]
        await asyncio.wait(running, timeout=opts.interval_s,
                           return_when=asyncio.FIRST_COMPLETED)
        if producing.done():
            raise RuntimeError(f"the producer stopped: {producing.exception()!r}")
        for task in others:
            if task.done() and task.exception() is not None:
                raise RuntimeError(f"{task.get_name()} failed: {task.exception()!r}")
        candidates = [m for m in members
                      if not m.frozen and m.spared_until <= time.monotonic()]
        if result.kills >= opts.kills or not candidates:
            continue
        victim = rng.choice(candidates)
        was_alive = victim.alive()
        victim.kill()
        if not was_alive:
            assert victim.proc is not None
            result.notes.append(f"p{victim.slot}-{victim.incarnation} had exited "
                                f"{victim.proc.returncode} before its kill")
        victim.start()
        result.kills += 1
        if result.kills % 10 == 0:
            brokers = "" if result.broker_kills is None else \
                f" broker_kills={result.broker_kills}"
            print(f"kills={result.kills}{brokers} produced={len(producer.acked)} after "
                  f"{time.monotonic() - started:.0f} s", flush=True)


async def freeze_members(members: list[Member], opts: Options, rng: random.Random,
                         result: Result) -> None:
    """``opts.freezes`` times: after ``opts.freeze_interval_s``, pick a live member (each
    in turn: one of those frozen least so far, at random), wait for its next append of the
    staging table to start (its :data:`APPENDING` log line), SIGSTOP its process tree at
    once, keep it stopped ``opts.freeze_s`` (past its session: the group gives its
    partitions to another member) and SIGCONT it: a zombie that wakes up with an append in
    flight. A member killed or silent meanwhile is passed over."""
    if not opts.freezes:
        return
    result.freezes = 0
    misses = 0
    while result.freezes < opts.freezes:
        await asyncio.sleep(opts.freeze_interval_s)
        candidates = [m for m in members if m.alive()]
        if candidates:
            least = min(m.freezes for m in candidates)
            victim = rng.choice([m for m in candidates if m.freezes == least])
        if not candidates or not await victim.next_append(opts.freeze_wait_s):
            misses += 1  # bounded: members that stopped appending fail the run
            if misses > 3 * opts.freezes + 3:
                raise RuntimeError(f"{misses} times no member appended within "
                                   f"{opts.freeze_wait_s:g} s: nothing to freeze")
            continue
        victim.freeze()
        frozen_at = victim.log_size()  # a stopped process writes nothing
        victim.freezes += 1
        result.freezes += 1
        name = f"p{victim.slot}-{victim.incarnation}"
        print(f"freeze {result.freezes}: {name} stopped as an append started "
              f"({len(victim.frozen)} process(es)), for {opts.freeze_s:g} s", flush=True)
        try:
            await asyncio.sleep(opts.freeze_s)
        finally:
            victim.thaw()
            # What the zombie does after its thaw is what is looked at: no kill yet.
            victim.spared_until = time.monotonic() + opts.freeze_interval_s
        # A zombie indeed: the group evicted it while it was frozen (it says so at once).
        if await victim.wait_log(EVICTED, frozen_at, 30):
            result.evicted += 1
        else:
            result.notes.append(f"{name} did not log {EVICTED!r} within 30 s of its thaw")


async def finish(opts: Options, work: Path, config: Path, bootstrap: str,
                 producer: Producer, producing: asyncio.Task[None], members: list[Member],
                 marks: Any, result: Result, catalog: Catalog) -> None:
    """Stop producing, drain to the high-water marks (``marks``: an awaitable of them),
    stop the members, merge (Spark) and count."""
    producer.stop()
    await producing
    result.produced, result.send_failed = len(producer.acked), producer.failed
    high_water: dict[int, int] = await marks
    print(f"produced={result.produced} send_failed={result.send_failed}; draining to "
          f"high-water {sum(high_water.values())}", flush=True)
    result.drained = await wait_drained(bootstrap, high_water, opts.drain_timeout_s,
                                        members)
    codes = await asyncio.gather(*(asyncio.to_thread(m.terminate, 60) for m in members))
    if opts.format == "avro":
        result.as_columns = sum(log.read_bytes().count(AS_COLUMNS.encode())
                                for log in (work / "logs").glob("p*-*.log"))
    result.clean_exits = all(c == 0 for c in codes)
    if not result.clean_exits:
        result.notes.append(f"exit codes after SIGTERM: {codes}")
    if opts.sink == "spark" and opts.merge:
        merge = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "service", "merge", "-c", str(config)],
            capture_output=True, text=True, cwd=work, timeout=600, check=False,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1",
                 "DEAD": str(work / "dead" / "merge.jsonl")})
        print(f"kstage merge exited {merge.returncode}: {merge.stdout.strip()}", flush=True)
        if merge.returncode != 0:
            result.notes.append(f"kstage merge failed:\n{merge.stderr[-3000:]}")
    await asyncio.to_thread(tally, opts, work, producer, result, high_water, catalog)


def describe(opts: Options) -> str:
    sink = opts.sink if opts.sink == "jsonl" else f"spark, appends: {opts.appends}"
    line = (f"{opts.processes} x kstage run ({sink}), {opts.partitions} partitions, "
            f"{opts.rate:g} events/s, a kill every {opts.interval_s:g} s")
    if opts.freezes:
        line += f", {opts.freezes} freezes of {opts.freeze_s:g} s"
    if opts.format != "json":
        line += f", {opts.format} events"
    if opts.catalog != "sqlite":
        line += f", a {opts.catalog} catalog"
    if opts.catalog_restarts:
        line += f" restarted {opts.catalog_restarts} times"
    if opts.s3:
        line += ", the warehouse on S3"
    if opts.s3_faults:
        line += f" failing {opts.s3_faults} times"
    return line


async def fetched_high_water(bootstrap: str, partitions: int, producer: Producer,
                             result: Result) -> dict[int, int]:
    """Every partition's high-water mark as a fetch reports it: the embedded broker's
    ListOffsets is wrong after batched sends (``end_offsets``), and the offsets its produce
    responses acknowledge were seen one short of the log's end (two ids acknowledged at
    one offset). A difference from the producer's acknowledged marks is noted."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    acked = producer.high_water()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, max(acked[tp.partition] - 1, 0))
        deadline = time.monotonic() + 60
        while any(consumer.highwater(tp) is None for tp in tps):
            if time.monotonic() > deadline:
                raise RuntimeError("no fetch answered with the high-water marks in 60 s")
            await consumer.getmany(*tps, timeout_ms=500)
        marks = {tp.partition: int(consumer.highwater(tp) or 0) for tp in tps}
    finally:
        await consumer.stop()
    if marks != acked:
        result.notes.append(f"the fetched high-water marks {marks} differ from those of "
                            f"the acknowledged sends {acked}")
    return marks


async def chaos(opts: Options, work: Path) -> Result:
    """The chaos run on the embedded broker (see the module doc)."""
    with catalog_database(opts, work) as catalog, event_values(opts) as values:
        return await chaos_embedded(opts, work, catalog, values)


async def chaos_embedded(opts: Options, work: Path, catalog: Catalog,
                         values: Values) -> Result:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from service.broker import EmbeddedBroker

    for sub in ("out", "dead", "logs"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    result = Result()
    rng = random.Random(opts.seed)
    spark = opts.sink == "spark"
    broker = EmbeddedBroker(log_path=work / "logs" / "broker.log").start()
    members: list[Member] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(TOPIC, opts.partitions, 1)])
        finally:
            await admin.close()
        config = write_config(work / "kstage.yml", opts, broker.bootstrap, catalog, values)
        producer = Producer(broker.bootstrap, opts.partitions, opts.rate, spark,
                            values=values)
        producing = asyncio.create_task(producer.run())
        tasks.append(producing)
        members = [Member(slot, config, work, opts.jsonl_per_slot)
                   for slot in range(opts.processes)]
        for m in members:
            m.start()
        print(f"chaos: {describe(opts)}; work dir {work}", flush=True)
        await wait_assigned(members, 90)
        others = [asyncio.create_task(freeze_members(members, opts, rng, result),
                                      name="freezing"),
                  asyncio.create_task(restart_catalog(catalog, opts, result),
                                      name="restarting the catalog"),
                  asyncio.create_task(s3_faults(catalog, opts, result), name="S3 faults")]
        tasks += others
        await kill_members(members, opts, rng, result, producer, producing, others)
        await finish(opts, work, config, broker.bootstrap, producer, producing, members,
                     fetched_high_water(broker.bootstrap, opts.partitions, producer,
                                        result), result, catalog)
    finally:
        await stop_tasks(tasks)
        for m in members:
            if m.frozen:
                m.thaw()
            if m.alive():
                m.kill()
        broker.stop()
    return result


async def stop_tasks(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel what still runs (a failed run), and wait for it (a freeze thaws)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# -- the cluster mode ---------------------------------------------------------------------

async def kill_brokers(cluster: Any, opts: Options, rng: random.Random, result: Result,
                       done: asyncio.Event) -> None:
    """Kill a random node, keep it down, restart it, wait until everything is in sync
    (never two down: ``min.insync.replicas=2`` keeps taking writes), until
    ``opts.broker_kills`` kills or ``done``."""
    result.broker_kills = 0
    while result.broker_kills < opts.broker_kills and not done.is_set():
        await asyncio.sleep(opts.broker_interval_s)
        node = rng.choice(cluster.nodes)
        node.kill()
        result.broker_kills += 1
        await asyncio.sleep(opts.broker_down_s)
        node.start()
        await asyncio.to_thread(node.wait_listening, 120)
        await cluster.wait_brokers({n.node_id for n in cluster.nodes}, 120)
        await cluster.wait_in_sync(timeout_s=180)
        if result.broker_kills % 5 == 0:
            print(f"broker_kills={result.broker_kills}", flush=True)


async def end_offsets(bootstrap: str, partitions: int) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(TOPIC, p) for p in range(partitions)])
    finally:
        await consumer.stop()
    return {tp.partition: offset for tp, offset in ends.items()}


async def chaos_on_cluster(opts: Options, work: Path) -> Result:
    """The chaos run on a 3-node Apache Kafka cluster (see the module doc)."""
    with catalog_database(opts, work) as catalog, event_values(opts) as values:
        return await chaos_cluster(opts, work, catalog, values)


async def chaos_cluster(opts: Options, work: Path, catalog: Catalog,
                        values: Values) -> Result:
    from tests.apache_kafka import KafkaCluster

    for sub in ("out", "dead", "logs"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    result = Result()
    rng = random.Random(opts.seed)
    members: list[Member] = []
    tasks: list[asyncio.Task[None]] = []
    with KafkaCluster(work / "kafka", size=3, heap_mb=256) as cluster:
        try:
            await cluster.create_topic(TOPIC, opts.partitions, replication=3)
            config = write_config(work / "kstage.yml", opts, cluster.bootstrap, catalog,
                                  values)
            # Idempotent: a send retried after a lost acknowledgement (a broker killed
            # mid-request) must not land twice, or final_dup would count the producer's.
            producer = Producer(cluster.bootstrap, opts.partitions, opts.rate,
                                opts.sink == "spark", "all", idempotent=True,
                                values=values)
            producing = asyncio.create_task(producer.run())
            tasks.append(producing)
            members = [Member(slot, config, work, opts.jsonl_per_slot)
                       for slot in range(opts.processes)]
            for m in members:
                m.start()
            print(f"chaos on a 3-node Apache Kafka cluster: {describe(opts)}, a broker "
                  f"kill every {opts.broker_interval_s:g} s; work dir {work}", flush=True)
            await wait_assigned(members, 90)
            done = asyncio.Event()
            brokers = asyncio.create_task(kill_brokers(cluster, opts, rng, result, done),
                                          name="killing brokers")
            others = [brokers,
                      asyncio.create_task(freeze_members(members, opts, rng, result),
                                          name="freezing"),
                      asyncio.create_task(restart_catalog(catalog, opts, result),
                                          name="restarting the catalog"),
                      asyncio.create_task(s3_faults(catalog, opts, result),
                                          name="S3 faults")]
            tasks += others
            await kill_members(members, opts, rng, result, producer, producing, others)
            done.set()
            await finish(opts, work, config, cluster.bootstrap, producer, producing,
                         members, end_offsets(cluster.bootstrap, opts.partitions), result,
                         catalog)
        finally:
            await stop_tasks(tasks)
            for m in members:
                if m.frozen:
                    m.thaw()
                if m.alive():
                    m.kill()
    return result


def report(result: Result) -> None:
    for note in result.notes[:20]:
        print(f"note: {note}")
    evicted = "" if result.freezes is None else f" evicted={result.evicted}"
    if result.as_columns is not None:
        evicted += f" as_columns={result.as_columns}"
    print(f"produced={result.produced} send_failed={result.send_failed} torn={result.torn} "
          f"uncovered={result.uncovered} dead={result.dead}{evicted} "
          f"drained={result.drained} clean_exits={result.clean_exits}")
    print(f"duplicate ratio: {result.dup_ratio:.4f} ({result.dup} duplicates / "
          f"{result.produced} events)")
    print(result.last_line(), flush=True)


def parse(argv: list[str] | None) -> Options:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--sink", choices=("jsonl", "spark"), default="jsonl")
    p.add_argument("--kills", type=int, default=None,
                   help="SIGKILLs to make (default 100 for jsonl, 10 for spark)")
    p.add_argument("--processes", type=int, default=None,
                   help="kstage processes (default 3 for jsonl, 2 for spark)")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--interval-s", type=float, default=None,
                   help="seconds between kills (default 4 for jsonl, 30 for spark: a Spark "
                   "member needs ~20 s to start its session and join)")
    p.add_argument("--rate", type=float, default=None,
                   help="events/s produced (default 200 for jsonl, 100 for spark)")
    p.add_argument("--drain-timeout-s", type=float, default=180.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jsonl-per-slot", action="store_true",
                   help="one JSONL file per process slot, appended to by each restart")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="kept after the run (default: a temporary directory, removed)")
    p.add_argument("--cluster", action="store_true",
                   help="a 3-node Apache Kafka cluster whose brokers are killed too")
    p.add_argument("--broker-kills", type=int, default=30,
                   help="with --cluster: broker SIGKILLs to make (default 30)")
    p.add_argument("--broker-interval-s", type=float, default=10.0,
                   help="with --cluster: seconds between a broker's return and the next kill")
    p.add_argument("--broker-down-s", type=float, default=3.0,
                   help="with --cluster: seconds a killed broker stays down")
    p.add_argument("--appends", choices=("spark", "pyiceberg"), default="spark",
                   help="with --sink spark: what appends to the Iceberg staging table "
                   "(spark.appends; pyiceberg starts no JVM until the merge)")
    p.add_argument("--freezes", type=int, default=0,
                   help="SIGSTOPs of a member's process tree, each as one of its appends "
                   "starts, for --freeze-s (--sink spark; default 0)")
    p.add_argument("--freeze-s", type=float, default=FREEZE_S,
                   help="seconds a frozen member stays stopped (default: the session "
                   f"timeout + 8 = {FREEZE_S:g})")
    p.add_argument("--freeze-interval-s", type=float, default=5.0,
                   help="seconds between a thaw and the choice of the next member to freeze")
    p.add_argument("--no-merge", dest="merge", action="store_false",
                   help="with --sink spark: no kstage merge (no JVM with --appends "
                   "pyiceberg); the final table is not counted (final_lost=- final_dup=-)")
    p.add_argument("--catalog", choices=("sqlite", "postgres"), default="sqlite",
                   help="with --sink spark: the Iceberg JDBC catalog's database (postgres: "
                   "a PostgreSQL server of the run, tests/postgres.py)")
    p.add_argument("--catalog-restarts", type=int, default=0,
                   help="with --catalog postgres: restarts of the catalog's server")
    p.add_argument("--catalog-interval-s", type=float, default=20.0,
                   help="seconds between a catalog restart and the next")
    p.add_argument("--catalog-down-s", type=float, default=3.0,
                   help="seconds the catalog's server stays down at each restart")
    p.add_argument("--s3", action="store_true",
                   help="with --sink spark: the warehouse on S3 (moto's server, "
                   "tests/s3_server.py) through a proxy; the catalog's database stays local")
    p.add_argument("--s3-faults", type=int, default=0,
                   help="with --s3: windows of S3 answering 503, each followed by one of "
                   "S3 slow")
    p.add_argument("--s3-interval-s", type=float, default=20.0,
                   help="seconds between the S3 faults")
    p.add_argument("--s3-fault-s", type=float, default=5.0,
                   help="seconds of 503 answers, then as many of slowness, per S3 fault")
    p.add_argument("--format", choices=("json", "avro"), default="json",
                   help="the events: JSON, or registry Avro (Spark sink: batches of a "
                        "backlog go as columns)")
    p.add_argument("--s3-delay-s", type=float, default=0.2,
                   help="while S3 is slow: seconds each chunk of bytes is held, either way")
    a = p.parse_args(argv)
    if a.s3 and a.sink != "spark":
        p.error("--s3 is the Spark sink's warehouse: --sink spark")
    if a.s3_faults and not a.s3:
        p.error("--s3-faults need --s3")
    if a.catalog != "sqlite" and a.sink != "spark":
        p.error("--catalog is the Spark sink's: --sink spark")
    if a.catalog_restarts and a.catalog != "postgres":
        p.error("--catalog-restarts restart a PostgreSQL catalog: --catalog postgres")
    if a.format == "avro" and a.sink != "spark":
        p.error("--format avro is the Spark sink's (gobblin_compaction as columns): "
                "--sink spark")
    if a.freezes and a.sink != "spark":
        p.error("--freezes freeze the members of the Iceberg staging path: --sink spark")
    spark = a.sink == "spark"
    return Options(
        sink=a.sink, kills=a.kills if a.kills is not None else (10 if spark else 100),
        processes=a.processes or (2 if spark else 3), partitions=a.partitions,
        interval_s=a.interval_s or (30.0 if spark else 4.0),
        rate=a.rate or (100.0 if spark else 200.0), work_dir=a.work_dir, seed=a.seed,
        drain_timeout_s=a.drain_timeout_s, jsonl_per_slot=a.jsonl_per_slot,
        cluster=a.cluster, broker_kills=a.broker_kills,
        broker_interval_s=a.broker_interval_s, broker_down_s=a.broker_down_s,
        appends=a.appends, freezes=a.freezes, freeze_s=a.freeze_s,
        freeze_interval_s=a.freeze_interval_s, merge=a.merge, catalog=a.catalog,
        catalog_restarts=a.catalog_restarts, catalog_interval_s=a.catalog_interval_s,
        catalog_down_s=a.catalog_down_s, s3=a.s3, s3_faults=a.s3_faults,
        s3_interval_s=a.s3_interval_s, s3_fault_s=a.s3_fault_s, s3_delay_s=a.s3_delay_s,
        format=a.format)


def run(opts: Options) -> Result:
    """One chaos run (what ``main`` and the CI test call)."""
    if opts.work_dir is not None:
        opts.work_dir.mkdir(parents=True, exist_ok=True)
        return asyncio.run(guarded(opts, opts.work_dir.resolve()))
    with tempfile.TemporaryDirectory(prefix="kstage-chaos-") as tmp:
        return asyncio.run(guarded(opts, Path(tmp)))


async def guarded(opts: Options, work: Path) -> Result:
    """The run, cancelled by a SIGTERM (a ``timeout`` around the bench) so that its
    cleanup runs: the members live in their own sessions and would outlive it."""
    mode = chaos_on_cluster if opts.cluster else chaos
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    with contextlib.suppress(ValueError, RuntimeError):  # not the main thread (a test)
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    return await mode(opts, work)


def main(argv: list[str] | None = None) -> int:
    try:
        result = run(parse(argv))
    except asyncio.CancelledError:
        print("chaos: stopped by SIGTERM (members thawed and killed, brokers stopped)",
              flush=True)
        return 128 + signal.SIGTERM
    report(result)
    return 0 if result.ok else 1


if __name__ == "__main__":
    # Not bench/ first: its http.py would shadow the standard library's (httpx, --s3).
    sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench")]
    sys.exit(main())
