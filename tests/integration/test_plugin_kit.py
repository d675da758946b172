"""The plugin kit on the real embedded broker: ``run_pipeline``, and the acceptance path
of a scaffolded plugin (generate, install, test, list, run end to end, uninstall)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from processors import COORDINATE_COLUMNS, registry
from processors.datahub_mcl import DatahubMclProcessor
from processors.testing import avro_message
from service.cli import main
from service.testing import arun_processor, run_pipeline
from tests.kafkautil import create_topic, produce, read_jsonl, unique, write_config
from tests.unit import test_processors_datahub as dh

pytestmark = pytest.mark.kafka

PLUGIN = "acme_rows"
DIST = "kstage-acme-rows"


def pip(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                          timeout=180, check=False)
    assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"


def run(*args: str, cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)


async def test_run_pipeline_json_rows_and_dead_letters(broker: str) -> None:
    values = [{"a": 1}, b"not json", {"a": 2, "b": "x"}]
    result = await run_pipeline("json_rows", values, options={"fields": ["a"]},
                                bootstrap=broker, timeout_s=60)
    assert [{k: r[k] for k in ("a", "_offset")} for r in result.rows] == [
        {"a": 1, "_offset": 0}, {"a": 2, "_offset": 2}]
    assert all(r["_topic"] == result.topic for r in result.rows)
    assert [(d["offset"], d["processor"], d["group"]) for d in result.dead_letters] == [
        (1, "json_rows", result.group)]
    assert "PoisonMessage" in result.dead_letters[0]["error_type"]


async def test_run_pipeline_avro_matches_run_processor(broker: str) -> None:
    records = [dh.mcl(), dh.mcl(changeType="DELETE", aspect=None, created=None)]
    result = await run_pipeline("datahub_mcl", records, format="avro", bootstrap=broker)
    # The schema defaults to the processor's reader_schema, served by a file:// registry.
    expected = await arun_processor(DatahubMclProcessor, [avro_message(dh.MCL, r)
                                                          for r in records])
    strip = [{k: v for k, v in r.items() if k not in COORDINATE_COLUMNS} for r in expected]
    assert [{k: v for k, v in r.items() if k not in COORDINATE_COLUMNS}
            for r in result.rows] == strip
    assert result.dead_letters == []


@pytest.fixture
def uninstall_plugin() -> Iterator[None]:
    """Leave the venv as it was: the scaffolded plugin is uninstalled even on failure."""
    if PLUGIN in registry.available():  # a leftover of an interrupted run
        pip("uninstall", "-y", "-q", DIST)
    try:
        yield
    finally:
        pip("uninstall", "-y", "-q", DIST)


async def test_scaffolded_plugin_installs_lists_and_runs_end_to_end(
    broker: str, tmp_path: Path, uninstall_plugin: None
) -> None:
    assert main(["processors", "new", PLUGIN, "--dir", str(tmp_path)]) == 0
    project = tmp_path / PLUGIN
    # Build isolation stays on: the venv's setuptools lacks `wheel` for an in-place build.
    pip("install", "-q", "--no-deps", "-e", str(project))

    # A fresh interpreter sees the new entry point (this process never imports the plugin).
    tests = run("-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=project)
    assert tests.returncode == 0, f"generated tests failed:\n{tests.stdout}\n{tests.stderr}"
    assert " passed" in tests.stdout and "failed" not in tests.stdout

    listing = run("-m", "service", "processors", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    line = next(ln for ln in listing.stdout.splitlines() if ln.startswith(PLUGIN))
    assert "JSON events -> stg_acme_rows" in line and "BROKEN" not in line

    topic, group, out = unique("acme"), unique("acme-group"), tmp_path / "rows.jsonl"
    await create_topic(broker, topic)
    await produce(broker, topic, [
        {"id": "e-1", "kind": "Signup", "user": {"id": "u-1"}},
        {"id": "e-2", "kind": "heartbeat"},  # dropped by the default drop_kinds
        {"kind": "signup"},  # poison: no id
        {"id": "e-4", "kind": "login"},
    ])
    cfg = write_config(tmp_path / "kstage.yml", broker, group, [
        {"topic": topic, "processor": PLUGIN, "format": "json",
         "sink": {"type": "jsonl", "path": str(out)}}])
    drained = run("-m", "service", "run", "-c", str(cfg), "--drain", cwd=tmp_path)
    assert drained.returncode == 0, drained.stdout + drained.stderr
    assert [(r["id"], r["kind"], r["user_id"], r["_offset"]) for r in read_jsonl(out)] == [
        ("e-1", "signup", "u-1", 0), ("e-4", "login", None, 3)]
    assert [d["offset"] for d in read_jsonl(tmp_path / "dead.jsonl")] == [2]
