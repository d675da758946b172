"""``spark.appends: pyiceberg``: the pyiceberg catalog ``spark.catalog`` becomes (the same
database and warehouse Spark's JDBC catalog uses), the Arrow table conformed to the
table's required columns, ``validate`` refusing the setting when a package it needs is
not installed (file, line and key), the Iceberg types named as Spark names them for the
column check, and where a new table goes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg import types as t
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from actors.sinks.spark import pyiceberg_catalog
from actors.sinks.spark.pyiceberg_appends import conformed
from actors.sinks.spark.pyiceberg_catalog import (
    catalog_properties,
    missing_modules,
    sqlalchemy_uri,
)
from actors.sinks.spark.pyiceberg_tables import iceberg_type, spark_type_name, table_location
from actors.sinks.table.columns import COLUMN_TYPES, column_kind
from service.cli import main
from settings import SparkSettings


def settings(**spark: object) -> SparkSettings:
    return SparkSettings.model_validate({"appends": "pyiceberg", **spark})


def test_a_sqlite_catalog_is_the_same_file_with_its_busy_timeout(tmp_path: Path) -> None:
    default = settings(warehouse=str(tmp_path / "wh"))
    assert sqlalchemy_uri(default) == f"sqlite:///{tmp_path / 'wh' / 'catalog.db'}?timeout=30"
    props = catalog_properties(default)
    assert props["warehouse"] == str(tmp_path / "wh")
    assert props["init_catalog_tables"] == "false"  # made with the JDBC catalog's DDL
    assert props["schema_version"] == "v1"  # as Spark's jdbc.schema-version
    named = settings(catalog={"uri": f"jdbc:sqlite:{tmp_path}/c.db?journal_mode=WAL"
                                     "&busy_timeout=1500"}, warehouse=str(tmp_path))
    assert sqlalchemy_uri(named) == f"sqlite:///{tmp_path}/c.db?timeout=1.5"


def test_a_postgres_catalog_logs_in_with_quoted_secrets() -> None:
    pg = settings(catalog={"uri": "jdbc:postgresql://db.example:5433/lake", "user": "kst age",
                           "password": "p@ss/word"}, warehouse="/w")
    assert sqlalchemy_uri(pg) == (
        "postgresql+psycopg2://kst%20age:p%40ss%2Fword@db.example:5433/lake"
        "?sslmode=prefer&connect_timeout=10")  # the JDBC driver's defaults
    assert "p@ss/word" not in repr(pg)


def test_an_s3_warehouse_gets_the_catalog_s3_settings() -> None:
    s3 = settings(catalog={"uri": "jdbc:postgresql://db/lake", "s3": {
        "endpoint": "http://127.0.0.1:9000", "region": "eu-west-1", "path_style_access": True,
        "access_key_id": "AK", "secret_access_key": "SK"}}, warehouse="s3://bucket/tables")
    props = catalog_properties(s3)
    assert props["warehouse"] == "s3://bucket/tables"
    assert {k: v for k, v in props.items() if k.startswith("s3.")} == {
        "s3.endpoint": "http://127.0.0.1:9000", "s3.region": "eu-west-1",
        "s3.force-virtual-addressing": "false", "s3.access-key-id": "AK",
        "s3.secret-access-key": "SK"}


def test_the_arrow_table_takes_the_tables_order_and_required_fields() -> None:
    schema = Schema(NestedField(1, "b", StringType(), required=False),
                    NestedField(2, "_offset", LongType(), required=True),
                    NestedField(3, "added_later", StringType(), required=False))
    table = pa.table({"_offset": pa.array([1, 2], pa.int64()), "b": ["x", None]})
    assert table.schema.field("_offset").nullable
    out = conformed(table, schema)
    assert out.column_names == ["b", "_offset", "added_later"]
    assert not out.schema.field("_offset").nullable
    assert out.schema.field("b").nullable
    assert out.column("added_later").null_count == 2
    assert out.column("_offset").to_pylist() == [1, 2]


def test_a_missing_package_is_refused_at_spark_appends(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert missing_modules(settings(warehouse="/w")) == []  # the dev install has them all
    real = pyiceberg_catalog.find_spec
    monkeypatch.setattr(pyiceberg_catalog, "find_spec",
                        lambda name: None if name == "pyiceberg_core" else real(name))
    monkeypatch.setenv("KSTAGE_JARS_DIR", str(tmp_path))  # no jars: a problem of its own
    path = tmp_path / "kstage.yml"
    path.write_text("name: lake\nspark:\n  appends: pyiceberg\n  jars: []\n" + textwrap.dedent(
        """\
        groups:
          - topics:
              - {topic: events, processor: gobblin_compaction, format: json,
                 sink: {type: spark}}
        """), encoding="utf-8")
    code = main(["validate", "-c", str(path)])
    output = "".join(capsys.readouterr())
    assert code == 2, output
    assert f"{path}: spark.appends (line 3): appends: pyiceberg needs pyiceberg-core" \
        in output, output


def test_iceberg_types_are_named_as_spark_names_them_for_the_column_check() -> None:
    """The names :func:`schema_change` compares an existing table's columns by: Spark's
    ``simpleString`` of the type Iceberg's Spark runtime reads each Iceberg type as."""
    for kind in (*COLUMN_TYPES, "decimal(12,3)"):  # kstage's own: Spark's DDL type, lowered
        assert spark_type_name(iceberg_type(kind)) == column_kind(kind).spark_sql.lower()
    assert spark_type_name(t.TimestampType()) == "timestamp_ntz"
    assert spark_type_name(t.UUIDType()) == "string"
    nested = t.StructType(t.NestedField(1, "a", t.ListType(2, t.LongType()), required=False),
                          t.NestedField(3, "m", t.MapType(4, t.StringType(), 5, t.DateType()),
                                        required=False))
    assert spark_type_name(nested) == "struct<a:array<bigint>,m:map<string,date>>"


def test_a_new_table_goes_where_the_jdbc_catalog_puts_it(tmp_path: Path) -> None:
    local = settings(warehouse=str(tmp_path / "wh"), catalog={"namespace": "lake"})
    assert table_location(local, "stg") == f"{tmp_path / 'wh'}/lake/stg"
    s3 = settings(warehouse="s3://bucket/prefix/", catalog={
        "uri": "jdbc:postgresql://db/lake", "s3": {"region": "eu-west-1"}})
    assert table_location(s3, "stg") == "s3://bucket/prefix/kstage/stg"
