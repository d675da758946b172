"""The run both peer benchmarks share: one Apache Kafka broker, kstage's two runs, a peer's
process runs, the checks, the report.

* Broker: one Apache Kafka 4.4.0 node (KRaft, tests/apache_kafka.py, jars of ``make
  kafka-jars``), not the embedded Tansu: Spark's Kafka source reads "up to latest"
  with ListOffsets, which Tansu answers wrongly after batched produce. All systems of a
  run use it, one at a time.
* kstage, throughput: ``kstage run --drain`` of the backlog (bench/throughput.py's
  ``--format spark`` settings: ``flush_max_rows`` 60 000, a commit after every durable
  write); freshness: ``kstage run`` with the ``spark:`` defaults at half of that rate
  (bench/latency.py's method: a paced producer in a process of its own stamps each
  event, a pyiceberg reader polls the catalog every 100 ms).
* A peer: the same two runs through :func:`run_to_exit` (a backlog, until the process
  exits) and :func:`freshness` (paced events until every row is visible, then SIGTERM).

Every table is read back whole afterwards (rows == distinct offsets == n, offsets
0..n-1) and its layout compared with kstage's table.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import throughput
from figures import Figures, Pace
from latency import (
    SPARK_POLL_S,
    START_TIMEOUT_S,
    IcebergReader,
    _wait_for_log,
    await_visible,
    latency_run,
    produce_apart,
)
from procs import ProcessTree, sample_until, stop_group
from tables import landed, layout, total_rows
from throughput import (
    _ASSIGNED,
    BenchError,
    Workload,
    _log_times,
    create_topic,
    run_kstage,
    spark_workload,
    unique,
)

from tests.apache_kafka import KafkaCluster

RUN_TIMEOUT_S = 900.0


@contextmanager
def apache_kafka(workdir: Path, bootstrap: str | None = None) -> Iterator[str]:
    """One Apache Kafka node for the run; its bootstrap address. Stopped (SIGKILL by its
    pid) at the end. With ``bootstrap``, that broker instead (the suite's short runs on
    its shared node), whose CPU is then not measured."""
    if bootstrap is not None:
        yield bootstrap
        return
    cluster = KafkaCluster(workdir / "kafka", 1, heap_mb=512)
    cluster.start()
    throughput.BROKER_PID = cluster.nodes[0].pid
    try:
        yield cluster.bootstrap
    finally:
        cluster.kill()


def check_landed(warehouse: Path, table: str, n: int, what: str) -> tuple[int, float]:
    """The table holds every offset 0..n-1 exactly once; its data files and the wall
    clock of the first snapshot holding n rows."""
    got = landed(warehouse, table, n)
    if not (got.rows == got.offsets == n and got.first == 0 and got.last == n - 1):
        raise BenchError(f"{what}: table {table} in {warehouse} holds {got}, expected {n} "
                         f"rows, offsets 0..{n - 1} once each")
    assert got.full_at is not None
    return got.data_files, got.full_at


def check_layout(reference: Path, warehouse: Path, table: str, what: str) -> None:
    """``what``'s table has the columns and partitioning of kstage's."""
    want, got = layout(reference, table), layout(warehouse, table)
    if want != got:
        raise BenchError(f"{what}: table {table} is not kstage's layout: {got} != {want}")


def fresh_workload(workdir: Path) -> Workload:
    """kstage's Gobblin workload for a freshness run: the settings of its throughput run
    (``flush_max_rows`` 60 000, the other flush limits the ``spark:`` defaults:
    ``flush_min_rows`` 1 000 while no append runs, ``flush_idle_s`` 1): appends start
    back to back and one takes all that waits, as Spark's default trigger does; with the
    default ``flush_max_rows`` (10 000) a backlog left by the fresh JVM's first appends
    drained slowly (p99 2.3 s at 16 236 events/s, 9.8 s at 13 024/s on a loaded
    machine)."""
    where = workdir / f"fresh-{len(list(workdir.iterdir()))}"
    where.mkdir()
    return spark_workload(0, where)


async def kstage_figures(bootstrap: str, workdir: Path, topic: str, n: int, work: Workload,
                         pace: Pace, table: str, fresh_work: Workload | None = None,
                         events: str = "gobblin", stamp_column: str = "log_event_time"
                         ) -> tuple[Figures, Path]:
    """kstage's throughput run on ``topic`` (a backlog of ``n`` events, ``work``), then
    its freshness run at half its rate (``pace``; ``fresh_work``, default
    :func:`fresh_workload`; paced ``events`` whose stamp lands in ``stamp_column``); its
    figures and its warehouse."""
    ks = await run_kstage(bootstrap, topic, n, workdir, work, work.processor)
    assert ks.warehouse is not None
    log = (ks.warehouse.parent / "kstage.log").read_text(errors="replace")
    start = _log_times(_ASSIGNED, log)[0].timestamp()
    files, full_at = check_landed(ks.warehouse, table, n, "kstage")
    fig = Figures("kstage", "flush_max_rows 60000, the other flush limits the spark: "
                  "defaults, for both runs", n=n, window_s=full_at - start,
                  cpu_s=ks.window_cpu_s[0] + ks.window_cpu_s[1], jvm_cpu_s=ks.window_cpu_s[1],
                  rss_mb=(ks.peak_rss_kb + ks.jvm_peak_rss_kb) / 1024, data_files=files)
    total = fig.plan(pace)
    reader = IcebergReader(table, stamp_column)
    await latency_run(bootstrap, workdir, fresh_work or fresh_workload(workdir), total,
                      fig.rate, events, reader, SPARK_POLL_S)
    fig.measure(reader.seen, reader.files)
    return fig, ks.warehouse


async def run_to_exit(cmd: list[str], log_path: Path, what: str) -> tuple[ProcessTree, str]:
    """Run ``cmd`` (its own process group) until it exits 0, sampling its process tree;
    the tree and its output."""
    with open(log_path, "wb") as log:  # noqa: ASYNC230 - opened once, before the run
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=log, stderr=log, start_new_session=True)
    tree = ProcessTree(proc.pid)
    waiter = asyncio.ensure_future(proc.wait())
    try:
        await sample_until(tree, waiter, RUN_TIMEOUT_S, what, log_path)
    finally:
        await stop_group(proc)
    text = log_path.read_text(errors="replace")  # noqa: ASYNC240 - once, after the run
    if proc.returncode != 0:
        raise BenchError(f"{what} exited {proc.returncode}; log {log_path}:\n{text[-4000:]}")
    return tree, text


async def run_until_rows(cmd: list[str], log_path: Path, what: str, warehouse: Path,
                         table: str, n: int, fatal: re.Pattern[str]
                         ) -> tuple[ProcessTree, str]:
    """Run ``cmd`` (a service that does not exit by itself) until its table holds ``n``
    rows (the current snapshot's summary, read every 0.5 s), sampling its process tree;
    then SIGTERM. BenchError when it exits first or its log matches ``fatal``."""
    with open(log_path, "wb") as log:  # noqa: ASYNC230 - opened once, before the run
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=log, stderr=log, start_new_session=True)
    tree = ProcessTree(proc.pid)
    waiter = asyncio.ensure_future(proc.wait())
    deadline = time.monotonic() + RUN_TIMEOUT_S
    next_check = 0.0
    try:
        while True:
            tree.sample()
            if time.monotonic() > next_check:
                next_check = time.monotonic() + 0.5
                if await asyncio.to_thread(total_rows, warehouse, table) >= n:
                    break
                text = await asyncio.to_thread(log_path.read_text, errors="replace")
                if fatal.search(text) or waiter.done() or time.monotonic() > deadline:
                    raise BenchError(f"{what} failed, exited or timed out before its table "
                                     f"held {n} rows; log {log_path}")
            await asyncio.wait([waiter], timeout=0.05)
    finally:
        await stop_group(proc)
    return tree, log_path.read_text(errors="replace")  # noqa: ASYNC240 - once, at the end


async def freshness(bootstrap: str, workdir: Path, what: str, table: str, events: str,
                    n: int, rate: float, ready: re.Pattern[str],
                    start: Callable[[str, Path, Path], list[str]],
                    stamp_column: str = "log_event_time"
                    ) -> IcebergReader:
    """A peer's freshness run: on a new topic, ``start(topic, run_dir, warehouse)``
    gives the command of the peer (its table made or making itself in ``warehouse``);
    once its log matches ``ready``, ``n`` ``events`` are produced at ``rate`` per s and
    the table polled until every row is visible; then the peer gets SIGTERM. The reader,
    which saw ``seen`` (``{offset: (visible, stamp)}``) and ``files``."""
    topic = unique(f"fresh-{what}")
    await create_topic(bootstrap, topic)
    run_dir = workdir / topic
    run_dir.mkdir()
    reader = IcebergReader(table, stamp_column)
    reader.warehouse = run_dir / "warehouse"
    cmd = start(topic, run_dir, reader.warehouse)
    log_path = run_dir / f"{what}.log"
    with open(log_path, "wb") as log:  # noqa: ASYNC230 - opened once, before the run
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=log, stderr=log, start_new_session=True)
    try:
        await _wait_for_log(log_path, ready, proc, START_TIMEOUT_S)
        producing = asyncio.ensure_future(produce_apart(bootstrap, topic, n, rate, events))
        await await_visible(proc, reader, producing, n, SPARK_POLL_S, log_path, what)
    finally:
        await stop_group(proc)
    if sorted(reader.seen) != list(range(n)):
        raise BenchError(f"{what}: rows seen are not offsets 0..{n - 1}; log {log_path}")
    return reader
