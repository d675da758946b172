"""A local session writes its files without a ``chmod`` process each
(``io.kstage.hadoop.NioLocalFileSystem``, the fence jar's; actors/sinks/spark/session.py).

Hadoop's local file system, without its native library (PySpark ships none), starts
``chmod`` for every file and directory it creates: about ten processes per Iceberg append
to a local warehouse, measured 119 -> 79 ms of JVM CPU per append of 500 rows. Here a
real session (a JVM of its own, whose ``PATH`` starts with a ``chmod`` that records each
call before running the real one) appends to an Iceberg table and merges into another
one: no call is recorded and every file and directory has the mode Hadoop gives it
(0644 and 0755 under umask 022, checksum files included). In the same JVM, Hadoop's own
local file system records its calls (the recorder works), a mode Java cannot set (the
sticky bit) goes to Hadoop's ``chmod``, and a missing file is an error naming it.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from actors.sinks.spark.jars import LOCAL_FILE_SYSTEM
from tests.kafkautil import CHILD_PATH

pytestmark = pytest.mark.slow

_RECORDER = """#!/bin/sh
echo "$*" >> "{log}"
exec {chmod} "$@"
"""

_SESSION = """
import json, os, sys
from actors.sinks.spark.session import start_session
from settings.models import SparkSettings
warehouse, scratch = sys.argv[1], sys.argv[2]
os.umask(0o022)
spark = start_session(SparkSettings(warehouse=warehouse), "local-files")
spark.sql("CREATE NAMESPACE IF NOT EXISTS kstage")
spark.sql("CREATE TABLE kstage.t (id BIGINT, name STRING) USING iceberg")
for n in range(3):
    spark.sql(f"INSERT INTO kstage.t VALUES ({n}, 'n{n}')")
spark.sql("CREATE TABLE kstage.f (id BIGINT, name STRING) USING iceberg")
spark.sql("MERGE INTO kstage.f f USING kstage.t t ON f.id = t.id "
          "WHEN NOT MATCHED THEN INSERT *")
rows = spark.sql("SELECT count(*) FROM kstage.f").collect()[0][0]
jvm = spark._jvm
conf = spark.sparkContext._jsc.hadoopConfiguration()
ours = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf)
session_done = open(os.environ["CHMOD_LOG"]).read() if os.path.exists(
    os.environ["CHMOD_LOG"]) else ""
hadoop = jvm.org.apache.hadoop.fs.LocalFileSystem()
hadoop.initialize(jvm.java.net.URI("file:///"), conf)
hadoop.create(jvm.org.apache.hadoop.fs.Path(f"file://{scratch}/hadoop.txt")).close()
sticky = jvm.org.apache.hadoop.fs.permission.FsPermission("1777")
ours.mkdirs(jvm.org.apache.hadoop.fs.Path(f"file://{scratch}/sticky"))
ours.setPermission(jvm.org.apache.hadoop.fs.Path(f"file://{scratch}/sticky"), sticky)
try:
    ours.setPermission(jvm.org.apache.hadoop.fs.Path(f"file://{scratch}/missing"),
                       jvm.org.apache.hadoop.fs.permission.FsPermission("644"))
    missing = "no error"
except Exception as exc:
    missing = str(exc)
print(json.dumps({"rows": rows, "class": ours.getClass().getName(),
                  "session_chmods": session_done, "missing": missing}))
spark.stop()
"""


@pytest.mark.timeout(400)  # a Spark session on a loaded 2-core machine
def test_a_local_session_sets_file_modes_without_a_chmod_process(tmp_path: Path) -> None:
    log = tmp_path / "chmod.log"
    tools = tmp_path / "bin"
    tools.mkdir()
    recorder = tools / "chmod"
    recorder.write_text(_RECORDER.format(log=log, chmod="/bin/chmod"))
    recorder.chmod(0o755)
    warehouse, scratch = tmp_path / "wh", tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": CHILD_PATH, "CHMOD_LOG": str(log),
           "PATH": f"{tools}:{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-c", _SESSION, str(warehouse), str(scratch)],
                          env=env, capture_output=True, text=True, timeout=380,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])

    assert said["rows"] == 3
    assert said["session_chmods"] == "", said["session_chmods"]
    assert said["class"] == LOCAL_FILE_SYSTEM
    tables = [warehouse / "t", warehouse / "f"]  # the SQLite catalog's files beside them
    modes = {path.relative_to(warehouse): stat.S_IMODE(path.stat().st_mode)
             for table in tables for path in (table, *table.rglob("*"))}
    data = [p for p in modes if p.suffix == ".parquet"]
    checksums = [p for p in modes if p.name.endswith(".crc")]
    assert len(data) >= 4 and checksums, sorted(modes)  # 3 appends and the merge
    assert {m for p, m in modes.items() if (warehouse / p).is_file()} == {0o644}, modes
    assert {m for p, m in modes.items() if (warehouse / p).is_dir()} == {0o755}, modes

    recorded = log.read_text().splitlines()
    assert any(line.endswith(f"{scratch}/hadoop.txt") for line in recorded), recorded
    assert any(line.startswith("1777 ") and line.endswith(f"{scratch}/sticky")
               for line in recorded), recorded
    assert stat.S_IMODE((scratch / "sticky").stat().st_mode) == 0o1777
    assert f"{scratch}/missing" in said["missing"], said["missing"]
