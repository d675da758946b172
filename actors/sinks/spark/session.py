"""The SparkSession's lifecycle for :class:`~actors.sinks.spark.sink.SparkActor`: start one
with kstage's configuration, tell a lost connection to its JVM, and forget a session
whose JVM died without calling into it (so the next session starts a new JVM).

pyspark is imported only inside functions: importing this module does not load it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from actors.sinks.spark.catalog import catalog_conf, is_local, sqlite_file, warehouse_location
from actors.sinks.spark.jars import (
    LOCAL_FILE_SYSTEM,
    fetched_missing,
    is_fence_jar,
    session_jars,
)
from settings.models import SparkSettings

logger = logging.getLogger(__name__)

EXIT_WAIT_S = 2.0  # how long a lost connection waits for the JVM to be seen exited


# py4j answers a lookup of a JVM class or member whose connection broke with its error
# answer (it logs the network error and returns "!"), which reads as this; seen in CI
# when a killed JVM's socket closed a moment before the process could be reaped.
_LOST_LOOKUP = "does not exist in the JVM"


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) may be a lost py4j/socket connection:
    a network error, or a failed lookup of a JVM name (what py4j turns a network error
    during a lookup into)."""
    from py4j.protocol import (  # type: ignore[import-untyped]
        Py4JError,  # pyspark only if used
        Py4JNetworkError,
    )

    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, Py4JNetworkError | ConnectionError | EOFError):
            return True
        if type(seen) is Py4JError and _LOST_LOOKUP in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _close_collect_sockets() -> None:
    """pyspark 4.1 leaves the socket a ``collect()`` reads from to the garbage collector
    (a ResourceWarning per call; SPARK-54247, fixed in 4.2, which Iceberg does not run on
    yet): read the results, then close the socket, as 4.2 does."""
    import pyspark  # pyspark only if used
    from pyspark import util
    from pyspark.core import context, rdd
    from pyspark.sql.classic import dataframe
    from pyspark.sql.pandas import conversion

    if not pyspark.__version__.startswith("4.1.") or getattr(util, "_kstage_closes", False):
        return

    def load_and_close(sock_info: Any, serializer: Any) -> Any:
        sockfile, sock = util.local_connect_and_auth(sock_info[0], sock_info[1])
        sock.settimeout(None)
        try:
            return iter(list(serializer.load_stream(sockfile)))
        finally:
            sockfile.close()
            sock.close()

    for module in (util, context, rdd, dataframe, conversion):
        module._load_from_socket = load_and_close  # type: ignore[attr-defined]
    util._kstage_closes = True  # type: ignore[attr-defined]


def start_session(settings: SparkSettings, writer_id: str) -> Any:
    """Start (or get) the process's SparkSession with kstage's configuration (the Iceberg
    catalog and the jars, see :mod:`actors.sinks.spark.catalog` and
    :mod:`actors.sinks.spark.jars`), then ``settings.conf`` (Spark thread)."""
    if settings.local_master:
        # One machine: loopback (the hostname may resolve elsewhere). On a cluster
        # the operator sets SPARK_LOCAL_IP or spark.driver.host to a reachable address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession  # pyspark only if used

    _close_collect_sockets()

    # Without the fetched jars (a configuration with JDBC sinks only; `validate` refuses a
    # spark sink without them) the session starts without the Iceberg catalog.
    iceberg = settings.jars != "fetched" or not fetched_missing()
    jars = session_jars(settings) if iceberg else []
    if is_local(settings):
        Path(warehouse_location(settings)).mkdir(parents=True, exist_ok=True)
    sqlite = sqlite_file(settings)
    if sqlite is not None:
        sqlite.parent.mkdir(parents=True, exist_ok=True)
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",  # no progress bars in logs
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.sql.session.timeZone": "UTC",
        # One Arrow batch, so one task and one Parquet file, per flush: fewer
        # files in staging, less per-task work on a CPU shared with the workers.
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(settings.flush_max_rows),
        **(catalog_conf(settings) if iceberg else {}),
        # Arrow batches go to the JVM as an RDD and are read row by row straight
        # into the Parquet writer. Below this threshold (48 MB by default) Spark
        # would first copy every row on the driver into a LocalRelation and ship
        # the copies in the task (measured: JVM peak RSS 850 -> 640 MB, two files
        # per flush -> one).
        "spark.sql.execution.arrow.localRelationThreshold": "0",
        # A JVM that ran out of heap is left half broken (every later call failed, seen
        # at 15k MCL/s with 512 MB): let it exit, so the session is replaced as after
        # any JVM death (the interrupted append looked up by its commit id).
        "spark.driver.extraJavaOptions": "-XX:+ExitOnOutOfMemoryError",
        **(_jar_conf(settings, jars) if jars else {}),
        **settings.conf,
    }
    builder = SparkSession.builder.master(settings.master).appName(f"kstage-{writer_id}")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    _quiet_task_size_warning(spark)
    return spark


