"""The suite's Spark JVMs start with C1, SerialGC and the class-data archive
(tests/spark_jvm.py): they map it, a refused archive changes nothing they say, a failed
make is not tried again in the session, and a changed jar makes a new one."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests import jvm_archive, kafka_jvm
from tests.brokers import SHARED_DIR_ENV
from tests.jvm_archive import QUIET, archive_key, java
from tests.kafkautil import CHILD_PATH, KstageProcess, write_config
from tests.spark_jvm import (
    FAST_START,
    INTERPRETED,
    KIND,
    SUBMIT_OPTS,
    class_path_inputs,
    ensure_archive,
    existing_archive,
    submit_opts,
)

_SESSION = """
import sys
from actors.sinks.spark.session import start_session
from settings.models import SparkSettings
spark = start_session(SparkSettings(warehouse=sys.argv[1]), "archive-check")
spark.sql("CREATE NAMESPACE IF NOT EXISTS kstage")
spark.sql("CREATE TABLE kstage.t (id BIGINT) USING iceberg")
spark.sql("INSERT INTO kstage.t VALUES (1)")
print("rows", spark.sql("SELECT count(*) FROM kstage.t").collect()[0][0])
spark.stop()
"""


@pytest.mark.slow
@pytest.mark.timeout(400)  # a Spark session on a loaded 2-core machine
def test_a_spark_session_of_the_suite_loads_its_classes_from_the_archive(
        tmp_path: Path) -> None:
    archive = existing_archive()
    assert archive is not None, "the session made no archive (see its stderr)"
    assert os.environ[SUBMIT_OPTS] == submit_opts(archive)
    loads = tmp_path / "class-load.log"
    env = {**os.environ, "PYTHONPATH": CHILD_PATH,
           SUBMIT_OPTS: f"{os.environ[SUBMIT_OPTS]} -Xlog:class+load=info:file={loads}"}
    done = subprocess.run([sys.executable, "-c", _SESSION, str(tmp_path / "wh")], env=env,
                          capture_output=True, text=True, timeout=380, check=False)
    assert done.returncode == 0, done.stderr
    assert "rows 1" in done.stdout
    assert "cds" not in done.stdout + done.stderr
    lines = loads.read_text().splitlines()
    shared = [line for line in lines if "source: shared objects file (top)" in line]
    iceberg = [line for line in shared if "org.apache.iceberg." in line]
    # most classes come from the archive, Iceberg's (the fetched jars) among them
    assert len(shared) > len(lines) / 2, (len(shared), len(lines))
    assert iceberg


def _java_says(opts: str, class_path: str) -> tuple[int, str, str]:
    """What ``java -version`` says with ``opts``: its exit code, stdout and stderr (the
    version's ``sharing`` tells whether an archive was mapped: left out)."""
    said = subprocess.run([java(), *opts.split(), "-cp", class_path, "-version"],
                          capture_output=True, text=True, timeout=120, check=False)
    return said.returncode, said.stdout, said.stderr.replace(", sharing)", ")")


def test_a_refused_archive_costs_time_never_a_word(tmp_path: Path) -> None:
    archive = existing_archive()
    assert archive is not None
    plain = _java_says(" ".join(FAST_START), str(tmp_path))
    garbage = tmp_path / "garbage.jsa"
    garbage.write_bytes(os.urandom(200_000))
    # another class path than the archive's (refused), a file that is no archive
    assert plain[0] == 0
    for opts in (submit_opts(archive), submit_opts(garbage),
                 submit_opts(tmp_path / "missing.jsa")):
        assert _java_says(opts, str(tmp_path)) == plain, opts
    # without the suite's quiet option the same JVMs would say so
    loud = _java_says(submit_opts(archive).replace(QUIET[0], ""), str(tmp_path))
    assert "shared archive" in loud[1] + loud[2], loud


def test_a_failed_make_leaves_no_archive_and_is_not_tried_again(tmp_path: Path) -> None:
    inputs = class_path_inputs()
    assert inputs is not None
    cache, shared = tmp_path / "cache", tmp_path / "shared"
    shared.mkdir()
    broken = {"JAVA_HOME": str(tmp_path / "no-jdk")}  # spark-submit finds no java
    assert ensure_archive(shared, cache, inputs, make_env=broken) is None
    assert "workload exited" in (shared / f"{KIND}-cds-failed").read_text()
    assert list(cache.iterdir()) == [cache / f"{KIND}.lock"]
    # the next process of the session does not try again (a make would take a minute
    # and succeed)
    assert ensure_archive(shared, cache, inputs) is None
    assert list(cache.iterdir()) == [cache / f"{KIND}.lock"]


def test_a_changed_jar_set_makes_another_archive(tmp_path: Path) -> None:
    jars = [tmp_path / "a.jar", tmp_path / "b.jar"]
    for jar in jars:
        jar.write_bytes(b"PK")
    key = archive_key(jars)
    assert key is not None and archive_key(jars) == key
    assert archive_key(jars[:1]) != key
    jars[1].write_bytes(b"PK\x03")
    assert archive_key(jars) != key


def test_kstage_children_inherit_the_suite_s_jvm_options(tmp_path: Path) -> None:
    config = write_config(tmp_path / "kstage.yml", "127.0.0.1:1", "g", [])
    proc = KstageProcess(config)
    try:
        environ = _exec_environ(proc)
    finally:
        proc.close()
    assert f"{SUBMIT_OPTS}={os.environ[SUBMIT_OPTS]}".encode() in environ
    assert all(opt in os.environ[SUBMIT_OPTS] for opt in (*FAST_START, *INTERPRETED))
    assert SHARED_DIR_ENV in os.environ


def _exec_environ(proc: KstageProcess, timeout_s: float = 60.0) -> list[bytes]:
    """The environment of ``proc`` once it runs its own program: /proc reads empty (or
    the parent's) while the exec is under way, so wait, bounded, for the child's own
    PYTHONPATH while it is alive."""
    deadline = time.monotonic() + timeout_s
    wanted = f"PYTHONPATH={CHILD_PATH}".encode()
    while True:
        assert proc.proc.poll() is None, f"kstage exited early: {proc.output()}"
        environ = Path(f"/proc/{proc.proc.pid}/environ").read_bytes().split(b"\0")
        if wanted in environ:
            return environ
        assert time.monotonic() < deadline, f"no exec within {timeout_s}s: {environ[:3]}"
        time.sleep(0.05)


def test_each_kind_is_made_under_its_own_lock(tmp_path: Path) -> None:
    """`make test` makes the Spark and Kafka archives side by side
    (tests/make_jvm_archives.py): one kind being made does not hold up the other."""
    cache, shared = tmp_path / "cache", tmp_path / "shared"
    shared.mkdir()
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"PK")
    making, release = threading.Event(), threading.Event()

    def slow(dump: Path) -> None:  # the Spark archive, still being made
        making.set()
        release.wait(60)
        dump.write_bytes(b"spark")

    def quick(dump: Path) -> None:
        dump.write_bytes(b"kafka")

    with ThreadPoolExecutor(2) as pool:
        spark = pool.submit(jvm_archive.ensure, KIND, [jar], slow, shared, cache)
        try:
            assert making.wait(60)
            kafka = pool.submit(jvm_archive.ensure, "kafka", [jar], quick, shared, cache)
            archive = kafka.result(timeout=10)  # not waiting for the Spark archive
        finally:
            release.set()
        assert spark.result(timeout=60) == jvm_archive.archive_path(KIND, [jar], cache)
    assert archive == jvm_archive.archive_path("kafka", [jar], cache)
    assert archive is not None and archive.read_bytes() == b"kafka"


def test_the_make_step_finds_both_archives_made() -> None:
    """`make test`'s step before pytest, once the archives are made: quick, and says
    where each is."""
    done = subprocess.run([sys.executable, "-m", "tests.make_jvm_archives"],
                          capture_output=True, text=True, timeout=120, check=True,
                          env={**os.environ, "PYTHONPATH": CHILD_PATH})
    spark, kafka = existing_archive(), kafka_jvm.existing_archive()
    assert spark is not None and kafka is not None
    assert done.stdout.splitlines() == [f"class-data archive: {spark}",
                                        f"class-data archive: {kafka}"]
