"""Where a Spark session's jars go (actors/sinks/spark/session.py): every local file on
the driver's class path; shipped to executors with ``spark.jars`` on a cluster, and in
local mode only the jars named by URL (the executor is the driver's JVM: a local file
shipped there would be copied at every start, tests/integration/test_spark_jvm_death.py).
A local session with the fence jar on its own class path writes ``file:`` paths through
the jar's file system (no ``chmod`` process per file:
tests/integration/test_spark_local_files.py)."""

from __future__ import annotations

from actors.sinks.spark.jars import LOCAL_FILE_SYSTEM
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


FENCE = "/cache/kstage-iceberg-fence-0123456789abcdef.jar"
LOCAL_FILES = {"spark.hadoop.fs.file.impl": LOCAL_FILE_SYSTEM}


def test_a_local_session_with_the_fence_jar_writes_files_without_chmod() -> None:
    conf = _jar_conf(SparkSettings(master="local[2]"), [JARS[0], FENCE])
    assert conf == {"spark.driver.extraClassPath": f"/j/iceberg.jar:{FENCE}", **LOCAL_FILES}
    conf = _jar_conf(SparkSettings(master="local[2]"), [f"local:{FENCE}"])
    assert conf == {"spark.driver.extraClassPath": FENCE, **LOCAL_FILES}


def test_hadoops_file_system_stays_without_the_jar_on_the_drivers_own_class_path() -> None:
    by_url = f"https://repo.example{FENCE}"
    assert _jar_conf(SparkSettings(master="local[1]"), [by_url]) == {"spark.jars": by_url}
    conf = _jar_conf(SparkSettings(master="spark://master:7077"), [FENCE])
    assert conf == {"spark.jars": FENCE, "spark.driver.extraClassPath": FENCE}
