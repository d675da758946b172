"""A Spark standalone cluster for tests: one Master and one Worker on 127.0.0.1.

Both run from the pip pyspark's ``bin/spark-class`` (``SPARK_HOME`` = the pyspark package
directory), on free ports, each in its own process group (the Worker's executors and
their Python workers are its children, in its group): :meth:`SparkCluster.stop` kills both
groups. Executors run the venv's Python (``PYSPARK_PYTHON``); :attr:`SparkCluster.env` is
the environment a driver (a ``kstage`` child process) needs beside ``master_url``.

Nothing is skipped: a missing Java or ``spark-class`` raises :class:`ClusterError`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from tests.spark_jvm import FAST_START

HOST = "127.0.0.1"


class ClusterError(RuntimeError):
    """The cluster could not start (the message names the logs)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def spark_home() -> Path:
    """The pip pyspark's package directory (it holds ``bin/spark-class`` and ``jars``)."""
    import pyspark  # only when a cluster is wanted

    return Path(pyspark.__file__).resolve().parent


class SparkCluster:
    """A standalone Master and one Worker (``cores`` cores, ``memory`` for executors).

    Attributes:
        master_url: ``spark://127.0.0.1:PORT``.
        webui_url: the Master's web UI (``/json/`` is its state as JSON).
        work_dir: the Worker's work directory (one ``app-*`` directory per application
            that ran executors there, with their stdout/stderr).
        env: variables for a driver process (``SPARK_LOCAL_IP``, ``PYSPARK_PYTHON``).
    """

    def __init__(self, root: Path, *, cores: int = 1, memory: str = "1g") -> None:
        self.root = root
        self.cores, self.memory = cores, memory
        self.port, self.webui_port = free_port(), free_port()
        self.worker_port, self.worker_webui_port = free_port(), free_port()
        self.master_url = f"spark://{HOST}:{self.port}"
        self.webui_url = f"http://{HOST}:{self.webui_port}"
        self.work_dir = root / "work"
        self.master_log, self.worker_log = root / "master.log", root / "worker.log"
        self.env = {"SPARK_LOCAL_IP": HOST, "PYSPARK_PYTHON": sys.executable,
                    "PYSPARK_DRIVER_PYTHON": sys.executable}
        self._procs: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []
        self.pgids: list[int] = []  # of the Master's and the Worker's process groups

    def _spawn(self, log: Path, *args: str) -> subprocess.Popen[bytes]:
        home = spark_home()
        spark_class = home / "bin" / "spark-class"
        if not os.access(spark_class, os.X_OK):
            raise ClusterError(f"{spark_class} is missing or not executable")
        env = {**os.environ, **self.env, "SPARK_HOME": str(home),
               "SPARK_DAEMON_MEMORY": "256m", "SPARK_WORKER_DIR": str(self.work_dir),
               # the suite's JVM options (tests/spark_jvm.py): C1 and SerialGC
               "SPARK_DAEMON_JAVA_OPTS": " ".join(FAST_START)}
        fh = open(log, "wb")  # closed in stop()
        proc = subprocess.Popen([str(spark_class), *args], stdout=fh,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=self.root, start_new_session=True)
        self._procs.append((proc, fh))
        self.pgids.append(proc.pid)
        return proc

    def state(self) -> dict[str, Any]:
        """The Master's state (``/json/``): workers, aliveworkers, activeapps,
        completedapps, ..."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=5) as resp:  # noqa: S310
            data: dict[str, Any] = json.load(resp)
        return data

    def _logs(self) -> str:
        parts = []
        for log in (self.master_log, self.worker_log):
            text = log.read_text(errors="replace") if log.exists() else "(none)"
            parts.append(f"--- {log.name} (last lines) ---\n"
                         + "\n".join(text.splitlines()[-30:]))
        return "\n".join(parts)

    def start(self, timeout: float = 90) -> SparkCluster:
        """Start the Master, then the Worker; return once the Worker is ALIVE."""
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise ClusterError("no java on PATH and no JAVA_HOME: Spark needs Java 17")
        self.root.mkdir(parents=True, exist_ok=True)
        self.work_dir.mkdir(exist_ok=True)
        try:
            self._spawn(self.master_log, "org.apache.spark.deploy.master.Master",
                        "--host", HOST, "--port", str(self.port),
                        "--webui-port", str(self.webui_port))
            self._spawn(self.worker_log, "org.apache.spark.deploy.worker.Worker",
                        "--host", HOST, "--port", str(self.worker_port),
                        "--webui-port", str(self.worker_webui_port),
                        "--cores", str(self.cores), "--memory", self.memory,
                        "--work-dir", str(self.work_dir), self.master_url)
            self._wait_for_worker(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_for_worker(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            for (proc, _), what in zip(self._procs, ("the Master", "the Worker"),
                                       strict=False):
                if proc.poll() is not None:
                    raise ClusterError(f"{what} exited {proc.returncode}:\n" + self._logs())
            try:
                state = self.state()
            except (OSError, urllib.error.URLError, ValueError) as exc:
                last = exc
            else:
                last = state
                alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
                if state.get("aliveworkers", len(alive)) >= 1 and alive:
                    return
            time.sleep(0.5)
        raise ClusterError(f"no ALIVE worker within {timeout}s (last: {last!r}):\n"
                           + self._logs())

    def completed_apps(self, count: int = 0, timeout: float = 15) -> list[dict[str, Any]]:
        """The Master's completed applications, once there are at least ``count`` (a
        stopped driver unregisters asynchronously); ClusterError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            apps = list(self.state().get("completedapps", []))
            if len(apps) >= count:
                return apps
            if time.monotonic() > deadline:
                raise ClusterError(f"{len(apps)} completed application(s), not {count}, "
                                   f"after {timeout}s: {self.state()!r}")
            time.sleep(0.2)

    def app_dirs(self) -> list[Path]:
        """The Worker's ``app-*`` directories (one per application with executors here)."""
        return sorted(self.work_dir.glob("app-*"))

    def stop(self) -> None:
        """Kill both process groups (TERM, then KILL after a grace); idempotent."""
        for proc, _ in reversed(self._procs):
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc, _ in reversed(self._procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # executors and Python workers of the group may outlive the leader
            _signal_group(proc, signal.SIGKILL)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for pgid in self.pgids:  # a killed member may take a moment to go
            while group_alive(pgid) and time.monotonic() < deadline + 10:
                time.sleep(0.1)
        for _, fh in self._procs:
            fh.close()
        self._procs.clear()

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)  # the group's id is the leader's pid (new session)
    except (ProcessLookupError, PermissionError):
        pass


def group_members(pgid: int) -> list[str]:
    """The live (not zombie) processes of process group ``pgid``, as ``"pid cmdline"``
    (read from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(f"{stat.parent.name} {cmd.decode(errors='replace')[:200]}")
    return found


def group_alive(pgid: int) -> bool:
    """Is a live process left in process group ``pgid``?"""
    return bool(group_members(pgid))
