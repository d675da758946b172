"""The background fold of a table that pyiceberg appends to: with ``spark.appends:
pyiceberg`` and ``spark.maintenance.every_s`` set, the process starts Spark for the table
jobs only, and its fold (``spark.maintenance.fold_files``) compacts the small files the
pyiceberg appends leave, beside them. With real processes and the real broker:

* the fold lands (``maintenance: folded``) while the appends go on, and its snapshot, a
  Spark commit between pyiceberg's, carries every partition's offsets (the fence gives a
  commit that records none the table's offsets);
* the table ends with fewer data files than the appends wrote;
* the process SIGKILLed after its table commits, before any Kafka commit, the next run
  (``--drain``) resumes each partition where the table holds it: every event once.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from actors.sinks.spark import iceberg
from tests.kafkautil import KstageProcess, committed, unique, wait_until
from tests.lake import (
    assert_resumed_once,
    fill_in_steps,
    produce_events,
    run_ahead_of_kafka,
    spark_section,
    wait_landed,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2
STEP = 50  # events produced at a time while the table fills
FOLDED = "maintenance: folded kstage.kstage.{} (staging): data files "


@pytest.mark.timeout(600)
async def test_a_fold_beside_pyiceberg_appends_carries_the_offsets_and_a_kill_resumes_once(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    first_batch, events, table = 400, 800, "stg_pyice_fold"
    topic, group = unique("pyice-fold"), unique("g-pyice-fold")
    catalog = {"uri": f"jdbc:sqlite:{tmp_path / 'lake' / 'catalog.db'}",
               "warehouse": str(tmp_path / "lake" / "wh")}
    spark = spark_section(catalog, appends="pyiceberg", flush_max_rows=40,
                          maintenance={"every_s": 3600, "fold_files": 4})
    run, cfg, reader = await run_ahead_of_kafka(kstage, broker, tmp_path, topic, group,
                                                table, spark, PARTITIONS)
    # caught up: appends of a data file or two each
    await fill_in_steps(run, broker, topic, reader, table, first_batch, STEP, PARTITIONS)
    try:
        await wait_until(lambda: run.proc.poll() is not None
                         or FOLDED.format(table) in run.output(),
                         timeout=300, what="a fold of the staging table")
    except AssertionError as exc:
        raise AssertionError(f"{exc}:\n{run.output()[-6000:]}") from None
    assert run.proc.poll() is None, run.output()
    # appends after the fold, on top of its snapshot
    await produce_events(broker, topic, first_batch, events - first_batch, PARTITIONS)
    await wait_landed(run, reader, table, events)
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait()
    out = run.output()
    assert "spark: session started" in out, out  # for the table jobs only
    assert sum(max(v, 0) for v in (await committed(
        broker, group, topic, PARTITIONS)).values()) == 0

    summaries = reader.summaries(table)
    folds = [s for s in summaries if int(s.get("deleted-data-files", "0")) > 0]
    assert folds, summaries
    for fold in folds:  # a Spark commit between pyiceberg's, with every partition's offsets
        held = iceberg.parse_offsets(fold.get(iceberg.OFFSETS, "{}"))
        assert sorted(held) == [(group, topic, p) for p in range(PARTITIONS)], fold
    appended = sum(int(s.get("added-data-files", "0")) for s in summaries
                   if int(s.get("deleted-data-files", "0")) == 0)
    assert int(summaries[-1]["total-data-files"]) < appended, summaries

    second = kstage(cfg, "--drain")
    assert await second.wait(timeout=300) == 0, second.output()
    await assert_resumed_once(broker, reader, second, group, table, topic, events,
                              PARTITIONS)
