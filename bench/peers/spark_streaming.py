"""kstage against Spark Structured Streaming, landing the same Kafka events in the same
Iceberg table layout (issue 24).

Usage (jars: ``make kafka-jars peer-jars`` and ``kstage jars fetch``)::

    python bench/peers/spark_streaming.py [--mapping gobblin|mcl] [--messages N]
                                          [--fresh-s S] [--appends spark|pyiceberg]
                                          [--rounds N] [--keep]

One run, one Apache Kafka broker (bench/peers/harness.py), one system at a time on the
same 2 cores: N WhereHows Gobblin compaction events (the Avro events of
``bench/throughput.py --format spark``, Confluent wire format) are produced once to a
1-partition topic, then

1. kstage drains them into its Iceberg staging table (``gobblin_compaction``), then runs
   its freshness run (harness.kstage_figures);
2. Spark Structured Streaming (bench/peers/spark_streaming_job.py: the Kafka source,
   ``from_avro``, the mapping in Spark SQL, the Iceberg sink with a checkpoint) drains
   the same topic with its throughput trigger (``AvailableNow``, ``minPartitions=2``)
   into a table of kstage's layout in a catalog of its own (SQLite JDBC, local
   warehouse), then its freshness run with its freshness trigger (the default: the
   next micro-batch as soon as one ends) at half of its own rate.

Each freshness run starts a fresh process and sends ``--warm-s`` of events at the rate
before the ``--fresh-s`` whose latencies count (a fresh JVM spends its first seconds
compiling).

``--mapping mcl`` does the same with a mapping that needs code in kstage: N DataHub
MetadataChangeLogs (those of ``bench/throughput.py --format avro``) through kstage's
``datahub_mcl`` processor, and through Spark SQL generated from the MCL schema (the
system metadata as canonical JSON: bench/peers/spark_mappings.py; no part needs a
Python UDF). Its freshness events carry the stamp in ``created.time``.

Printed per system: events/s counted in the table, freshness p50/p99, CPU seconds per
100k events, peak RSS of all its processes, data files per 100k events
(bench/peers/figures.py); the last line is kstage's ratios to Spark Structured Streaming.
With ``--rounds N``, the whole run (kstage, then Spark) is done N times alternating, on
the same broker, each round on topics of its own; then each system's medians, from which
the last line is.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from _paths import ROOT, check_jars
from figures import Figures, Pace, line, load, medians, ratios, round_dir
from harness import (
    apache_kafka,
    check_landed,
    check_layout,
    fresh_workload,
    freshness,
    kstage_figures,
    run_to_exit,
)
from picture import draw
from throughput import BenchError, Workload, avro_workload, produce_workload, spark_workload

from processors.datahub_mcl import DatahubMclProcessor
from processors.gobblin import GobblinCompactionProcessor

JOB = ROOT / "bench" / "peers" / "spark_streaming_job.py"


@dataclass(frozen=True)
class Mapping:
    """One mapping's table, its freshness events and where their stamp lands."""

    table: str
    events: str  # a name of latency.EVENTS
    stamp_column: str


MAPPINGS = {
    "gobblin": Mapping(GobblinCompactionProcessor.table, "gobblin", "log_event_time"),
    "mcl": Mapping(DatahubMclProcessor.table, "mcl", "created_time"),
}


def mcl_workload(n: int, workdir: Path, like: Workload) -> Workload:
    """``n`` DataHub MCLs (:func:`throughput.avro_workload`, its registry in a new
    directory of ``workdir``) into kstage's ``datahub_mcl`` staging table, with the sink,
    ``spark:`` and group settings of ``like`` (a Gobblin workload)."""
    where = workdir / f"mcl-{len(os.listdir(workdir))}"
    where.mkdir()
    work = avro_workload(n, where)
    work.processor, work.sink = "datahub_mcl", like.sink
    work.spark, work.group_config = like.spark, like.group_config
    return work


def workloads(mapping: str, n: int, workdir: Path, appends: str = "spark",
              ) -> tuple[Workload, Workload]:
    """kstage's throughput workload (``n`` events) and its freshness one, its staging
    appends written by ``appends`` (``spark.appends``)."""
    work = spark_workload(n if mapping == "gobblin" else 0, workdir)
    fresh = fresh_workload(workdir)
    for w in (work, fresh):
        w.spark = {**(w.spark or {}), "appends": appends}
    if mapping == "mcl":
        work, fresh = mcl_workload(n, workdir, work), mcl_workload(0, workdir, fresh)
    return work, fresh
_FIRST_TRIGGER = re.compile(r"^first_trigger=([\d.]+)$", re.MULTILINE)
_READY = re.compile(r"^ready$", re.MULTILINE)


def job(topic: str, run_dir: Path, warehouse: Path, bootstrap: str, mode: str,
        mapping: str) -> list[str]:
    return [sys.executable, str(JOB), "--bootstrap", bootstrap, "--topic", topic,
            "--warehouse", str(warehouse), "--checkpoint", str(run_dir / "checkpoint"),
            "--mode", mode, "--mapping", mapping]


