"""How late the event loop runs while pyiceberg appends a backlog-sized append on another
thread (issue 35: can a big append starve the consumer's heartbeats?).

Usage::

    python bench/append_loop_lag.py [--rows N] [--appends K]

kstage's appends run on their own thread (pyiceberg's lake thread,
:mod:`actors.sinks.spark.pyiceberg_appends`), while aiokafka heartbeats from a task on
the event loop; only the GIL ties them. This appends K Arrow tables of N rows (default
14 000 rows of about 2.4 KB: 32 MiB, the defaults' ``flush_max_mb``, as a Gobblin
backlog's appends are cut) to a table of a fresh SQLite catalog on a one-thread
executor, while a probe on the loop sleeps 10 ms again and again and records how late it
wakes. Last line: ``loop lag p50 ... p99 ... max ... s``; compare the max with the
group's ``heartbeat_interval_ms`` and ``session_timeout_ms``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import tempfile
import time
from typing import Any

PROBE_S = 0.01


def rows(n: int, base: int) -> Any:
    """``n`` rows of about 2.4 KB of Arrow each (two 1.2 KB strings, two longs)."""
    import pyarrow as pa

    return pa.table({
        "_offset": pa.array(range(base, base + n), pa.int64()),
        "a": pa.array([f"x{i:07d}" * 150 for i in range(base, base + n)]),
        "b": pa.array([f"y{i:07d}" * 150 for i in range(base, base + n)]),
        "c": pa.array(range(n), pa.int64())})


async def measure(n: int, appends: int) -> list[float]:
    from pyiceberg.catalog.sql import SqlCatalog

    where = tempfile.mkdtemp(prefix="append-lag-")
    catalog = SqlCatalog("lag", uri=f"sqlite:///{where}/catalog.db",
                         warehouse=f"file://{where}/warehouse")
    catalog.create_namespace("ns")
    first = rows(n, 0)
    print(f"append size: {n} rows, {first.nbytes / 2**20:.1f} MiB of Arrow", flush=True)
    table = catalog.create_table("ns.t", schema=first.schema)
    lake = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lake")
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            started = loop.time()
            await asyncio.sleep(PROBE_S)
            lags.append(loop.time() - started - PROBE_S)

    def append(i: int) -> float:
        started = time.monotonic()
        table.append(rows(n, i * n))
        return time.monotonic() - started

    prober = asyncio.ensure_future(probe())
    for i in range(appends):
        took = await loop.run_in_executor(lake, append, i)
        print(f"append {i}: {took:.2f} s, loop lag so far max {max(lags, default=0):.3f} s",
              flush=True)
    done.set()
    await prober
    lake.shutdown()
    return sorted(lags)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=14_000)
    parser.add_argument("--appends", type=int, default=5)
    args = parser.parse_args(argv)
    lags = asyncio.run(measure(args.rows, args.appends))
    print(f"loop lag p50 {lags[len(lags) // 2]:.4f} p99 {lags[int(len(lags) * 0.99)]:.4f} "
          f"max {lags[-1]:.3f} s over {len(lags)} probes", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
