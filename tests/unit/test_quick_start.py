"""What ``kstage run`` does before its first fetch stays cheap (issue 36, a quick start):
the collector is tuned without a full collection of the start-up heap, and a process
whose topics read JSON loads no Avro library. Each check runs in a fresh interpreter
(the test process's own heap and imports would hide both); the time itself is measured
by ``bench/throughput.py`` (docs/benchmarks.md), never asserted here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str) -> str:
    """The last line ``code`` printed in a fresh interpreter on this repository."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_tune_gc_freezes_the_start_heap_and_raises_the_threshold_without_collecting() -> None:
    """The start-up heap is frozen (the collector never walks it again) and gen 0 waits
    for more allocations; no full collection runs first (it cost ~70 ms of CPU at every
    start and found ~50 unreachable objects, which the freeze now keeps)."""
    out = run_python(
        "import gc\n"
        "from service.lifecycle import _GC_GEN0_THRESHOLD, tune_gc\n"
        "gc.disable()  # no collection of the collector's own accord in between\n"
        "before = [s['collections'] for s in gc.get_stats()]\n"
        "tune_gc()\n"
        "after = [s['collections'] for s in gc.get_stats()]\n"
        "print(before == after, gc.get_freeze_count() > 0,\n"
        "      gc.get_threshold()[0] == _GC_GEN0_THRESHOLD)\n")
    assert out == "True True True"


def test_a_json_topic_process_loads_no_avro_library() -> None:
    """``kstage run``'s modules and a JSON topic's settings load neither fastavro nor
    cavro: the Avro decoder imports them when it is made (a topic reading Avro)."""
    out = run_python(
        "import sys\n"
        "import service.commands.run, service.lifecycle, actors.master, actors.worker\n"
        "import actors.worker.known_schema\n"
        "from service.commands.common import load_for_run\n"
        "load_for_run('kstage.yml', [])\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'fastavro', 'cavro'}))\n")
    assert out == "[]"


def test_the_avro_decoder_loads_fastavro_when_made() -> None:
    out = run_python(
        "import sys\n"
        "from actors.codecs.avro import AvroDecoder\n"
        "from actors.codecs.schema_files import FileSchemaRegistry\n"
        "AvroDecoder(FileSchemaRegistry('.'))\n"
        "print('fastavro' in sys.modules)\n")
    assert out == "True"
