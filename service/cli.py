"""The ``kstage`` command line: a thin layer that parses arguments and calls a command.

Commands::

    kstage run -c FILE [--drain]     run the service (exit 0 clean, 1 crash, 2 bad config)
    kstage validate -c FILE          check the configuration and processors (exit 0 or 2;
                                     settings that can lose data are warned about)
    kstage processors [-c FILE]      list installed processors (and the topics using them)
    kstage processors new NAME [--dir DIR]   scaffold a processor plugin package in DIR/NAME
    kstage schemas check -c FILE     can every Avro topic's reader read its writer schema
    kstage config from-wherehows|from-datahub FILE [-o OUT]   translate a config to kstage YAML
    kstage demo [--dir DIR]          the main job on the embedded broker, summarised
    kstage broker [--port N]         run the embedded Kafka-compatible broker in the foreground
    kstage lag -c FILE [--json]      committed offset, high-water mark and lag per partition
    kstage offsets reset -c FILE --group G --to earliest|latest|TIME|OFFSET [--dry-run]
    kstage dlq show|replay -c FILE [--topic T] [--since TIME] [--json] [--to-kafka]
                              [--from-topic NAME]
    kstage ctl status|pause|resume|restart -c FILE [--topic T]   a running process's topics
    kstage merge -c FILE [--table NAME]   fold the Spark staging tables into final tables
    kstage tables show|maintain -c FILE [--table NAME] [--json]   the Iceberg tables
    kstage tables migrate -c FILE    import an earlier version's Parquet warehouse
    kstage tables reset-offsets -c FILE --group G --topic T [--partition P] [--to N]
                              [--table NAME] [--yes]   move the offsets a staging table holds
    kstage jars fetch [--dir DIR]    the Spark session's jars, from Maven Central

Each command is a module of :mod:`service.commands` and a line of its table
(:data:`service.commands.COMMANDS`). This module imports only the command that runs, and
that command imports what its work needs: ``kstage --help`` loads neither the settings
nor the actors.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence

from service.commands import BY_NAME, COMMANDS
from service.exits import EXIT_CONFIG, EXIT_CRASH

_ABOUT = """\
kstage consumes Kafka topics and lands every event in staging tables (Spark and
Iceberg), JSONL files, JDBC tables or HTTP APIs. One worker per topic decodes each
message, maps it with the topic's processor and writes the rows to the topic's sinks;
an offset is committed only after the sinks durably accepted its rows, and a message
that cannot be processed is dead-lettered, never lost."""

_START = """\
Start with `kstage demo`, then `kstage validate -c kstage.yml` and
`kstage run -c kstage.yml`. `kstage COMMAND --help` says more about each command.
Exit codes: 0 done, 1 crashed or a check failed, 2 a configuration problem."""


def _epilog() -> str:
    """The commands, grouped by purpose, in their table's order."""
    lines = ["commands:"]
    group = None
    for command in COMMANDS:
        if command.group != group:
            group = command.group
            lines.append(f"  {group}")
        lines.append(f"    {command.name:<11} {command.summary}")
    return "\n".join(lines) + "\n\n" + _START


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``kstage`` argument parser; with ``only``, the options of that command alone
    (the others are listed but not imported). Tests check every command line the docs
    show against the whole parser."""
    top = argparse.ArgumentParser(
        prog="kstage", description=_ABOUT, epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND",
                             help="one of the commands below")
    for command in COMMANDS:
        # No help= here: kstage --help lists the commands once, grouped (the epilog).
        cmd = sub.add_parser(command.name, description=command.summary)
        if only is None or only == command.name:
            command.module().add_arguments(cmd)
    return top


def _command_named(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (its first word that is one), if any."""
    return next((word for word in argv if word in BY_NAME), None)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = parser(_command_named(words)).parse_args(words)
    try:
        return BY_NAME[args.command].module().run(args)
    except Exception as exc:
        code = _config_error(exc, getattr(args, "config", None))
        if code is None:
            raise
        return code


def _config_error(exc: Exception, where: str | None) -> int | None:
    """The exit code of a configuration or start-up error, said on stderr: one line per
    problem, each naming the file; None for any other exception."""
    from processors.errors import RegistryError
    from service.errors import BrokerError
    from settings.errors import ConfigValidationError, SettingsError

    if isinstance(exc, ConfigValidationError):
        print("\n".join(f"kstage: {exc.source}: {problem}" for problem in exc.problems),
              file=sys.stderr)
        return EXIT_CONFIG
    if isinstance(exc, SettingsError):
        print(f"kstage: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if isinstance(exc, RegistryError):  # processors named by the file: prefix each line
        lines = str(exc).splitlines() if where else [str(exc)]
        print("\n".join(f"kstage: {where}: {line}" if where else f"kstage: {line}"
                        for line in lines), file=sys.stderr)
        return EXIT_CONFIG
    if isinstance(exc, BrokerError):
        print(f"kstage: {exc}", file=sys.stderr)
        return EXIT_CRASH
    return None


def entry() -> None:
    """The ``kstage`` program: run the command, then exit with its code. Before the
    interpreter exits, the heap is frozen (:func:`gc.freeze`): its last collection would
    walk every object the imports and the settings models made (~20-80 ms of a 0.3 s
    ``kstage validate``) to free nothing that outlives the process. Atexit handlers, the
    flush of stdout and stderr and the freeing of what is not in a cycle still happen;
    ``kstage run`` froze its start-up heap already (:func:`service.lifecycle.tune_gc`)."""
    code = main()
    gc.freeze()
    sys.exit(code)
