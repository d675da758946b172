"""What an append and its Iceberg commit cost on the JVM side (issue 21).

    python bench/commit_cost.py [--sizes 1,1000,10000,60000] [--repeat 8] [--keep]

One SparkSession (``local[2]``, ``spark.driver.memory=512m``, the pinned Iceberg runtime)
in this process, one Arrow table per size of real Gobblin compaction rows (the
``gobblin_compaction`` processor's columns and the Kafka coordinates), and per size
``--repeat`` appends of it, after two warm-up rounds of every size (JIT):

* baseline: the same Arrow table appended as plain Parquet
  (``createDataFrame(...).write.mode("append").parquet(path)``: what kstage's staging
  tables were before Iceberg: no catalog, no commit);
* kstage: the staging writer's append (:class:`~actors.sinks.spark.staging.StagingWriter`,
  through :class:`~actors.sinks.spark.actor.SparkActor`): ``DataFrameWriterV2.append``
  into the Iceberg table with its snapshot properties (commit id, writer id, Kafka offsets),
  committed in the SQLite JDBC catalog.

Each append is timed on the wall clock and by the JVM's CPU time (``/proc``); a least-squares
line over the sizes splits each into a fixed cost per append (ms) and a cost per row (us).
Printed per size and per kind, then the fits, then the last line
``commit_ms=<fixed wall ms of an Iceberg append> row_us=<wall us per row> ratio=<Iceberg
fixed cost / Parquet fixed cost>``. The machine is shared (2 cores): the figures are upper
bounds; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)  # not bench/: its http.py would shadow the standard library's

from aiokafka import TopicPartition

from actors.offsets import Entry
from actors.sinks.spark.actor import SparkActor
from actors.sinks.spark.staging import StagingWriter
from actors.sinks.table.rows import arrow_table
from processors.base import Message
from processors.gobblin import GobblinCompactionProcessor
from service.dev.samples import SAMPLE_TOPICS, sample_records
from settings import SparkSettings

TABLE = "stg_commit_cost"
TICKS = os.sysconf("SC_CLK_TCK")


def jvm_cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rows_of(n: int) -> list[dict[str, Any]]:
    """``n`` rows of real Gobblin compaction events, through the processor."""
    sample = next(t for t in SAMPLE_TOPICS if t.processor == "gobblin_compaction")
    processor = GobblinCompactionProcessor({})
    rows: list[dict[str, Any]] = []
    records = sample_records(sample, min(n, 5000))
    for i in range(n):
        value = records[i % len(records)]
        rows.extend(processor.transform(Message(sample.topic, 0, i, 1_717_000_000_000, None,
                                                value, (), None)))
    return rows[:n]


def at_offsets(part: Any, start: int) -> Any:
    """The record batch ``part`` with ``_offset`` ``start, start + 1, ...`` (each append
    continues the partition: the writer drops rows of offsets the table holds)."""
    import pyarrow as pa

    index = part.schema.get_field_index("_offset")
    columns = list(part.columns)
    columns[index] = pa.array(range(start, start + len(part)), part.schema.field(index).type)
    return pa.RecordBatch.from_arrays(columns, schema=part.schema)


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares ``y = a + b * x``: (a, b)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = (sum((x - mx) * (y - my) for x, y in points)
         / sum((x - mx) ** 2 for x in xs))
    return my - b * mx, b


async def main(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="kstage-commit-cost-"))
    actor = SparkActor(SparkSettings(master="local[2]", warehouse=str(work / "warehouse"),
                                     flush_max_rows=max(sizes), flush_max_interval_s=3600,
                                     flush_idle_s=3600, flush_min_rows=max(sizes)))
    columns = GobblinCompactionProcessor.columns
    writer = StagingWriter(actor, TABLE, tuple(columns))
    try:
        await writer.register()
        parts = {n: writer.convert(rows_of(n))[0] for n in sizes}
        started = time.monotonic()
        parquet = str(work / "parquet")
        offset = 0

        def plain(spark: Any, part: Any) -> None:
            table = arrow_table([part], dt.datetime.now(dt.UTC))
            spark.createDataFrame(table).write.mode("append").parquet(parquet)

        stream = ("bench", "bench", 0)
        await writer.load_floors([stream])  # as at assignment: where the appends start

        async def iceberg(part: Any) -> None:
            nonlocal offset
            part = at_offsets(part, offset)  # the partition's next messages
            offset += len(part)
            entry = Entry(TopicPartition("bench", 0), offset, len(part))
            writer.register_batch(stream, entry)
            task = asyncio.ensure_future(writer.write(part, batch=entry,
                                                      stream=("bench", "bench", 0)))
            await asyncio.sleep(0)
            writer.flush_soon()  # one append per part, now
            await task

        timings: dict[str, dict[int, list[tuple[float, float]]]] = {"parquet": {},
                                                                     "iceberg": {}}
        for round_ in range(2 + args.repeat):
            for n in sizes:
                for kind in ("parquet", "iceberg"):
                    cpu = jvm_cpu_s(actor.jvm_pid)
                    t0 = time.monotonic()
                    if kind == "parquet":
                        await actor.call(lambda spark, p=parts[n]: plain(spark, p))
                    else:
                        await iceberg(parts[n])
                    wall = time.monotonic() - t0
                    if round_ >= 2:  # the first two rounds warm the JIT up
                        timings[kind].setdefault(n, []).append(
                            (wall, jvm_cpu_s(actor.jvm_pid) - cpu))
        print(f"{len(sizes)} sizes x {args.repeat} appends per kind after 2 warm-up "
              f"rounds ({time.monotonic() - started:.0f} s); median per append:", flush=True)
        fits = {}
        for kind, by_size in timings.items():
            for n, samples in sorted(by_size.items()):
                wall = statistics.median(w for w, _ in samples) * 1000
                cpu = statistics.median(c for _, c in samples) * 1000
                print(f"  {kind:8} {n:>7} rows: wall {wall:8.1f} ms, JVM CPU {cpu:8.1f} ms",
                      flush=True)
            wall_fit = fit([(n, statistics.median(w for w, _ in s) * 1000)
                            for n, s in by_size.items()])
            cpu_fit = fit([(n, statistics.median(c for _, c in s) * 1000)
                           for n, s in by_size.items()])
            fits[kind] = wall_fit
            print(f"{kind}: {wall_fit[0]:.1f} ms per append + {wall_fit[1] * 1000:.2f} us per "
                  f"row (wall); {cpu_fit[0]:.1f} ms + {cpu_fit[1] * 1000:.2f} us per row "
                  "(JVM CPU)", flush=True)
        snapshots = await actor.call(lambda spark: spark.sql(
            f"SELECT count(*) AS n FROM kstage.kstage.{TABLE}.snapshots"  # noqa: S608
        ).first()["n"])
        print(f"iceberg: {snapshots} commits in the table, one per append", flush=True)
        ratio = fits["iceberg"][0] / max(fits["parquet"][0], 1e-9)
        print(f"commit_ms={fits['iceberg'][0]:.0f} row_us={fits['iceberg'][1] * 1000:.2f} "
              f"ratio={ratio:.2f}", flush=True)
        return 0
    finally:
        await actor.astop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1,1000,10000,60000",
                   help="rows per append, comma-separated")
    p.add_argument("--repeat", type=int, default=8, help="appends per size and kind")
    p.add_argument("--keep", action="store_true", help="keep the warehouse")
    return p.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
