"""Fixtures shared by the integration modules that write to PostgreSQL through Spark."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actors.sinks.spark.actor import SparkActor
from settings.models import SparkSettings
from tests.postgres import Postgres, postgres_server


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    """A real PostgreSQL server of the module's own (a test may stop and start it)."""
    yield from postgres_server()


@pytest.fixture
def running(pg: Postgres) -> Iterator[Postgres]:
    """The module's server, started again after a test that stopped it."""
    if not pg.running:
        pg.start()
    yield pg
    if not pg.running:
        pg.start()


@pytest.fixture(scope="module")
def jdbc_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkActor]:
    """The Spark session the module's JDBC sinks write through (local[1])."""
    spark = SparkActor(SparkSettings(master="local[1]",
                                     warehouse=str(tmp_path_factory.mktemp("warehouse")),
                                     flush_max_interval_s=0.2))
    yield spark
    spark.stop()
