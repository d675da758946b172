"""``kstage processors [-c FILE]``: list installed processors (and the topics using them);
``kstage processors new NAME [--dir DIR]``: scaffold a processor plugin package."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from service.exits import EXIT_CONFIG, EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config", default=None, help="also show the topics of FILE")
    sub = parser.add_subparsers(dest="processors_command", metavar="{new}")
    new = sub.add_parser("new", help="scaffold an installable processor plugin package")
    new.add_argument("name", help="processor and package name: lowercase, digits, underscores")
    new.add_argument("--dir", default=".", help="create the project in DIR/NAME (default: .)")


def run(args: argparse.Namespace) -> int:
    if args.processors_command == "new":
        return _new_plugin(args.name, args.dir)
    return _list(args.config)


def _list(path: str | None) -> int:
    from processors import registry
    from processors.errors import RegistryError
    from service.commands.common import load

    users: dict[str, list[str]] = {}
    if path:
        settings = load(path)
        for g in settings.groups:
            for t in g.topics:
                users.setdefault(t.processor, []).append(
                    f"{settings.group_id(g)}/{t.topic} ({t.format})")
    names = registry.available()
    for name, target in names.items():
        try:
            cls = registry.load(name)
            line = f"{name:<24} {'/'.join(cls.formats):<16} {cls.description or target}"
        except RegistryError as exc:
            line = f"{name:<24} BROKEN: {exc}"
        print(line)
        for use in users.get(name, []):
            print(f"{'':<24} topic {use}")
    missing = sorted(set(users) - set(names))
    for name in missing:
        print(f"{name:<24} NOT INSTALLED (used by {', '.join(users[name])})")
    return EXIT_CONFIG if missing else EXIT_OK


def _new_plugin(name: str, directory: str) -> int:
    from service.dev.scaffold import ScaffoldError, scaffold

    try:
        files = scaffold(name, directory)
    except ScaffoldError as exc:
        print(f"kstage: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    project = Path(directory) / name
    for path in files:
        print(f"created {path}")
    print(f"next: pip install -e {project} && (cd {project} && pytest) && kstage processors")
    return EXIT_OK
