"""The PostgreSQL catalog's connection settings on both append paths: the PostgreSQL JDBC
driver's parameters (the URI's query, ``user``/``password``, ``properties`` ``jdbc.*``) as
libpq's (``appends: pyiceberg``), the same TLS on both (``verify-full`` given on either side
is verify-full on both; the JDBC default ``prefer`` passed explicitly, so libpq's
environment cannot change it), and ``validate`` refusing, with file, line and key, what
libpq cannot mean the same way."""

from __future__ import annotations

import os
import pwd
import textwrap
from pathlib import Path
from typing import Any

import pytest

from actors.sinks.spark.catalog import catalog_conf
from actors.sinks.spark.catalog_connection import (
    connection_problems,
    libpq_arguments,
    tls_failure,
)
from actors.sinks.spark.pyiceberg_catalog import sqlalchemy_uri
from service.cli import main
from settings import SparkSettings

HOME = pwd.getpwuid(os.getuid()).pw_dir  # Java's user.home


def settings(uri: str = "jdbc:postgresql://db.example:5433/lake", *,
             appends: str = "pyiceberg", **catalog: Any) -> SparkSettings:
    return SparkSettings.model_validate({"appends": appends, "warehouse": "/w",
                                         "catalog": {"uri": uri, **catalog}})


def test_tls_parameters_of_the_uri_reach_libpq() -> None:
    tls = settings("jdbc:postgresql://db.example:5433/lake?sslmode=verify-full"
                   "&sslrootcert=/etc/ca.pem&sslcert=/etc/c.pem&sslkey=/etc/c.key"
                   "&ApplicationName=kstage%20lake&connectTimeout=3")
    assert libpq_arguments(tls) == {
        "sslmode": "verify-full", "sslrootcert": "/etc/ca.pem", "sslcert": "/etc/c.pem",
        "sslkey": "/etc/c.key", "application_name": "kstage lake", "connect_timeout": "3"}
    assert sqlalchemy_uri(tls) == (
        "postgresql+psycopg2://db.example:5433/lake?sslmode=verify-full"
        "&sslrootcert=%2Fetc%2Fca.pem&sslcert=%2Fetc%2Fc.pem&sslkey=%2Fetc%2Fc.key"
        "&application_name=kstage+lake&connect_timeout=3")
    assert connection_problems(tls) == []


def test_the_jdbc_defaults_are_explicit_for_libpq() -> None:
    """Nothing given: the JDBC driver's prefer and 10 s connect timeout, whatever
    PGSSLMODE says; verify-* without sslrootcert: the driver's default file."""
    assert libpq_arguments(settings()) == {"sslmode": "prefer", "connect_timeout": "10"}
    assert libpq_arguments(settings("jdbc:postgresql://db/lake?sslmode=verify-ca")) == {
        "sslmode": "verify-ca", "sslrootcert": f"{HOME}/.postgresql/root.crt",
        "connect_timeout": "10"}
    # The driver's ssl=true (or a bare ssl) without sslmode is verify-full.
    for flag in ("ssl=true", "ssl", "ssl=TRUE"):
        found = libpq_arguments(settings(f"jdbc:postgresql://db/lake?{flag}"))
        assert found["sslmode"] == "verify-full", flag
    assert libpq_arguments(settings("jdbc:postgresql://db/lake?ssl=false"))["sslmode"] \
        == "prefer"
    # The driver reads the mode in any case; libpq only in lower case.
    assert libpq_arguments(settings("jdbc:postgresql://db/lake?sslmode=Verify-Full"))[
        "sslmode"] == "verify-full"


def test_user_and_password_from_the_query_settings_or_properties_log_in() -> None:
    query = settings("jdbc:postgresql://db/lake?user=kst%20age&password=p%40ss%2Fword")
    assert sqlalchemy_uri(query).startswith(
        "postgresql+psycopg2://kst%20age:p%40ss%2Fword@db/lake?")
    assert "password" not in libpq_arguments(query)  # in the URL's login, not twice
    props = settings(properties={"jdbc.user": "u", "jdbc.password": "pw",
                                 "jdbc.sslmode": "verify-full",
                                 "jdbc.sslrootcert": "/etc/ca.pem"})
    assert sqlalchemy_uri(props) == (
        "postgresql+psycopg2://u:pw@db.example:5433/lake?sslmode=verify-full"
        "&sslrootcert=%2Fetc%2Fca.pem&connect_timeout=10")
    # Spark's catalog gets the same: the URI as given, the properties as jdbc.*.
    conf = catalog_conf(props)
    assert conf["spark.sql.catalog.kstage.jdbc.sslmode"] == "verify-full"
    assert conf["spark.sql.catalog.kstage.jdbc.user"] == "u"
    same = settings("jdbc:postgresql://db/lake?user=u", user="u", password="pw",  # noqa: S106
                    properties={"jdbc.password": "pw"})
    assert connection_problems(same) == []  # the same value twice is no conflict


def problems(spark: SparkSettings) -> dict[str, str]:
    """Each refused key and why (several reasons of one key joined)."""
    found: dict[str, str] = {}
    for path, why in connection_problems(spark):
        key = ".".join(map(str, path))
        found[key] = f"{found[key]} | {why}" if key in found else why
    return found