async def spark_figures(bootstrap: str, workdir: Path, topic: str, n: int,
                        pace: Pace, mapping: str) -> tuple[Figures, Path]:
    """Spark Structured Streaming's throughput run on ``topic``, then its freshness run
    at half its rate; its figures and the throughput run's warehouse."""
    run_dir = workdir / "spark-throughput"
    run_dir.mkdir()
    warehouse = run_dir / "warehouse"
    table = MAPPINGS[mapping].table
    tree, out = await run_to_exit(
        job(topic, run_dir, warehouse, bootstrap, "throughput", mapping),
        run_dir / "job.log", "spark streaming")
    match = _FIRST_TRIGGER.search(out)
    if match is None:
        raise BenchError(f"spark streaming: no first_trigger line; log {run_dir}/job.log")
    start = float(match.group(1))
    files, full_at = check_landed(warehouse, table, n, "spark streaming")
    cpu, jvm = tree.cpu_between(start, full_at)
    fig = Figures("spark_streaming", "throughput: Trigger.AvailableNow, minPartitions 2; "
                  "freshness: the default trigger", n=n, window_s=full_at - start,
                  cpu_s=cpu, jvm_cpu_s=jvm, rss_mb=tree.peak_rss_mb(),
                  data_files=files)
    total = fig.plan(pace)
    reader = await freshness(bootstrap, workdir, "spark_streaming", table,
                            MAPPINGS[mapping].events, total, fig.rate, _READY,
                            lambda t, d, w: job(t, d, w, bootstrap, "freshness", mapping),
                            MAPPINGS[mapping].stamp_column)
    fig.measure(reader.seen, reader.files)
    return fig, warehouse


async def bench(bootstrap: str, workdir: Path, n: int, pace: Pace, mapping: str,
                appends: str = "spark") -> list[Figures]:
    work, fresh = workloads(mapping, n, workdir, appends)
    m = MAPPINGS[mapping]
    topic, _ = await produce_workload(bootstrap, work)
    kstage, kstage_wh = await kstage_figures(bootstrap, workdir, topic, n, work, pace,
                                             m.table, fresh, m.events, m.stamp_column)
    print(line(kstage), flush=True)
    spark, spark_wh = await spark_figures(bootstrap, workdir, topic, n, pace, mapping)
    check_layout(kstage_wh, spark_wh, m.table, "spark streaming")
    print(line(spark), flush=True)
    return [kstage, spark]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mapping", choices=sorted(MAPPINGS), default="gobblin",
                        help="gobblin (Gobblin compaction, SQL-only in kstage too) or mcl "
                             "(DataHub MCLs: canonical JSON)")
    parser.add_argument("--messages", type=int, default=200_000,
                        help="events of the throughput runs (default 200 000)")
    parser.add_argument("--fresh-s", type=float, default=30.0,
                        help="length of each freshness run, in s of events (default 30)")
    parser.add_argument("--warm-s", type=float, default=10.0,
                        help="s of events at the same rate before those, not counted "
                             "(default 10: a fresh JVM's warm-up)")
    parser.add_argument("--appends", choices=("spark", "pyiceberg"), default="spark",
                        help="what writes kstage's staging appends (spark.appends; "
                             "default spark)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs of each system, alternating; medians printed and the "
                             "last line from them (default 1)")
    parser.add_argument("--picture", type=Path, default=Path("out/peers-spark-streaming.svg"),
                        help="where the picture of both freshness runs goes (SVG; default "
                             "out/peers-spark-streaming.svg)")
    parser.add_argument("--bootstrap", default=None,
                        help="an Apache Kafka broker already running, instead of a node "
                             "of the run's own (its CPU is then not measured)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (configs, logs, tables)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    check_jars("spark")  # says what to run when jars are missing, before anything starts
    workdir = Path(tempfile.mkdtemp(prefix="kstage-peers-spark-"))
    try:
        with apache_kafka(workdir, args.bootstrap) as bootstrap:
            rounds = [asyncio.run(bench(bootstrap, round_dir(workdir, i), args.messages,
                                        Pace(args.fresh_s, args.warm_s), args.mapping,
                                        args.appends)) for i in range(args.rounds)]
    except BaseException:
        print(f"configs, logs and tables kept in {workdir}", file=sys.stderr)
        raise
    if args.keep:
        print(f"configs, logs and tables kept in {workdir}", file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    kstage, spark = (medians([r[i] for r in rounds]) for i in range(2))
    draw(rounds[-1], "kstage beside Spark Structured Streaming: "
         f"{args.fresh_s:g} s of events at half of each one's rate", args.picture)
    if args.rounds > 1:
        print(f"medians of {args.rounds} rounds:\n{line(kstage)}\n{line(spark)}")
    print(f"mapping: {args.mapping}; kstage appends: {args.appends}; versions: pyspark "
          "4.1.4, spark-sql-kafka-0-10/"
          f"spark-avro 4.1.1, Iceberg 1.12.0, Apache Kafka 4.4.0; {load()}")
    print(ratios(kstage, [spark]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
