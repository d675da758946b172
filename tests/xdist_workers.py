"""How many pytest processes the suite runs in (``-n auto``, pyproject.toml).

The suite waits more than it computes: a test starts a kstage process, a JVM or a broker
and then waits for its event. One process per core left the 2-core machine 35 % busy
(8 integration files: 259 s with 2 processes, 155 s with 4, 58 % busy); the whole suite
took 45:36 with 2 and 22:14 with 4, 90 % busy, no failure; with 6 the load passed 11
and it ran slower than with 4 (after 22 minutes it had finished fewer tests than 4
processes had after 12). So two processes per core, bounded by memory (the suite's peak
was 6.7 GB with 4: a process holds a Spark session and starts kstage processes with
their own JVMs) and by :data:`MAX_WORKERS`. ``PYTEST_XDIST_AUTO_NUM_WORKERS`` and
``-n N`` still override it.
"""

from __future__ import annotations

import os

WORKERS_PER_CORE = 2
"""Test processes per core: most of a test's time is spent waiting for another process."""

MEMORY_PER_WORKER = 2 * 1024**3
"""The memory one test process may take at its peak, with the JVMs it starts."""

MAX_WORKERS = 8
"""At most this many: the shared Apache Kafka node and the disk serve them all."""


def auto_workers(cores: int, memory: int) -> int:
    """The number of test processes for ``cores`` usable cores and ``memory`` bytes."""
    return max(1, min(WORKERS_PER_CORE * cores, memory // MEMORY_PER_WORKER, MAX_WORKERS))


def machine_workers() -> int:
    """:func:`auto_workers` of this machine (``PYTEST_XDIST_AUTO_NUM_WORKERS`` first)."""
    told = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if told:
        return int(told)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return auto_workers(len(os.sched_getaffinity(0)), memory)


__all__ = ["MAX_WORKERS", "MEMORY_PER_WORKER", "WORKERS_PER_CORE", "auto_workers",
           "machine_workers"]
