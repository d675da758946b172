"""Class-data-sharing archives of the suite's short-lived JVMs (an AppCDS dynamic archive,
``-XX:ArchiveClassesAtExit`` in one run, ``-XX:SharedArchiveFile`` after): the Spark
drivers (tests/spark_jvm.py) and the Apache Kafka nodes (tests/kafka_jvm.py).

An archive is made once per machine by a run of what the tests do and kept in
:func:`cache_dir`, named by :func:`archive_key` (the java version and the JVM class path
it is made with: a changed jar set makes a new one), by ``make test`` before pytest
(tests/make_jvm_archives.py), else by the first pytest process that needs it. Each kind is
made under a file lock of its own; the others wait and reuse it. A missing, stale or refused
archive costs time, never a result: it is checked before it is put in place (a truncated
archive would crash the JVM that maps it), a JVM says nothing about one it refuses
(:data:`QUIET`), and a failed make is said once and not tried again in the same session
(a marker in the session's shared directory).
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.file_lock import locked

# A JVM that refuses an archive (another class path, a changed jar) would say so in a
# warning on stdout: none reaches a test.
QUIET = ("-Xlog:cds=off,cds+dynamic=off",)
KEEP = 3  # archives of a kind kept (worktrees with different jar sets share the cache)


def cache_dir() -> Path:
    """Where the archives are kept: in the virtualenv (ignored by git, shared by every
    checkout that uses it), else beside the tests' jars."""
    if sys.prefix != sys.base_prefix:
        return Path(sys.prefix) / "var" / "kstage-jvm-cds"
    return Path(__file__).resolve().parent / "jars" / "jvm-cds"


def java() -> str:
    """The java that runs the JVMs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


@functools.cache
def _java_version(command: str) -> bytes | None:
    try:
        return subprocess.run([command, "-version"], capture_output=True, timeout=60,
                              check=True).stderr
    except (OSError, subprocess.SubprocessError):
        return None


def archive_key(inputs: list[Path]) -> str | None:
    """A digest of the java version and of ``inputs`` (the class path's files: path,
    size, mtime), or None when java does not answer."""
    version = _java_version(java())
    if version is None:
        return None
    digest = hashlib.sha256(version)
    for path in inputs:
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def archive_path(kind: str, inputs: list[Path] | None, cache: Path | None = None
                 ) -> Path | None:
    """Where the archive of ``kind`` for ``inputs`` is (made or not); None without
    inputs or java."""
    key = archive_key(inputs) if inputs else None
    return None if key is None else (cache or cache_dir()) / f"{kind}-{key}.jsa"


def existing(kind: str, inputs: list[Path] | None, cache: Path | None = None
             ) -> Path | None:
    """The archive of ``kind`` for ``inputs`` if it was made."""
    archive = archive_path(kind, inputs, cache)
    return archive if archive is not None and archive.exists() else None


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


# Makes an archive at the path it is given (a temporary name beside the target); says
# why not, or None when it did. The caller checks it and moves it in place.
Maker = Callable[[Path], "str | None"]


def _prune(kind: str, cache: Path, keep: Path) -> None:
    """Keep the :data:`KEEP` most recently used archives of ``kind``."""
    others = sorted((p for p in cache.glob(f"{kind}-*.jsa") if p != keep),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[KEEP - 1:]:
        old.unlink(missing_ok=True)


def ensure(kind: str, inputs: list[Path] | None, make: Maker, shared: Path,
           cache: Path | None = None) -> Path | None:
    """The archive of ``kind`` for ``inputs``, made first by ``make`` if missing (under
    the cache's lock of ``kind``: one process makes it, the others wait for it, while
    another kind is made beside it); None when there is nothing to make it for, or making
    it failed (said on stderr, once a session)."""
    cache = cache or cache_dir()
    archive = archive_path(kind, inputs, cache)
    if archive is None:
        return None
    cache.mkdir(parents=True, exist_ok=True)
    failed = shared / f"{kind}-cds-failed"
    with locked(cache / f"{kind}.lock"):  # one lock per kind: made side by side
        if archive.exists():
            os.utime(archive)
            return archive
        if failed.exists():
            return None
        started = time.monotonic()
        dump = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
        try:
            why = make(dump)
            if why is None:
                os.replace(dump, archive)
        finally:
            dump.unlink(missing_ok=True)
        if why is not None:
            failed.write_text(why)
            sys.stderr.write(f"tests/jvm_archive.py: no class-data archive for the {kind} "
                             f"JVMs (they start slower): {why}\n")
            return None
        sys.stderr.write(f"tests/jvm_archive.py: made {archive} in "
                         f"{time.monotonic() - started:.0f} s\n")
        _prune(kind, cache, archive)
        return archive
