"""Where the suite's CPU goes: the CPU of every process of a run charged to the test that
was running in its pytest process (an xdist worker, or the only process), and to the kind
of process it is (a Spark JVM, an Apache Kafka node, a kstage child, a worker itself...).

The suite is CPU-bound on the 2-core machine, so its wall time follows its CPU; this
says which tests and which processes to make cheaper. On when :data:`OUT_ENV` names the
report's file (tests/conftest.py registers this module then)::

    KSTAGE_CPU_PROFILE=out/cpu-profile.json make test
    .venv/bin/python -m tests.cpu_profile out/cpu-profile.json   # the summary

Each pytest process writes the test it runs to a file named by its pid; the main process
reads every process's CPU ticks from /proc every :data:`PERIOD_S` seconds and charges the
growth to the test of the process's nearest pytest ancestor (``-outside-`` without one:
a daemon that left its parent, such as PostgreSQL's server). A process is known by its pid
and start time (pids are reused within a run: pid_max is 32768 here). A process that
lives less than a period between two reads is charged through its parent (:class:`Profile`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

OUT_ENV = "KSTAGE_CPU_PROFILE"  # where the report goes; unset: no profile
DIR_ENV = "KSTAGE_CPU_PROFILE_DIR"  # made by the main process: the current tests' files
PERIOD_S = 2.0
OUTSIDE = "-outside-"  # no pytest process above it
BETWEEN = "-between-"  # its pytest process ran no test (collection, fixtures' teardown)
HZ = os.sysconf("SC_CLK_TCK")

# (what the command line holds, the kind), first match wins
KINDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("java", "kafka.Kafka"), "apache-kafka"),
    (("java", "nessie"), "nessie"),
    (("java", "ConnectDistributed"), "kafka-connect"),
    (("java", "ConnectStandalone"), "kafka-connect"),
    (("java", "spark"), "spark-jvm"),
    (("java",), "other-jvm"),
    (("-m service",), "kstage"),
    (("pyspark.daemon",), "pyspark-worker"),
    (("postgres",), "postgresql"),
    (("tansu",), "tansu"),
    (("moto",), "s3-server"),
    (("sys.stdin.readline",), "pytest-worker"),  # execnet's bootstrap of an xdist worker
    (("pytest",), "pytest"),
    (("python",), "other-python"),
)


def kind(cmdline: str) -> str:
    for needles, name in KINDS:
        if all(n in cmdline for n in needles):
            return name
    return "other"


@dataclass(frozen=True)
class Proc:
    ppid: int
    start: int  # clock ticks after boot
    ticks: int  # user + system
    reaped: int = 0  # user + system of the children it waited for (cutime + cstime)


def read_procs(root: Path = Path("/proc")) -> dict[int, Proc]:
    """Every process now: pid -> parent, start time and CPU ticks."""
    found: dict[int, Proc] = {}
    for entry in root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        f = text[text.rfind(")") + 2:].split()
        # after the name, from 0: state ppid ... utime(11) stime(12) cutime(13)
        # cstime(14) ... starttime(19)
        found[int(entry.name)] = Proc(int(f[1]), int(f[19]), int(f[11]) + int(f[12]),
                                      int(f[13]) + int(f[14]))
    return found


def _cmdline(root: Path, pid: int) -> str:
    try:
        return (root / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return ""


Key = tuple[int, int]  # pid, start time
SHORT = "short-lived"  # children that came and went between two reads


def short_under(waiter: str) -> str:
    """The kind charged with the short-lived children a process of kind ``waiter``
    waited for (``short-lived under kstage``: what a kstage child ran)."""
    return f"{SHORT} under {waiter}"


@dataclass
class Profile:
    """The CPU seconds seen so far, per test and per (file, kind).

    A child that lived and ended between two reads is not seen, but its CPU is: it grows
    the ``reaped`` ticks of the process that waited for it. That growth, less what was
    already charged for the children seen before they ended, is charged as
    :data:`SHORT` (:func:`short_under` the waiting process's kind) to the waiting
    process's test. What was charged for a child whose parent ended in the same period
    is credited to the nearest running ancestor; if that ancestor did not wait for it
    (the child was orphaned and init did), the credit left over is taken off the other
    waiting processes' growth, so the child is not charged twice.

    A process's kind is read at every sample (it may exec another program); the
    processes of each kind are counted per file where each was first seen
    (:attr:`started`)."""

    root: Path = Path("/proc")
    tests: Counter[str] = field(default_factory=Counter)
    files: defaultdict[str, Counter[str]] = field(
        default_factory=lambda: defaultdict(Counter))
    processes: Counter[str] = field(default_factory=Counter)  # kind -> processes seen
    started: defaultdict[str, Counter[str]] = field(  # file -> kind -> processes seen
        default_factory=lambda: defaultdict(Counter))
    _last: dict[Key, Proc] = field(default_factory=dict)  # of the previous read
    _kinds: dict[Key, str] = field(default_factory=dict)
    _where: dict[Key, str] = field(default_factory=dict)  # the file it was first seen in

    def baseline(self, procs: dict[int, Proc]) -> None:
        """The processes running when the profile starts: only what they use from now
        on is charged."""
        self._last = {(pid, proc.start): proc for pid, proc in procs.items()}

    def sample(self, procs: dict[int, Proc], current: dict[int, str]) -> None:
        """Charge the ticks each process of ``procs`` gained since the last sample (all
        of them for a process not seen before) to the test ``current`` names for its
        nearest pytest ancestor (pid -> its test, "" between tests)."""
        now = {(pid, proc.start): proc for pid, proc in procs.items()}
        # what was charged for the processes that ended, credited to the nearest
        # ancestor still running (whose reaped ticks now hold all of theirs)
        credit: Counter[Key] = Counter()
        running = {key[0]: key for key in now}
        ended = {key[0]: proc for key, proc in self._last.items() if key not in now}
        for proc in ended.values():
            credit[_running_ancestor(proc.ppid, running, ended)] += proc.ticks + proc.reaped
        shorts: dict[Key, int] = {}
        for key, proc in now.items():
            before = self._last.get(key)
            # read at every sample: a process may exec another program (pyspark's
            # spark-class, a shell whose command line names the fetched
            # postgresql-*.jar, becomes the Spark JVM under the same pid and start)
            cmdline = _cmdline(self.root, key[0])  # "": it just ended
            now_kind = kind(cmdline) if cmdline or key not in self._kinds else self._kinds[key]
            if self._kinds.get(key) != now_kind:
                where = self._owner(key[0], procs, current).split("::")[0]
                if key in self._kinds:
                    _less(self.processes, self._kinds[key])
                    _less(self.started[self._where[key]], self._kinds[key])
                self._kinds[key], self._where[key] = now_kind, where
                self.processes[now_kind] += 1
                self.started[where][now_kind] += 1
            gained = proc.ticks - (before.ticks if before else 0)
            if gained > 0:
                self._charge(self._owner(key[0], procs, current), self._kinds[key], gained)
            if before is not None:
                shorts[key] = proc.reaped - before.reaped - credit[key]
        left = sum(-short for short in shorts.values() if short < 0)
        for key, short in shorts.items():
            if short > 0:
                taken = min(short, left)
                left -= taken
                if short > taken:
                    self._charge(self._owner(key[0], procs, current),
                                 short_under(self._kinds[key]), short - taken)
        self._last = now

    def _charge(self, test: str, what: str, ticks: int) -> None:
        seconds = ticks / HZ
        if test not in (OUTSIDE, BETWEEN):
            self.tests[test] += seconds
        self.files[test.split("::")[0]][what] += seconds

    @staticmethod
    def _owner(pid: int, procs: dict[int, Proc], current: dict[int, str]) -> str:
        seen = 0
        while pid in procs and seen < 64:
            if pid in current:
                return current[pid] or BETWEEN
            pid, seen = procs[pid].ppid, seen + 1
        return OUTSIDE

    def report(self, wall_s: float) -> dict[str, object]:
        kinds: Counter[str] = Counter()
        for by_kind in self.files.values():
            kinds.update(by_kind)
        return {"wall_s": round(wall_s, 1),
                "kinds": {k: {"cpu_s": round(v, 1), "processes": self.processes[k]}
                          for k, v in kinds.most_common()},
                "files": {f: {k: round(v, 1) for k, v in c.most_common()}
                          for f, c in sorted(self.files.items(),
                                             key=lambda x: -sum(x[1].values()))},
                "started": {f: dict(c.most_common()) for f, c in self.started.items()},
                "tests": {t: round(v, 1) for t, v in self.tests.most_common()}}


def _less(counter: Counter[str], key: str) -> None:
    counter[key] -= 1
    if not counter[key]:
        del counter[key]


def _running_ancestor(pid: int, running: dict[int, Key], ended: dict[int, Proc]) -> Key:
    """The nearest process above ``pid`` still running (through those that ended)."""
    for _ in range(64):
        if pid in running:
            return running[pid]
        if pid not in ended:
            break
        pid = ended[pid].ppid
    return (0, 0)


def current_tests(directory: Path) -> dict[int, str]:
    """pid -> the test that pytest process runs now ("" between tests)."""
    found = {}
    for path in directory.glob("current-*"):
        try:
            found[int(path.name.removeprefix("current-"))] = path.read_text()
        except (OSError, ValueError):
            continue
    return found


@dataclass
class _Here:
    """Where this pytest process says which test it runs; None in xdist's main process
    (its hooks hear of every worker's tests, it runs none)."""

    directory: Path | None = None


_HERE = _Here()


def _say(nodeid: str) -> None:
    if _HERE.directory is None:
        return
    path = _HERE.directory / f"current-{os.getpid()}"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(nodeid)
    tmp.replace(path)


class _Sampler(threading.Thread):
    def __init__(self, directory: Path) -> None:
        super().__init__(name="cpu-profile", daemon=True)
        self.directory, self.profile = directory, Profile()
        self.stopping = threading.Event()
        self.started_at = 0.0

    def run(self) -> None:
        import time

        self.started_at = time.monotonic()
        self.profile.baseline(read_procs())
        while not self.stopping.wait(PERIOD_S):
            self.profile.sample(read_procs(), current_tests(self.directory))


_SAMPLER = pytest.StashKey[_Sampler]()


def pytest_configure(config: pytest.Config) -> None:
    if DIR_ENV not in os.environ:  # the main process: the workers inherit the directory
        directory = Path(tempfile.mkdtemp(prefix="kstage-cpu-"))
        os.environ[DIR_ENV] = str(directory)
        sampler = _Sampler(directory)
        config.stash[_SAMPLER] = sampler
        sampler.start()
    if "PYTEST_XDIST_WORKER" in os.environ or not config.getoption("numprocesses", None):
        _HERE.directory = Path(os.environ[DIR_ENV])
        _say("")


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _say(nodeid)


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    _say("")


def pytest_unconfigure(config: pytest.Config) -> None:
    sampler = config.stash.get(_SAMPLER, None)
    if sampler is None:
        return
    import time

    sampler.stopping.set()
    sampler.join()
    sampler.profile.sample(read_procs(), current_tests(sampler.directory))
    out = Path(os.environ[OUT_ENV])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(sampler.profile.report(time.monotonic() - sampler.started_at),
                              indent=1))
    shutil.rmtree(sampler.directory, ignore_errors=True)
    sys.stderr.write(f"tests/cpu_profile.py: {out}\n")


def main(argv: list[str]) -> int:
    """The summary of a report: CPU per kind of process, the costliest files and tests."""
    report = json.loads(Path(argv[1]).read_text())
    kinds = report["kinds"]
    total = sum(k["cpu_s"] for k in kinds.values())
    lines = [f"{total:.0f} CPU s seen in {report['wall_s']:.0f} s"]
    lines += [f"  {k['cpu_s']:7.0f} s  {name} ({k['processes']} processes)"
              for name, k in kinds.items()]
    lines.append("costliest files:")
    started = report.get("started", {})
    for name, by_kind in list(report["files"].items())[:25]:
        top = ", ".join(f"{k} {v:.0f}" for k, v in list(by_kind.items())[:3])
        jvms = started.get(name, {}).get("spark-jvm")
        top += f" ({jvms} Spark JVMs)" if jvms else ""
        lines.append(f"  {sum(by_kind.values()):7.0f} s  {name}: {top}")
    lines.append("costliest tests:")
    lines += [f"  {seconds:7.0f} s  {name}"
              for name, seconds in list(report["tests"].items())[:25]]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
