"""The options of the suite's Spark JVMs: C1-only JIT, SerialGC and a class-data-sharing
archive, for a faster start at less CPU on the 2-core machine.

Every Spark JVM the suite starts (the ``kstage run`` children, in-process sessions of
tests, bench processes) is a driver in local mode launched by pyspark's spark-submit,
which passes ``SPARK_SUBMIT_OPTS`` to it (silently, unlike ``JAVA_TOOL_OPTIONS``). The
suite sets it in each pytest process (tests/conftest.py) before any JVM starts; child
processes inherit it. Measured on a quiet machine (session start, an Iceberg table, 5
appends, a count): default 22.6 s wall, 33 s JVM CPU; C1 and SerialGC 20.4 s, 21 s;
with the archive 12-14 s, 12.5-14 s. kstage's own JVM options do not change: a long
running service wants C2 and its default collector.

The archive (an AppCDS dynamic archive, ``-XX:ArchiveClassesAtExit``) is made once per
machine by :data:`WORKLOAD` (session start, Iceberg create, append, MERGE, read with the
SQLite JDBC catalog) and kept in :func:`cache_dir`, named by :func:`archive_key` (the
java version and the JVM class path it is made with: a changed jar set makes a new one).
The first pytest process that needs it makes it under a file lock; the others wait and
reuse it. A missing, stale or refused archive costs time, never a result: it is checked
before it is put in place (a truncated archive would crash the JVM that maps it), the
JVM says nothing about one it refuses (``-Xlog:cds=off``), and a failed make is not
tried again in the same session (a marker in the session's shared directory).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

SUBMIT_OPTS = "SPARK_SUBMIT_OPTS"
FAST_START = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
# A JVM that refuses an archive (another class path, a changed jar) would say so in a
# warning on stdout: none reaches a test.
QUIET = ("-Xlog:cds=off,cds+dynamic=off",)
WORKLOAD = "tests.spark_jvm_workload"
KEEP = 3  # archives kept in the cache (worktrees with different jar sets share it)
MAKE_TIMEOUT_S = 900.0  # the workload and the archive's dump, on a loaded machine
FAILED = "spark-cds-failed"  # the marker of a failed make, in the session's shared dir


def cache_dir() -> Path:
    """Where the archives are kept: in the virtualenv (ignored by git, shared by every
    checkout that uses it), else beside the tests' jars."""
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix) / "var" / "kstage-spark-cds"
    return Path(__file__).resolve().parent / "jars" / "spark-cds"


def java() -> str:
    """The java spark-submit runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def class_path_inputs() -> list[Path] | None:
    """The files of a Spark session's JVM class path (the fetched jars, pyspark's), or
    None without pyspark or the fetched jars (then no Spark test runs a session)."""
    from actors.sinks.spark.jars import fetched_missing, session_jars
    from settings.models import SparkSettings

    try:
        import pyspark
    except ImportError:
        return None
    if fetched_missing():
        return None
    spark_jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    return [Path(j) for j in session_jars(SparkSettings())] + spark_jars


def archive_key(inputs: list[Path]) -> str | None:
    """A digest of the java version and of ``inputs`` (path, size, mtime), or None when
    java does not answer."""
    try:
        version = subprocess.run([java(), "-version"], capture_output=True, timeout=60,
                                 check=True).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    digest = hashlib.sha256(version)
    for path in inputs:
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def submit_opts(archive: Path | None) -> str:
    """``SPARK_SUBMIT_OPTS`` for the suite's JVMs, with ``archive`` if there is one."""
    shared = (f"-XX:SharedArchiveFile={archive}",) if archive is not None else ()
    return " ".join((*FAST_START, *QUIET, *shared))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def usable(archive: Path, class_path: str) -> bool:
    """Whether a JVM maps ``archive`` with ``class_path`` (``-Xshare:on`` fails when it
    cannot; a truncated archive crashes it, without an error file)."""
    try:
        done = subprocess.run(
            [java(), "-Xshare:on", f"-XX:SharedArchiveFile={archive}", *QUIET,
             "-XX:ErrorFile=/dev/null", "-cp", class_path, "-version"],
            capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def make_archive(target: Path, timeout_s: float = MAKE_TIMEOUT_S,
                 env: dict[str, str] | None = None) -> str | None:
    """Run :data:`WORKLOAD` in a JVM that dumps its classes at exit, check the dump and
    move it to ``target``; None if that worked, else why not. ``env`` is added to the
    workload's environment."""
    from tests.kafkautil import CHILD_PATH

    with tempfile.TemporaryDirectory(prefix="spark-cds-") as work:
        dump = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        cp_file = Path(work) / "class-path"
        full_env = {**os.environ, "PYTHONPATH": CHILD_PATH,
                    SUBMIT_OPTS: " ".join((*FAST_START, *QUIET,
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
        try:
            tail = log.read_text(errors="replace")[-2000:]
            if code != 0:
                return f"the workload {'timed out' if code is None else f'exited {code}'}: {tail}"
            if not dump.exists() or not cp_file.exists():
                return f"the JVM wrote no archive: {tail}"
            if not usable(dump, cp_file.read_text()):
                return "the JVM refuses the archive it wrote"
            os.replace(dump, target)
            return None
        finally:
            dump.unlink(missing_ok=True)


def _prune(cache: Path, keep: Path) -> None:
    """Keep the :data:`KEEP` most recently used archives (``keep`` among them)."""
    others = sorted((p for p in cache.glob("*.jsa") if p != keep),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[KEEP - 1:]:
        old.unlink(missing_ok=True)


def ensure_archive(shared: Path, cache: Path | None = None,
                   inputs: list[Path] | None = None,
                   make_env: dict[str, str] | None = None) -> Path | None:
    """The archive for this machine's java and Spark class path, made first if missing
    (under the cache's lock: one process makes it, the others wait for it); None when
    there is nothing to make it for, or making it failed (said on stderr, once a
    session). ``make_env`` is added to the workload's environment."""
    cache = cache or cache_dir()
    inputs = class_path_inputs() if inputs is None else inputs
    key = archive_key(inputs) if inputs else None
    if key is None:
        return None
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"spark-{key}.jsa"
    with _locked(cache / "lock"):
        if archive.exists():
            os.utime(archive)
            return archive
        if (shared / FAILED).exists():
            return None
        started = time.monotonic()
        why = make_archive(archive, env=make_env)
        if why is not None:
            (shared / FAILED).write_text(why)
            sys.stderr.write(f"tests/spark_jvm.py: no class-data archive for the Spark "
                             f"JVMs (they start slower): {why}\n")
            return None
        sys.stderr.write(f"tests/spark_jvm.py: made {archive} in "
                         f"{time.monotonic() - started:.0f} s\n")
        _prune(cache, archive)
        return archive


def existing_archive(cache: Path | None = None) -> Path | None:
    """The archive for this machine's java and Spark class path if it was made."""
    inputs = class_path_inputs()
    key = archive_key(inputs) if inputs else None
    archive = (cache or cache_dir()) / f"spark-{key}.jsa"
    return archive if key is not None and archive.exists() else None
