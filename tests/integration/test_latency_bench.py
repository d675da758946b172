"""``bench/latency.py``'s short variants run and print their figures (no timing is
asserted: the figures depend on the machine's load).

The benchmark starts its own broker and one real ``kstage run``: 200 JSONL events at 400/s
(``--rate`` skips the maximum-rate run) on one Apache Kafka node (``--broker kafka``);
150 Gobblin events at 50/s on the embedded broker into
an Iceberg table (pyiceberg's appends: ``--appends``) through Nessie's REST catalog whose
table commits a proxy holds for 1 s (``--commit-latency-s``), the table read back whole
through the same catalog.
"""

from __future__ import annotations

import asyncio
import re
import sys

import pytest

from tests.kafkautil import ROOT

pytestmark = [pytest.mark.slow]


async def latency(*args: str, timeout: float) -> tuple[str, list[str]]:
    """``bench/latency.py ARGS`` run to its exit 0: its output and lines."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bench" / "latency.py"), *args, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    return text, text.strip().splitlines()


@pytest.mark.timeout(300)
async def test_the_short_jsonl_latency_run_prints_its_percentiles_and_last_line() -> None:
    text, lines = await latency("--sink", "jsonl", "--messages", "200", "--rate", "400",
                                "--broker", "kafka", timeout=280)
    assert re.fullmatch(r"jsonl: p99_ms=\d+ target_ms=100 (PASS|FAIL)", lines[-1]), text
    assert re.search(r"^jsonl: 200 events at 400/s: latency p50 \d+ ms, p99 \d+ ms, max \d+ ms",
                     text, re.MULTILINE), text
    assert re.search(r"^jsonl: raw aiokafka baseline, 200 JSON events", text, re.MULTILINE), text


@pytest.mark.timeout(400)
async def test_the_short_rest_catalog_run_with_slow_commits_prints_its_last_line() -> None:
    # pyiceberg's appends: no Spark JVM beside Nessie's (the bench's Spark path differs
    # by spark.appends alone)
    text, lines = await latency("--sink", "spark", "--appends", "pyiceberg", "--messages",
                                "150", "--rate", "50", "--commit-latency-s", "1",
                                timeout=380)
    assert re.fullmatch(r"spark: p99_ms=\d+ target_ms=2500 (PASS|FAIL)", lines[-1]), text
    assert ("spark: through a REST catalog (Nessie) whose table commits take 1 s more"
            in text), text
    assert ("spark: table read back whole with pyiceberg: 150 rows, offsets 0..149 once "
            "each") in text, text
    assert re.search(r"^spark: 150 events at 50/s: latency p50 \d+ ms, p99 \d+ ms",
                     text, re.MULTILINE), text
