"""Big appends while a backlog waits, small fresh ones once caught up, with the defaults
(issue 35): ``kstage run`` with ``spark.appends: pyiceberg`` on the embedded broker and a
SQLite catalog, nothing else tuned.

* A backlog of 30 000 events, three appends' worth (``flush_max_rows`` 10 000; the rest
  the defaults), lands in big appends: while the partitions' high-water marks are past
  the batches shipped by enough to fill an append with the rows pending, a staging table
  is flushed only at its backlog size (``flush_max_rows``, ``flush_max_mb``), at
  ``flush_max_interval_s`` or when the worker's window is full; the last append's worth
  goes as caught up. Every append that began while two appends' worth or more was still
  to land is full, but those the interval cut (their number follows from the spread of
  the run's commits). Then single events, produced one at a time, are each visible
  without a size threshold.
* With ``flush_idle_s`` 60 and ``flush_max_interval_s`` 120 set (upper bounds), the same
  backlog is appended only at the sizes or once caught up (no append before the last
  two appends' worth is short: a bound without timing), and
  then a single event of the caught-up topic is visible well within the idle bound: caught
  up, a row is flushed as soon as no append of its table runs.
* SIGKILL while a backlog's big append is in flight (the backlog three appends' worth):
  the next run (``--drain``) leaves every event in the table exactly once, and commits
  every partition to its end.
"""

from __future__ import annotations

import logging
import math
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from settings.models import SparkSettings
from tests.gobblin_events import compaction
from tests.kafkautil import KstageProcess, committed, create_topic, produce, unique, wait_until
from tests.lake import (
    IcebergReader,
    assert_once,
    lake_config,
    produce_events,
    wait_committed,
)

logger = logging.getLogger(__name__)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2
BACKLOG = 30_000
APPEND_ROWS = 10_000  # flush_max_rows: the backlog is three appends' worth
DEFAULTS = SparkSettings()


