"""``bench/tracing.py``'s short variant runs to its last line (no figure is asserted: it
depends on the machine's load): kstage with tracing off and on over the same data, the
spans decoded by the OTLP receiver, so a change to the spans or the log lines the
benchmark reads fails here, not in the next long run."""

from __future__ import annotations

import asyncio
import re
import sys

import pytest

from tests.kafkautil import ROOT

pytestmark = [pytest.mark.slow]


async def test_the_short_tracing_run_prints_the_cost_per_event_and_the_ratio() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bench" / "tracing.py"), "--messages", "2000",
        "--rounds", "1", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    lines = text.strip().splitlines()
    assert re.fullmatch(r"on_us_per_event=\d+\.\d\d added_us_per_event=-?\d+\.\d\d "
                        r"ratio=\d+\.\d\d", lines[-1]), text
    assert re.search(r"^round 1: tracing off: [\d.]+ s", text, re.MULTILINE), text
    # 2000 spans fit the batch span processor's queue (2048): none is dropped
    assert re.search(r"^round 1: tracing on : [\d.]+ s, .*, 2000 of 2000 process spans "
                     r"received$", text, re.MULTILINE), text
