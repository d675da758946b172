"""Fixtures shared by the integration modules: PostgreSQL, the Spark session the JDBC
sinks write through, and a check that no module leaves a Spark session running."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from actors.sinks.spark.actor import SparkActor
from settings.models import SparkSettings
from tests.postgres import Postgres, postgres_server


@pytest.fixture(scope="module", autouse=True)
def no_spark_session_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the module (its own fixtures stopped): no SparkContext of pyspark still runs.
    pyspark has one per process; a session left running would be handed to the next
    module's actor, which kstage refuses."""
    yield
    pyspark = sys.modules.get("pyspark")
    context = pyspark.SparkContext._active_spark_context if pyspark else None
    if context is not None:
        context.stop()
        pytest.fail(f"{request.module.__name__} left a Spark session running "
                    f"(app {context.appName!r}): stop its SparkActor", pytrace=False)


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
    # flush_min_rows 1000: the writes of a test gather within the interval (one flush
    # for concurrent workers), as before issue 35 made 1 the default (a caught-up row
    # flushed at once: tests/integration/test_backlog_appends.py).
    spark = SparkActor(SparkSettings(master="local[1]",
                                     warehouse=str(tmp_path_factory.mktemp("warehouse")),
                                     flush_max_interval_s=0.2, flush_min_rows=1000))
    yield spark
    spark.stop()
