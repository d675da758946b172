"""The processes of one system under test: started, sampled, stopped by their pid.

A system is one process tree: kstage (Python, its Spark JVM), the Spark Structured
Streaming job (Python driver, its JVM, pyspark's Python workers when a pandas UDF runs)
or the Kafka Connect worker (one JVM). :class:`ProcessTree` samples the tree every 50 ms
(``/proc``, through bench/throughput.py's helpers): the CPU seconds of every process of
the tree over time (a process that exited keeps its last reading), and each process's
peak RSS (``VmHWM``). Only ``python*`` and ``java`` processes count towards the RSS:
the JVM's short-lived forks (``chmod`` of Hadoop's local file system) report the JVM's
pages as theirs before ``exec``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from throughput import _cpu_s, _descendants, _peak_rss_kb

SAMPLE_S = 0.05
SCAN_EVERY = 10  # a full /proc scan for new descendants every 10 samples


@dataclass
class ProcessTree:
    """CPU and peak RSS of ``pid`` and its descendants, sampled while they live."""

    pid: int
    cpu_s: dict[int, float] = field(default_factory=dict)  # last reading per process
    peak_kb: dict[int, int] = field(default_factory=dict)
    comm: dict[int, str] = field(default_factory=dict)
    # (wall clock, CPU s of the whole tree, of its java processes)
    timeline: list[tuple[float, float, float]] = field(default_factory=list)
    _samples: int = 0

    def sample(self) -> None:
        if self._samples % SCAN_EVERY == 0:
            self.comm.update(_descendants(self.pid))
            self.comm.setdefault(self.pid, _comm(self.pid))
        self._samples += 1
        for pid in self.comm:
            cpu = _cpu_s(pid)
            if cpu is not None:
                self.cpu_s[pid] = cpu
            kb = _peak_rss_kb(pid)
            if kb is not None:
                self.peak_kb[pid] = max(self.peak_kb.get(pid, 0), kb)
        java = sum(cpu for pid, cpu in self.cpu_s.items() if self.comm.get(pid) == "java")
        self.timeline.append((time.time(), sum(self.cpu_s.values()), java))

    def cpu_between(self, start: float, end: float) -> tuple[float, float]:
        """CPU seconds of the whole tree and of its JVMs between two wall-clock times
        (the nearest samples)."""
        def at(when: float) -> tuple[float, float, float]:
            return min(self.timeline, key=lambda s: abs(s[0] - when))

        first, last = at(start), at(end)
        return last[1] - first[1], last[2] - first[2]

    def peak_rss_mb(self) -> float:
        """The sum of the peak RSS of the tree's Python and Java processes."""
        counted = [kb for pid, kb in self.peak_kb.items()
                   if pid == self.pid or self.comm.get(pid, "").startswith(("python", "java"))]
        return sum(counted) / 1024


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "gone"


async def sample_until(tree: ProcessTree, done: asyncio.Future[object],
                       timeout_s: float, what: str, log: Path) -> None:
    """Sample ``tree`` until ``done``; TimeoutError naming ``what`` and its log after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not done.done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not finish within {timeout_s:.0f} s; log {log}")
        tree.sample()
        await asyncio.wait([done], timeout=SAMPLE_S)
    tree.sample()


async def stop_group(proc: asyncio.subprocess.Process, grace_s: float = 30.0) -> None:
    """SIGTERM to the process group ``proc`` leads (started with ``start_new_session``);
    SIGKILL to what is left of it after ``grace_s`` or once the leader exited."""
    try:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), grace_s)
    except TimeoutError:
        pass
    except ProcessLookupError:
        await proc.wait()
    try:  # whatever of the group outlived its leader (a JVM child)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    await proc.wait()
