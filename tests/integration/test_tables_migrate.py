"""``kstage tables migrate`` on a warehouse written by the OLD code (commit 753fb47, plain
Parquet): ``validate``/``run`` refuse it naming what to run; a migration that fails half
way is finished by running it again; every old row is in its Iceberg table once (read
back by pyiceberg, not Spark); a further run changes nothing; the old directories are
moved aside, never deleted.

The old warehouse is made once per module by ``tests/legacy_writer.py`` run against a
``git archive`` of the old commit (its own JVM); the test migrates a copy of it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from actors.tables import migrate as migration
from service.cli import main
from tests.iceberg_tables import reader, rows, summaries
from tests.kafkautil import ROOT

pytestmark = pytest.mark.slow

OLD_COMMIT = "753fb47"  # the last commit of the Parquet tables
TOPICS = {"stg_legacy": "GobblinTrackingEvent_compaction",
          "stg_legacy_raw": "GobblinTrackingEvent_compaction_raw"}


@pytest.fixture(scope="module")
def old(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[Any]]]:
    """A warehouse the old code wrote, and every row it reads back per directory."""
    tree = tmp_path_factory.mktemp(f"legacy-{OLD_COMMIT}")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD_COMMIT, "actors",
                              "processors", "settings"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    warehouse = tmp_path_factory.mktemp("old") / "warehouse"
    out = warehouse.parent / "rows.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(tree), str(ROOT)))}
    # -P: the script's directory (tests/, with its own `actors` package) is not on the path
    done = subprocess.run([sys.executable, "-P", str(ROOT / "tests" / "legacy_writer.py"),
                           str(warehouse), str(out)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return warehouse, json.loads(out.read_text())


def write_config(path: Path, warehouse: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "kafka": {"bootstrap": "127.0.0.1:9092"},
        "spark": {"master": "local[1]", "warehouse": str(warehouse)},
        "groups": [{"group_id": "legacy", "topics": [
            {"topic": topic, "processor": "gobblin_compaction", "format": "json",
             "sink": {"type": "spark", "table": table}} for table, topic in TOPICS.items()]}],
    }))
    return path


def micros(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return int(value.timestamp() * 1_000_000)
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def as_old(row: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """An Iceberg row in the old row's terms (``_kafka_partition`` was ``_partition``)."""
    renamed = {("_partition" if k == "_kafka_partition" else k): micros(v)
               for k, v in row.items()}
    return tuple(sorted(renamed.items()))


def old_rows(found: list[dict[str, Any]]) -> Counter[tuple[tuple[str, Any], ...]]:
    return Counter(tuple(sorted(r.items())) for r in found)


def test_an_old_warehouse_is_refused_then_migrated_once_with_every_row(
        old: tuple[Path, dict[str, list[Any]]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    source, expected = old
    warehouse = tmp_path / "warehouse"
    shutil.copytree(source, warehouse)
    cfg = write_config(tmp_path / "kstage.yml", warehouse)

    for command in (["validate", "-c", str(cfg)], ["run", "-c", str(cfg)],
                    ["tables", "maintain", "-c", str(cfg)]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert f"{cfg}" in err and "spark.warehouse" in err, err
        assert (f"{warehouse} holds tables of an earlier kstage version (Parquet, not "
                "Iceberg): stg_legacy, stg_legacy_raw, final_legacy, _merge_state, "
                f"_merge_work; run `kstage tables migrate -c {cfg}`") in err, err

    # the first run fails after importing the staging tables, before the final table
    def no_disk(*args: Any) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(migration, "_partition", no_disk)  # the final table's first step
    assert main(["tables", "migrate", "-c", str(cfg)]) == 1
    assert ("kstage tables migrate: stg_legacy: OSError: No space left on device (nothing of "
            "it was moved aside; run the migration again)") in capsys.readouterr().err
    assert (warehouse / "stg_legacy").is_dir() and (warehouse / "final_legacy").is_dir()
    monkeypatch.undo()

    assert main(["tables", "migrate", "-c", str(cfg)]) == 0
    out = capsys.readouterr().out.splitlines()
    table = "kstage.kstage.stg_legacy"
    assert out == [f"stg_legacy (merged) -> {table}: imported by an earlier run",
                   f"stg_legacy (unmerged) -> {table}: imported by an earlier run",
                   "final_legacy (final) -> kstage.kstage.final_legacy: 6 rows",
                   "stg_legacy_raw (unmerged) -> kstage.kstage.stg_legacy_raw: 5 rows"], out
    aside = warehouse / "_pre_iceberg"
    assert sorted(p.name for p in aside.iterdir()) == [
        "_merge_state", "_merge_work", "final_legacy", "stg_legacy", "stg_legacy_raw"]
    assert sorted(p.name for p in warehouse.iterdir()
                  if not p.name.startswith("catalog.db")) == ["_pre_iceberg", "kstage"]

    # every old row in its Iceberg table once, read by another engine (pyiceberg)
    for name in ("stg_legacy", "stg_legacy_raw", "final_legacy"):
        got = Counter(as_old(r) for r in rows(warehouse, name))
        assert got == old_rows(expected[name]), name
    assert len(expected["stg_legacy"]) == 20 and len(expected["final_legacy"]) == 6
    staging, final = summaries(warehouse, "stg_legacy"), summaries(warehouse, "final_legacy")
    assert [s.get("kstage.migrated-from") for s in staging] == ["stg_legacy#merged",
                                                                "stg_legacy#unmerged"]
    assert [int(s["added-records"]) for s in staging] == [16, 4]  # merged: 6 + 6 replayed + 4
    assert len(final) == 1 and final[0]["kstage.migrated-from"] == "final_legacy#final"
    # the final table is merged through the merged files' commit: the next merge folds
    # only the 4 rows after it
    first = min(reader(warehouse).catalog.load_table(("kstage", "stg_legacy")).snapshots(),
                key=lambda s: s.timestamp_ms)
    assert final[0]["kstage.merged-snapshot-id"] == str(first.snapshot_id)

    # again: nothing to do, nothing changed; validate accepts the warehouse now
    assert main(["tables", "migrate", "-c", str(cfg)]) == 0
    assert "no tables of an earlier kstage version to migrate" in capsys.readouterr().out
    assert summaries(warehouse, "stg_legacy") == staging
    assert summaries(warehouse, "final_legacy") == final
    assert main(["validate", "-c", str(cfg)]) == 0
    # the old files are all still there, moved
    assert len(list((aside / "stg_legacy").rglob("*.parquet"))) == 4
