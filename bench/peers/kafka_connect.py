"""kstage against Kafka Connect with Apache Iceberg's sink connector, landing the same Kafka
events in the same Iceberg table layout (issue 24).

Usage (jars: ``make kafka-jars peer-jars`` and ``kstage jars fetch``)::

    python bench/peers/kafka_connect.py [--messages N] [--fresh-s S]
                                        [--commit-interval-ms MS] [--fresh-commit-interval-ms MS]
                                        [--appends spark|pyiceberg] [--rounds N] [--keep]

One run, one Apache Kafka broker (bench/peers/harness.py), one system at a time on the
same 2 cores: N WhereHows Gobblin compaction events (those of ``bench/throughput.py
--format spark``) are produced once as Avro in the Confluent wire format (kstage's
input) and once as JSON (Connect's: Confluent's Avro converter is not on Maven Central),
each to a 1-partition topic, then

1. kstage drains the Avro topic into its Iceberg staging table (``gobblin_compaction``),
   then runs its freshness run (harness.kstage_figures);
2. a Kafka Connect standalone worker with Iceberg's sink (bench/peers/connect_worker.py:
   JSON converter, the mapping in Kafka's built-in SMTs, the SQLite JDBC catalog of a
   warehouse of its own, the table made beforehand with kstage's layout) drains the JSON
   topic with ``iceberg.control.commit.interval-ms`` ``--commit-interval-ms`` (default
   5000: of 1, 2, 5 and 10 s, the one that gave the most events/s with 200k events
   here, 2026-11-26: the worker drained them in 5-6 s, and the rows count once a
   commit holds them; Iceberg's default, 300 s, would hold them for 5 minutes), until
   its table holds N rows; then its freshness run with ``--fresh-commit-interval-ms``
   (default 1000) and ``--fresh-commit-timeout-ms`` (default 2000) at half of its own
   rate, after ``--warm-s`` of warm-up. At 7 736 events/s, 2026-11-26: p99 1.8 s with
   0.5 s commits, 1.4 s with 1 s; with the default timeout (30 s) the first commit
   request, sent before the sink started its commit worker, held every row for 30 s
   (p99 21 s at any interval).

Printed per system: events/s counted in the table, freshness p50/p99, CPU seconds per
100k events, peak RSS of all its processes, data files per 100k events
(bench/peers/figures.py); the last line is kstage's ratios to Kafka Connect.
``--appends`` chooses what writes kstage's staging appends (``spark.appends``). With
``--rounds N``, the whole run (kstage, then Connect) is done N times alternating, on the
same broker, each round on topics of its own; then each system's medians, from which the
last line is.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from pathlib import Path

import orjson
import runs
from _paths import check_jars
from connect_worker import command
from figures import Figures, Pace, line
from harness import (
    check_landed,
    check_layout,
    fresh_workload,
    freshness,
    kstage_figures,
    run_until_rows,
)
from tables import create_like
from throughput import (
    _SAMPLE_CHUNK,
    BenchError,
    Workload,
    produce_workload,
    spark_workload,
)

from processors.gobblin import GobblinCompactionProcessor
from service.dev.samples import SAMPLE_TOPICS, sample_records

TABLE = GobblinCompactionProcessor.table
# The sink task's consumer got the partition: the start of Connect's window.
_ASSIGNED = re.compile(r"^\[(\S+)\] INFO \[Consumer clientId=connector-consumer-\S+, "
                       r"groupId=\S+\] Adding newly assigned partitions", re.MULTILINE)
_READY = re.compile(r"Adding newly assigned partitions: \[control-")
_FATAL = re.compile(r"Task threw an uncaught and unrecoverable exception")


def json_workload(n: int) -> Workload:
    """The events of :func:`throughput.spark_workload` (same records, same seeds) as JSON
    objects."""
    sample = next(t for t in SAMPLE_TOPICS if t.processor == "gobblin_compaction")
    values: list[bytes] = []
    for chunk, start in enumerate(range(0, n, _SAMPLE_CHUNK)):
        records = sample_records(sample, min(_SAMPLE_CHUNK, n - start), seed=chunk)
        values += [orjson.dumps(r) for r in records]
    return Workload("JSON Gobblin compaction", values, orjson.loads)


async def connect_figures(bootstrap: str, workdir: Path, topic: str, n: int,
                          args: argparse.Namespace, reference: Path) -> tuple[Figures, Path]:
    """Kafka Connect's throughput run on ``topic`` (JSON), then its freshness run at half
    its rate; its figures and the throughput run's warehouse (tables made like those of
    ``reference``, kstage's warehouse)."""
    run_dir = workdir / "connect-throughput"
    run_dir.mkdir()
    warehouse = run_dir / "warehouse"
    create_like(reference, warehouse, TABLE)
    cmd = command(run_dir, bootstrap, topic, warehouse, TABLE, args.commit_interval_ms)
    tree, log = await run_until_rows(cmd, run_dir / "connect.log", "kafka connect",
                                     warehouse, TABLE, n, _FATAL)
    assigned = _ASSIGNED.search(log)
    if assigned is None:
        raise BenchError(f"kafka connect: no assignment line; log {run_dir}/connect.log")
    start = dt.datetime.strptime(assigned.group(1), "%Y-%m-%dT%H:%M:%S,%f").timestamp()
    files, full_at = check_landed(warehouse, TABLE, n, "kafka connect")
    cpu, jvm = tree.cpu_between(start, full_at)
    fig = Figures("kafka_connect", f"JSON converter, built-in SMTs; commit interval "
                  f"{args.commit_interval_ms} ms for throughput, "
                  f"{args.fresh_commit_interval_ms} ms (timeout {args.fresh_commit_timeout_ms} ms) "
                  "for freshness", n=n,
                  window_s=full_at - start, cpu_s=cpu, jvm_cpu_s=jvm,
                  rss_mb=tree.peak_rss_mb(), data_files=files)
    total = fig.plan(Pace(args.fresh_s, args.warm_s))

    def start_worker(fresh_topic: str, fresh_dir: Path, fresh_wh: Path) -> list[str]:
        create_like(reference, fresh_wh, TABLE)
        return command(fresh_dir, bootstrap, fresh_topic, fresh_wh, TABLE,
                       args.fresh_commit_interval_ms, args.fresh_commit_timeout_ms)

    reader = await freshness(bootstrap, workdir, "kafka_connect", TABLE, "gobblin-json",
                            total, fig.rate, _READY, start_worker)
    fig.measure(reader.seen, reader.files)
    return fig, warehouse


