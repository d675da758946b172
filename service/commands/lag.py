"""``kstage lag -c FILE [--json]``: committed offset, high-water mark and lag per
partition."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from service.exits import EXIT_OK

if TYPE_CHECKING:
    from settings.models import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", default="kstage.yml")
    parser.add_argument("--json", action="store_true", help="print a JSON list of partitions")


def run(args: argparse.Namespace) -> int:
    from service.commands.common import operate

    def body(settings: Settings) -> int:
        from service.ops.lag import lag, render_json, render_table

        rows = lag(settings)
        print(render_json(rows) if args.json else render_table(rows))
        return EXIT_OK

    return operate(args, body)
