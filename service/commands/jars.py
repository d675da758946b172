"""``kstage jars fetch [--dir DIR] [--repository URL]``: the JVM jars of the Spark session
(Iceberg, JDBC drivers, kstage's commit fence)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from service.exits import EXIT_CRASH, EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="jars_command", required=True)
    fetch = sub.add_parser("fetch", help="fetch the pinned jars from Maven Central (with mvn "
                           "when it is installed) into the jar directory, and build kstage's "
                           "commit fence there with mvn (Maven and a JDK)")
    fetch.add_argument("--dir", default=None,
                       help="jar directory (default: $KSTAGE_JARS_DIR, else "
                            "~/.cache/kstage/jars)")
    fetch.add_argument("--repository", default=None, metavar="URL",
                       help="download from this Maven repository (Maven Central's layout) "
                            "instead of through mvn")


def run(args: argparse.Namespace) -> int:
    from service.ops.jars import JarsError, fetch

    try:
        result = fetch(Path(args.dir) if args.dir else None, args.repository)
    except (JarsError, OSError) as exc:
        print(f"kstage jars fetch: {exc}", file=sys.stderr)
        return EXIT_CRASH
    print(result.summary())
    return EXIT_OK
