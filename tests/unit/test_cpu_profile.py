"""tests/cpu_profile.py charges each process's CPU to the test of its pytest ancestor, knows
a reused pid for a new process, and names the kinds of the suite's processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import cpu_profile
from tests.cpu_profile import (
    BETWEEN,
    HZ,
    OUTSIDE,
    Proc,
    Profile,
    kind,
    read_procs,
    short_under,
)


def _proc(root: Path, pid: int, ppid: int, start: int, ticks: int, cmdline: str,
          reaped: int = 0) -> None:
    (root / str(pid)).mkdir(exist_ok=True)
    # pid (name with a space and a paren) state ppid ... utime stime cutime cstime ...
    # starttime
    fields = (["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0", str(reaped), "0"]
              + ["0"] * 4 + [str(start)])
    (root / str(pid) / "stat").write_text(f"{pid} (a (b) c) {' '.join(fields)} 0 0\n")
    (root / str(pid) / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode())


def test_cpu_is_charged_to_the_test_of_the_nearest_pytest_ancestor(tmp_path: Path) -> None:
    root = tmp_path / "proc"
    root.mkdir()
    (root / "self").mkdir()  # not a pid
    worker = "python -u -c import sys;exec(eval(sys.stdin.readline()))"
    run = "python -m service run -c /tmp/pytest-of-root/k.yml"
    jvm = "java -cp /x/pyspark/jars/* org.apache.spark.deploy.SparkSubmit"
    _proc(root, 1, 0, 1, 0, "init")
    _proc(root, 10, 1, 5, 100, worker)
    _proc(root, 11, 10, 6, 50, run)
    _proc(root, 12, 10, 7, 300, jvm)
    _proc(root, 13, 1, 8, 40, "postgres: checkpointer")
    _proc(root, 14, 1, 3, 5000, "sshd: listener")  # running before the profile
    profile = Profile(root=root)
    profile.baseline({14: Proc(ppid=1, start=3, ticks=4990)})
    current = {10: "tests/a.py::test_one"}
    procs = read_procs(root)
    assert procs[12] == Proc(ppid=10, start=7, ticks=300)
    profile.sample(procs, current)
    assert profile.tests == {"tests/a.py::test_one": (100 + 50 + 300) / HZ}
    assert profile.files["tests/a.py"] == {"pytest-worker": 100 / HZ, "kstage": 50 / HZ,
                                           "spark-jvm": 300 / HZ}
    assert profile.files[OUTSIDE] == {"postgresql": 40 / HZ, "other": 10 / HZ}
    # A second read, between tests: the JVM gained 100 ticks; the first run (pid 11)
    # ended with 60 ticks and was waited for, and so was a child never seen (70 ticks):
    # the worker's reaped ticks grew by 130; pid 11 is a new run now (a reused pid).
    _proc(root, 10, 1, 5, 100, worker, reaped=130)
    _proc(root, 11, 10, 90, 20, run)
    _proc(root, 12, 10, 7, 400, jvm)
    profile.sample(read_procs(root), {10: ""})
    assert profile.files[BETWEEN] == {"spark-jvm": 100 / HZ, "kstage": 20 / HZ,
                                      short_under("pytest-worker"): (130 - 50) / HZ}
    assert profile.tests == {"tests/a.py::test_one": (100 + 50 + 300) / HZ}
    assert profile.processes == {"pytest-worker": 1, "kstage": 2, "spark-jvm": 1,
                                 "postgresql": 1, "other": 2}
    report = profile.report(12.0)
    assert report["kinds"]["spark-jvm"] == {"cpu_s": round(400 / HZ, 1), "processes": 1}
    # The run (pid 11) and the JVM (pid 12, 400 ticks seen) end before the next read;
    # the worker waited for the run (20 ticks), the JVM was orphaned and init waited for
    # it (its 400 and 30 more): only those 30 are new, charged once.
    (root / "11" / "stat").unlink()
    (root / "12" / "stat").unlink()
    _proc(root, 10, 1, 5, 100, worker, reaped=130 + 20)
    _proc(root, 1, 0, 1, 0, "init", reaped=430)
    profile.sample(read_procs(root), {10: ""})
    assert profile.files[BETWEEN][short_under("pytest-worker")] == (130 - 50) / HZ
    assert profile.files[OUTSIDE][short_under("other")] == 30 / HZ  # init


def test_a_process_that_execs_is_charged_as_what_it_became(tmp_path: Path) -> None:
    """pyspark's spark-class (a shell whose command line names the fetched
    postgresql-*.jar) execs the Spark JVM under the same pid and start time."""
    root = tmp_path / "proc"
    root.mkdir()
    worker = "python -u -c import sys;exec(eval(sys.stdin.readline()))"
    _proc(root, 1, 0, 1, 0, "init")
    _proc(root, 10, 1, 5, 0, worker)
    jars = "/root/.cache/kstage/jars/postgresql-42.7.14.jar"
    _proc(root, 12, 10, 7, 2, f"bash spark-class SparkSubmit --conf "
          f"spark.driver.extraClassPath={jars} pyspark-shell")
    profile = Profile(root=root)
    current = {10: "tests/a.py::test_one"}
    profile.sample(read_procs(root), current)
    assert profile.processes == {"pytest-worker": 1, "postgresql": 1, "other": 1}
    _proc(root, 12, 10, 7, 302, f"java -cp {jars}:/x/pyspark/jars/* org.apache.spark."
          "deploy.SparkSubmit pyspark-shell")
    profile.sample(read_procs(root), current)
    assert profile.files["tests/a.py"] == {"postgresql": 2 / HZ, "spark-jvm": 300 / HZ}
    assert profile.processes == {"pytest-worker": 1, "spark-jvm": 1, "other": 1}
    assert profile.started["tests/a.py"] == {"pytest-worker": 1, "spark-jvm": 1}
    (root / "12" / "cmdline").write_bytes(b"")  # ended between the two reads
    _proc(root, 12, 10, 7, 312, "")
    profile.sample(read_procs(root), current)
    assert profile.files["tests/a.py"]["spark-jvm"] == 310 / HZ


@pytest.mark.parametrize(("cmdline", "expected"), [
    ("java -Xmx384m kafka.Kafka /tmp/n/server.properties", "apache-kafka"),
    ("java -Xmx384m -Dquarkus.http.port=1 -jar tests/jars/nessie/lib/nessie-quarkus.jar",
     "nessie"),
    ("/root/.calfkit/bin/tansu-v0.6.0 broker --listener-url tcp://127.0.0.1:1", "tansu"),
    ("python -m moto.server -p 1", "s3-server"),
    ("python -m pytest tests/unit", "pytest"),
    ("sh -c true", "other"),
])
def test_the_kinds_of_the_suites_processes(cmdline: str, expected: str) -> None:
    assert kind(cmdline) == expected


def test_the_summary_of_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = Profile(root=tmp_path)
    profile.files["tests/a.py"]["spark-jvm"] = 30.0
    profile.tests["tests/a.py::test_one"] = 30.0
    profile.processes["spark-jvm"] = 2
    profile.started["tests/a.py"]["spark-jvm"] = 2
    report = tmp_path / "cpu.json"
    report.write_text(json.dumps(profile.report(60.0)))
    assert cpu_profile.main(["cpu_profile", str(report)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("30 CPU s seen in 60 s\n")
    assert "       30 s  spark-jvm (2 processes)" in out
    assert "       30 s  tests/a.py: spark-jvm 30 (2 Spark JVMs)" in out
    assert "       30 s  tests/a.py::test_one" in out
