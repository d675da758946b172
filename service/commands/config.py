"""``kstage config from-wherehows|from-datahub FILE [-o OUT]``: translate another
consumer's config to kstage YAML."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from service.exits import EXIT_CONFIG, EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="config_command", required=True)
    for source, what in (("wherehows", "a WhereHows Kafka consumer job (.job properties)"),
                         ("datahub", "a DataHub Actions pipeline (YAML, Kafka source)")):
        translate = sub.add_parser(f"from-{source}", help=f"translate {what}")
        translate.add_argument("file", help=what)
        translate.add_argument("-o", "--output", default=None, help="write to OUT, not stdout")


def run(args: argparse.Namespace) -> int:
    from service.dev.translate import TranslationError, translate_file

    output: str | None = args.output
    try:
        text = translate_file(args.config_command.removeprefix("from-"), args.file)
        if output is not None:
            Path(output).write_text(text, encoding="utf-8")
    except TranslationError as exc:
        print("\n".join(f"kstage: {line}" for line in str(exc).splitlines()), file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:
        print(f"kstage: {output}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CONFIG
    if output is None:
        sys.stdout.write(text)
    else:
        print(f"{output}: translated from {args.file}; check it with: kstage validate -c "
              f"{output}")
    return EXIT_OK
