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
import os
import re
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import runs
from _paths import ROOT, check_jars
from figures import Figures, Pace, line
from harness import (
    check_landed,
    check_layout,
    fresh_workload,
    freshness,
    kstage_figures,
    run_to_exit,
)
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


def one_round(bootstrap: str, workdir: Path, args: argparse.Namespace,
              ) -> Coroutine[Any, Any, list[Figures]]:
    return bench(bootstrap, workdir, args.messages, Pace(args.fresh_s, args.warm_s),
                 args.mapping, args.appends)


VERSIONS = ("pyspark 4.1.4, spark-sql-kafka-0-10/spark-avro 4.1.1, Iceberg 1.12.0, "
            "Apache Kafka 4.4.0")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mapping", choices=sorted(MAPPINGS), default="gobblin",
                        help="gobblin (Gobblin compaction, SQL-only in kstage too) or mcl "
                             "(DataHub MCLs: canonical JSON)")
    runs.options(parser, "out/peers-spark-streaming.svg")
    args = runs.parse(parser, argv)
    check_jars("spark")  # says what to run when jars are missing, before anything starts
    rounds = runs.run_rounds("kstage-peers-spark-", args, one_round)
    runs.report(rounds, args, "kstage beside Spark Structured Streaming",
                f"mapping: {args.mapping}; kstage appends: {args.appends}; versions: "
                f"{VERSIONS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
