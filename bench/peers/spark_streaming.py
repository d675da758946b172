"""kstage against Spark Structured Streaming, landing the same Kafka events in the same
Iceberg table layout (issue 24).

Usage (jars: ``make kafka-jars peer-jars`` and ``kstage jars fetch``)::

    python bench/peers/spark_streaming.py [--messages N] [--fresh-s S] [--keep]

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

Printed per system: events/s counted in the table, freshness p50/p99, CPU seconds per
100k events, peak RSS of all its processes, data files per 100k events
(bench/peers/figures.py); the last line is kstage's ratios to Spark Structured Streaming.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import sys
import tempfile
from pathlib import Path

from _paths import ROOT, spark_jars
from figures import Figures, line, load, percentile, ratios
from harness import (
    apache_kafka,
    check_landed,
    check_layout,
    freshness,
    kstage_figures,
    run_to_exit,
)
from throughput import BenchError, produce_workload, spark_workload

from processors.gobblin import GobblinCompactionProcessor

JOB = ROOT / "bench" / "peers" / "spark_streaming_job.py"
TABLE = GobblinCompactionProcessor.table
_FIRST_TRIGGER = re.compile(r"^first_trigger=([\d.]+)$", re.MULTILINE)
_READY = re.compile(r"^ready$", re.MULTILINE)


def job(topic: str, run_dir: Path, warehouse: Path, bootstrap: str, mode: str) -> list[str]:
    return [sys.executable, str(JOB), "--bootstrap", bootstrap, "--topic", topic,
            "--warehouse", str(warehouse), "--checkpoint", str(run_dir / "checkpoint"),
            "--mode", mode]


async def spark_figures(bootstrap: str, workdir: Path, topic: str, n: int,
                        fresh_s: float) -> tuple[Figures, Path]:
    """Spark Structured Streaming's throughput run on ``topic``, then its freshness run
    at half its rate; its figures and the throughput run's warehouse."""
    run_dir = workdir / "spark-throughput"
    run_dir.mkdir()
    warehouse = run_dir / "warehouse"
    tree, out = await run_to_exit(job(topic, run_dir, warehouse, bootstrap, "throughput"),
                                  run_dir / "job.log", "spark streaming")
    match = _FIRST_TRIGGER.search(out)
    if match is None:
        raise BenchError(f"spark streaming: no first_trigger line; log {run_dir}/job.log")
    start = float(match.group(1))
    files, full_at = check_landed(warehouse, TABLE, n, "spark streaming")
    fig = Figures("spark_streaming", "throughput: Trigger.AvailableNow, minPartitions 2; "
                  "freshness: the default trigger", n=n, window_s=full_at - start,
                  cpu_s=tree.cpu_between(start, full_at), rss_mb=tree.peak_rss_mb(),
                  data_files=files)
    fig.rate = fig.events_s / 2
    fig.fresh_n = max(200, round(fig.rate * fresh_s))
    lat = await freshness(bootstrap, workdir, "spark_streaming", TABLE, "gobblin",
                          fig.fresh_n, fig.rate, _READY,
                          lambda t, d, w: job(t, d, w, bootstrap, "freshness"))
    fig.p50_ms, fig.p99_ms = percentile(lat, 0.5), percentile(lat, 0.99)
    return fig, warehouse


async def bench(bootstrap: str, workdir: Path, n: int, fresh_s: float) -> list[Figures]:
    work = spark_workload(n, workdir)
    topic, _ = await produce_workload(bootstrap, work)
    kstage, kstage_wh = await kstage_figures(bootstrap, workdir, topic, n, work, fresh_s,
                                             TABLE)
    print(line(kstage), flush=True)
    spark, spark_wh = await spark_figures(bootstrap, workdir, topic, n, fresh_s)
    check_layout(kstage_wh, spark_wh, TABLE, "spark streaming")
    print(line(spark), flush=True)
    return [kstage, spark]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000,
                        help="events of the throughput runs (default 200 000)")
    parser.add_argument("--fresh-s", type=float, default=30.0,
                        help="length of each freshness run, in s of events (default 30)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (configs, logs, tables)")
    args = parser.parse_args(argv)
    spark_jars()  # says what to run when they are missing, before anything starts
    workdir = Path(tempfile.mkdtemp(prefix="kstage-peers-spark-"))
    try:
        with apache_kafka(workdir) as bootstrap:
            kstage, spark = asyncio.run(bench(bootstrap, workdir, args.messages,
                                              args.fresh_s))
    except BaseException:
        print(f"configs, logs and tables kept in {workdir}", file=sys.stderr)
        raise
    if args.keep:
        print(f"configs, logs and tables kept in {workdir}", file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"versions: pyspark 4.1.4, spark-sql-kafka-0-10/spark-avro 4.1.1, Iceberg 1.12.0, "
          f"Apache Kafka 4.4.0; {load()}")
    print(ratios(kstage, [spark]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
