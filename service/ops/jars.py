"""``kstage jars fetch``: put the pinned JVM jars of the Spark session in the jar directory.

The jars are those of :data:`actors.sinks.spark.jars.PINNED` (the Iceberg runtime for
Spark, Iceberg's AWS bundle, the SQLite and PostgreSQL JDBC drivers), the same
coordinates as the pinned ``pom.xml`` shipped beside that module. With ``mvn`` on the
PATH they are copied from Maven Central through Maven
(``mvn dependency:copy-dependencies`` on that POM, transitive dependencies excluded: the
runtime and the bundle are shaded and Spark brings the rest), so Maven's settings
(mirrors, proxies) apply; without it, or with ``--repository URL`` (a mirror with Maven
Central's layout), each jar is downloaded over HTTPS. Either way every file is checked
against its pinned SHA-256 before it is moved into place (atomically); a jar already
there with the right checksum is kept. Nothing is fetched at run time.

Then kstage's commit fence (the catalog wrapper of ``actors/sinks/spark/fence``) is built
from its sources with ``mvn package`` (Maven and a JDK; the build writes only a scratch
directory of the jar directory) unless a jar of the same sources is already there: its
name carries the digest of the sources (:func:`~actors.sinks.spark.jars.fence_file_name`),
and the built jar is checked to hold the fence's classes before it is moved into place.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from actors.sinks.spark.jars import (
    FENCE_ARTIFACT,
    PINNED,
    Jar,
    fence_dir,
    fence_file_name,
    jars_dir,
    pom_path,
    sha256,
)

logger = logging.getLogger(__name__)

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
FENCE_CLASSES = ("io/kstage/iceberg/FencingCatalog.class", "io/kstage/iceberg/Fence.class")


class JarsError(Exception):
    """The jars could not be fetched (network, Maven, a checksum that does not match)."""


@dataclass(slots=True)
class FetchResult:
    """What :func:`fetch` did: the directory, the jars already there, those it fetched,
    and how (``mvn`` or the repository URL), and the fence jar if it was built."""

    directory: Path
    kept: list[str] = field(default_factory=list)
    fetched: list[str] = field(default_factory=list)
    how: str = ""
    built: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{self.directory}:"]
        lines += [f"  {name} (fetched{', ' + self.how if self.how else ''})"
                  for name in self.fetched]
        lines += [f"  {name} (built from source, mvn)" for name in self.built]
        lines += [f"  {name} (already there)" for name in self.kept]
        return "\n".join(lines)


def _good(path: Path, jar: Jar) -> bool:
    return path.is_file() and sha256(path) == jar.sha256


def _place(source: Path, target: Path, jar: Jar) -> None:
    """Check ``source`` against the pin, then move it to ``target`` atomically."""
    digest = sha256(source)
    if digest != jar.sha256:
        raise JarsError(f"{jar.coordinates}: SHA-256 {digest} does not match the pinned "
                        f"{jar.sha256}; nothing was installed for it")
    staged = target.with_name(f".{target.name}.part")
    shutil.copyfile(source, staged)
    staged.replace(target)


def _with_maven(jars: list[Jar], directory: Path, scratch: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsError("mvn is not on the PATH")
    out = scratch / "mvn"
    command = [mvn, "-q", "-B", "-f", str(pom_path()), "dependency:copy-dependencies",
               f"-DoutputDirectory={out}", "-DexcludeTransitive=true"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800,  # noqa: S603
                          check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise JarsError(f"mvn failed (exit {done.returncode}):\n{tail}")
    for jar in jars:
        found = out / jar.file_name
        if not found.is_file():
            raise JarsError(f"mvn did not produce {jar.file_name} ({jar.coordinates})")
        _place(found, directory / jar.file_name, jar)


def _download(jars: list[Jar], directory: Path, scratch: Path, repository: str) -> None:
    with httpx.Client(timeout=httpx.Timeout(30, read=300), follow_redirects=True) as client:
        for jar in jars:
            url = jar.url(repository)
            part = scratch / jar.file_name
            try:
                with client.stream("GET", url) as answer:
                    if answer.status_code != 200:
                        raise JarsError(f"{url}: HTTP {answer.status_code}")
                    with open(part, "wb") as out:
                        for chunk in answer.iter_bytes(1 << 20):
                            out.write(chunk)
            except httpx.HTTPError as exc:
                raise JarsError(f"{url}: {type(exc).__name__}: {exc}") from exc
            _place(part, directory / jar.file_name, jar)


def _build_fence(target: Path, scratch: Path) -> None:
    """``mvn package`` of the fence's project into ``scratch``, then its jar (checked to
    hold the fence's classes) moved to ``target`` atomically."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsError("mvn is not on the PATH: the commit fence jar is built from source "
                        "with Maven and a JDK (.ci/system-deps installs both)")
    build = scratch / "fence"
    command = [mvn, "-q", "-B", "-f", str(fence_dir() / "pom.xml"), "package",
               f"-Dkstage.build.dir={build}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800,  # noqa: S603
                          check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise JarsError(f"building the commit fence failed: mvn exit {done.returncode} "
                        f"(a JDK with javac is needed, not only a JRE):\n{tail}")
    built = build / f"{FENCE_ARTIFACT}-1.jar"
    try:
        with zipfile.ZipFile(built) as jar:
            missing = [name for name in FENCE_CLASSES if name not in jar.namelist()]
    except (OSError, zipfile.BadZipFile) as exc:
        raise JarsError(f"mvn did not build a readable {built.name}: {exc}") from exc
    if missing:
        raise JarsError(f"the built {built.name} lacks {', '.join(missing)}")
    staged = target.with_name(f".{target.name}.part")
    shutil.copyfile(built, staged)
    staged.replace(target)


def fetch(directory: Path | None = None, repository: str | None = None) -> FetchResult:
    """Put every pinned jar and the fence jar in ``directory`` (default: the jar
    directory); see the module docstring. JarsError names what failed."""
    target = (directory or jars_dir()).expanduser()
    target.mkdir(parents=True, exist_ok=True)
    result = FetchResult(target)
    wanted = []
    for jar in PINNED:
        if _good(target / jar.file_name, jar):
            result.kept.append(jar.file_name)
        else:
            wanted.append(jar)
    fence = fence_file_name()
    if (target / fence).is_file():
        result.kept.append(fence)
    if not wanted and fence in result.kept:
        return result
    with tempfile.TemporaryDirectory(prefix="kstage-jars-", dir=target) as tmp:
        if wanted and repository is None and shutil.which("mvn") is not None:
            result.how = "mvn"
            _with_maven(wanted, target, Path(tmp))
        elif wanted:
            result.how = repository or MAVEN_CENTRAL
            _download(wanted, target, Path(tmp), result.how)
        result.fetched = [jar.file_name for jar in wanted]
        if fence not in result.kept:
            _build_fence(target / fence, Path(tmp))
            result.built = [fence]
    return result


__all__ = ["MAVEN_CENTRAL", "FetchResult", "JarsError", "fetch"]
