"""``kstage validate -c FILE``: check the configuration and processors as ``run`` does at
start (exit 0 or 2; settings that can lose data are warned about)."""

from __future__ import annotations

import argparse
import sys

from service.exits import EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", default="kstage.yml")


def run(args: argparse.Namespace) -> int:
    from service.commands.common import load_for_run

    warnings: list[str] = []
    settings = load_for_run(args.config, warnings)
    for warning in warnings:  # valid, so exit 0, but said before the OK line
        print(f"kstage: warning: {warning}", file=sys.stderr)
    entries = [t for g in settings.groups for t in g.topics]
    patterns = sum(t.topic_pattern is not None for t in entries)
    counts = f"{len(entries) - patterns} topic(s)" + (f", {patterns} pattern(s)"
                                                       if patterns else "")
    print(f"{args.config}: OK ({len(settings.groups)} group(s), {counts})")
    return EXIT_OK
