"""The Spark benchmarks' short variants run to their last line (no figure is asserted:
they depend on the machine's load).

``bench/throughput.py --format spark`` starts its own embedded broker, a raw loop and one
real ``kstage run --drain`` into an Iceberg staging table, and reads the table back with
pyiceberg; ``bench/commit_cost.py`` appends to an Iceberg and a Parquet table in one
Spark session; ``bench/pyiceberg_commit.py`` appends through pyiceberg's ``Table.append``
and kstage's transaction; ``bench/append_loop_lag.py`` times the event loop while pyiceberg
appends on another thread. They read kstage's own log lines and tables, so a change to
either that the benchmark no longer understands fails here, not in the next long run.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys

import pytest

from tests.kafkautil import CHILD_PATH, ROOT

pytestmark = [pytest.mark.slow]


async def _run(*args: str, timeout_s: float) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, cwd=ROOT, env={**os.environ, "PYTHONPATH": CHILD_PATH},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    return text


async def test_the_short_spark_throughput_run_reads_its_table_back_and_prints_the_ratio(
        ) -> None:
    text = await _run(str(ROOT / "bench" / "throughput.py"), "--format", "spark",
                      "--messages", "20000", "--rounds", "1", "--warmup", "10000",
                      "--flush-rows", "2000", timeout_s=300)
    lines = text.strip().splitlines()
    assert re.fullmatch(r"ratio=\d+\.\d\d", lines[-1]), text
    assert re.search(r"^round 1:   spark: start-up [\d.]+ s \(before the window\); \d+ appends",
                     text, re.MULTILINE), text
    assert ("staging tables read back with pyiceberg: 1 x 20000 rows, offsets 0..19999 "
            "each exactly once, committed offset 20000") in text, text
    assert re.search(r"^round 1:   warm \(offsets \d+\.\.19999", text, re.MULTILINE), text


async def test_the_short_commit_cost_run_prints_what_an_append_costs() -> None:
    text = await _run(str(ROOT / "bench" / "commit_cost.py"), "--sizes", "1,500",
                      "--repeat", "2", timeout_s=300)
    lines = text.strip().splitlines()
    assert re.fullmatch(r"commit_ms=\d+ row_us=-?\d+\.\d\d ratio=-?\d+\.\d\d", lines[-1]), text
    assert re.search(r"^iceberg: [\d.]+ ms per append \+ -?[\d.]+ us per row \(wall\)", text,
                     re.MULTILINE), text
    # 2 sizes x (2 measured appends + 2 warm-up rounds)
    assert "iceberg: 8 commits in the table, one per append" in text, text


async def test_the_short_pyiceberg_commit_run_reads_every_append_back() -> None:
    text = await _run(str(ROOT / "bench" / "pyiceberg_commit.py"), "--snapshots", "100",
                      "--rows", "10", timeout_s=300)
    lines = text.strip().splitlines()
    assert re.fullmatch(r"ratio=\d+\.\d\d", lines[-1]), text
    assert re.search(r"^snapshots 1-100: pyiceberg [\d.]+ ms, kstage [\d.]+ ms per append",
                     text, re.MULTILINE), text
    assert "read back 1000 rows: every append once" in text, text


async def test_the_short_append_loop_lag_run_prints_the_lag() -> None:
    text = await _run(str(ROOT / "bench" / "append_loop_lag.py"), "--rows", "200",
                      "--appends", "2", timeout_s=300)
    lines = text.strip().splitlines()
    assert re.fullmatch(r"loop lag p50 \d+\.\d{4} p99 \d+\.\d{4} max \d+\.\d{3} s over \d+ "
                        r"probes", lines[-1]), text
    assert len(re.findall(r"^append \d: [\d.]+ s", text, re.MULTILINE)) == 2, text
