"""``bench/hostile.py`` runs to its last line:
every case kstage bounds is poison, and the table names every case of the corpus (no
figure is asserted: times and RSS are the benchmark's, not a test's)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile_corpus import CASES

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow]  # the whole benchmark's short variant: ~40 s


def test_the_short_hostile_run_prints_every_case_and_the_worst() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "hostile.py")],
                          capture_output=True, text=True, timeout=170, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    table = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ")}
    for name in [*CASES, "json_schema uniqueItems, 4,000 objects",
                 "json_schema pattern ^(a+)+$, 40 chars", "json 50 MB single message",
                 "header invalid UTF-8, as a string column"]:
        assert "| poison: " in table[name], table.get(name, lines)
    assert "took more than its budget" in table["json_schema uniqueItems, 4,000 objects"]
    assert not any(line.startswith("not poison") for line in lines), lines
    assert re.fullmatch(r"worst_s=\d+\.\d+ \(.+\) worst_rss_mb=\d+ \(.+\)", lines[-1]), lines
