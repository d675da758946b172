"""The schema-driven ``schema_rows`` processor against the hand-written
``gobblin_compaction`` on the same Gobblin events into Iceberg (issue 34, "Speed").

Usage::

    python bench/schema_rows.py [--messages N] [--warmup W] [--appends spark,pyiceberg]
                                [--rounds R] [--flush-rows N] [--change-rate R]
                                [--change-seconds S] [--keep]

One embedded broker (Tansu). **Throughput**: N WhereHows Gobblin compaction events
(``--messages``, default 200 000; the events, registry, Spark settings and commit mode of
``bench/throughput.py --format spark``: real ``GobblinTrackingEvent`` schema, Confluent
wire format, schema id 1 in a ``file://`` registry) are produced once to a new
1-partition topic. For each append path (``--appends``, default both: Spark SQL, and
``spark.appends: pyiceberg``), ``kstage run --drain`` consumes the topic with a fresh
group, alternately (``--rounds`` times each; ``flush_max_rows`` 60 000, ``--flush-rows``):

* **hand-written**: ``gobblin_compaction`` -> its staging table (its columns declared
  in Python: cluster, dataset, ... ; the WhereHows mapping);
* **schema-driven**: ``schema_rows`` -> ``sink: {type: spark, table:
  stg_gobblin_schema_rows}``: the columns of the writer schema (``timestamp``,
  ``namespace``, ``name``, ``metadata`` as a map), the table made from the subject's
  latest schema at start.

Both are timed over the same *processing window* (the method of ``bench/throughput.py``,
read from kstage's own log): from its first commit at or past offset ``--warmup``
(default half of N: the JVM's JIT warm-up, the Spark session start and the group join
are before it) to its last commit, i.e. the processing of the same events with durable
appends and commits, in a process that already processed the first W. Each table is
read back with pyiceberg: N rows, offsets 0..N-1 once each. Per path: both rates and
``schema_rows / gobblin_compaction``.

**A schema change while running** (per append path): ``kstage run`` (no ``--drain``)
with ``schema_rows`` and the ``spark:`` defaults on a new topic; once assigned, a
producer in a process of its own (confluent-kafka, the method of ``bench/latency.py``)
sends ``--change-rate`` events/s for ``--change-seconds`` s, each stamped (its
``timestamp``, ms) when handed to the producer: the first half with writer schema id 1,
the second half with a new version of the subject that adds an optional field
(``tracking_version``, ``["null", "string"]``), registered by the producer when it
sends its first event of that version (in a registry server: the tests' fake Confluent
registry, :mod:`tests.fake_registry`; kstage made the table at start from version 1,
the subject's latest then). Freshness is the house's: an event's produce stamp to the
moment its row is visible to a reader of the table (pyiceberg through the catalog,
polled every 100 ms). Printed: the median and largest freshness of the events stamped
10 to 5 s before the change (the steady state), the largest of those from 5 s before to
5 s after it (the longest gap across the change), the longest time between two
consecutive visible commits across it, and that the change cost one table schema commit
(one ``evolved`` log line) and no restart (one assignment, the same process, exit 0
after SIGTERM); rows of the new version carry the new column, rows of id 1 read NULL.

Last line: ``ratio=<lowest per-path ratio> spark=<r> pyiceberg=<r>`` (target >= 0.9).
On the shared 2-core machine only the ratio, measured in one run on the same broker and
data, means anything.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import multiprocessing
import signal
import statistics
import sys
from pathlib import Path
from typing import Any

import latency
import throughput
from throughput import BenchError, KstageResult, Workload, create_topic, unique

throughput._import_stdlib_http()  # before the fake registry's http.server: not bench/http.py
from tests.fake_registry import FakeRegistry  # noqa: E402

TABLE = "stg_gobblin_schema_rows"
NEW_FIELD = "tracking_version"
AROUND_S = 5.0  # the change's neighbourhood, in produce stamps
START_TIMEOUT_S = 300.0  # kstage's start and join (latency.py's 120 s ran out at load 25)


def schema_texts() -> tuple[str, str]:
    """The Gobblin writer schema (v1) and its next version (v2): an optional field added."""
    from processors.base import SCHEMA_DIR

    v1 = (SCHEMA_DIR / "wherehows/GobblinTrackingEvent.avsc").read_text()
    v2 = json.loads(v1)
    v2["fields"].append({"name": NEW_FIELD, "type": ["null", "string"], "default": None,
                         "doc": "added by version 2 of the subject"})
    return v1, json.dumps(v2)


def write_registry(directory: Path, subject: str) -> str:
    """A ``file://`` registry holding version 1 of the Gobblin schema as id 1 in
    ``subject`` (the throughput runs' events are all of it)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "v1.avsc").write_text(schema_texts()[0])
    (directory / "index.json").write_text(json.dumps(
        {"1": {"subject": subject, "file": "v1.avsc"}}))
    return f"file://{directory}"


def schema_rows_work(work: Workload) -> Workload:
    """``work`` (a Gobblin workload) through ``schema_rows`` into :data:`TABLE`."""
    return dataclasses.replace(work, processor="schema_rows",
                               sink={**work.sink, "table": TABLE})


# -- throughput ------------------------------------------------------------------------

def read_offsets(warehouse: Path, table: str, filled: str) -> dict[str, Any]:
    """Rows, distinct offsets, first and last offset of ``table`` (pyiceberg), and the
    rows whose column ``filled`` is not NULL."""
    import pyarrow.compute as pc

    data = throughput.run_catalog(warehouse).load_table(f"kstage.{table}").scan(
        selected_fields=("_offset", filled)).to_arrow()
    offsets = data.column("_offset")
    return {"rows": data.num_rows, "offsets": len(pc.unique(offsets)),
            "first": pc.min(offsets).as_py(), "last": pc.max(offsets).as_py(),
            "filled": data.num_rows - data.column(filled).null_count}


def check_table(ks: KstageResult, table: str, filled: str, n: int) -> None:
    """``table`` holds every event once, its column ``filled`` never NULL."""
    assert ks.warehouse is not None
    got = read_offsets(ks.warehouse, table, filled)
    want = {"rows": n, "offsets": n, "first": 0, "last": n - 1, "filled": n}
    if got != want:
        raise BenchError(f"{table} in {ks.warehouse}: {got}, expected {want}")


async def throughput_path(bootstrap: str, workdir: Path, topic: str, n: int, path: str,
                          rounds: int, warmup: int, flush_rows: int) -> float:
    """Both processors on ``topic`` through one append path; the ratio of their median
    processing rates (schema_rows over gobblin_compaction)."""
    where = workdir / f"throughput-{path}"
    where.mkdir()
    hand = throughput.spark_workload(0, where, flush_rows=flush_rows, appends=path)
    # the topic's own subject: schema_rows makes its table at start from the latest schema
    hand.extra_config = {"schema_registry": {"url": write_registry(
        where / "registry-topic", f"{topic}-value")}}
    schema = schema_rows_work(hand)
    rates: dict[str, list[float]] = {"gobblin_compaction": [], "schema_rows": []}
    for r in range(1, rounds + 1):
        for work, table, filled in ((hand, "stg_kafka_gobblin_compaction", "dataset"),
                                    (schema, TABLE, "name")):
            ks = await throughput.run_kstage(bootstrap, topic, n, where, work,
                                             work.processor, warmup)
            await asyncio.to_thread(check_table, ks, table, filled, n)
            rows = n - ks.warm_from
            rate = rows / ks.warm_s
            rates[work.processor].append(rate)
            sizes = sorted(ks.flush_rows)
            print(f"{path} round {r}: {work.processor:18} {rate:7.0f} events/s (offsets "
                  f"{ks.warm_from}..{n - 1} in {ks.warm_s:.2f} s; CPU Python "
                  f"{ks.warm_cpu_s[0] / rows * 1e6:.1f} us/row, JVM "
                  f"{ks.warm_cpu_s[1] / rows * 1e6:.1f} us/row; from the assignment "
                  f"{n / ks.seconds:.0f}/s; {len(sizes)} appends, median "
                  f"{statistics.median(sizes) if sizes else 0:.0f} rows; table {table} "
                  f"read back: {n} rows, offsets 0..{n - 1} once each)", flush=True)
    hand_rate = statistics.median(rates["gobblin_compaction"])
    schema_rate = statistics.median(rates["schema_rows"])
    ratio = schema_rate / hand_rate
    print(f"{path}: gobblin_compaction {hand_rate:.0f} events/s, schema_rows "
          f"{schema_rate:.0f} events/s: ratio {ratio:.2f}", flush=True)
    return ratio


# -- a schema change while running ------------------------------------------------------

def _change_values(count: int, change_at: int, registry: str, subject: str) -> Any:
    """``value(i, stamp)``: Gobblin event ``i`` stamped, of writer schema v1 (id 1)
    before ``change_at``; at ``change_at`` version 2 is registered in the subject (as a
    producer's serializer does) and the events from it on carry the new field."""
    import httpx
    from fastavro import parse_schema

    from actors.codecs.avro import encode
    from service.dev.samples import SAMPLE_TOPICS, sample_records

    sample = next(t for t in SAMPLE_TOPICS if t.processor == "gobblin_compaction")
    text_v1, text_v2 = schema_texts()
    v1, v2 = parse_schema(json.loads(text_v1)), parse_schema(json.loads(text_v2))
    records = sample_records(sample, count, seed=11)
    v2_id: list[int] = []

    def value(i: int, stamp: float) -> bytes:
        record = records[i]
        record["timestamp"] = int(stamp * 1000)
        if i < change_at:
            return encode(v1, 1, record)
        if not v2_id:
            answer = httpx.post(f"{registry}/subjects/{subject}/versions",
                                json={"schema": text_v2}, timeout=10)
            answer.raise_for_status()
            v2_id.append(int(answer.json()["id"]))
        return encode(v2, v2_id[0], {**record, NEW_FIELD: f"v2-{i}"})

    return value


def _produce_main(bootstrap: str, topic: str, n: int, rate: float, change_at: int,
                  registry: str, out: Any) -> None:
    """The producer process: paced events (:func:`latency.produce_paced`), the schema
    changing at event ``change_at``; its worst lag behind the schedule and the stamp of
    the first event of version 2 in ``out``."""
    value = _change_values(n, change_at, registry, f"{topic}-value")

    def stamped(i: int, stamp: float) -> bytes:
        if i == change_at:
            out[1] = stamp
        return bytes(value(i, stamp))

    out[0] = latency.produce_paced(bootstrap, topic, n, rate, stamped)


async def change_run(bootstrap: str, workdir: Path, path: str, rate: float,
                     seconds: float) -> None:
    n = int(rate * seconds)
    change_at = n // 2
    topic = unique("schema-change")
    await create_topic(bootstrap, topic)
    where = workdir / f"change-{path}"
    where.mkdir()
    work = schema_rows_work(latency.spark_latency_workload(where, 0))
    assert work.spark is not None
    work.spark["appends"] = path
    registry = FakeRegistry().start()  # stopped (its thread) at the end of the run
    if registry.register(f"{topic}-value", schema_texts()[0]) != 1:
        raise BenchError("the registry did not give version 1 the id 1")
    work.extra_config = {"schema_registry": {"url": registry.url}}
    group = unique("schema-change")
    run_dir = where / group
    run_dir.mkdir()
    cfg = throughput.write_config(run_dir / "kstage.yml", bootstrap, group, topic, work,
                                  work.processor)
    log_path = run_dir / "kstage.log"
    reader = latency.IcebergReader(TABLE, stamp_column="timestamp")
    reader.warehouse = run_dir / "warehouse"
    with open(log_path, "wb") as log:  # noqa: ASYNC230 - opened once, before the run
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "service", "run", "-c", str(cfg),
            cwd=run_dir, stdout=log, stderr=log)
    context = multiprocessing.get_context("spawn")
    out = context.Array("d", [-1.0, -1.0])
    producer = context.Process(target=_produce_main, daemon=True,
                               args=(bootstrap, topic, n, rate, change_at, registry.url,
                                     out))
    try:
        await latency._wait_for_log(log_path, latency._ASSIGNED, proc, START_TIMEOUT_S)
        producer.start()
        producing = asyncio.ensure_future(asyncio.to_thread(producer.join))

        async def produced() -> tuple[float, float]:
            await producing
            if producer.exitcode != 0 or out[0] < 0:
                raise BenchError(f"the producer process exited {producer.exitcode}")
            return out[0], 0.0

        await latency.await_visible(proc, reader, asyncio.ensure_future(produced()), n,
                                    latency.SPARK_POLL_S, log_path)
    finally:
        if producer.is_alive():
            producer.kill()
        if producer.pid is not None:
            await asyncio.to_thread(producer.join)
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        registry.stop()
    text = log_path.read_text(errors="replace")
    if proc.returncode != 0:
        raise BenchError(f"kstage exited {proc.returncode} after SIGTERM; log {log_path}")
    if sorted(reader.seen) != list(range(n)):
        raise BenchError(f"rows seen are not offsets 0..{n - 1}; log {log_path}")
    assigned = text.count(": assigned partitions ")
    evolved = [line for line in text.splitlines() if "evolved with the writer schema" in line]
    if assigned != 1 or len(evolved) != 1 or f"added {NEW_FIELD}" not in evolved[0]:
        raise BenchError(f"{assigned} assignment(s), evolution lines {evolved}: expected "
                         f"one of each, adding {NEW_FIELD}; log {log_path}")
    new = await asyncio.to_thread(read_new_column, reader.warehouse)
    want = {i: f"v2-{i}" if i >= change_at else None for i in range(n)}
    if new != want:
        wrong = [i for i in range(n) if new.get(i) != want[i]][:5]
        raise BenchError(f"{NEW_FIELD} wrong at offsets {wrong}; log {log_path}")
    change = out[1]
    fresh = {i: (seen - stamp) * 1000 for i, (seen, stamp) in reader.seen.items()}
    # steady state before the change: the events stamped 2*AROUND_S to AROUND_S before it
    before = [ms for i, ms in fresh.items()
              if -2 * AROUND_S <= reader.seen[i][1] - change < -AROUND_S] or [0.0]
    around = [ms for i, ms in fresh.items()
              if abs(reader.seen[i][1] - change) <= AROUND_S]
    commits = sorted({seen for seen, stamp in reader.seen.values()
                      if abs(stamp - change) <= AROUND_S})
    gap = max((b - a for a, b in zip(commits, commits[1:], strict=False)), default=0.0)
    print(f"{path}: schema change at event {change_at} of {n} ({rate:.0f} events/s): "
          f"one table schema commit ({evolved[0].split('writer schema: ')[-1]}), no "
          f"restart (1 assignment, exit 0 after SIGTERM); {NEW_FIELD} filled in the "
          f"{n - change_at} rows of id 2, NULL in the {change_at} of id 1", flush=True)
    print(f"{path}: freshness (produce -> visible) {2 * AROUND_S:.0f} to {AROUND_S:.0f} "
          f"s before the change: p50 {statistics.median(before):.0f} ms, max "
          f"{max(before):.0f} ms; within "
          f"{AROUND_S:.0f} s of it: max {max(around):.0f} ms (the longest gap across "
          f"the change); longest time between two visible commits across it "
          f"{gap * 1000:.0f} ms", flush=True)


