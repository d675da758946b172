"""The catalog's TLS on both append paths, against a real PostgreSQL that requires TLS
(``ssl=on``, ``hostssl`` entries only) with a server certificate of a private CA made
here (tests/tls_certs.py), the catalog's URI asking for ``sslmode=verify-full`` with that
CA:

* ``appends: pyiceberg`` (``kstage run``, no JVM): with the login and TLS parameters in the
  URI's query, ``--drain`` lands every event (libpq verified the server with the private
  CA); the server then presents a certificate of another CA: the run registers no table,
  appends and commits nothing, ``/readyz`` is 503 and the error names the catalog and its
  TLS; the private CA's certificate back, the same run lands every event;
* Spark's JDBC catalog (``appends: spark``, one Spark session, the TLS parameters as
  ``jdbc.*`` catalog properties): the server presenting the other CA's certificate, the
  table cannot be registered, with the same clear error, and is not created; with the
  private CA's certificate the same session registers a table through the catalog.

The module has one server (its certificate swapped by a restart) and one Spark session.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.errors import SinkError
from actors.sinks.spark.actor import SparkActor
from tests.kafkautil import KstageProcess, committed, create_topic, status_port, unique, wait_readyz
from tests.lake import (
    IcebergReader,
    assert_once,
    lake_config,
    opened_sink,
    produce_events,
    spark_section,
    spark_settings,
    wait_committed,
)
from tests.postgres import DATABASE, USER, TlsPostgres, tls_postgres_server
from tests.tls_certs import Pki, make_pki

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("catalog-pki"))


@pytest.fixture(scope="module")
def tls_pg(pki: Pki) -> Iterator[TlsPostgres]:
    yield from tls_postgres_server(pki.server_cert, pki.server_key)


@pytest.fixture
def trusted(tls_pg: TlsPostgres, pki: Pki) -> Iterator[TlsPostgres]:
    """The server presenting the private CA's certificate (again after a test that
    swapped it)."""
    if tls_pg.serving != pki.server_cert:
        tls_pg.serve(pki.server_cert, pki.server_key)
    yield tls_pg


def present_other_ca(server: TlsPostgres, pki: Pki) -> None:
    """Restart ``server`` with a certificate for the same host signed by another CA."""
    server.serve(pki.other_server_cert, pki.other_server_key)


def catalog_tables(server: TlsPostgres, table: str) -> int:
    """How many rows of the catalog name ``table`` (0 when the catalog has no tables)."""
    exists = server.psql("SELECT to_regclass('iceberg_tables') IS NOT NULL")
    if exists != [["t"]]:
        return 0
    rows = server.psql("SELECT count(*) FROM iceberg_tables "  # noqa: S608 - our table name
                       f"WHERE table_name = '{table}'")
    return int(rows[0][0])


def assert_clear_tls_error(text: str, server: TlsPostgres, pki: Pki) -> None:
    """The error names the catalog, its server and TLS, never the password."""
    assert f"catalog 'kstage' (PostgreSQL 127.0.0.1:{server.port}/{DATABASE}" in text, text
    assert f"TLS sslmode=verify-full, sslrootcert={pki.ca}" in text, text
    assert "certificate" in text.lower(), text
    assert "password=secret" not in text and ":secret@" not in text, text


@pytest.mark.timeout(400)
async def test_pyiceberg_appends_verify_the_server_with_the_private_ca(
        broker: str, tmp_path: Path, kstage: type[KstageProcess], trusted: TlsPostgres,
        pki: Pki) -> None:
    uri = (f"{trusted.url}?sslmode=verify-full&sslrootcert={pki.ca}&user={USER}"
           "&password=secret")
    spark = spark_section({"uri": uri, "warehouse": str(tmp_path / "wh")},
                          appends="pyiceberg")
    table, events = "stg_tls_pyiceberg", 60
    topic, group = unique("cat-tls"), unique("g-cat-tls")
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_events(broker, topic, 0, events, PARTITIONS)
    cfg = lake_config(tmp_path / "kstage.yml", broker, group, topic, table, spark)
    proc = kstage(cfg, "--drain")
    assert await proc.wait(timeout=180) == 0, proc.output()
    assert_once(IcebergReader(spark), table, topic, events, PARTITIONS)

    # The same run against a server whose certificate another CA signed.
    present_other_ca(trusted, pki)
    table, topic, group = "stg_tls_pyiceberg_refused", unique("cat-tls-no"), unique("g-tls-no")
    await create_topic(broker, topic, partitions=PARTITIONS)
    await produce_events(broker, topic, 0, events, PARTITIONS)
    # The worker opens its sink again with backoff (actors/worker/opening.py), the
    # reason in /readyz meanwhile.
    cfg = lake_config(tmp_path / "refused.yml", broker, group, topic, table, spark)
    refused = kstage(cfg)
    base = f"http://127.0.0.1:{await status_port(refused, timeout=120)}"
    await wait_readyz(base, refused, 503, "cannot register the table", timeout=120)
    await refused.wait_for_log(f"spark sink kstage.kstage.{table}: cannot register the "
                               "table: catalog 'kstage'", timeout=60)
    assert_clear_tls_error(refused.output(), trusted, pki)
    assert all(v <= 0 for v in (await committed(broker, group, topic, PARTITIONS)).values())
    assert catalog_tables(trusted, table) == 0

    # The private CA's certificate back: the retried registration and the appends land.
    trusted.serve(pki.server_cert, pki.server_key)
    await wait_committed(broker, group, topic, PARTITIONS, events, [refused])
    refused.signal(signal.SIGTERM)
    assert await refused.wait(timeout=60) == 0, refused.output()
    assert_once(IcebergReader(spark), table, topic, events, PARTITIONS)


@pytest.mark.timeout(400)
async def test_sparks_jdbc_catalog_verifies_the_server_with_the_private_ca(
        tmp_path: Path, tls_pg: TlsPostgres, pki: Pki) -> None:
    """One session: the other CA's certificate first (the catalog cannot be opened: no
    pooled connection from before hides the TLS error), then the private CA's."""
    catalog: dict[str, Any] = {
        "uri": tls_pg.url, "user": USER, "password": "secret",
        "warehouse": str(tmp_path / "wh"),
        "properties": {"jdbc.sslmode": "verify-full", "jdbc.sslrootcert": str(pki.ca)}}
    present_other_ca(tls_pg, pki)
    actor = SparkActor(spark_settings(spark_section(catalog)))
    try:
        with pytest.raises(SinkError, match="cannot register the table") as refused:
            await opened_sink(actor, "stg_tls_spark_refused")
        assert_clear_tls_error(str(refused.value), tls_pg, pki)
        assert catalog_tables(tls_pg, "stg_tls_spark_refused") == 0

        tls_pg.serve(pki.server_cert, pki.server_key)
        await opened_sink(actor, "stg_tls_spark")
        assert catalog_tables(tls_pg, "stg_tls_spark") == 1
    finally:
        actor.stop()
