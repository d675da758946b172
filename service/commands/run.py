"""``kstage run -c FILE [--drain]``: run the service (exit 0 clean, 1 crash, 2 bad config)."""

from __future__ import annotations

import argparse
import logging

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", default="kstage.yml", help="YAML config file")
    parser.add_argument("--drain", action="store_true",
                        help="exit 0 once every assigned partition is processed and "
                             "committed up to its high-water mark")


def run(args: argparse.Namespace) -> int:
    from service.commands.common import load_for_run
    from service.lifecycle import run as serve
    from service.logs import configure_logging

    warnings: list[str] = []
    settings = load_for_run(args.config, warnings)
    configure_logging(settings.service.log_level, settings.service.log_format)
    for warning in warnings:
        logger.warning("%s", warning)
    return serve(settings, drain=args.drain)
