"""kstage beside both peers in one run: Spark Structured Streaming and Kafka Connect with
Apache Iceberg's sink, landing the same Kafka events in the same Iceberg table layout
(issue 35).

Usage (jars: ``make kafka-jars peer-jars`` and ``kstage jars fetch``)::

    python bench/peers/both.py [--messages N] [--fresh-s S] [--warm-s S]
                               [--appends spark|pyiceberg] [--rounds N] [--keep]
                               [--commit-interval-ms MS] [--fresh-commit-interval-ms MS]

What bench/peers/spark_streaming.py (the Gobblin mapping) and bench/peers/kafka_connect.py
do, with kstage's runs once: one Apache Kafka broker, one system at a time on the same 2
cores; N WhereHows Gobblin compaction events produced once as Avro in the Confluent wire
format (kstage's and Spark's input) and once as JSON (Connect's), then kstage's throughput
and freshness runs, Spark's, then Connect's (its commit options as in kafka_connect.py).

Printed per system: events/s counted in the table, freshness p50/p99, CPU seconds per
100k events, peak RSS of all its processes, data files per 100k events
(bench/peers/figures.py); one picture of the three freshness runs (freshness and data
files over time); the last line is kstage's ratios to each peer. With ``--rounds N``, the
whole run is done N times, each round on topics of its own; then each system's medians,
from which the last line is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import runs
from _paths import check_jars
from figures import Figures, Pace, line
from harness import check_layout, kstage_figures
from kafka_connect import VERSIONS as CONNECT_VERSIONS
from kafka_connect import commit_options, connect_figures, json_workload
from spark_streaming import MAPPINGS, spark_figures, workloads
from spark_streaming import VERSIONS as SPARK_VERSIONS
from throughput import produce_workload

MAPPING = "gobblin"  # Connect's single message transforms have this one


async def bench(bootstrap: str, workdir: Path, args: argparse.Namespace) -> list[Figures]:
    n, pace, m = args.messages, Pace(args.fresh_s, args.warm_s), MAPPINGS[MAPPING]
    work, fresh = workloads(MAPPING, n, workdir, args.appends)
    topic, _ = await produce_workload(bootstrap, work)
    json_topic, _ = await produce_workload(bootstrap, json_workload(n))
    kstage, kstage_wh = await kstage_figures(bootstrap, workdir, topic, n, work, pace,
                                             m.table, fresh, m.events, m.stamp_column)
    print(line(kstage), flush=True)
    spark, spark_wh = await spark_figures(bootstrap, workdir, topic, n, pace, MAPPING)
    check_layout(kstage_wh, spark_wh, m.table, "spark streaming")
    print(line(spark), flush=True)
    connect, connect_wh = await connect_figures(bootstrap, workdir, json_topic, n, args,
                                                kstage_wh)
    check_layout(kstage_wh, connect_wh, m.table, "kafka connect")
    print(line(connect), flush=True)
    return [kstage, spark, connect]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    runs.options(parser, "out/peers-both.svg")
    commit_options(parser)
    args = runs.parse(parser, argv)
    check_jars("spark", "connect", "iceberg-sink")  # what to run when jars are missing
    rounds = runs.run_rounds("kstage-peers-both-", args, bench)
    runs.report(rounds, args, "kstage beside Spark Structured Streaming and Kafka Connect",
                f"kstage appends: {args.appends}; versions: {SPARK_VERSIONS}; "
                f"{CONNECT_VERSIONS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
