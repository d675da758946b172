"""``kstage run`` with ``spark.appends: pyiceberg`` and nothing else that needs Spark starts no
JVM: the catalog, the staging table, its column check, the offsets read at assignment and
every append go through pyiceberg. With real processes, on a catalog no JVM ever opened:

* a run lands every event and is SIGKILLed after its table commits, before any Kafka commit;
  the next run (``--drain``) resumes where the table holds each partition (read through
  pyiceberg): every event once, no ``java`` process under either run at any time;
* a run with ``merge`` configured does start Spark (for the merge after the drain: the
  watch sees the JVM, so it would have seen one before), the merge of the table pyiceberg
  created fills the final table with every event once, and ``kstage tables show`` reads the
  table and its offsets;
* PostgreSQL (the catalog) stopped when the run starts: registration and the offsets read
  fail and are retried, ``/readyz`` says so, nothing is committed; once it is back every
  event lands once, still without a JVM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kafkautil import (
    CHILD_PATH,
    KstageProcess,
    committed,
    create_topic,
    status_port,
    unique,
    wait_readyz,
)
from tests.lake import (
    IcebergReader,
    assert_once,
    assert_resumed_once,
    lake_config,
    produce_events,
    spark_section,
    wait_committed,
    wait_landed,
)
from tests.postgres import USER, Postgres
from tests.process_tree import watched

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2


@pytest.mark.timeout(600)
async def test_a_run_starts_no_jvm_resumes_after_sigkill_and_its_table_merges(
        broker: str, tmp_path: Path, kstage: type[KstageProcess]) -> None:
    events, table = 600, "stg_pyice_nojvm"
    topic, group = unique("pyice-nojvm"), unique("g-pyice-nojvm")
    catalog = {"uri": f"jdbc:sqlite:{tmp_path / 'lake' / 'catalog.db'}",
               "warehouse": str(tmp_path / "lake" / "wh")}
    spark = spark_section(catalog, appends="pyiceberg", flush_max_rows=100)
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_events(broker, topic, 0, events, PARTITIONS)
    # Kafka commits only every hour: every table commit is ahead of Kafka's.
    cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark,
                      commit={"mode": "batch", "max_messages": 10**9,
                              "max_interval_s": 3600})
    pyiceberg = IcebergReader(spark)

    first = kstage(cfg)
    async with watched(first.proc.pid, "java") as jvms:
        await wait_landed(first, pyiceberg, table, events)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    assert jvms == {}, first.output()
    assert "spark: session started" not in first.output()
    assert sum(max(v, 0) for v in (await committed(
        broker, group, topic, PARTITIONS)).values()) == 0

    second = kstage(cfg, "--drain")
    async with watched(second.proc.pid, "java") as jvms:
        assert await second.wait(timeout=240) == 0, second.output()
    assert jvms == {}, second.output()
    await assert_resumed_once(broker, pyiceberg, second, group, table, topic, events,
                              PARTITIONS)
    half = events // PARTITIONS

    # The merge needs Spark: configured, the JVM starts (after the drain), and merges the
    # table pyiceberg created.
    data = yaml.safe_load(cfg.read_text())
    data["merge"] = {"interval_s": 3600}  # once, after the drain
    cfg.write_text(yaml.safe_dump(data))
    third = kstage(cfg, "--drain")
    async with watched(third.proc.pid, "java") as jvms:
        assert await third.wait(timeout=300) == 0, third.output()
    assert jvms, "the merge ran without a JVM under kstage?"
    final = "final_pyice_nojvm"
    assert_once(pyiceberg, final, topic, events, PARTITIONS)

    shown = tables_show(cfg)
    [staging] = [t for t in shown if t["table"] == f"kstage.kstage.{table}"]
    assert (staging["exists"], staging["rows"]) == (True, events)
    assert sorted((o["partition"], o["offset"]) for o in staging["offsets"]) == [
        (0, half), (1, half)]


def tables_show(cfg: Path) -> list[dict[str, Any]]:
    """``kstage tables show --json`` (its own process and JVM)."""
    env = {**os.environ, "PYTHONPATH": CHILD_PATH}
    done = subprocess.run([sys.executable, "-m", "service", "tables", "show", "-c", str(cfg),
                           "--json"], capture_output=True, text=True, env=env,
                          cwd=cfg.parent, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    shown: list[dict[str, Any]] = json.loads(done.stdout)
    return shown


@pytest.mark.timeout(400)
async def test_catalog_down_when_the_run_starts_is_retried_and_shown_in_readyz(
        broker: str, broker_kind: str, tmp_path: Path, kstage: type[KstageProcess],
        running: Postgres) -> None:
    """PostgreSQL (the catalog) stopped when ``kstage run`` starts: the table cannot be
    registered (the worker's sink cannot open: it is opened again with backoff, as any
    sink that cannot open, its log naming the table); ``/readyz`` is 503 naming it, nothing is
    committed to Kafka; once PostgreSQL is back every event lands once, with no JVM at any
    time."""
    table = f"stg_pyice_pg_start_{broker_kind}"  # the module's server: one per broker
    topic, group = unique("pyice-pg-start"), unique("g-pyice-pg-start")
    spark = spark_section({"uri": running.url, "user": USER, "password": "secret",
                           "warehouse": str(tmp_path / "warehouse")}, appends="pyiceberg")
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_events(broker, topic, 0, 40, PARTITIONS)
    # The worker opens its sink again with backoff until the catalog is back
    # (actors/worker/opening.py), the reason in /readyz meanwhile: no crash, no restart.
    cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark)
    running.stop()
    try:
        proc = kstage(cfg)
        async with watched(proc.proc.pid, "java") as jvms:
            base = f"http://127.0.0.1:{await status_port(proc, timeout=120)}"
            await wait_readyz(base, proc, 503, "cannot register the table", timeout=120)
            # the sink opened again and failed again (its second line, not a settle
            # time): nothing was committed meanwhile
            await proc.wait_for_log(f"spark sink kstage.kstage.{table}: cannot register the "
                                    "table: OperationalError", timeout=60, count=2)
            assert all(v <= 0 for v in (await committed(
                broker, group, topic, PARTITIONS)).values())
            running.start()
            await wait_committed(broker, group, topic, PARTITIONS, 40, [proc])
            await wait_readyz(base, proc, 200, timeout=60)
            proc.signal(signal.SIGTERM)
            assert await proc.wait(timeout=60) == 0, proc.output()
            assert "crashed" not in proc.output(), proc.output()
    finally:
        if not running.running:
            running.start()
    assert jvms == {}, proc.output()
    assert_once(IcebergReader(spark), table, topic, 40, PARTITIONS)
