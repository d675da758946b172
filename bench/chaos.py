"""The chaos run: kstage processes of one group SIGKILLed and restarted while a producer writes.

    python bench/chaos.py --sink jsonl --kills 100            # 3 processes, JSONL sink
    python bench/chaos.py --sink spark --kills 10             # 2 processes, Spark + merge

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
4. stops producing, lets the members drain: waits (up to ``--drain-timeout-s``) until the
   group's committed offset equals the high-water mark of every partition (the producer's
   last acknowledged offset + 1: ``end_offsets`` is wrong on this broker), then SIGTERMs
   them (exit 0 expected) and, for Spark, runs ``kstage merge`` once.
5. reads every output and counts, against the produced ids:

   * ``lost``: produced ids found in no output; ``dup``: occurrences beyond the first
     (all rows of every JSONL file, or every row of the Spark staging table). The
     duplicate ratio is ``dup / produced``: the at-least-once price of the kills (JSONL);
     the Iceberg staging table is exactly once, so for Spark a ``dup`` fails the run.
   * ``final_lost`` / ``final_dup``: the same, after the deduplication a downstream
     consumer applies. Spark: the final table written by ``kstage merge``. JSONL: the
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

With ``--cluster`` (JSONL only) the broker is a 3-node Apache Kafka cluster instead
(KRaft, replication factor 3, ``min.insync.replicas=2``, the producer idempotent with
``acks=all``; ``make kafka-jars`` fetches its jars): besides the member kills, a node is
SIGKILLed every ``--broker-interval-s`` seconds, kept down ``--broker-down-s`` seconds,
restarted, and the next kill waits until every partition is in sync again, until
``--broker-kills`` kills were made (:func:`chaos_on_cluster`). The high-water marks are
the cluster's end offsets.

Last lines: the duplicate ratio, then exactly
``lost=<n> dup=<n> final_lost=<n> final_dup=<n> kills=<k>`` (with ``--cluster``, then
`` broker_kills=<b>``). The exit code is 0 when lost, final_lost and final_dup are 0 (and
dup, for Spark), every partition drained and every member stopped cleanly; 1 otherwise.
The tables are read with pyiceberg through the run's catalog.
``tests/integration/test_chaos.py`` runs a 10-kill JSONL variant.
"""

from __future__ import annotations

import argparse
import asyncio
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


@dataclass
class Result:
    """What the run counted (see the module docstring)."""

    produced: int = 0
    send_failed: int = 0
    lost: int = 0
    dup: int = 0
    final_lost: int = 0
    final_dup: int = 0
    kills: int = 0
    broker_kills: int | None = None  # the cluster mode's
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
        return (self.lost == 0 and self.final_lost == 0 and self.final_dup == 0
                and (self.dup == 0 or not self.exactly_once)
                and self.uncovered == 0 and self.drained and self.clean_exits)

    def last_line(self) -> str:
        line = (f"lost={self.lost} dup={self.dup} final_lost={self.final_lost} "
                f"final_dup={self.final_dup} kills={self.kills}")
        return line if self.broker_kills is None else f"{line} broker_kills={self.broker_kills}"


# -- the producer -------------------------------------------------------------------------

