"""``kstage merge -c FILE [--table NAME]``: fold the Spark staging tables into final
tables (replays and superseded rows dropped; idempotent)."""

from __future__ import annotations

import argparse
import sys

from service.exits import EXIT_CONFIG, EXIT_CRASH, EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", default="kstage.yml")
    parser.add_argument("--table", default=None, help="only this staging table")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from actors.preflight import resolve_processors
    from actors.resources import Resources
    from actors.tables import MergeError, merge_tables
    from service.commands.common import load_checked, missing_spark
    from service.logs import configure_logging

    if missing_spark("merge"):
        return EXIT_CONFIG
    settings = load_checked(args.config)
    configure_logging("WARNING", settings.service.log_format)

    async def go() -> list[str]:
        async with Resources(settings.spark) as resources:  # stops the SparkActor after
            processors = resolve_processors(settings)
            return [r.summary() for r in await merge_tables(
                settings, processors, args.table, actor=resources.spark())]

    try:
        lines = asyncio.run(go())
    except MergeError as exc:
        print(f"kstage: {exc}", file=sys.stderr)
        return EXIT_CRASH
    print("\n".join(lines) if lines else f"{args.config}: no spark sink tables to merge")
    return EXIT_OK
