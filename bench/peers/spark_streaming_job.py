"""The Spark Structured Streaming job of bench/peers/spark_streaming.py: one process, its
driver JVM started by pyspark, as a data engineer would run it.

    python bench/peers/spark_streaming_job.py --bootstrap HOST:PORT --topic T \\
        --warehouse DIR --checkpoint DIR --mode throughput|freshness [--mapping gobblin|mcl]

* Session: kstage's own (:func:`actors.sinks.spark.session.start_session`: the same
  SQLite JDBC Iceberg catalog beside a local warehouse, ``local[2]``,
  ``spark.driver.memory=512m``; kstage's local file system, which writes the warehouse
  without a ``chmod`` process per file, so the peer gains what kstage gains from it)
  plus the Kafka source and ``spark-avro`` jars of
  ``make peer-jars``; ``spark.sql.iceberg.check-nullability=false`` (the NOT NULL
  columns are fed expressions Spark cannot prove non-null; a null fails at write).
* Table: created by kstage's own DDL (:func:`actors.sinks.spark.iceberg.create_staging`),
  so the layout is kstage's to the column.
* Query: ``readStream.format("kafka")`` from ``earliest``, the mapping of
  :mod:`spark_mappings` in Spark SQL, ``writeStream.format("iceberg")`` in append mode with
  a checkpoint (``fanout-enabled``: rows need no sort by partition).
* ``--mode throughput``: ``Trigger.AvailableNow`` (the backlog in one micro-batch:
  the fewest commits and planning rounds) and ``minPartitions=2``, so the Kafka source
  splits the one topic partition into two tasks for the two cores. Prints
  ``first_trigger=<epoch s>`` (the first micro-batch's trigger, from its progress) and
  exits when the backlog is in the table.
* ``--mode freshness``: the default trigger (a micro-batch as soon as the previous one
  ended: Spark's lowest latency for a micro-batch sink; the continuous trigger does not
  support Iceberg), one task per Kafka partition. Prints ``ready`` once its first
  (empty) micro-batch is done, then runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from _paths import spark_jars
from spark_mappings import GOBBLIN_COMPACTION, datahub_mcl

from actors.sinks.spark.iceberg import create_staging
from actors.sinks.spark.jars import session_jars
from actors.sinks.spark.session import start_session
from processors.base import SCHEMA_DIR, Processor
from processors.datahub_mcl import DatahubMclProcessor
from processors.gobblin import GobblinCompactionProcessor
from settings.models import SparkSettings

# kstage's processor (its table and columns, its reader schema) -> the Spark SQL mapping
MAPPINGS: dict[str, tuple[type[Processor], Callable[[str], str]]] = {
    "gobblin": (GobblinCompactionProcessor, lambda schema: GOBBLIN_COMPACTION),
    "mcl": (DatahubMclProcessor, datahub_mcl),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--warehouse", required=True, type=Path)
    parser.add_argument("--checkpoint", required=True, type=Path)
    parser.add_argument("--mode", choices=("throughput", "freshness"), required=True)
    parser.add_argument("--mapping", choices=sorted(MAPPINGS), default="gobblin")
    args = parser.parse_args(argv)

    processor, mapping = MAPPINGS[args.mapping]
    settings = SparkSettings(master="local[2]", warehouse=str(args.warehouse))
    jars = [*session_jars(settings), *spark_jars()]
    settings = settings.model_copy(update={"conf": {
        "spark.driver.memory": "512m",
        "spark.jars": ",".join(jars),
        "spark.sql.iceberg.check-nullability": "false",
    }})
    spark = start_session(settings, "spark-streaming-peer")
    create_staging(spark, settings, processor.table, processor.columns)

    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.functions import expr

    source = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.topic)
              .option("startingOffsets", "earliest"))
    if args.mode == "throughput":
        source = source.option("minPartitions", "2")
    schema = (SCHEMA_DIR / processor.reader_schema).read_text()
    decoded = source.load().select(
        from_avro(expr("substr(value, 6)"), schema).alias("e"),
        "topic", "partition", "offset", "timestamp")
    decoded.createOrReplaceTempView("decoded")
    mapped = spark.sql(mapping(schema))
    writer = (mapped.writeStream.format("iceberg").outputMode("append")
              .option("checkpointLocation", str(args.checkpoint))
              .option("fanout-enabled", "true"))
    if args.mode == "throughput":
        writer = writer.trigger(availableNow=True)
    query = writer.toTable(f"kstage.kstage.{processor.table}")

    if args.mode == "throughput":
        query.awaitTermination()
        first = query.recentProgress[0]["timestamp"]
        started = dt.datetime.fromisoformat(first.replace("Z", "+00:00")).timestamp()
        batches = [(p["batchId"], p["numInputRows"]) for p in query.recentProgress]
        print(f"batches={json.dumps(batches)}", flush=True)
        print(f"first_trigger={started:.3f}", flush=True)
    else:
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        while not query.recentProgress and not stop.is_set():
            query.awaitTermination(0.05)
        print("ready", flush=True)
        stop.wait()
        query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