def _jar_conf(settings: SparkSettings, jars: list[str]) -> dict[str, str]:
    """Where the session's ``jars`` go. Every local file is on the driver's own class
    path: the catalog's JDBC driver must be there (DriverManager ignores jars added
    later: "No suitable driver"). ``spark.jars`` ships jars to executors: on a cluster
    all of them; in local mode, whose executor is the driver's JVM, only those named by
    URL. A local file listed there too would be served by the driver's file server and
    copied into a temporary directory by its own executor at every start (125 MB for the
    fetched jars, measured 0.3-1 CPU s, and left behind when the JVM is killed)."""
    files = [j.removeprefix("local:") for j in jars if "://" not in j]
    shipped = [j for j in jars if "://" in j] if settings.local_master else jars
    return {**({"spark.jars": ",".join(shipped)} if shipped else {}),
            **({"spark.driver.extraClassPath": ":".join(files)} if files else {}),
            **_local_file_system(settings, files)}


def _local_file_system(settings: SparkSettings, class_path: list[str]) -> dict[str, str]:
    """``file:`` paths through the fence jar's :data:`LOCAL_FILE_SYSTEM` (Hadoop's, with the
    files' modes set by Java instead of a ``chmod`` process each: about ten per append to
    a local warehouse) when the session runs in this JVM with that jar on its own class
    path; ``spark.conf`` may set ``spark.hadoop.fs.file.impl`` back to Hadoop's."""
    if not settings.local_master or not any(is_fence_jar(j) for j in class_path):
        return {}
    return {"spark.hadoop.fs.file.impl": LOCAL_FILE_SYSTEM}


def other_session() -> str | None:
    """What describes the SparkContext already running in this process, if any (pyspark
    allows one per process, shared by every ``getOrCreate``), else None."""
    from pyspark import SparkContext  # pyspark only if used

    context = SparkContext._active_spark_context
    if context is None:
        return None
    proc = getattr(SparkContext._gateway, "proc", None)
    return (f"app {context.appName!r}, master {context.master!r}, JVM pid "
            f"{getattr(proc, 'pid', 'unknown')}")


def discard_session(spark: Any, proc: Any) -> None:
    """Forget ``spark``, whose JVM (``proc``) is gone: no call into it (py4j would log a
    traceback for every refused connection); the next session starts a new JVM. pyspark's
    class-level session, context and gateway are cleared only while they are still this
    session's (never another session's that started since)."""
    from pyspark import SparkContext  # pyspark only if used
    from pyspark.sql import SparkSession, SQLContext

    context = spark.sparkContext
    owned = SparkContext._jvm is spark._jvm
    gateway = SparkContext._gateway if owned else None
    if owned:
        with SparkContext._lock:
            SparkContext._active_spark_context = None
            SparkContext._gateway = None
            SparkContext._jvm = None
        SQLContext._instantiatedContext = None
    if SparkSession._instantiatedSession is spark:
        SparkSession._instantiatedSession = None
    if SparkSession._activeSession is spark:
        SparkSession._activeSession = None
    context._jsc = None
    server = getattr(context, "_accumulatorServer", None)
    context._accumulatorServer = None
    stdin = getattr(proc, "stdin", None)
    for close in (getattr(server, "shutdown", None), getattr(gateway, "close", None),
                  getattr(stdin, "close", None)):
        try:
            if close is not None:
                close()
        except Exception as exc:  # noqa: BLE001 - best effort: the JVM is gone anyway
            logger.debug("spark: cleaning up after the dead JVM: %s", exc)


_TASK_SIZE_LOGGER = "org.apache.spark.scheduler.TaskSetManager"


def _quiet_task_size_warning(spark: Any) -> None:
    """Drop Spark's "contains a task of very large size" warning (once per flush: a
    flush's Arrow data travels in its one task by design, see the session conf); the
    logger's other warnings stay. Its level becomes at least WARN: a logger of its own
    would otherwise pass pyspark's console threshold (WARN) with its INFO lines."""
    try:
        jvm = spark._jvm
        log4j = jvm.org.apache.logging.log4j
        result = jvm.java.lang.Class.forName("org.apache.logging.log4j.core.Filter$Result")
        deny = jvm.java.lang.Enum.valueOf(result, "DENY")
        neutral = jvm.java.lang.Enum.valueOf(result, "NEUTRAL")
        regex = log4j.core.filter.RegexFilter.createFilter(
            ".*contains a task of very large size.*", None, False, deny, neutral)
        context = log4j.LogManager.getContext(False)
        level = log4j.LogManager.getLogger(_TASK_SIZE_LOGGER).getLevel()
        if level.isLessSpecificThan(log4j.Level.WARN):
            level = log4j.Level.WARN
        config = log4j.core.config.LoggerConfig(_TASK_SIZE_LOGGER, level, True)
        config.addFilter(regex)
        context.getConfiguration().addLogger(_TASK_SIZE_LOGGER, config)
        context.updateLoggers()
    except Exception as exc:  # noqa: BLE001 - a log filter is never worth a failed start
        logger.debug("spark: could not filter the task size warning: %s", exc)