def read_new_column(warehouse: Path) -> dict[int, str | None]:
    data = throughput.run_catalog(warehouse).load_table(f"kstage.{TABLE}").scan(
        selected_fields=("_offset", NEW_FIELD)).to_arrow()
    return dict(zip(data.column("_offset").to_pylist(), data.column(NEW_FIELD).to_pylist(),
                    strict=True))


# -- main ------------------------------------------------------------------------------

async def bench(bootstrap: str, workdir: Path, args: argparse.Namespace) -> dict[str, float]:
    (workdir / "data").mkdir()
    work = throughput.spark_workload(args.messages, workdir / "data")
    topic, n = await throughput.produce_workload(bootstrap, work)
    ratios = {path: await throughput_path(bootstrap, workdir, topic, n, path, args.rounds,
                                          args.warmup, args.flush_rows)
              for path in args.appends}
    for path in args.appends:
        if args.change_seconds > 0:
            await change_run(bootstrap, workdir, path, args.change_rate, args.change_seconds)
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--warmup", type=int, default=None, metavar="EVENTS",
                        help="the processing window starts at the first commit at or "
                             "past this offset (default: half of --messages)")
    parser.add_argument("--appends", default="spark,pyiceberg",
                        help="append paths, comma-separated: spark, pyiceberg")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--flush-rows", type=int, default=throughput.SPARK_FLUSH_ROWS,
                        help="flush_max_rows of both throughput runs (the default of "
                             "bench/throughput.py; smaller for short runs)")
    parser.add_argument("--change-rate", type=float, default=1000.0,
                        help="events/s of the schema-change run")
    parser.add_argument("--change-seconds", type=float, default=40.0,
                        help="length of the schema-change run (0: skip it)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (configs, logs, tables)")
    args = parser.parse_args(argv)
    args.appends = [p.strip() for p in args.appends.split(",") if p.strip()]
    if not args.appends or set(args.appends) - {"spark", "pyiceberg"}:
        parser.error("--appends takes spark and/or pyiceberg")
    if args.warmup is None:
        args.warmup = args.messages // 2
    if args.messages < 2 or not 0 <= args.warmup < args.messages or args.rounds < 1:
        parser.error("--messages >= 2, 0 <= --warmup < --messages, --rounds >= 1")
    with throughput.bench_run(args.keep, "kstage-bench-schema-rows-") as (broker, workdir):
        ratios = asyncio.run(bench(broker.bootstrap, workdir, args))
    print(f"ratio={min(ratios.values()):.2f} "
          + " ".join(f"{p}={r:.2f}" for p, r in ratios.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