def pyiceberg_spark(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    """A ``spark:`` section with the defaults but for the catalog and the append path."""
    return {"appends": "pyiceberg", **extra,
            "catalog": {"uri": f"jdbc:sqlite:{tmp_path / 'lake' / 'catalog.db'}",
                        "warehouse": str(tmp_path / "lake" / "wh")}}


async def single_events_visible(broker: str, reader: IcebergReader, table: str, topic: str,
                                start: int, count: int, proc: KstageProcess,
                                deadline_s: float) -> None:
    """Events ``start ..`` produced one at a time (each sent and acknowledged alone), each
    visible in ``table`` within ``deadline_s`` of its send."""
    for i in range(start, start + count):
        partition = i % PARTITIONS
        await produce(broker, topic, [compaction(i)], partition_of=lambda _, p=partition: p)
        want = (topic, partition, i // PARTITIONS)

        def visible(w: tuple[str, int, int] = want) -> bool:
            return proc.proc.poll() is not None or w in reader.coordinates(table)
        await wait_until(visible, timeout=deadline_s, what=f"event {i} in the table")
        assert proc.proc.poll() is None, proc.output()


def commits_s(reader: IcebergReader, table: str) -> list[float]:
    """The commit times of the table's snapshots, oldest first (s)."""
    return sorted(s.timestamp_ms / 1000 for s in reader._table(table).snapshots())


def cut_short(reader: IcebergReader, table: str, events: int, max_rows: int) -> list[int]:
    """The rows of each append of ``table`` (oldest first) that began while two appends'
    worth or more of its ``events`` were still to land and held fewer than ``max_rows``."""
    added = [int(s.get("added-records", "0")) for s in reader.summaries(table)]
    before = [sum(added[:i]) for i in range(len(added))]
    return [rows for rows, landed in zip(added, before, strict=True)
            if events - landed >= 2 * max_rows and rows < max_rows]


# actors/sinks/table/batching.py, DEBUG: a single row's append started by its arrival, or
# by the end of the rest after the append before it (spark.freshness_target_s)
CAUGHT_UP_ONE = ("flushing 1 row(s) (caught up)", "flushing 1 row(s) (rested)")


def caught_up_ones(proc: KstageProcess) -> int:
    output = proc.output()
    return sum(output.count(line) for line in CAUGHT_UP_ONE)


@pytest.mark.timeout(600)
async def test_a_backlog_lands_in_few_appends_then_a_caught_up_event_in_its_own(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    """The switch both ways with the defaults (but the append size: the backlog three
    appends' worth): the backlog in big appends (the snapshots read once its offsets are
    committed), then, caught up, each single
    event in an append of its own, started by its arrival or by the end of the rest
    after the append before it (the flush's reason in the log: ``caught up`` or
    ``rested``, not a timer of the row's wait nor a row count)."""
    table, topic, group = "stg_backlog", unique("backlog"), unique("g-backlog")
    spark = pyiceberg_spark(tmp_path, flush_max_rows=APPEND_ROWS)
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_events(broker, topic, 0, BACKLOG, PARTITIONS)
    cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark)
    data = yaml.safe_load(cfg.read_text())
    data["service"]["log_level"] = "DEBUG"  # the flushes' reasons
    cfg.write_text(yaml.safe_dump(data))
    reader = IcebergReader(spark)
    proc = kstage(cfg)
    try:
        await wait_committed(broker, group, topic, PARTITIONS, BACKLOG, [proc], timeout=300)
        commits = commits_s(reader, table)
        # The rule: while behind by an append's worth, the rows gather into one append,
        # cut by a size or by the interval (appends the interval cuts start at least an
        # interval apart: their commits spread over about as long); one more per
        # partition whose first rows came while the others were caught up.
        short = cut_short(reader, table, BACKLOG, APPEND_ROWS)
        allowed = (math.floor((commits[-1] - commits[0]) / DEFAULTS.flush_max_interval_s)
                   + PARTITIONS - 1)
        assert len(short) <= allowed, (short, allowed, reader.summaries(table),
                                       proc.output()[-3000:])
        assert_once(reader, table, topic, BACKLOG, PARTITIONS)

        # Caught up: each single event is appended on its own, as soon as it arrives.
        for i in range(BACKLOG, BACKLOG + PARTITIONS):
            snapshots, flushed = reader.snapshots(table), caught_up_ones(proc)
            sent_ms = time.time() * 1000
            await produce(broker, topic, [compaction(i)],
                          partition_of=lambda _, p=i % PARTITIONS: p)
            await wait_committed(broker, group, topic, PARTITIONS, i + 1, [proc], timeout=60)
            assert reader.snapshots(table) == snapshots + 1
            assert reader.summaries(table)[-1].get("added-records") == "1"
            # informative only (a timing is a benchmark's business): the send to its commit
            logger.info("event %d: committed to the table %.0f ms after its send", i,
                        commits_s(reader, table)[-1] * 1000 - sent_ms)
            await wait_until(lambda f=flushed: caught_up_ones(proc) > f, timeout=60,
                             what=f"event {i}'s append started by its arrival or a rest")
        assert_once(reader, table, topic, BACKLOG + PARTITIONS, PARTITIONS)
    finally:
        proc.kill()


@pytest.mark.timeout(600)
async def test_with_long_waits_set_a_backlog_is_one_append_and_a_caught_up_row_waits_not(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    """``flush_idle_s`` 60 and ``flush_max_interval_s`` 120 set by hand (upper bounds):
    the backlog (three appends' worth) is appended at the sizes or once caught up (no
    timing in the bound), and then a single event is visible well before either wait."""
    table, topic, group = "stg_caught_up", unique("caught-up"), unique("g-caught-up")
    spark = pyiceberg_spark(tmp_path, flush_idle_s=60, flush_max_interval_s=120,
                            flush_max_rows=APPEND_ROWS)
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_events(broker, topic, 0, BACKLOG, PARTITIONS)
    cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark)
    reader = IcebergReader(spark)
    started = time.monotonic()
    proc = kstage(cfg)
    try:
        await wait_until(lambda: proc.proc.poll() is not None
                         or sum(reader.coordinates(table).values()) >= BACKLOG,
                         timeout=300, what="the backlog in the staging table")
        assert proc.proc.poll() is None, proc.output()
        elapsed = time.monotonic() - started
        short = cut_short(reader, table, BACKLOG, APPEND_ROWS)
        assert len(short) <= math.floor(elapsed / 120) + PARTITIONS - 1, (
            short, reader.summaries(table))
        assert_once(reader, table, topic, BACKLOG, PARTITIONS)
        # Under the configured idle bound (60 s): visible without waiting it out.
        await single_events_visible(broker, reader, table, topic, BACKLOG, 3, proc,
                                    deadline_s=30)
        assert_once(reader, table, topic, BACKLOG + 3, PARTITIONS)
    finally:
        proc.kill()


@pytest.mark.timeout(600)
async def test_sigkill_with_a_big_append_in_flight_then_every_event_once(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    table, topic, group = "stg_backlog_kill", unique("backlog-kill"), unique("g-backlog-kill")
    spark = pyiceberg_spark(tmp_path, flush_max_rows=APPEND_ROWS)
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_events(broker, topic, 0, BACKLOG, PARTITIONS)
    cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark)
    data = yaml.safe_load(cfg.read_text())
    data["service"]["log_level"] = "DEBUG"
    cfg.write_text(yaml.safe_dump(data))
    reader = IcebergReader(spark)
    first = kstage(cfg)
    try:
        # The lake thread logs this line right before it writes and commits an append.
        await first.wait_for_log(f"spark sink: kstage.kstage.{table}: appending", timeout=240)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    finally:
        first.kill()
    line = next(x for x in first.output().splitlines() if ": appending " in x)
    assert int(line.split(": appending ")[1].split()[0]) > 1, line  # a backlog's append
    landed = sum(reader.coordinates(table).values()) if reader.exists(table) else 0
    assert landed < BACKLOG, "the whole backlog landed before the kill"

    second = kstage(cfg, "--drain")
    try:
        assert await second.wait(timeout=300) == 0, second.output()
    finally:
        second.kill()
    assert_once(reader, table, topic, BACKLOG, PARTITIONS)
    assert await committed(broker, group, topic, PARTITIONS) == dict.fromkeys(
        range(PARTITIONS), BACKLOG // PARTITIONS)

