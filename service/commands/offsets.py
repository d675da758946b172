"""``kstage offsets reset -c FILE --group G --to earliest|latest|TIME|OFFSET [--dry-run]``:
move a consumer group's committed offsets."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from service.exits import EXIT_OK

if TYPE_CHECKING:
    from settings.models import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="offsets_command", required=True)
    reset = sub.add_parser(
        "reset", help="move a group's committed offsets (refused while it has live members)")
    reset.add_argument("-c", "--config", default="kstage.yml")
    reset.add_argument("--group", required=True, help="consumer group of the config")
    reset.add_argument("--to", required=True,
                       help="earliest | latest | ISO-8601 time (UTC if no zone) | offset")
    reset.add_argument("--dry-run", action="store_true", help="report, commit nothing")


def run(args: argparse.Namespace) -> int:
    from service.commands.common import operate

    def body(settings: Settings) -> int:
        from service.ops.offsets import render, reset

        print(render(reset(settings, args.group, args.to, args.dry_run)))
        return EXIT_OK

    return operate(args, body)
