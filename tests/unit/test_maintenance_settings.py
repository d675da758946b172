"""``spark.maintenance``: what ``kstage validate`` refuses, with the file, key and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.cli import main
from settings.models import MaintenanceSettings, SparkSettings

CONFIG = """\
kafka:
  bootstrap: 127.0.0.1:9092
spark:
  maintenance:
    {key}: {value}
groups:
  - topics:
      - {{topic: t, processor: gobblin_compaction, format: json, sink: {{type: spark}}}}
"""


@pytest.mark.parametrize(("key", "value", "why"), [
    ("orphan_min_age_s", 3600, "Input should be greater than or equal to 86400"),
    ("min_input_files", 1, "Input should be greater than or equal to 2"),
    ("every_s", 0, "Input should be greater than 0"),
    ("fold_files", 1, "Input should be greater than or equal to 2"),
    ("snapshot_min_keep", 0, "Input should be greater than or equal to 1"),
    ("snapshot_max_age", 60, "Extra inputs are not permitted"),
])
def test_a_bad_maintenance_setting_is_refused_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: int,
        why: str) -> None:
    path = tmp_path / "kstage.yml"
    path.write_text(CONFIG.format(key=key, value=value), encoding="utf-8")
    assert main(["validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kstage: {path}: spark.maintenance.{key} (line 5): "), err
    assert why in err, err


def test_the_defaults_run_every_ten_minutes_keep_an_hour_and_remove_orphans_after_a_day() -> None:
    m = MaintenanceSettings()
    assert (m.every_s, m.snapshot_max_age_s, m.snapshot_min_keep) == (600, 3600, 10)
    assert (m.target_file_mb, m.min_input_files, m.orphan_min_age_s) == (128, 5, 86400)


@pytest.mark.parametrize(("spark", "expiry"), [
    ({"appends": "pyiceberg"}, (60, 60)),  # no JVM: expiry through pyiceberg alone
    ({"appends": "pyiceberg", "maintenance": {"snapshot_max_age_s": 900}}, (60, 900)),
    ({"appends": "pyiceberg", "maintenance": {"every_s": 600}}, None),  # the maintenance's
    ({"appends": "pyiceberg", "maintenance": {"every_s": None}}, None),  # off
    ({}, None),  # appends: spark: the maintenance expires, every 600 s
])
def test_pyiceberg_appends_without_the_maintenance_expire_through_pyiceberg(
        spark: dict[str, object], expiry: tuple[float, float] | None) -> None:
    assert SparkSettings.model_validate(spark).pyiceberg_expiry() == expiry


@pytest.mark.parametrize(("spark", "fold_files"), [
    ({"appends": "pyiceberg"}, 50),  # no JVM: the fold through pyiceberg
    ({"appends": "pyiceberg", "maintenance": {"fold_files": 8}}, 8),
    ({"appends": "pyiceberg", "maintenance": {"fold_files": None}}, None),  # off
    ({"appends": "pyiceberg", "maintenance": {"every_s": 600}}, None),  # Spark's fold
    ({"appends": "pyiceberg", "maintenance": {"every_s": None}}, None),  # off
    ({}, None),  # appends: spark: Spark's fold
])
def test_pyiceberg_appends_without_the_maintenance_fold_through_pyiceberg(
        spark: dict[str, object], fold_files: int | None) -> None:
    assert SparkSettings.model_validate(spark).pyiceberg_fold_files() == fold_files