async def bench(bootstrap: str, workdir: Path, args: argparse.Namespace) -> list[Figures]:
    n, pace = args.messages, Pace(args.fresh_s, args.warm_s)
    work, fresh = spark_workload(n, workdir), fresh_workload(workdir)
    for w in (work, fresh):
        w.spark = {**(w.spark or {}), "appends": args.appends}
    topic, _ = await produce_workload(bootstrap, work)
    json_topic, _ = await produce_workload(bootstrap, json_workload(n))
    kstage, kstage_wh = await kstage_figures(bootstrap, workdir, topic, n, work, pace,
                                             TABLE, fresh)
    print(line(kstage), flush=True)
    connect, connect_wh = await connect_figures(bootstrap, workdir, json_topic, n, args,
                                                kstage_wh)
    check_layout(kstage_wh, connect_wh, TABLE, "kafka connect")
    print(line(connect), flush=True)
    return [kstage, connect]


def commit_options(parser: argparse.ArgumentParser) -> None:
    """Kafka Connect's commit intervals and timeout (the Iceberg sink's control topic)."""
    parser.add_argument("--commit-interval-ms", type=int, default=5000,
                        help="Connect's commit interval in its throughput run")
    parser.add_argument("--fresh-commit-interval-ms", type=int, default=1000,
                        help="Connect's commit interval in its freshness run")
    parser.add_argument("--fresh-commit-timeout-ms", type=int, default=2000,
                        help="Connect's commit timeout in its freshness run")


VERSIONS = ("Kafka Connect 4.3.1 (standalone), Iceberg sink connector 1.12.0, "
            "Apache Kafka 4.4.0 broker")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    runs.options(parser, "out/peers-kafka-connect.svg")
    commit_options(parser)
    args = runs.parse(parser, argv)
    check_jars("connect", "iceberg-sink")  # says what to run when jars are missing
    rounds = runs.run_rounds("kstage-peers-connect-", args, bench)
    runs.report(rounds, args, "kstage beside Kafka Connect + Iceberg sink",
                f"kstage appends: {args.appends}; versions: {VERSIONS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
