"""The command line and the rounds every peer benchmark shares (spark_streaming.py,
kafka_connect.py, both.py): the options of a run, and the run of its rounds on one broker
(each round on topics and in a directory of its own; the directory kept on failure or
with ``--keep``)."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import _paths  # noqa: F401 - bench/ and the repository on sys.path (harness needs them)
from figures import Figures, line, load, medians, ratios, round_dir
from harness import apache_kafka
from picture import draw

Round = Callable[[str, Path, argparse.Namespace], Coroutine[Any, Any, list[Figures]]]


def options(parser: argparse.ArgumentParser, picture: str) -> None:
    """The options of every peer benchmark; ``picture``: where its picture goes by
    default."""
    parser.add_argument("--messages", type=int, default=200_000,
                        help="events of the throughput runs (default 200 000)")
    parser.add_argument("--fresh-s", type=float, default=30.0,
                        help="length of each freshness run, in s of events (default 30)")
    parser.add_argument("--warm-s", type=float, default=10.0,
                        help="s of events at the same rate before those, not counted "
                             "(default 10: a fresh JVM's warm-up)")
    parser.add_argument("--appends", choices=("spark", "pyiceberg"), default="spark",
                        help="what writes kstage's staging appends (spark.appends; "
                             "default spark)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs of each system, alternating; medians printed and the "
                             "last line from them (default 1)")
    parser.add_argument("--picture", type=Path, default=Path(picture),
                        help="where the picture of the freshness runs goes (SVG; default "
                             f"{picture})")
    parser.add_argument("--bootstrap", default=None,
                        help="an Apache Kafka broker already running, instead of a node "
                             "of the run's own (its CPU is then not measured)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (configs, logs, tables)")


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``argv`` parsed (``--rounds`` at least 1)."""
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    return args


def run_rounds(prefix: str, args: argparse.Namespace, one: Round) -> list[list[Figures]]:
    """``args.rounds`` rounds of ``one`` (each system's figures, kstage's first) on one
    broker, in a work directory named by ``prefix``."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        with apache_kafka(workdir, args.bootstrap) as bootstrap:
            rounds = [asyncio.run(one(bootstrap, round_dir(workdir, i), args))
                      for i in range(args.rounds)]
    except BaseException:
        print(f"configs, logs and tables kept in {workdir}", file=sys.stderr)
        raise
    if args.keep:
        print(f"configs, logs and tables kept in {workdir}", file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return rounds


def report(rounds: list[list[Figures]], args: argparse.Namespace, title: str,
           versions: str) -> None:
    """The picture of the last round's freshness runs (``title``), each system's medians
    when there were several rounds, ``versions`` and the machine's load, then the last
    line: kstage's ratios to each peer (from the medians)."""
    systems = [medians([r[i] for r in rounds]) for i in range(len(rounds[0]))]
    draw(rounds[-1], f"{title}: {args.fresh_s:g} s of events at half of each one's rate",
         args.picture)
    if args.rounds > 1:
        print(f"medians of {args.rounds} rounds:\n" + "\n".join(line(s) for s in systems))
    print(f"{versions}; {load()}")
    print(ratios(systems[0], systems[1:]))
