"""The commands of ``kstage``: one module each, one line each in :data:`COMMANDS`.

A command ``foo`` is the module ``service.commands.foo`` (a :class:`CommandModule`: its
``add_arguments`` and ``run``) and one :class:`Command` line below, which places it in
``kstage --help``. The table imports no command module; :mod:`service.cli` imports the
one that runs. A command module imports what its work needs inside ``run``, so that
``kstage --help`` and every other command stay quick to start.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from typing import Protocol, cast


class CommandModule(Protocol):
    """What a command's module holds."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's options (and its subcommands) to its parser."""

    def run(self, args: argparse.Namespace) -> int:
        """Do the command; the process's exit code (:mod:`service.exits`)."""


@dataclass(frozen=True, slots=True)
class Command:
    """One line of ``kstage --help``.

    Attributes:
        name: the command (and its module's name in this package).
        group: the heading it is listed under.
        summary: what it does, in one line (also the first line of its own ``--help``).
    """

    name: str
    group: str
    summary: str

    def module(self) -> CommandModule:
        """The command's module, imported now."""
        return cast(CommandModule, importlib.import_module(f"{__name__}.{self.name}"))


_RUN, _CHECK, _OPERATE, _TABLES = ("run the service", "check a configuration",
                               "operate a deployment", "tables (spark sinks)")

COMMANDS = (
    Command("run", _RUN, "consume the configured topics until stopped (--drain: until caught up)"),
    Command("broker", _RUN, "run the embedded Kafka-compatible broker, for trying kstage out"),
    Command("demo", _RUN, "run a sample job on the embedded broker and summarise what landed"),
    Command("validate", _CHECK, "report every problem of a config file at once (file, line, key)"),
    Command("processors", _CHECK, "list the installed processors (new NAME: start a processor "
            "plugin)"),
    Command("schemas", _CHECK, "check that each Avro topic's reader can read its writer schema"),
    Command("config", _CHECK, "translate a WhereHows or DataHub consumer config into kstage's"),
    Command("lag", _OPERATE, "committed offset, high-water mark and lag of each partition"),
    Command("offsets", _OPERATE, "move a consumer group's committed offsets"),
    Command("dlq", _OPERATE, "show dead-lettered messages, or replay them once fixed"),
    Command("ctl", _OPERATE, "status, pause, resume or restart the topics of a running process"),
    Command("merge", _TABLES, "fold the staging tables into their final tables"),
    Command("tables", _TABLES, "show, maintain, migrate the Iceberg tables, or reset their "
            "offsets"),
    Command("jars", _TABLES, "fetch the JVM jars the Spark session needs"),
)
"""Every command, in the order ``kstage --help`` lists them (grouped by purpose)."""

BY_NAME = {command.name: command for command in COMMANDS}

__all__ = ["BY_NAME", "COMMANDS", "Command", "CommandModule"]
