"""``spark.catalog`` for object storage and several hosts, as Spark configuration: an
``s3://`` warehouse through Iceberg's S3FileIO, a PostgreSQL JDBC catalog, the settings
``kstage validate`` refuses (file, line and key named), and the one-line text of a
failed JVM call that the sink logs and ``/readyz`` shows."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from actors.sinks.spark.actor import short
from actors.sinks.spark.catalog import catalog_conf, catalog_uri, is_local, warehouse_location
from settings import load_settings
from settings.errors import SettingsError
from settings.models import SparkSettings

S3 = {"endpoint": "http://127.0.0.1:9000", "region": "eu-west-1", "path_style_access": True,
      "access_key_id": "AKIDEXAMPLE", "secret_access_key": "wJalrXUtnFEMI"}


def test_an_s3_warehouse_is_written_through_s3fileio_with_the_s3_block() -> None:
    settings = SparkSettings.model_validate({"catalog": {
        "uri": "jdbc:sqlite:/var/lib/kstage/catalog.db", "warehouse": "s3://lake/prefix/",
        "s3": S3}})
    conf = catalog_conf(settings)
    prefix = "spark.sql.catalog.kstage"
    assert not is_local(settings)
    assert warehouse_location(settings) == "s3://lake/prefix"  # as given, no trailing /
    assert conf[f"{prefix}.warehouse"] == "s3://lake/prefix"
    assert conf[f"{prefix}.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf[f"{prefix}.s3.endpoint"] == "http://127.0.0.1:9000"
    assert conf[f"{prefix}.s3.path-style-access"] == "true"
    assert conf[f"{prefix}.client.region"] == "eu-west-1"
    assert conf[f"{prefix}.s3.access-key-id"] == "AKIDEXAMPLE"
    assert conf[f"{prefix}.s3.secret-access-key"] == "wJalrXUtnFEMI"
    # the catalog stays a local SQLite file (WAL, busy timeout)
    assert conf[f"{prefix}.uri"].startswith("jdbc:sqlite:/var/lib/kstage/catalog.db?")


def test_s3_without_keys_leaves_them_to_the_aws_default_chain() -> None:
    settings = SparkSettings.model_validate({"catalog": {
        "uri": "jdbc:sqlite:/c.db", "warehouse": "s3a://lake", "s3": {"region": "us-east-1"}}})
    conf = catalog_conf(settings)
    assert not any(key.endswith(("access-key-id", "secret-access-key")) for key in conf)
    assert "spark.sql.catalog.kstage.s3.endpoint" not in conf  # AWS's own endpoint
    assert conf["spark.sql.catalog.kstage.s3.path-style-access"] == "false"


def test_catalog_properties_tune_s3fileio_and_override_kstage() -> None:
    settings = SparkSettings.model_validate({"catalog": {
        "uri": "jdbc:sqlite:/c.db", "warehouse": "s3://lake", "s3": S3,
        "properties": {"s3.multipart.part-size-bytes": "8388608",
                       "io-impl": "org.apache.iceberg.io.ResolvingFileIO"}}})
    conf = catalog_conf(settings)
    assert conf["spark.sql.catalog.kstage.s3.multipart.part-size-bytes"] == "8388608"
    assert conf["spark.sql.catalog.kstage.io-impl"] == "org.apache.iceberg.io.ResolvingFileIO"


def test_a_postgres_catalog_for_several_hosts() -> None:
    settings = SparkSettings.model_validate({"catalog": {
        "uri": "jdbc:postgresql://db.example.com:5432/lake", "user": "kstage",
        "password": "s3cret", "warehouse": "s3://lake/wh", "s3": S3}})
    conf = catalog_conf(settings)
    assert catalog_uri(settings) == "jdbc:postgresql://db.example.com:5432/lake"  # as is
    assert conf["spark.sql.catalog.kstage.jdbc.user"] == "kstage"
    assert conf["spark.sql.catalog.kstage.jdbc.password"] == "s3cret"
    assert conf["spark.sql.catalog.kstage.jdbc.schema-version"] == "V1"
    # connections PostgreSQL ended (a restart) are reconnected, not failed
    assert conf["spark.sql.catalog.kstage.retryable_status_codes"] == "57P01,57P02,57P03"
    sqlite = catalog_conf(SparkSettings.model_validate({"catalog": {"uri": "jdbc:sqlite:/c.db"}}))
    assert "spark.sql.catalog.kstage.retryable_status_codes" not in sqlite
    assert "s3cret" not in repr(settings) and "wJalrXUtnFEMI" not in repr(settings)


def validate(tmp_path: Path, spark: str) -> str:
    config = tmp_path / "kstage.yml"
    config.write_text("groups: []\nspark:\n" + textwrap.indent(textwrap.dedent(spark), "  "))
    with pytest.raises(SettingsError) as refused:
        load_settings(config)
    return str(refused.value)


@pytest.mark.parametrize(("spark", "named"), [
    ("catalog:\n  warehouse: s3://lake/wh\n  s3: {region: us-east-1}\n",
     "set spark.catalog.uri"),
    ("catalog:\n  uri: jdbc:sqlite:/c.db\n  warehouse: s3://lake/wh\n",
     "set spark.catalog.s3"),
    ("catalog:\n  uri: jdbc:sqlite:/c.db\n  warehouse: s3://Lake_Bucket/wh\n"
     "  s3: {region: us-east-1}\n", "is not s3://bucket[/prefix]"),
    ("catalog:\n  uri: jdbc:sqlite:/c.db\n  warehouse: gs://lake/wh\n",
     "a warehouse is a local (or shared) path, file://, or s3://bucket/prefix"),
    ("catalog:\n  uri: jdbc:sqlite:/c.db\n  warehouse: s3://lake/wh\n"
     "  s3: {endpoint: 127.0.0.1:9000}\n", "is not an http:// or https:// URL"),
    ("catalog:\n  uri: jdbc:sqlite:/c.db\n  warehouse: s3://lake/wh\n"
     "  s3: {access_key_id: AKID}\n", "set access_key_id and secret_access_key together"),
    ("catalog:\n  uri: jdbc:mysql://db/lake\n", "a jdbc catalog's uri is jdbc:sqlite:PATH or "
     "jdbc:postgresql://HOST[:PORT]/DB"),
])
def test_validate_refuses_an_object_store_it_cannot_reach(
        tmp_path: Path, spark: str, named: str) -> None:
    message = validate(tmp_path, spark)
    assert named in message, message
    assert "kstage.yml" in message and "spark.catalog" in message, message


def test_a_failed_jvm_call_is_shown_by_its_java_exception_and_root_cause() -> None:
    class Py4JJavaError(Exception):  # py4j's name; its str() as py4j gives it
        pass

    error = Py4JJavaError(
        "An error occurred while calling o143.append.\n"
        ": org.apache.iceberg.jdbc.UncheckedSQLException: Failed to get table stg_x "
        "from catalog kstage\n"
        "\tat org.apache.iceberg.jdbc.JdbcTableOperations.doRefresh(JdbcTableOperations.java:77)\n"
        "Caused by: java.sql.SQLTransientConnectionException: connection failed\n"
        "\tat org.apache.iceberg.ClientPoolImpl.run(ClientPoolImpl.java:72)\n"
        "Caused by: org.postgresql.util.PSQLException: Connection to 127.0.0.1:5432 refused."
        "\n\t... 40 more\n")
    assert short(error) == (
        "Py4JJavaError: org.apache.iceberg.jdbc.UncheckedSQLException: Failed to get table "
        "stg_x from catalog kstage (caused by org.postgresql.util.PSQLException: "
        "Connection to 127.0.0.1:5432 refused.)")
    assert short(ValueError("first line\nsecond")) == "ValueError: first line"
