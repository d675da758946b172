"""The CPU of one pyiceberg append as a table's snapshots grow: pyiceberg's own
``Table.append`` (the baseline) against kstage's transaction
(:mod:`actors.sinks.spark.pyiceberg_transaction`, table metadata computed once per state).

Usage::

    python bench/pyiceberg_commit.py [--snapshots N] [--rows R] [--keep]

One table in a SQLite catalog and a local warehouse (the catalog of ``spark.appends:
pyiceberg``), ``--snapshots`` appends (default 600) of ``--rows`` rows each (default
1 000: a flush of a quiet topic), alternately through each path, so both meet the same
snapshot counts. Per step of 100 snapshots it prints each path's median CPU milliseconds
per append (``time.process_time``: the append's work, not the disk's waits); the last
line is the baseline's median over kstage's in the last step::

    ratio=<baseline ms / kstage ms>

The table is read back at the end: every append's rows, once.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # not bench/: its http.py would
# shadow the standard library's

import pyarrow as pa  # noqa: E402

from actors.sinks.spark.pyiceberg_transaction import transaction  # noqa: E402

STEP = 100


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=600)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--keep", action="store_true", help="keep the warehouse")
    args = parser.parse_args()
    from pyiceberg.catalog.sql import SqlCatalog

    work = Path(tempfile.mkdtemp(prefix="bench-pyiceberg-"))
    try:
        catalog = SqlCatalog("bench", uri=f"sqlite:///{work}/catalog.db",
                             warehouse=f"file://{work}/warehouse")
        catalog.create_namespace("kstage")
        rows = pa.table({"id": pa.array(range(args.rows), pa.int64()),
                         "value": pa.array([f"event {i}" for i in range(args.rows)])})
        table = catalog.create_table(("kstage", "appends"), schema=rows.schema)
        times: dict[str, list[float]] = {"pyiceberg": [], "kstage": []}
        last: dict[str, float] = {}
        for n in range(1, args.snapshots + 1):
            path = "kstage" if n % 2 == 0 else "pyiceberg"
            started = time.process_time()
            if path == "kstage":
                with transaction(table) as appending:
                    appending.append(rows, snapshot_properties={"bench.n": str(n)})
            else:
                table.append(rows, snapshot_properties={"bench.n": str(n)})
            times[path].append((time.process_time() - started) * 1000)
            if n % STEP == 0:
                last = {p: statistics.median(t) for p, t in times.items()}
                print(f"snapshots {n - STEP + 1}-{n}: pyiceberg {last['pyiceberg']:.1f} ms, "
                      f"kstage {last['kstage']:.1f} ms per append (CPU, median)", flush=True)
                times = {p: [] for p in times}
        read = table.scan().to_arrow().num_rows
        if read != args.snapshots * args.rows:
            print(f"read back {read} rows, appended {args.snapshots * args.rows}: FAIL")
            return 1
        print(f"read back {read} rows: every append once")
        if not last:
            print("fewer snapshots than one step: no ratio")
            return 1
        print(f"ratio={last['pyiceberg'] / last['kstage']:.2f}")
        return 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
