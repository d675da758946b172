"""``kstage demo [--dir DIR]``: the main job on the embedded broker, summarised."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default="demo-out", help="output directory")
    parser.add_argument("--events", type=int, default=500, help="events per topic")


def run(args: argparse.Namespace) -> int:
    from service.dev.demo import run_demo
    from service.logs import configure_logging

    configure_logging("ERROR")
    return run_demo(Path(args.dir), args.events)
