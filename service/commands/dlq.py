"""``kstage dlq show|replay -c FILE [--topic T] [--since TIME] [--json] [--to-kafka]
[--from-topic NAME]``: show dead-lettered messages, or replay them once fixed."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from service.exits import EXIT_CRASH, EXIT_OK

if TYPE_CHECKING:
    from settings.models import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="dlq_command", required=True)
    for name, what in (("show", "list dead-lettered messages"),
                       ("replay", "reprocess dead-lettered messages through their processor "
                                  "and sink (or re-produce them with --to-kafka)")):
        cmd = sub.add_parser(name, help=what)
        cmd.add_argument("-c", "--config", default="kstage.yml")
        cmd.add_argument("--topic", default=None, help="only this topic")
        cmd.add_argument("--since", default=None,
                         help="only messages that failed at or after this ISO-8601 time")
        cmd.add_argument("--from-topic", default=None, metavar="NAME",
                         help="read the dead-letter topic NAME (failure.dead_letter_topic) "
                              "instead of the dead-letter files")
        if name == "show":
            cmd.add_argument("--json", action="store_true",
                             help="print each line's record as JSON (headers named like "
                                  "credentials masked)")
        if name == "replay":
            cmd.add_argument("--to-kafka", action="store_true",
                             help="re-produce to the original topic instead of processing")


def run(args: argparse.Namespace) -> int:
    from service.commands.common import operate

    def body(settings: Settings) -> int:
        from service.ops import dlq

        if args.dlq_command == "show":
            letters, unreadable = dlq.show(settings, args.topic, args.since, args.from_topic)
            print(dlq.render_json(letters) if args.json else dlq.render(letters, unreadable))
            return EXIT_OK
        result = dlq.replay(settings, args.topic, args.since, args.to_kafka, args.from_topic)
        print(dlq.render_replay(result, args.to_kafka))
        return EXIT_CRASH if result.failed or result.skipped else EXIT_OK

    return operate(args, body)
