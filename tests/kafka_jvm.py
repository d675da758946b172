"""The class-data-sharing archive of the suite's Apache Kafka nodes (tests/jvm_archive.py).

The tests start many short-lived Kafka JVMs: the shared node, and the 3-node clusters of
the fault tests, whose nodes are killed and restarted. Measured on the 2-core machine
under load (load average 12-16, start to listening, 7 pairs interleaved): without the
archive 10.7-42.2 s (median 18.7 s), with it 7.6-18.2 s (median 11.6 s); JVM CPU to
listening median 9.1 s without, 4.2 s with.

The archive is made by a node that starts, serves a topic, a producer and a consumer
group, and stops; :data:`~tests.apache_kafka.NODE_OPTS` hands it to every node the
tests start (the pytest process sets it, tests/conftest.py).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.apache_kafka import JARS, KafkaCluster, classpath, run_sync
from tests.jvm_archive import QUIET, ensure, existing, usable

KIND = "kafka"


def class_path_inputs() -> list[Path] | None:
    """The jars of a node's class path, or None when they were not fetched."""
    jars = sorted(JARS.glob("*.jar"))
    return jars or None


def node_opts(archive: Path | None) -> str:
    """The nodes' extra JVM options (:data:`~tests.apache_kafka.NODE_OPTS`)."""
    return " ".join((*QUIET, *((f"-XX:SharedArchiveFile={archive}",) if archive else ())))


async def _serve(cluster: KafkaCluster) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import NewTopic

    admin = cluster.admin()
    await admin.start()
    try:
        await admin.create_topics([NewTopic("cds", 2, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
    await producer.start()
    try:
        for i in range(50):
            await producer.send_and_wait("cds", f"m{i}".encode(), key=str(i).encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer("cds", bootstrap_servers=cluster.bootstrap, group_id="cds",
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        seen = 0
        for _ in range(60):
            batches = await consumer.getmany(timeout_ms=1000)
            seen += sum(len(records) for records in batches.values())
            if seen >= 50:
                break
        await consumer.commit()
    finally:
        await consumer.stop()


def make_archive(dump: Path) -> str | None:
    """Run a node that dumps its classes into ``dump`` as it stops; None if that worked,
    else why not."""
    with tempfile.TemporaryDirectory(prefix="kafka-cds-") as work:
        cluster = KafkaCluster(Path(work), 1, jvm_options=(
            *QUIET, f"-XX:ArchiveClassesAtExit={dump}"))
        node = cluster.node(1)
        try:
            cluster.start()
            run_sync(lambda: _serve(cluster))
        except Exception as exc:  # noqa: BLE001 - no archive is a slower suite, said
            cluster.kill()
            return f"the node did not serve: {exc!r}"
        node.stop(timeout_s=300)  # SIGTERM: the JVM exits and dumps
        if not dump.exists():
            return f"the node wrote no archive; see {node.log_path}"
        if not usable(dump, classpath()):
            return "the JVM refuses the archive it wrote"
        return None


def ensure_archive(shared: Path) -> Path | None:
    """The Kafka nodes' archive, made first if missing."""
    return ensure(KIND, class_path_inputs(), make_archive, shared)


def existing_archive() -> Path | None:
    """The Kafka nodes' archive for this machine's java and jars if it was made."""
    return existing(KIND, class_path_inputs())
