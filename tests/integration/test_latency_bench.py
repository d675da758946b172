"""``bench/latency.py``'s short JSONL variant runs and prints its figures (no timing is
asserted: the figures depend on the machine's load).

The benchmark starts its own embedded broker and one real ``kstage run``; 200 events at
400/s (``--rate`` skips the maximum-rate run).
"""

from __future__ import annotations

import asyncio
import re
import sys

import pytest

from tests.kafkautil import ROOT

pytestmark = [pytest.mark.slow]


async def test_the_short_jsonl_latency_run_prints_its_percentiles_and_last_line() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bench" / "latency.py"), "--sink", "jsonl",
        "--messages", "200", "--rate", "400", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 150)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    lines = text.strip().splitlines()
    assert re.fullmatch(r"jsonl: p99_ms=\d+ target_ms=100 (PASS|FAIL)", lines[-1]), text
    assert re.search(r"^jsonl: 200 events at 400/s: latency p50 \d+ ms, p99 \d+ ms, max \d+ ms",
                     text, re.MULTILINE), text
    assert re.search(r"^jsonl: raw aiokafka baseline, 200 JSON events", text, re.MULTILINE), text
