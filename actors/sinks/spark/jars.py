"""The JVM jars of kstage's Spark session: which ones, where they are, what is missing.

The pinned set is :data:`PINNED` (the same coordinates as ``pom.xml`` beside this module,
which ``kstage jars fetch`` hands to ``mvn``): Apache Iceberg's Spark runtime and AWS
bundle, and the JDBC drivers of the Iceberg catalog. Each jar is checked by its SHA-256.
Beside them, kstage's own commit fence (:func:`fence_file_name`: the catalog wrapper of
``fence/``, built from source by ``mvn``, named by a digest of its sources, so a changed
source is a missing jar; see :mod:`actors.sinks.spark.catalog`).

``spark.jars`` says where the session finds them:

* ``fetched`` (the default): the files ``kstage jars fetch`` put in the jar directory
  (:func:`jars_dir`: ``$KSTAGE_JARS_DIR``, else ``$XDG_CACHE_HOME/kstage/jars``, else
  ``~/.cache/kstage/jars``);
* a list of paths: exactly these (a cluster that already has the jars names them; an empty
  list: the cluster's Spark has them on its class path). A list that is not empty must name
  the fence jar (``kstage-iceberg-fence-*.jar``): the session's catalog is the fence.

:func:`jar_problems` is what ``kstage validate`` and ``run`` refuse when a needed jar is
missing (exit 2, saying what to run). Nothing here imports pyspark.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from settings.models import SparkSettings

FETCH_COMMAND = "kstage jars fetch"


@dataclass(frozen=True, slots=True)
class Jar:
    """One pinned Maven artifact and the SHA-256 of its jar."""

    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    def url(self, repository: str) -> str:
        """The jar's address in a Maven repository (Maven Central's layout)."""
        path = "/".join((*self.group.split("."), self.artifact, self.version, self.file_name))
        return f"{repository.rstrip('/')}/{path}"


ICEBERG_VERSION = "1.12.0"
SPARK_LINE = "4.1"  # the Spark minor version of the Iceberg runtime (pyspark is pinned to it)

PINNED: tuple[Jar, ...] = (
    Jar("org.apache.iceberg", f"iceberg-spark-runtime-{SPARK_LINE}_2.13", ICEBERG_VERSION,
        "3123c3798af642dd537230923548e013ef41cc28b6626e5225808cf5670a0f82"),
    Jar("org.apache.iceberg", "iceberg-aws-bundle", ICEBERG_VERSION,
        "dd7e49ffa4ac9b215bed846581991259e3aec9bb2fa08d6cec029c46cd66d957"),
    Jar("org.xerial", "sqlite-jdbc", "3.54.1.0",
        "f8dce420a6016278497f4f0560f65602b9db858de141b541cf91a4644ebe4639"),
    Jar("org.postgresql", "postgresql", "42.7.14",
        "73914527305a40cce504b0d3d90b23caf565136912d607ae8ae7c5895512332c"),
)
"""The jars of ``pom.xml``, in its order (a unit test holds the two equal)."""


FENCE_ARTIFACT = "kstage-iceberg-fence"
FENCE_CATALOG = "io.kstage.iceberg.FencingCatalog"
# Hadoop's local file system without a `chmod` process per file written (the fence jar's
# io.kstage.hadoop.NioLocalFileSystem): `fs.file.impl` of a local session (session.py)
LOCAL_FILE_SYSTEM = "io.kstage.hadoop.NioLocalFileSystem"


def fence_dir() -> Path:
    """The fence's Maven project (package data beside this module)."""
    return Path(__file__).with_name("fence")


def fence_sources() -> list[Path]:
    """The files the fence jar is built from: its POM and Java sources."""
    root = fence_dir()
    return [root / "pom.xml", *sorted((root / "src").rglob("*.java"))]


def fence_file_name() -> str:
    """The fence jar's file name in the jar directory: ``kstage-iceberg-fence-<digest>.jar``,
    the digest (16 hex digits) of :func:`fence_sources` (path and content)."""
    digest = hashlib.sha256()
    root = fence_dir()
    for path in fence_sources():
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return f"{FENCE_ARTIFACT}-{digest.hexdigest()[:16]}.jar"


def is_fence_jar(path: str) -> bool:
    """Whether ``path`` (a path or URL of ``spark.jars``) names a fence jar."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name.startswith(f"{FENCE_ARTIFACT}-") and name.endswith(".jar")


def pom_path() -> Path:
    """The pinned POM (package data beside this module)."""
    return Path(__file__).with_name("pom.xml")


def jars_dir() -> Path:
    """Where ``kstage jars fetch`` puts the jars and ``spark.jars: fetched`` finds them."""
    explicit = os.environ.get("KSTAGE_JARS_DIR")
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "kstage" / "jars"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetched_missing(directory: Path | None = None) -> list[str]:
    """The pinned jars not in ``directory`` (default :func:`jars_dir`), by file name. A
    file of the right name is trusted here (``kstage jars fetch`` checked its SHA-256 when
    it put it there, and checks again when it runs)."""
    where = directory or jars_dir()
    return [name for name in fetched_names() if not (where / name).is_file()]


def fetched_names() -> list[str]:
    """The file names ``spark.jars: fetched`` loads: the pinned jars, then the fence."""
    return [*(jar.file_name for jar in PINNED), fence_file_name()]


def session_jars(settings: SparkSettings) -> list[str]:
    """The jar paths the session loads: the fetched pinned jars, or ``spark.jars``."""
    if settings.jars == "fetched":
        where = jars_dir()
        return [str(where / name) for name in fetched_names()]
    return [str(Path(p).expanduser()) if "://" not in p and not p.startswith("local:") else p
            for p in settings.jars]


def jar_problems(settings: SparkSettings) -> list[str]:
    """Why the session could not load its jars (empty: it can), naming what to run or
    which configured path is missing."""
    if settings.jars == "fetched":
        missing = fetched_missing()
        if not missing:
            return []
        return [f"the Iceberg jars are not fetched ({', '.join(missing)} missing in "
                f"{jars_dir()}): run `{FETCH_COMMAND}` (it fetches them from Maven Central "
                "with mvn; KSTAGE_JARS_DIR chooses the directory), or list jars a cluster "
                "already has in spark.jars"]
    problems = [f"{path}: no such jar file (spark.jars names the jars the session loads)"
                for path in settings.jars
                if "://" not in path and not path.startswith("local:")
                and not Path(path).expanduser().is_file()]
    if settings.jars and not any(is_fence_jar(path) for path in settings.jars):
        problems.append(
            f"no {FENCE_ARTIFACT}-*.jar listed: the catalog's commit fence ({FENCE_CATALOG}, "
            "which refuses a staging append whose offsets another writer already committed) "
            f"must be on the session's class path: add {jars_dir() / fence_file_name()} "
            f"(`{FETCH_COMMAND}` builds it), or use spark.jars: fetched")
    return problems


__all__ = ["FENCE_ARTIFACT", "FENCE_CATALOG", "FETCH_COMMAND", "LOCAL_FILE_SYSTEM", "PINNED",
           "Jar", "fence_dir", "fence_file_name", "fence_sources", "fetched_missing",
           "fetched_names", "is_fence_jar", "jar_problems", "jars_dir", "pom_path",
           "session_jars", "sha256"]
