"""Where a Spark session's jars go (actors/sinks/spark/session.py): every local file on
the driver's class path; shipped to executors with ``spark.jars`` on a cluster, and in
local mode only the jars named by URL (the executor is the driver's JVM: a local file
shipped there would be copied at every start, tests/integration/test_spark_jvm_death.py)."""

from __future__ import annotations

from actors.sinks.spark.session import _jar_conf
from settings.models import SparkSettings

JARS = ["/j/iceberg.jar", "local:/opt/fence.jar", "https://repo.example/driver.jar"]


def test_local_mode_ships_only_the_jars_named_by_url() -> None:
    conf = _jar_conf(SparkSettings(master="local[2]"), JARS)
    assert conf == {"spark.jars": "https://repo.example/driver.jar",
                    "spark.driver.extraClassPath": "/j/iceberg.jar:/opt/fence.jar"}


def test_local_mode_with_local_files_only_sets_no_spark_jars() -> None:
    conf = _jar_conf(SparkSettings(master="local[1]"), JARS[:1])
    assert conf == {"spark.driver.extraClassPath": "/j/iceberg.jar"}


def test_a_cluster_ships_every_jar() -> None:
    conf = _jar_conf(SparkSettings(master="spark://master:7077"), JARS)
    assert conf == {"spark.jars": ",".join(JARS),
                    "spark.driver.extraClassPath": "/j/iceberg.jar:/opt/fence.jar"}
