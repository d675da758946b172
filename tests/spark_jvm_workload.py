"""What the suite's Spark JVMs do, run once so that their classes are dumped into the
class-data archive (tests/spark_jvm.py): kstage's session, Iceberg tables of the SQLite
JDBC catalog created, appended to (Arrow batches with snapshot properties, rows),
evolved, merged, deleted from, read (rows, snapshots) and maintained.

``python -m tests.spark_jvm_workload WORKDIR CLASS_PATH_FILE``: writes the JVM's class
path to CLASS_PATH_FILE, stops the session and waits for the JVM to exit (it writes the
archive as it exits).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from actors.sinks.spark.session import start_session
from settings.models import SparkSettings

EXIT_WAIT_S = 600  # the JVM dumps its classes as it exits: seconds on a loaded machine


def _exercise(spark: Any) -> None:
    spark.sql("CREATE NAMESPACE IF NOT EXISTS kstage")
    spark.sql("CREATE TABLE kstage.staged (id BIGINT, name STRING, _topic STRING, "
              "_partition_id INT, _offset BIGINT, ts TIMESTAMP) USING iceberg "
              "PARTITIONED BY (days(ts))")
    batch = pa.table({"id": pa.array(range(1000), pa.int64()),
                      "name": pa.array([f"n{i}" for i in range(1000)]),
                      "_topic": pa.array(["t"] * 1000),
                      "_partition_id": pa.array([0] * 1000, pa.int32()),
                      "_offset": pa.array(range(1000), pa.int64()),
                      "ts": pa.array([1_700_000_000_000_000 + i for i in range(1000)],
                                     pa.timestamp("us", tz="UTC"))})
    for n in range(3):
        (spark.createDataFrame(batch).writeTo("kstage.staged")
         .option("snapshot-property.kstage.commit", f"c{n}").append())
    spark.createDataFrame([(1, "a", "t", 0, 1, None)], spark.table("kstage.staged").schema
                          ).writeTo("kstage.staged").append()
    spark.sql("ALTER TABLE kstage.staged ADD COLUMN extra STRING")
    spark.sql("CREATE TABLE kstage.final (id BIGINT, name STRING) USING iceberg")
    spark.sql("MERGE INTO kstage.final f USING (SELECT id, max(name) AS name "
              "FROM kstage.staged GROUP BY id) s ON f.id = s.id "
              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    spark.sql("DELETE FROM kstage.final WHERE id < 10")
    spark.sql("SELECT count(*), max(_offset) FROM kstage.staged").collect()
    spark.table("kstage.final").toArrow()
    spark.sql("SELECT snapshot_id, summary FROM kstage.staged.snapshots").collect()
    spark.sql("CALL kstage.system.rewrite_data_files(table => 'kstage.staged')").collect()
    spark.sql("CALL kstage.system.expire_snapshots(table => 'kstage.staged', "
              "retain_last => 1)").collect()


def main(workdir: Path, class_path_file: Path) -> None:
    from pyspark import SparkContext

    spark = start_session(SparkSettings(warehouse=str(workdir / "warehouse")), "cds")
    _exercise(spark)
    class_path_file.write_text(spark._jvm.java.lang.System.getProperty("java.class.path"))
    gateway = SparkContext._gateway
    assert gateway is not None
    proc = gateway.proc
    spark.stop()
    proc.stdin.close()  # the JVM exits at the end of its input
    proc.wait(timeout=EXIT_WAIT_S)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
