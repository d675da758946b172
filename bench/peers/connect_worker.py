"""A Kafka Connect standalone worker running Apache Iceberg's sink connector, as
bench/peers/kafka_connect.py starts it: its configuration files and its command.

* Worker: ``org.apache.kafka.connect.cli.ConnectStandalone`` of Kafka 4.4.0 (the jars of
  ``bench/peers/jars/connect``), ``-Xmx512m`` (as Spark's driver in the other runs),
  offsets in a file, the REST listener on a free loopback port; the Iceberg sink is a
  plugin of its own (``plugin.path``: ``bench/peers/jars/iceberg-sink``, loaded in
  isolation).
* Records: Confluent's Avro converter is not on Maven Central, so Connect reads the same
  events as **JSON** (``JsonConverter``, ``schemas.enable=false``: a map per event).
* Mapping without code, with Kafka's built-in transforms (SMTs): ``Flatten`` (the
  metadata map), ``ReplaceField`` (metadata keys to kstage's column names),
  ``InsertField`` (topic, partition, offset, record timestamp), ``TimestampConverter``
  (the record timestamp to epoch ms). The Iceberg sink matches map keys to the table's
  columns by name and parses strings into numbers. What built-in SMTs cannot express is
  left as is: ``dataset`` of a ``CompactionRecordCounts`` event is the whole
  ``DatasetOutputPath`` (kstage cuts it into dataset, partition type and partition),
  ``partition_type`` and that event's ``partition_name`` stay NULL, ``job_context`` is
  the event name without kstage's ``Gobblin:`` prefix, and ``_ingested_at`` is the
  record's Kafka timestamp (no SMT gives the write time).
  Every event of the benchmark passes kstage's filter, so none is needed.
* Sink: ``iceberg.tables`` kstage's staging table (made beforehand with kstage's layout,
  bench/peers/tables.create_like), the SQLite JDBC catalog of the run's warehouse, a
  control topic of its own, ``iceberg.control.commit.interval-ms`` and
  ``iceberg.control.commit.timeout-ms`` as given. The timeout matters for freshness: the
  sink starts its commit worker (and its control-topic consumer, reading from the end)
  only with the first records, so a commit request sent before that is never answered
  and the coordinator waits the whole timeout (default 30 s) before the next one.
"""

from __future__ import annotations

from pathlib import Path

from _paths import JARS, lib

from service.broker import free_port

MAIN = "org.apache.kafka.connect.cli.ConnectStandalone"

RENAMES = {
    "metadata_clusterIdentifier": "cluster",
    "metadata_datasetUrn": "dataset",
    "metadata_DatasetOutputPath": "dataset",
    "metadata_partition": "partition_name",
    "metadata_recordCount": "record_count",
    "metadata_RegularRecordCount": "record_count",
    "metadata_LateRecordCount": "late_record_count",
    "metadata_dedupeStatus": "dedupe_status",
    "metadata_azkabanProjectName": "project_name",
    "metadata_azkabanFlowId": "flow_name",
    "metadata_azkabanJobId": "job_name",
    "metadata_azkabanExecId": "flow_exec_id",
    "timestamp": "log_event_time",
    "name": "job_context",  # the event name; kstage writes "Gobblin:<name>"
}

TRANSFORMS = {
    "transforms": "flatten,rename,coordinates,ingested,millis",
    "transforms.flatten.type": "org.apache.kafka.connect.transforms.Flatten$Value",
    "transforms.flatten.delimiter": "_",
    "transforms.rename.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
    "transforms.rename.renames": ",".join(f"{k}:{v}" for k, v in RENAMES.items()),
    "transforms.coordinates.type": "org.apache.kafka.connect.transforms.InsertField$Value",
    "transforms.coordinates.topic.field": "_topic",
    "transforms.coordinates.partition.field": "_kafka_partition",
    "transforms.coordinates.offset.field": "_offset",
    "transforms.coordinates.timestamp.field": "_timestamp",
    "transforms.ingested.type": "org.apache.kafka.connect.transforms.InsertField$Value",
    "transforms.ingested.timestamp.field": "_ingested_at",
    "transforms.millis.type": "org.apache.kafka.connect.transforms.TimestampConverter$Value",
    "transforms.millis.field": "_timestamp",
    "transforms.millis.target.type": "unix",
}

LOG4J = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d{ISO8601}] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = org.apache.kafka
logger.kafka.level = WARN
logger.rl.name = org.apache.kafka.clients.consumer.internals.ConsumerRebalanceListenerInvoker
logger.rl.level = INFO
logger.assign.name = org.apache.kafka.clients.consumer.internals.ConsumerCoordinator
logger.assign.level = INFO
"""


def _properties(values: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


def command(run_dir: Path, bootstrap: str, topic: str, warehouse: Path, table: str,
            commit_interval_ms: int, commit_timeout_ms: int = 30_000) -> list[str]:
    """Write the worker's and the connector's properties into ``run_dir``; the worker's
    command line."""
    worker = {
        "bootstrap.servers": bootstrap,
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "offset.storage.file.filename": str(run_dir / "connect.offsets"),
        # How long the task's consumer poll may block when no record comes (default 60
        # s): the sink sees the coordinator's commit requests only between polls.
        "offset.flush.interval.ms": "100",
        "plugin.path": str(JARS / "iceberg-sink"),
        "plugin.discovery": "service_load",
        "listeners": f"http://127.0.0.1:{free_port()}",
    }
    lib("iceberg-sink")  # fetched, or say what to run
    connector = {
        # The connector's name is its consumer group's (connect-<name>): one per run.
        "name": f"iceberg-{run_dir.name}",
        "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
        "tasks.max": "1",
        "topics": topic,
        **TRANSFORMS,
        "iceberg.tables": f"kstage.{table}",
        "iceberg.catalog": "kstage",
        "iceberg.catalog.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "iceberg.catalog.uri": f"jdbc:sqlite:{warehouse / 'catalog.db'}"
                               "?journal_mode=WAL&busy_timeout=30000",
        "iceberg.catalog.warehouse": str(warehouse),
        "iceberg.catalog.jdbc.schema-version": "V1",
        "iceberg.control.topic": f"control-{run_dir.name}",
        "iceberg.control.commit.interval-ms": str(commit_interval_ms),
        "iceberg.control.commit.timeout-ms": str(commit_timeout_ms),
    }
    (run_dir / "worker.properties").write_text(_properties(worker))
    (run_dir / "connector.properties").write_text(_properties(connector))
    (run_dir / "log4j2.properties").write_text(LOG4J)
    return ["java", "-Xmx512m", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={run_dir / 'log4j2.properties'}",
            "-cp", f"{lib('connect')}/*", MAIN,
            str(run_dir / "worker.properties"), str(run_dir / "connector.properties")]
