"""The Parquet warehouse of an earlier version: which directories are taken for old
tables (never an Iceberg one), the old merge's half-done swaps put back, and ``validate``
refusing to start until they are migrated (file system only: no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from actors.tables import legacy
from service.cli import main
from settings.models import SparkSettings


def parquet(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PAR1")


def old_warehouse(root: Path) -> None:
    parquet(root / "stg_x" / "ingest_date=2026-01-01" / "writer_id=h-1-ab" / "part-0.parquet")
    parquet(root / "stg_x" / "ingest_date=2026-01-01" / "writer_id=h-1-ab" / "_temporary"
            / "part-9.parquet")  # an append the old JVM never finished
    parquet(root / "final_x" / "log_date=2016-07-13" / "part-0.parquet")
    (root / "_merge_state").mkdir()
    (root / "_merge_state" / "final_x.json").write_text(json.dumps(
        {"staging_table": "stg_x", "merged_files": [
            "ingest_date=2026-01-01/writer_id=h-1-ab/part-0.parquet"]}))


def iceberg_tables(root: Path) -> None:
    """What the Iceberg catalog writes: <namespace>/<table>/{metadata,data}."""
    for table in ("stg_x", "final_x"):
        (root / "kstage" / table / "metadata").mkdir(parents=True)
        parquet(root / "kstage" / table / "data" / "_ingested_at_day=2026-01-01" / "0.parquet")


def test_old_staging_final_and_merge_state_are_found_and_iceberg_is_not(tmp_path: Path) -> None:
    iceberg_tables(tmp_path)
    settings = SparkSettings(warehouse=str(tmp_path))
    assert legacy.find(settings) is None
    old_warehouse(tmp_path)
    found = legacy.find(settings)
    assert found is not None and found.root == tmp_path
    assert found.names() == ["stg_x", "final_x", "_merge_state"]
    assert found.states["final_x"].staging == "stg_x"
    assert legacy.parquet_files(tmp_path / "stg_x") == [
        "ingest_date=2026-01-01/writer_id=h-1-ab/part-0.parquet"]
    for name in ("stg_x", "final_x", "_merge_state"):
        legacy.move_aside(tmp_path, tmp_path / name)
    assert legacy.find(settings) is None  # what was moved aside is not asked for again
    assert (tmp_path / "_pre_iceberg" / "stg_x").is_dir()


def test_no_local_warehouse_has_nothing_old(tmp_path: Path) -> None:
    assert legacy.find(SparkSettings(warehouse=str(tmp_path / "missing"))) is None
    remote = SparkSettings(warehouse="s3://bucket/wh", catalog={
        "uri": "jdbc:sqlite:/tmp/c.db", "s3": {"region": "us-east-1"}})
    assert legacy.find(remote) is None


def test_a_swap_the_old_merge_left_half_done_is_put_back(tmp_path: Path) -> None:
    work = tmp_path / "_merge_work"
    parquet(work / "final_a.old" / "part-0.parquet")  # moved out, never replaced
    parquet(work / "final_b.old" / "part-0.parquet")  # replaced: garbage, kept aside
    parquet(tmp_path / "final_b" / "part-1.parquet")
    parquet(work / "final_c.old-parts" / "log_date=1" / "p.parquet")  # replaced
    parquet(work / "final_c.old-parts" / "log_date=2" / "p.parquet")  # taken out only
    parquet(tmp_path / "final_c" / "log_date=1" / "new.parquet")
    legacy.repair(tmp_path)
    assert (tmp_path / "final_a" / "part-0.parquet").is_file()
    assert (work / "final_b.old" / "part-0.parquet").is_file()
    assert [p.name for p in (tmp_path / "final_b").iterdir()] == ["part-1.parquet"]
    assert (tmp_path / "final_c" / "log_date=2" / "p.parquet").is_file()
    assert [p.name for p in (tmp_path / "final_c" / "log_date=1").iterdir()] == ["new.parquet"]


def test_validate_refuses_an_unmigrated_warehouse_naming_what_to_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    warehouse = tmp_path / "warehouse"
    iceberg_tables(warehouse)
    cfg = tmp_path / "kstage.yml"
    cfg.write_text(yaml.safe_dump({
        "kafka": {"bootstrap": "127.0.0.1:9092"},
        "spark": {"warehouse": str(warehouse)},
        "groups": [{"topics": [{"topic": "t", "processor": "gobblin_compaction",
                                "format": "json", "sink": {"type": "spark",
                                                           "table": "stg_x"}}]}]}))
    assert main(["validate", "-c", str(cfg)]) == 0
    capsys.readouterr()
    old_warehouse(warehouse)
    assert main(["validate", "-c", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kstage: {cfg}: ") and "spark.warehouse" in err, err
    assert (f"{warehouse} holds tables of an earlier kstage version (Parquet, not Iceberg): "
            f"stg_x, final_x, _merge_state; run `kstage tables migrate -c {cfg}` to import "
            "them into their Iceberg tables (the old directories are then moved to "
            f"{warehouse / '_pre_iceberg'}, never deleted)") in err
