"""What several commands share: loading the configuration with the checks each command
makes, and the error handling of the commands that talk to a running deployment."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from service.exits import EXIT_CRASH

if TYPE_CHECKING:
    from settings.models import Settings


def remembered(settings: Settings) -> Settings:
    """``settings``, whose secret values are masked from every log and dead-letter line of
    this process from now on (a command that runs against them loads them here)."""
    from settings.secrets import remember, secret_values

    remember(secret_values(settings))
    return settings


def load(path: str) -> Settings:
    """``path`` parsed and validated (settings only: no processor is built)."""
    from settings.loader import load_settings

    return remembered(load_settings(path))


def load_for_run(path: str, warnings: list[str]) -> Settings:
    """Load ``path`` with every check ``run`` makes at start (processors built with their
    options, Kafka client keys, no Parquet tables of an earlier version in the
    warehouse, a schema_rows table's partition_by against its latest writer schema...):
    ``validate`` and ``run`` refuse the same files."""
    from actors import preflight
    from settings.loader import load_settings

    return remembered(load_settings(path, warnings=warnings, checks=[
        preflight.check, lambda settings: _spark_problems(settings, path, warnings)],
        name_checks=[preflight.check_names]))


def _spark_problems(settings: Settings, path: str, warnings: list[str]
                    ) -> list[tuple[tuple[str | int, ...], str]]:
    """What ``run`` refuses of the spark sinks' tables (an earlier version's Parquet
    warehouse, a partition spec the latest writer schema does not take); the spark sink's
    and the table jobs' code is loaded only for a configuration with spark sinks."""
    if not settings.uses_sink("spark"):
        return []
    from actors.sinks.spark import layout_check
    from actors.tables import legacy_problems

    return [*legacy_problems(settings, path), *layout_check.problems(settings, warnings, path)]


def load_checked(path: str) -> Settings:
    """Load ``path`` with the checks of ``run`` that hold for any command reading the
    same tables (processors built with their options, unknown names with their line),
    but not the refusal of an earlier version's Parquet tables, which ``kstage tables
    migrate`` is for: ``merge`` and ``tables`` name a bad file as ``validate`` does."""
    from actors import preflight
    from settings.loader import load_settings

    return remembered(load_settings(path, checks=[preflight.check],
                                    name_checks=[preflight.check_names]))


def operate(args: argparse.Namespace, body: Callable[[Settings], int]) -> int:
    """Run ``body`` against the deployment of ``args.config`` (lag, offsets, dlq, ctl): an
    operator's error or a Kafka error is one line on stderr and exit 1."""
    from aiokafka.errors import KafkaError

    from service.logs import configure_logging
    from service.ops.lag import OpsError

    settings = load(args.config)
    configure_logging("WARNING", settings.service.log_format)
    try:
        return body(settings)
    except (OpsError, KafkaError) as exc:
        print(f"kstage: {exc}", file=sys.stderr)
        return EXIT_CRASH


def missing_spark(command: str) -> bool:
    """Whether Spark is not installed, said on stderr for ``kstage COMMAND`` (the table
    commands run on Spark: say what to install before reading the file, whose checks
    would say it too, per sink)."""
    from actors.sinks.checks import missing_packages

    missing = missing_packages(["spark"])
    if missing:
        print(f"kstage {command}: {'; '.join(missing)}", file=sys.stderr)
    return bool(missing)


__all__ = ["load", "load_checked", "load_for_run", "missing_spark", "operate", "remembered"]
