"""The options of the suite's Spark JVMs: C1-only JIT, SerialGC and a class-data-sharing
archive (tests/jvm_archive.py), for a faster start at less CPU on the 2-core machine.

Every Spark JVM the suite starts (the ``kstage run`` children, in-process sessions of
tests, bench processes) is a driver in local mode launched by pyspark's spark-submit,
which passes ``SPARK_SUBMIT_OPTS`` to it (silently, unlike ``JAVA_TOOL_OPTIONS``). The
suite sets it in each pytest process (tests/conftest.py) before any JVM starts; child
processes inherit it. Measured on a quiet machine (session start, an Iceberg table, 5
appends, a count): default 22.6 s wall, 33 s JVM CPU; C1 and SerialGC 20.4 s, 21 s;
with the archive 12-14 s, 12.5-14 s. Spark SQL runs interpreted (:data:`INTERPRETED`):
whole files, CPU of the machine, before and after: test_final_deletions 142-150 ->
117-121 s, test_merge 125 -> 99 s, test_spark_exactly_once (Tansu) 131 -> 124 s. kstage's
own JVM options do not change: a long running service wants C2, its default collector and
generated code.

The archive is made by :data:`WORKLOAD` (session start, Iceberg create, append, MERGE,
read with the SQLite JDBC catalog), named by the java version and the jars of the
driver's class path (the fetched jars, pyspark's).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.jvm_archive import QUIET, ensure, existing, usable

SUBMIT_OPTS = "SPARK_SUBMIT_OPTS"
FAST_START = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
# Spark SQL without generated code: the suite's queries read a few rows, for which
# compiling Java per plan (Janino, then the JIT) costs more than it saves. A driver's
# SparkConf takes the JVM's spark.* system properties; kstage's own settings and a test's
# `spark.conf` still win.
INTERPRETED = ("-Dspark.sql.codegen.wholeStage=false",
               "-Dspark.sql.codegen.factoryMode=NO_CODEGEN")
KIND = "spark"
WORKLOAD = "tests.spark_jvm_workload"
MAKE_TIMEOUT_S = 900.0  # the workload and the archive's dump, on a loaded machine


def class_path_inputs() -> list[Path] | None:
    """The files of a Spark session's JVM class path (the fetched jars, pyspark's), or
    None without pyspark or the fetched jars (then no Spark test runs a session)."""
    from actors.sinks.spark.jars import fetched_missing, session_jars
    from settings.models import SparkSettings

    found = importlib.util.find_spec("pyspark")  # not imported: a second for nothing
    if found is None or found.origin is None or fetched_missing():
        return None
    spark_jars = sorted((Path(found.origin).parent / "jars").glob("*.jar"))
    return [Path(j) for j in session_jars(SparkSettings())] + spark_jars


def submit_opts(archive: Path | None) -> str:
    """``SPARK_SUBMIT_OPTS`` for the suite's JVMs, with ``archive`` if there is one."""
    shared = (f"-XX:SharedArchiveFile={archive}",) if archive is not None else ()
    return " ".join((*FAST_START, *INTERPRETED, *QUIET, *shared))


def make_archive(dump: Path, timeout_s: float = MAKE_TIMEOUT_S,
                 env: dict[str, str] | None = None) -> str | None:
    """Run :data:`WORKLOAD` in a JVM that dumps its classes into ``dump`` at exit and
    check the dump; None if that worked, else why not. ``env`` is added to the
    workload's environment."""
    from tests.kafkautil import CHILD_PATH

    with tempfile.TemporaryDirectory(prefix="spark-cds-") as work:
        cp_file = Path(work) / "class-path"
        full_env = {**os.environ, "PYTHONPATH": CHILD_PATH,
                    SUBMIT_OPTS: " ".join((*FAST_START, *INTERPRETED, *QUIET,
                                           f"-XX:ArchiveClassesAtExit={dump}")),
                    **(env or {})}
        log = Path(work) / "workload.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", WORKLOAD, work, str(cp_file)],
                                    stdout=out, stderr=subprocess.STDOUT, env=full_env,
                                    cwd=work, start_new_session=True)
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = None
        tail = log.read_text(errors="replace")[-2000:]
        if code != 0:
            return f"the workload {'timed out' if code is None else f'exited {code}'}: {tail}"
        if not dump.exists() or not cp_file.exists():
            return f"the JVM wrote no archive: {tail}"
        if not usable(dump, cp_file.read_text()):
            return "the JVM refuses the archive it wrote"
        return None


def ensure_archive(shared: Path, cache: Path | None = None,
                   inputs: list[Path] | None = None,
                   make_env: dict[str, str] | None = None) -> Path | None:
    """The Spark JVMs' archive, made first if missing (tests/jvm_archive.py's
    :func:`~tests.jvm_archive.ensure`); ``make_env`` is added to the workload's
    environment."""
    return ensure(KIND, class_path_inputs() if inputs is None else inputs,
                  lambda dump: make_archive(dump, env=make_env), shared, cache)


def existing_archive() -> Path | None:
    """The Spark JVMs' archive for this machine's java and jars if it was made."""
    return existing(KIND, class_path_inputs())