class Producer:
    """Writes ``{"id": n, ...}`` events at a steady rate; remembers what the broker acked."""

    def __init__(self, bootstrap: str, partitions: int, rate: float, spark: bool,
                 acks: int | str = 1, idempotent: bool = False) -> None:
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
                    fut = await producer.send(TOPIC, json.dumps(self.value(i)).encode(),
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
        path = self.work / "logs" / f"p{self.slot}-{self.incarnation}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

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


def write_config(path: Path, opts: Options, bootstrap: str) -> Path:
    spark = opts.sink == "spark"
    topic: dict[str, Any] = {"topic": TOPIC, "format": "json"}
    if spark:
        topic.update(processor="gobblin_compaction", sink={"type": "spark"})
    else:
        topic.update(processor="json_rows", sink={"type": "jsonl", "path": "${OUT}"})
    cfg: dict[str, Any] = {
        "name": GROUP,
        "kafka": {"bootstrap": bootstrap},
        "service": {"http_port": 0, "log_level": "INFO"},
        "supervisor": {"shutdown_grace_s": 30, "abort_grace_s": 10},
        "groups": [{
            "group_id": GROUP,
            "auto_offset_reset": "earliest",
            "max_poll_records": 200,
            **_GROUP_TIMING,
            "commit": {"mode": "batch", "max_messages": 100, "max_interval_s": 0.5},
            "failure": {"mode": "continue", "dead_letter_path": "${DEAD}"},
            "topics": [topic],
        }],
    }
    if spark:
        cfg["spark"] = {"master": "local[1]", "warehouse": str(path.parent / "warehouse"),
                        "flush_max_rows": 5000, "flush_max_interval_s": 1.0,
                        "conf": {"spark.driver.memory": "512m", "spark.ui.enabled": "false"}}
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


def read_spark_tables(work: Path) -> dict[str, list[list[Any]] | None]:
    """The staging and final tables' (dataset, Kafka partition, offset) rows, read with
    pyiceberg through the run's SQLite catalog (None: no such table)."""
    from pyiceberg.catalog.sql import SqlCatalog  # dev dependency
    from pyiceberg.exceptions import NoSuchTableError

    warehouse = work / "warehouse"
    catalog = SqlCatalog("kstage", uri=f"sqlite:///{warehouse / 'catalog.db'}",
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


def tally(opts: Options, work: Path, producer: Producer, result: Result) -> None:
    produced = set(producer.acked)
    marks = producer.high_water()
    result.dead = sum(len(p.read_bytes().splitlines()) for p in (work / "dead").glob("*"))
    if opts.sink == "jsonl":
        rows = read_jsonl_outputs(work, result)
        result.lost, result.dup = count(Counter(int(r["id"]) for r in rows), produced)
        by_coords = {(r["_topic"], r["_partition"], r["_offset"]): int(r["id"]) for r in rows}
        result.final_lost, result.final_dup = count(Counter(by_coords.values()), produced)
        seen = {(p, o) for _, p, o in by_coords}
    else:
        result.exactly_once = True
        tables = read_spark_tables(work)
        staging, final = tables[SPARK_TABLE] or [], tables[SPARK_FINAL]
        result.lost, result.dup = count(Counter(spark_id(d) for d, _, _ in staging), produced)
        if final is None:
            result.notes.append("no final table: did kstage merge run?")
            final = []
        result.final_lost, result.final_dup = count(
            Counter(spark_id(d) for d, _, _ in final), produced)
        seen = {(p, o) for _, p, o in staging}
    result.uncovered = sum(1 for p, hw in marks.items() for o in range(hw)
                           if (p, o) not in seen)


# -- the run ------------------------------------------------------------------------------

async def chaos(opts: Options, work: Path) -> Result:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from service.broker import EmbeddedBroker

    for sub in ("out", "dead", "logs"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    result = Result()
    rng = random.Random(opts.seed)
    spark = opts.sink == "spark"
    broker = EmbeddedBroker(log_path=work / "logs" / "broker.log").start()
    members: list[Member] = []
    try:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(TOPIC, opts.partitions, 1)])
        finally:
            await admin.close()
        config = write_config(work / "kstage.yml", opts, broker.bootstrap)
        producer = Producer(broker.bootstrap, opts.partitions, opts.rate, spark)
        producing = asyncio.create_task(producer.run())
        members = [Member(slot, config, work, opts.jsonl_per_slot)
                   for slot in range(opts.processes)]
        for m in members:
            m.start()
        print(f"chaos: {opts.processes} x kstage run ({opts.sink}), {opts.partitions} "
              f"partitions, {opts.rate:g} events/s, a kill every {opts.interval_s:g} s; "
              f"work dir {work}", flush=True)
        await wait_assigned(members, 90)
        started = time.monotonic()
        while result.kills < opts.kills:
            await asyncio.sleep(opts.interval_s)
            if producing.done():
                raise RuntimeError(f"the producer stopped: {producing.exception()!r}")
            victim = rng.choice(members)
            was_alive = victim.alive()
            victim.kill()
            if not was_alive:
                assert victim.proc is not None
                result.notes.append(f"p{victim.slot}-{victim.incarnation} had exited "
                                    f"{victim.proc.returncode} before its kill")
            victim.start()
            result.kills += 1
            if result.kills % 10 == 0:
                print(f"kills={result.kills} produced={len(producer.acked)} "
                      f"after {time.monotonic() - started:.0f} s", flush=True)
        producer.stop()
        await producing
        result.produced, result.send_failed = len(producer.acked), producer.failed
        marks = producer.high_water()
        print(f"produced={result.produced} send_failed={result.send_failed}; draining to "
              f"high-water {sum(marks.values())}", flush=True)
        result.drained = await wait_drained(broker.bootstrap, marks, opts.drain_timeout_s,
                                            members)
        codes = await asyncio.gather(*(asyncio.to_thread(m.terminate, 60) for m in members))
        result.clean_exits = all(c == 0 for c in codes)
        if not result.clean_exits:
            result.notes.append(f"exit codes after SIGTERM: {codes}")
        if spark:
            merge = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "service", "merge", "-c", str(config)],
                capture_output=True, text=True, cwd=work, timeout=600, check=False,
                env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1",
                     "DEAD": str(work / "dead" / "merge.jsonl")})
            print(f"kstage merge exited {merge.returncode}: {merge.stdout.strip()}", flush=True)
            if merge.returncode != 0:
                result.notes.append(f"kstage merge failed:\n{merge.stderr[-3000:]}")
        await asyncio.to_thread(tally, opts, work, producer, result)
    finally:
        for m in members:
            if m.alive():
                m.kill()
        broker.stop()
    return result


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
    from tests.apache_kafka import KafkaCluster

    for sub in ("out", "dead", "logs"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    result = Result()
    rng = random.Random(opts.seed)
    members: list[Member] = []
    with KafkaCluster(work / "kafka", size=3, heap_mb=256) as cluster:
        try:
            await cluster.create_topic(TOPIC, opts.partitions, replication=3)
            config = write_config(work / "kstage.yml", opts, cluster.bootstrap)
            # Idempotent: a send retried after a lost acknowledgement (a broker killed
            # mid-request) must not land twice, or final_dup would count the producer's.
            producer = Producer(cluster.bootstrap, opts.partitions, opts.rate, False, "all",
                                idempotent=True)
            producing = asyncio.create_task(producer.run())
            members = [Member(slot, config, work, opts.jsonl_per_slot)
                       for slot in range(opts.processes)]
            for m in members:
                m.start()
            print(f"chaos on a 3-node Apache Kafka cluster: {opts.processes} x kstage run, "
                  f"{opts.partitions} partitions, {opts.rate:g} events/s, a member kill "
                  f"every {opts.interval_s:g} s, a broker kill every "
                  f"{opts.broker_interval_s:g} s; work dir {work}", flush=True)
            await wait_assigned(members, 90)
            done = asyncio.Event()
            brokers = asyncio.create_task(kill_brokers(cluster, opts, rng, result, done))
            started = time.monotonic()
            while result.kills < opts.kills or not brokers.done():
                await asyncio.sleep(opts.interval_s)
                if producing.done():
                    raise RuntimeError(f"the producer stopped: {producing.exception()!r}")
                if brokers.done() and brokers.exception() is not None:
                    raise RuntimeError(f"killing brokers failed: {brokers.exception()!r}")
                if result.kills >= opts.kills:
                    continue
                victim = rng.choice(members)
                victim.kill()
                victim.start()
                result.kills += 1
                if result.kills % 10 == 0:
                    print(f"kills={result.kills} broker_kills={result.broker_kills} "
                          f"produced={len(producer.acked)} after "
                          f"{time.monotonic() - started:.0f} s", flush=True)
            done.set()
            await brokers
            producer.stop()
            await producing
            result.produced, result.send_failed = len(producer.acked), producer.failed
            marks = await end_offsets(cluster.bootstrap, opts.partitions)
            print(f"produced={result.produced} send_failed={result.send_failed}; draining "
                  f"to high-water {sum(marks.values())}", flush=True)
            result.drained = await wait_drained(cluster.bootstrap, marks,
                                                opts.drain_timeout_s, members)
            codes = await asyncio.gather(*(asyncio.to_thread(m.terminate, 60)
                                           for m in members))
            result.clean_exits = all(c == 0 for c in codes)
            if not result.clean_exits:
                result.notes.append(f"exit codes after SIGTERM: {codes}")
            await asyncio.to_thread(tally, opts, work, producer, result)
            result.uncovered = uncovered(work, marks)
        finally:
            for m in members:
                if m.alive():
                    m.kill()
    return result


def uncovered(work: Path, marks: dict[int, int]) -> int:
    """Offsets below the cluster's end offsets in no output (the producer's own marks
    miss the records of sends whose acknowledgement was lost)."""
    seen = {(int(r["_partition"]), int(r["_offset"])) for r in read_jsonl_outputs(
        work, Result())}
    return sum(1 for p, end in marks.items() for o in range(end) if (p, o) not in seen)


def report(result: Result) -> None:
    for note in result.notes[:20]:
        print(f"note: {note}")
    print(f"produced={result.produced} send_failed={result.send_failed} torn={result.torn} "
          f"uncovered={result.uncovered} dead={result.dead} drained={result.drained} "
          f"clean_exits={result.clean_exits}")
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
                   help="a 3-node Apache Kafka cluster whose brokers are killed too (jsonl)")
    p.add_argument("--broker-kills", type=int, default=30,
                   help="with --cluster: broker SIGKILLs to make (default 30)")
    p.add_argument("--broker-interval-s", type=float, default=10.0,
                   help="with --cluster: seconds between a broker's return and the next kill")
    p.add_argument("--broker-down-s", type=float, default=3.0,
                   help="with --cluster: seconds a killed broker stays down")
    a = p.parse_args(argv)
    if a.cluster and a.sink != "jsonl":
        p.error("--cluster runs the jsonl sink")
    spark = a.sink == "spark"
    return Options(
        sink=a.sink, kills=a.kills if a.kills is not None else (10 if spark else 100),
        processes=a.processes or (2 if spark else 3), partitions=a.partitions,
        interval_s=a.interval_s or (30.0 if spark else 4.0),
        rate=a.rate or (100.0 if spark else 200.0), work_dir=a.work_dir, seed=a.seed,
        drain_timeout_s=a.drain_timeout_s, jsonl_per_slot=a.jsonl_per_slot,
        cluster=a.cluster, broker_kills=a.broker_kills,
        broker_interval_s=a.broker_interval_s, broker_down_s=a.broker_down_s)


def run(opts: Options) -> Result:
    """One chaos run (what ``main`` and the CI test call)."""
    mode = chaos_on_cluster if opts.cluster else chaos
    if opts.work_dir is not None:
        opts.work_dir.mkdir(parents=True, exist_ok=True)
        return asyncio.run(mode(opts, opts.work_dir.resolve()))
    with tempfile.TemporaryDirectory(prefix="kstage-chaos-") as tmp:
        return asyncio.run(mode(opts, Path(tmp)))


def main(argv: list[str] | None = None) -> int:
    result = run(parse(argv))
    report(result)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
