"""Debezium's PostgreSQL connector in a Kafka Connect standalone worker, for the change
data end-to-end test: the worker's and the connector's properties, and the process.

* Jars: ``tests/jars/debezium/lib`` (``make debezium-jars``: Kafka Connect 4.3.1's
  runtime and JSON converter, Debezium 3.6.1.Final's PostgreSQL connector, from Maven
  Central by tests/jars/debezium/pom.xml), all on the class path (no plugin isolation).
* Worker: ``ConnectStandalone``, ``-Xmx384m``, source offsets in a file (so a restarted
  worker resumes), the REST listener on a free loopback port; keys and values through
  Connect's ``JsonConverter`` with their schemas (its default: ``{"schema", "payload"}``).
* Connector: ``pgoutput`` (PostgreSQL's built-in logical decoding plugin, so the server
  needs ``wal_level=logical`` and nothing installed), a replication slot and a
  publication of the captured tables of its own, an initial snapshot (``op: r``), then
  the changes; Debezium's defaults otherwise (``decimal.handling.mode=precise``, a
  tombstone after each delete). Topics: ``<prefix>.<schema>.<table>``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from service.broker import free_port

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "tests" / "jars" / "debezium" / "lib"
MAIN = "org.apache.kafka.connect.cli.ConnectStandalone"

LOG4J = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d{ISO8601}] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.debezium.name = io.debezium
logger.debezium.level = INFO
"""


def _properties(values: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


def jars() -> Path:
    """The jars' directory; fails the test saying what to run when they are missing."""
    if not any(LIB.glob("debezium-connector-postgres-*.jar")):
        pytest.fail(f"Debezium's jars are missing in {LIB}: run `make debezium-jars`",
                    pytrace=False)
    return LIB


class DebeziumWorker:
    """A Connect standalone worker running Debezium's PostgreSQL connector."""

    def __init__(self, run_dir: Path, bootstrap: str, port: int, database: str,
                 tables: list[str], prefix: str) -> None:
        self.run_dir = run_dir
        self.log = run_dir / "connect.log"
        worker = {
            "bootstrap.servers": bootstrap,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "offset.storage.file.filename": str(run_dir / "connect.offsets"),
            "offset.flush.interval.ms": "200",
            "listeners": f"http://127.0.0.1:{free_port()}",
            "plugin.discovery": "hybrid_warn",
        }
        connector = {
            "name": f"dbz-{prefix}",
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "tasks.max": "1",
            "database.hostname": "127.0.0.1",
            "database.port": str(port),
            "database.user": "postgres",
            "database.password": "unused",  # trust authentication on loopback
            "database.dbname": database,
            "topic.prefix": prefix,
            "table.include.list": ",".join(tables),
            "plugin.name": "pgoutput",
            "slot.name": f"slot_{prefix}",
            "publication.name": f"pub_{prefix}",
            "publication.autocreate.mode": "filtered",
            "snapshot.mode": "initial",
            "poll.interval.ms": "100",
        }
        (run_dir / "worker.properties").write_text(_properties(worker))
        (run_dir / "connector.properties").write_text(_properties(connector))
        (run_dir / "log4j2.properties").write_text(LOG4J)
        self.command = [
            "java", "-Xmx384m", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={run_dir / 'log4j2.properties'}",
            "-cp", f"{jars()}/*", MAIN,
            str(run_dir / "worker.properties"), str(run_dir / "connector.properties")]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
