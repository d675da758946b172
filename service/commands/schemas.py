"""``kstage schemas check -c FILE``: can every Avro topic's reader read its writer schema."""

from __future__ import annotations

import argparse

from service.exits import EXIT_CRASH, EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="schemas_command", required=True)
    check = sub.add_parser(
        "check", help="check that every Avro topic's reader can read its writer schema")
    check.add_argument("-c", "--config", default="kstage.yml")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from service.commands.common import load
    from service.ops.schemas import check

    settings = load(args.config)
    results = asyncio.run(check(settings))
    if not results:
        print(f"{args.config}: no Avro topics (or no schema_registry) to check")
        return EXIT_OK
    for r in results:
        print(f"{'OK ' if r.ok else 'BAD'} {r.group}/{r.topic} [{r.subject}]: {r.detail}")
    return EXIT_OK if all(r.ok for r in results) else EXIT_CRASH
