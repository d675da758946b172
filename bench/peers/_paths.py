"""Where the peers' benchmarks find the repository's code and their jars.

Importing this module puts the repository's root (``tests.apache_kafka``) first on
``sys.path`` and ``bench/`` (the shared helpers of ``throughput.py`` and ``latency.py``)
last: ``bench/http.py`` must not shadow the standard library's ``http``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JARS = ROOT / "bench" / "peers" / "jars"
FETCH = "make peer-jars"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "bench") not in sys.path:
    sys.path.append(str(ROOT / "bench"))


class JarsMissing(SystemExit):
    """A peer's jars were never fetched: the message says what to run."""


def lib(name: str) -> Path:
    """The jar directory of one set (``spark``, ``connect``, ``iceberg-sink``), fetched by
    ``make peer-jars`` (mvn, ``bench/peers/jars/<name>/pom.xml``)."""
    path = JARS / name / "lib"
    if not (path / ".fetched").exists():
        raise JarsMissing(f"the {name} jars of the peer benchmarks are not in {path}: run "
                          f"`{FETCH}` (mvn copies them from Maven Central per "
                          f"bench/peers/jars/{name}/pom.xml)")
    return path


def check_jars(*sets: str) -> None:
    """Every jar a peer benchmark needs is there, else :class:`JarsMissing` naming the
    command that fetches it: ``sets`` of ``make peer-jars``, Apache Kafka's (``make
    kafka-jars``) and kstage's own Spark jars (``kstage jars fetch``)."""
    from actors.sinks.spark.jars import FETCH_COMMAND, fetched_missing
    from tests.apache_kafka import KafkaJarsMissing, classpath

    for name in sets:
        lib(name)
    try:
        classpath()
    except KafkaJarsMissing as exc:
        raise JarsMissing(str(exc)) from None
    if fetched_missing():
        raise JarsMissing(f"kstage's Spark jars are missing ({', '.join(fetched_missing())})"
                          f": run `{FETCH_COMMAND}` (or `make jars`)")


def spark_jars() -> list[str]:
    """The Kafka source and spark-avro jars for the Spark session (``spark.jars``)."""
    return sorted(str(p) for p in lib("spark").glob("*.jar"))