def test_what_libpq_cannot_mean_the_same_is_refused_by_key() -> None:
    found = problems(settings(
        "jdbc:postgresql://db/lake?sslfactory=org.postgresql.ssl.NonValidatingFactory"
        "&sslMode=verify-full&sslpassword=x",
        properties={"jdbc.sslhostnameverifier": "com.example.Any",
                    "jdbc.socketTimeout": "5", "jdbc.schema-version": "V1"}))
    assert set(found) == {"spark.catalog.uri",
                          "spark.catalog.properties.jdbc.sslhostnameverifier",
                          "spark.catalog.properties.jdbc.socketTimeout"}
    uri = found["spark.catalog.uri"]
    assert "sslfactory" in uri and "Java" in uri and "sslmode=verify-full" in uri
    assert "sslMode" in uri and "did you mean 'sslmode'" in uri
    assert "sslpassword" in uri
    assert "appends: pyiceberg" in uri
    assert "socketTimeout" in found["spark.catalog.properties.jdbc.socketTimeout"]


@pytest.mark.parametrize(("uri", "catalog", "key", "words"), [
    ("jdbc:postgresql://db/lake?sslmode=verify-full&sslrootcert=system", {},
     "spark.catalog.uri", ["system", "file"]),
    ("jdbc:postgresql://db/lake?sslmode=require&sslrootcert=/ca.pem", {},
     "spark.catalog.uri", ["require", "verify-full"]),
    ("jdbc:postgresql://db/lake?sslmode=verify-full&sslcert=/c.pem", {},
     "spark.catalog.uri", ["sslkey"]),
    ("jdbc:postgresql://db/lake?sslcert=/c.pem&sslkey=/c.pk8", {},
     "spark.catalog.uri", ["PEM", "PKCS-8"]),
    ("jdbc:postgresql://db/lake?sslmode=sure", {}, "spark.catalog.uri",
     ["sslmode", "verify-full"]),
    ("jdbc:postgresql://db/lake?sslmode=verify-full", {"properties": {
        "jdbc.sslmode": "require"}}, "spark.catalog.properties.jdbc.sslmode",
     ["sslmode", "twice"]),
    ("jdbc:postgresql://db/lake?user=a", {"user": "b"}, "spark.catalog.user",
     ["user", "twice"]),
    ("jdbc:postgresql://h1:5432,h2:5432/lake", {}, "spark.catalog.uri", ["one host"]),
    ("jdbc:postgresql:lake", {}, "spark.catalog.uri", ["//HOST"]),
])
def test_each_refusal_names_its_key_and_why(uri: str, catalog: dict[str, Any], key: str,
                                            words: list[str]) -> None:
    found = problems(settings(uri, **catalog))
    assert key in found, found
    assert all(word in found[key] for word in words), found[key]
    with pytest.raises(ValueError, match="appends: pyiceberg"):
        sqlalchemy_uri(settings(uri, **catalog))  # never a connection that means otherwise


def test_appends_spark_and_sqlite_are_not_checked() -> None:
    odd = "jdbc:postgresql://db/lake?sslfactory=x.Y"
    assert connection_problems(settings(odd, appends="spark")) == []
    assert connection_problems(settings("jdbc:sqlite:/w/c.db")) == []


def test_validate_refuses_a_tls_setting_libpq_cannot_honour(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSTAGE_JARS_DIR", str(tmp_path))  # no jars: a problem of its own
    path = tmp_path / "kstage.yml"
    path.write_text(textwrap.dedent("""\
        name: lake
        spark:
          appends: pyiceberg
          jars: []
          catalog:
            uri: "jdbc:postgresql://db/lake?sslmode=verify-full&sslfactory=a.B"
            properties:
              jdbc.sslpassword: hunter2x
        groups:
          - topics:
              - {topic: events, processor: gobblin_compaction, format: json,
                 sink: {type: spark}}
        """), encoding="utf-8")
    code = main(["validate", "-c", str(path)])
    output = "".join(capsys.readouterr())
    assert code == 2, output
    assert f"{path}: spark.catalog.uri (line 6): " in output, output
    assert "sslfactory" in output
    assert f"{path}: spark.catalog.properties['jdbc.sslpassword'] (line 8): " in output, \
        output
    assert "hunter2x" not in output


def test_a_tls_failure_names_the_catalog_and_its_tls_never_the_login() -> None:
    spark = settings("jdbc:postgresql://db.example:5433/lake?user=u&password=hunter2x",
                     appends="spark", properties={"jdbc.sslmode": "verify-full",
                                                  "jdbc.sslrootcert": "/etc/ca.pem"})
    refused = ConnectionError("SSL error: certificate verify failed")
    why = tls_failure(spark, refused)
    assert why is not None
    assert why.startswith("catalog 'kstage' (PostgreSQL db.example:5433/lake, TLS "
                          "sslmode=verify-full, sslrootcert=/etc/ca.pem): the TLS connection")
    assert "hunter2x" not in why
    java = RuntimeError("Failed to connect")
    java.__cause__ = RuntimeError("PKIX path building failed")
    assert tls_failure(spark, java) is not None  # the cause says it
    assert tls_failure(spark, ConnectionError("connection refused")) is None
    assert tls_failure(settings("jdbc:sqlite:/w/c.db"), refused) is None
    assert "TLS sslmode=prefer)" in (tls_failure(settings(), refused) or "")
