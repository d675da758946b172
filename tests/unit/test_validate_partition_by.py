"""``kstage validate`` refuses a spark sink's ``partition_by`` and ``table_properties`` it
cannot apply, each in one line naming the file, the key (the transform's index) and its
line: an unknown transform, a bucket count or truncate width <= 0, a column partitioned
twice, two fields of one name, a column the processor's rows lack, a transform that does
not fit the column's type (a time transform of a string or of ``_timestamp``, a long), a
property kstage sets itself. Accepted: every transform kind on a column it fits, kstage's
own columns among them. (A ``schema_rows`` topic's columns come from the registry:
``tests/unit/test_validate_partition_schema.py``.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.sinks.spark import partitioning
from service.cli import main
from tests.validate_kit import assert_refused_at, topics_config

TYPED = "gobblin_compaction"  # string, long and int columns (no timestamp)


def entry(partition_by: str, extra: str = "") -> str:
    """A topic (on line 4) whose sink's ``partition_by`` is on line 8, its items from
    line 9 on."""
    return (f"- topic: events\n  processor: {TYPED}\n  sink:\n    type: spark\n"
            f"    partition_by:\n{partition_by}{extra}")


@pytest.mark.parametrize(("items", "key", "line", "why"), [
    ("      - cluster\n      - dayz(dataset)\n", "sink.partition_by[1]", 10,
     "unknown transform 'dayz'"),
    ("      - bucket(0, dataset)\n", "sink.partition_by[0]", 9,
     "the bucket count must be > 0, not 0"),
    ("      - cluster\n      - truncate(-3, dataset)\n", "sink.partition_by[1]", 10,
     "the truncate width must be > 0, not -3"),
    ("      - bucket(16 dataset)\n", "sink.partition_by[0]", 9,
     "is not a partition transform"),
    ("      - cluster\n      - customer_id\n", "sink.partition_by[1]", 10,
     "the table has no column 'customer_id'"),
    ("      - day(dataset)\n", "sink.partition_by[0]", 9,
     "day(dataset) does not fit column 'dataset' of type string"),
    ("      - hour(_timestamp)\n", "sink.partition_by[0]", 9,
     "_timestamp is the record's timestamp in milliseconds"),
    ("      - bucket(4, cluster)\n      - bucket(8, cluster)\n", "sink.partition_by", 8,
     "column(s) cluster partitioned twice (bucket(4, cluster), bucket(8, cluster))"),
    ("      - day(_ingested_at)\n      - hour(_ingested_at)\n", "sink.partition_by", 8,
     "column(s) _ingested_at partitioned twice"),
    ("      - truncate(2, dataset)\n      - dataset\n", "sink.partition_by", 8,
     "a column can be the source of one partition field only"),
    ("      - cluster_day\n      - day(cluster)\n", "sink.partition_by", 8,
     "partition field name(s) cluster_day given twice"),
])
def test_validate_refuses_a_partition_transform(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], items: str, key: str, line: int,
        why: str) -> None:
    assert_refused_at(tmp_path, capsys, entry(items), key, line, why)


def test_a_transform_split_by_a_yaml_flow_list_says_to_quote_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = topics_config(tmp_path, entry("      [day(_ingested_at), bucket(16, dataset)]\n"))
    code = main(["validate", "-c", str(path)])
    out, err = capsys.readouterr()
    lines = (out + err).splitlines()
    assert code == 2, lines
    hint = ("is not a partition transform: write col, year(col), month(col), day(col), "
            "hour(col), bucket(N, col) or truncate(W, col) (in a YAML [...] list a comma "
            "ends an item: quote it, \"bucket(16, customer_id)\", or write one item per line)")
    assert lines == [
        f"kstage: {path}: groups[0].topics[0].sink.partition_by[1] (line 9): 'bucket(16' {hint}",
        f"kstage: {path}: groups[0].topics[0].sink.partition_by[2] (line 9): 'dataset)' {hint}"]


def test_validate_refuses_a_property_kstage_sets(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_refused_at(tmp_path, capsys, entry(
        "      - cluster\n", "    table_properties:\n      commit.retry.num-retries: 2\n"),
        "sink.table_properties", 10, "commit.retry.num-retries: kstage sets these")


def test_validate_accepts_every_transform_that_fits(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = topics_config(tmp_path, entry(
        "      - cluster\n      - bucket(16, dataset)\n      - truncate(4, job_name)\n"
        "      - truncate(10, record_count)\n      - day(_ingested_at)\n"
        "      - bucket(8, _timestamp)\n      - _kafka_partition\n",
        "    table_properties:\n      write.target-file-size-bytes: 1048576\n"
        "      read.split.open-file-cost: '1'\n      kstage.test: true\n"))
    code = main(["validate", "-c", str(path)])
    out, err = capsys.readouterr()
    assert code == 0, out + err


def test_transforms_parse_as_iceberg_names_them() -> None:
    parsed = partitioning.parse_all(["customer_id", "days(ts)", "bucket(16, `id`)",
                                     "truncate( 4 ,name)", "year(d)"])
    assert [(t.spark_sql(), t.field_name()) for t in parsed] == [
        ("`customer_id`", "customer_id"), ("days(`ts`)", "ts_day"),
        ("bucket(16, `id`)", "id_bucket"), ("truncate(4, `name`)", "name_trunc"),
        ("years(`d`)", "d_year")]
    assert partitioning.wanted_fields(()) == [("_ingested_at_day", "day")]
