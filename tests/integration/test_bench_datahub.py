"""Smoke test of ``bench/datahub_actions.py``: its raw-loop and kstage parts, untimed.

The benchmark runs as it would by hand (a subprocess with its own embedded broker), with
500 MCL events and ``--no-datahub`` (the DataHub Actions venv is installed by the
benchmark only, never by the test suite). Nothing here compares timings: it checks that
both sides consumed and committed every event and that the summary lines are printed.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.kafkautil import ROOT

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_raw_and_kstage_parts_run_and_print_the_ratio_line() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "datahub_actions.py"), "--no-datahub",
         "--messages", "500"],
        cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"raw_ratio=\d+\.\d\d", lines[-1]), proc.stdout
    assert any(line.startswith("round 1: raw aiokafka+fastavro") for line in lines), proc.stdout
    assert any(line.startswith("round 1: kstage datahub_mcl") and "committed 500;" in line
               for line in lines), proc.stdout
    assert any(line.startswith("kstage run --drain (datahub_mcl, null sink): ")
               for line in lines), proc.stdout
