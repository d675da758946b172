"""The figures of one system, its report line, and the last line: kstage's ratios.

Per system (:class:`Figures`), from its throughput run (a backlog of ``n`` events):

* ``events_s``: rows counted in its table over its window, from its start of processing
  (kstage and Kafka Connect: the consumer's partition assignment; Spark Structured
  Streaming: the trigger of its first micro-batch) to the commit of the first snapshot
  holding all ``n`` rows (the snapshot's ``timestamp-ms``);
* ``cpu_100k``: CPU seconds of all its processes in that window, per 100 000 events;
* ``rss_mb``: the sum of the peak RSS of its Python and Java processes over the run;
* ``files_100k``: data files in its table per 100 000 events;

and, from its freshness run at half of its ``events_s`` (:class:`Pace`): ``p50_ms`` /
``p99_ms``, producer send (the stamp) to the row visible to a pyiceberg reader of the
table, of the events after the warm-up (``latencies_ms``, each); ``fresh_files_100k``,
the data files of that table at the end of the run per 100 000 of its events, and
``files_at``, its data files over the run (the picture of :mod:`picture`).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path


@dataclass(frozen=True)
class Pace:
    """A freshness run: ``warm_s`` of events at the rate (a fresh process's JIT warm-up,
    not counted), then ``seconds`` of events whose latencies count."""

    seconds: float
    warm_s: float


@dataclass
class Figures:
    system: str
    settings: str  # what was tuned, for the report
    n: int = 0
    window_s: float = 0.0
    cpu_s: float = 0.0
    jvm_cpu_s: float = 0.0  # the part of cpu_s its JVMs used
    rss_mb: float = 0.0
    data_files: int = 0
    rate: float = 0.0  # the freshness run's events/s
    warm_n: int = 0  # its first events, not counted
    fresh_n: int = 0  # the events counted after them
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)  # each counted event's
    files_at: list[tuple[float, int]] = field(default_factory=list)  # (s into the run, files)
    fresh_files: int = 0  # data files of the freshness run's table at its end

    @property
    def events_s(self) -> float:
        return self.n / self.window_s

    @property
    def cpu_100k(self) -> float:
        return self.cpu_s / self.n * 100_000

    @property
    def files_100k(self) -> float:
        return self.data_files / self.n * 100_000

    @property
    def fresh_files_100k(self) -> float:
        return self.fresh_files / max(1, self.warm_n + self.fresh_n) * 100_000

    def plan(self, pace: Pace) -> int:
        """Set the freshness run's rate (half of ``events_s``) and sizes; the events to
        produce."""
        self.rate = self.events_s / 2
        self.warm_n = round(self.rate * pace.warm_s)
        self.fresh_n = max(200, round(self.rate * pace.seconds))
        return self.warm_n + self.fresh_n

    def measure(self, seen: dict[int, tuple[float, float]],
                files: list[tuple[float, int]] | None = None) -> None:
        """p50/p99 of the events after the warm-up: ``seen[offset] = (visible, stamp)``;
        ``files``: ``(wall clock, data files)`` of the table over the run."""
        counted = [(at - stamp) * 1000 for offset, (at, stamp) in seen.items()
                   if offset >= self.warm_n]
        self.p50_ms, self.p99_ms = percentile(counted, 0.5), percentile(counted, 0.99)
        self.latencies_ms = counted
        first = min((stamp for _, stamp in seen.values()), default=0.0)
        self.files_at = [(at - first, count) for at, count in files or []]
        self.fresh_files = self.files_at[-1][1] if self.files_at else 0


def medians(runs: list[Figures]) -> Figures:
    """One system's figures over several rounds (``--rounds``): the median of each
    figure (events/s, CPU, RSS, files, p50, p99, rate) on its own."""
    first = runs[0]
    if len(runs) == 1:
        return first
    med = statistics.median
    n = first.n
    return replace(first, settings=f"median of {len(runs)} rounds; {first.settings}",
                   window_s=n / med(f.events_s for f in runs),
                   cpu_s=med(f.cpu_s for f in runs), jvm_cpu_s=med(f.jvm_cpu_s for f in runs),
                   rss_mb=med(f.rss_mb for f in runs),
                   data_files=round(med(f.data_files for f in runs)),
                   rate=med(f.rate for f in runs),
                   warm_n=round(med(f.warm_n for f in runs)),
                   fresh_n=round(med(f.fresh_n for f in runs)), p50_ms=med(f.p50_ms for f in runs),
                   p99_ms=med(f.p99_ms for f in runs))


def round_dir(workdir: Path, i: int) -> Path:
    """The work directory of round ``i`` (the first is ``workdir`` itself)."""
    if i == 0:
        return workdir
    where = workdir / f"round-{i + 1}"
    where.mkdir()
    return where


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def line(f: Figures) -> str:
    """One system's figures on one line."""
    return (f"{f.system}: {f.events_s:.0f} events/s ({f.n} in {f.window_s:.2f} s), freshness "
            f"p50 {f.p50_ms:.0f} ms p99 {f.p99_ms:.0f} ms ({f.fresh_n} events at "
            f"{f.rate:.0f}/s after {f.warm_n} of warm-up), CPU {f.cpu_100k:.1f} s/100k (JVM "
            f"{f.jvm_cpu_s / f.n * 100_000:.1f}), peak RSS {f.rss_mb:.0f} MB, "
            f"{f.files_100k:.1f} data files/100k (after the freshness run {f.fresh_files}: "
            f"{f.fresh_files_100k:.1f}/100k); {f.settings}")


def load() -> str:
    return f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"


def ratios(kstage: Figures, peers: list[Figures]) -> str:
    """The last line: kstage's figure over each peer's (throughput: higher is better for
    kstage; freshness, CPU, RSS, files: lower is)."""
    parts = []
    for peer in peers:
        parts.append(
            f"kstage/{peer.system}: events_s={kstage.events_s / peer.events_s:.2f} "
            f"p99={kstage.p99_ms / peer.p99_ms:.2f} "
            f"cpu={kstage.cpu_100k / peer.cpu_100k:.2f} "
            f"rss={kstage.rss_mb / peer.rss_mb:.2f} "
            f"files={kstage.files_100k / peer.files_100k:.2f}")
    return "; ".join(parts)
