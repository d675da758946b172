"""The ``kstage`` command line: a thin layer that parses arguments and calls the service.

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
    kstage merge -c FILE [--table NAME]   fold the Spark staging tables into final tables
    kstage tables show|maintain -c FILE [--table NAME] [--json]   the Iceberg tables
    kstage tables migrate -c FILE    import an earlier version's Parquet warehouse
    kstage tables reset-offsets -c FILE --group G --topic T [--partition P] [--to N]
                              [--table NAME] [--yes]   move the offsets a staging table holds
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from processors import registry
from processors.errors import RegistryError
from service.broker import EmbeddedBroker
from service.errors import BrokerError
from service.lifecycle import EXIT_CONFIG, EXIT_CRASH, EXIT_OK
from service.logs import configure_logging
from settings.errors import ConfigValidationError, SettingsError
from settings.loader import load_settings
from settings.models import Settings
from settings.secrets import remember, secret_values

logger = logging.getLogger(__name__)

_ABOUT = """\
kstage consumes Kafka topics and lands every event in staging tables (Spark and
Iceberg), JSONL files, JDBC tables or HTTP APIs. One worker per topic decodes each
message, maps it with the topic's processor and writes the rows to the topic's sinks;
an offset is committed only after the sinks durably accepted its rows, and a message
that cannot be processed is dead-lettered, never lost."""

_COMMANDS = """\
commands:
  run the service
    run         consume the configured topics until stopped (--drain: until caught up)
    broker      run the embedded Kafka-compatible broker, for trying kstage out
    demo        run a sample job on the embedded broker and summarise what landed
  check a configuration
    validate    report every problem of a config file at once (file, line, key)
    processors  list the installed processors (new NAME: start a processor plugin)
    schemas     check that each Avro topic's reader can read its writer schema
    config      translate a WhereHows or DataHub consumer config into kstage's
  operate a deployment
    lag         committed offset, high-water mark and lag of each partition
    offsets     move a consumer group's committed offsets
    dlq         show dead-lettered messages, or replay them once fixed
    ctl         status, pause, resume or restart the topics of a running process
  tables (spark sinks)
    merge       fold the staging tables into their final tables
    tables      show, maintain, migrate the Iceberg tables, or reset their offsets
    jars        fetch the JVM jars the Spark session needs

Start with `kstage demo`, then `kstage validate -c kstage.yml` and
`kstage run -c kstage.yml`. `kstage COMMAND --help` says more about each command.
Exit codes: 0 done, 1 crashed or a check failed, 2 a configuration problem."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kstage", description=_ABOUT, epilog=_COMMANDS,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help="one of the commands below")
    run = sub.add_parser("run", help="run the service")
    run.add_argument("-c", "--config", default="kstage.yml", help="YAML config file")
    run.add_argument("--drain", action="store_true",
                     help="exit 0 once every assigned partition is processed and committed "
                          "up to its high-water mark")
    val = sub.add_parser("validate", help="validate a config file")
    val.add_argument("-c", "--config", default="kstage.yml")
    procs = sub.add_parser("processors", help="list installed processors")
    procs.add_argument("-c", "--config", default=None, help="also show the topics of FILE")
    procs_sub = procs.add_subparsers(dest="processors_command", metavar="{new}")
    new = procs_sub.add_parser("new", help="scaffold an installable processor plugin package")
    new.add_argument("name", help="processor and package name: lowercase, digits, underscores")
    new.add_argument("--dir", default=".", help="create the project in DIR/NAME (default: .)")
    demo = sub.add_parser("demo", help="run the main job on the embedded broker with "
                          "sample events and summarise what landed")
    demo.add_argument("--dir", default="demo-out", help="output directory")
    demo.add_argument("--events", type=int, default=500, help="events per topic")
    schemas = sub.add_parser("schemas", help="schema registry tools")
    schemas_sub = schemas.add_subparsers(dest="schemas_command", required=True)
    schemas_check = schemas_sub.add_parser(
        "check", help="check that every Avro topic's reader can read its writer schema")
    schemas_check.add_argument("-c", "--config", default="kstage.yml")
    config = sub.add_parser("config", help="translate other consumers' configs to kstage YAML")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    for source, what in (("wherehows", "a WhereHows Kafka consumer job (.job properties)"),
                         ("datahub", "a DataHub Actions pipeline (YAML, Kafka source)")):
        translate = config_sub.add_parser(f"from-{source}", help=f"translate {what}")
        translate.add_argument("file", help=what)
        translate.add_argument("-o", "--output", default=None, help="write to OUT, not stdout")
    _add_ops_parsers(sub)
    merge = sub.add_parser("merge", help="fold the Spark staging tables into their final "
                           "tables (replays and superseded rows dropped; idempotent)")
    merge.add_argument("-c", "--config", default="kstage.yml")
    merge.add_argument("--table", default=None, help="only this staging table")
    _add_tables_parsers(sub)
    jars = sub.add_parser("jars", help="the JVM jars of the Spark session (Iceberg, JDBC "
                          "drivers, kstage's commit fence)")
    jars_sub = jars.add_subparsers(dest="jars_command", required=True)
    fetch = jars_sub.add_parser("fetch", help="fetch the pinned jars from Maven Central "
                                "(with mvn when it is installed) into the jar directory, "
                                "and build kstage's commit fence there with mvn (Maven and a "
                                "JDK)")
    fetch.add_argument("--dir", default=None,
                       help="jar directory (default: $KSTAGE_JARS_DIR, else "
                            "~/.cache/kstage/jars)")
    fetch.add_argument("--repository", default=None, metavar="URL",
                       help="download from this Maven repository (Maven Central's layout) "
                            "instead of through mvn")
    broker = sub.add_parser("broker", help="run the embedded broker in the foreground")
    broker.add_argument("--port", type=int, default=9092)
    # Each command's one line says what it is for on its own help page; kstage --help
    # lists the commands once, grouped by purpose (_COMMANDS), not again in add order.
    for action in sub._choices_actions:
        command = sub.choices[action.dest]
        command.description = command.description or action.help
    sub._choices_actions.clear()
    return parser


def parser() -> argparse.ArgumentParser:
    """The ``kstage`` argument parser (tests check every command line the docs show)."""
    return _parser()


def _remembered(settings: Settings) -> Settings:
    """``settings``, whose secret values are masked from every log and dead-letter line of
    this process from now on (a command that runs against them loads them here)."""
    remember(secret_values(settings))
    return settings


def _load(path: str) -> Settings:
    return _remembered(load_settings(path))


def _load_for_run(path: str, warnings: list[str]) -> Settings:
    """Load ``path`` with every check ``run`` makes at start (processors built with their
    options, Kafka client keys, no Parquet tables of an earlier version in the
    warehouse...): ``validate`` and ``run`` refuse the same files."""
    from actors import preflight  # keep `processors` light
    from actors.sinks.spark import legacy

    return _remembered(load_settings(path, warnings=warnings, checks=[
        preflight.check, lambda settings: list(legacy.problems(settings, path))],
        name_checks=[preflight.check_names]))


def _load_checked(path: str) -> Settings:
    """Load ``path`` with the checks of ``run`` that hold for any command reading the
    same tables (processors built with their options, unknown names with their line),
    but not the refusal of an earlier version's Parquet tables, which ``kstage tables
    migrate`` is for: ``merge`` and ``tables`` name a bad file as ``validate`` does."""
    from actors import preflight  # keep `processors` light

    return _remembered(load_settings(path, checks=[preflight.check],
                                     name_checks=[preflight.check_names]))


def _validate(path: str) -> int:
    warnings: list[str] = []
    settings = _load_for_run(path, warnings)
    for warning in warnings:  # valid, so exit 0, but said before the OK line
        print(f"kstage: warning: {warning}", file=sys.stderr)
    topics = sum(len(g.topics) for g in settings.groups)
    print(f"{path}: OK ({len(settings.groups)} group(s), {topics} topic(s))")
    return EXIT_OK


def _processors(path: str | None) -> int:
    users: dict[str, list[str]] = {}
    if path:
        settings = _load(path)
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


def _schemas_check(path: str) -> int:
    import asyncio

    from service.ops.schemas import check

    settings = _load(path)
    results = asyncio.run(check(settings))
    if not results:
        print(f"{path}: no Avro topics (or no schema_registry) to check")
        return EXIT_OK
    for r in results:
        print(f"{'OK ' if r.ok else 'BAD'} {r.group}/{r.topic} [{r.subject}]: {r.detail}")
    return EXIT_OK if all(r.ok for r in results) else EXIT_CRASH


def _config(kind: str, path: str, output: str | None) -> int:
    from service.dev.translate import TranslationError, translate_file

    try:
        text = translate_file(kind, path)
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
        print(f"{output}: translated from {path}; check it with: kstage validate -c {output}")
    return EXIT_OK


_OPS_COMMANDS = ("lag", "offsets", "dlq", "ctl")


def _add_ops_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Subcommands of the ops tools (service.ops.lag, .offsets, .dlq)."""
    lag = sub.add_parser("lag", help="committed offset, high-water mark and lag per partition")
    lag.add_argument("-c", "--config", default="kstage.yml")
    lag.add_argument("--json", action="store_true", help="print a JSON list of partitions")
    offsets = sub.add_parser("offsets", help="consumer-group offset tools")
    offsets_sub = offsets.add_subparsers(dest="offsets_command", required=True)
    reset = offsets_sub.add_parser(
        "reset", help="move a group's committed offsets (refused while it has live members)")
    reset.add_argument("-c", "--config", default="kstage.yml")
    reset.add_argument("--group", required=True, help="consumer group of the config")
    reset.add_argument("--to", required=True,
                       help="earliest | latest | ISO-8601 time (UTC if no zone) | offset")
    reset.add_argument("--dry-run", action="store_true", help="report, commit nothing")
    ctl = sub.add_parser("ctl", help="the control API of a running kstage run "
                         "(service.control_token)")
    ctl_sub = ctl.add_subparsers(dest="ctl_command", required=True)
    for name, what in (("status", "every group, topic and partition with its state, "
                                  "offsets, lag and last error"),
                       ("pause", "pause a topic's partitions (membership kept)"),
                       ("resume", "resume a paused topic"),
                       ("restart", "restart a topic's worker (it commits first)")):
        cmd = ctl_sub.add_parser(name, help=what)
        cmd.add_argument("-c", "--config", default="kstage.yml")
        cmd.add_argument("--url", default=None,
                         help="the process's status server (default: the config's "
                              "service.http_host and http_port)")
        if name == "status":
            cmd.add_argument("--json", action="store_true", help="print the JSON answer")
        else:
            cmd.add_argument("--topic", required=True)
            cmd.add_argument("--group", default=None,
                             help="the group (needed when several groups consume the topic)")
    dlq = sub.add_parser("dlq", help="dead-letter tools")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", required=True)
    for name, what in (("show", "list dead-lettered messages"),
                       ("replay", "reprocess dead-lettered messages through their processor "
                                  "and sink (or re-produce them with --to-kafka)")):
        cmd = dlq_sub.add_parser(name, help=what)
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


def _ops(args: argparse.Namespace) -> int:
    from aiokafka.errors import KafkaError  # keep other commands light

    from service.ops.lag import OpsError

    settings = _load(args.config)
    configure_logging("WARNING", settings.service.log_format)
    try:
        if args.command == "lag":
            from service.ops.lag import lag, render_json, render_table

            rows = lag(settings)
            print(render_json(rows) if args.json else render_table(rows))
            return EXIT_OK
        if args.command == "offsets":
            from service.ops.offsets import render, reset

            print(render(reset(settings, args.group, args.to, args.dry_run)))
            return EXIT_OK
        if args.command == "ctl":
            from service.ops import ctl

            if args.ctl_command == "status":
                status = ctl.call(settings, "GET", "/status", args.url)
                print(json.dumps(status, indent=2) if args.json
                      else "\n".join(ctl.status_lines(status)))
                return EXIT_OK
            print(ctl.act(settings, args.ctl_command, args.topic, args.group, args.url))
            return EXIT_OK
        from service.ops import dlq

        if args.dlq_command == "show":
            letters, unreadable = dlq.show(settings, args.topic, args.since, args.from_topic)
            print(dlq.render_json(letters) if args.json else dlq.render(letters, unreadable))
            return EXIT_OK
        result = dlq.replay(settings, args.topic, args.since, args.to_kafka, args.from_topic)
        print(dlq.render_replay(result, args.to_kafka))
        return EXIT_CRASH if result.failed or result.skipped else EXIT_OK
    except (OpsError, KafkaError) as exc:
        print(f"kstage: {exc}", file=sys.stderr)
        return EXIT_CRASH


def _merge(path: str, table: str | None) -> int:
    import asyncio

    from actors.preflight import resolve_processors
    from actors.resources import Resources
    from actors.sinks.checks import missing_packages
    from actors.sinks.spark.merge import MergeError, merge

    # The merge runs on Spark: say what to install before reading the file (whose
    # checks would say it too, per sink, beside what a missing Spark implies).
    missing = missing_packages(["spark"])
    if missing:
        print(f"kstage merge: {'; '.join(missing)}", file=sys.stderr)
        return EXIT_CONFIG
    settings = _load_checked(path)
    configure_logging("WARNING", settings.service.log_format)

    async def go() -> list[str]:
        async with Resources(settings.spark) as resources:  # stops the SparkActor after
            processors = resolve_processors(settings)
            return [r.summary() for r in await merge(settings, processors, table,
                                                     actor=resources.spark())]

    try:
        lines = asyncio.run(go())
    except MergeError as exc:
        print(f"kstage: {exc}", file=sys.stderr)
        return EXIT_CRASH
    print("\n".join(lines) if lines else f"{path}: no spark sink tables to merge")
    return EXIT_OK


def _add_tables_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``kstage tables show|maintain|migrate`` (service.ops.tables)."""
    tables = sub.add_parser("tables", help="the Iceberg tables of the spark sinks (show, "
                            "maintain, migrate, reset-offsets)")
    tables_sub = tables.add_subparsers(dest="tables_command", required=True)
    show = tables_sub.add_parser("show", help="each staging table and its final table: "
                                 "snapshots, data files, rows, the Kafka offsets it holds")
    maintain = tables_sub.add_parser("maintain", help="compact small files, rewrite "
                                     "manifests, expire snapshots (keeping what offset "
                                     "recovery and the merge need), remove orphan files")
    migrate = tables_sub.add_parser("migrate", help="import the Parquet tables of an "
                                    "earlier kstage version into Iceberg (idempotent; the "
                                    "old directories are moved aside, never deleted)")
    reset = tables_sub.add_parser(
        "reset-offsets", help="record in a staging table a new Kafka offset for a group's "
        "partition (a topic re-created, a group moved to another cluster): a dry run "
        "unless --yes")
    reset.add_argument("--group", required=True, help="the consumer group id the table "
                       "records (kstage tables show lists them)")
    reset.add_argument("--topic", required=True)
    reset.add_argument("--partition", type=int, default=None,
                       help="only this partition (default: every one the table records)")
    reset.add_argument("--to", type=int, default=None, help="the new offset (default: the "
                       "partition's log start, read from the brokers)")
    reset.add_argument("--table", default=None, help="only this staging table (default: "
                       "every one of the configuration that records the group's topic)")
    reset.add_argument("--yes", action="store_true", help="record the reset (default: only "
                       "print what would change)")
    for cmd in (show, maintain, migrate, reset):
        cmd.add_argument("-c", "--config", default="kstage.yml")
    for cmd in (show, maintain):
        cmd.add_argument("--table", default=None,
                         help="only this staging table (and its final table)")
    show.add_argument("--json", action="store_true", help="print a JSON list of tables")


def _tables(args: argparse.Namespace) -> int:
    import asyncio

    from actors.preflight import resolve_processors
    from actors.resources import Resources
    from actors.sinks.checks import missing_packages
    from actors.sinks.spark import legacy
    from actors.sinks.spark.actor import short
    from actors.sinks.spark.maintenance import MaintenanceError, maintain
    from actors.sinks.spark.migrate import MigrationError, migrate
    from service.ops import tables

    command = args.tables_command
    missing = missing_packages(["spark"])
    if missing:
        print(f"kstage tables {command}: {'; '.join(missing)}", file=sys.stderr)
        return EXIT_CONFIG
    settings = _load_checked(args.config)
    configure_logging("WARNING", settings.service.log_format)
    if command == "reset-offsets":
        return _reset_offsets(args, settings)
    if command == "maintain":  # the old directories are not Iceberg's: migrate first
        found = [why for _, why in legacy.problems(settings, args.config)]
        if found:
            print(f"kstage: {args.config}: spark.warehouse: {found[0]}", file=sys.stderr)
            return EXIT_CONFIG

    async def go() -> int:
        async with Resources(settings.spark) as resources:  # stops the SparkActor after
            processors, actor = resolve_processors(settings), resources.spark()
            if command == "show":
                views = await tables.show(settings, processors, args.table, actor=actor)
                print(tables.render_json(views) if args.json else tables.render(views))
                return EXIT_OK
            if command == "maintain":
                results = await maintain(settings, processors,
                                         tables.kafka_committed(settings), args.table,
                                         actor=actor)
                for result in results:
                    print("\n".join(result.summary(settings.spark.maintenance)))
                return EXIT_CRASH if any(r.error for r in results) else EXIT_OK
            done = await migrate(settings, processors, actor=actor)
            print("\n".join(d.summary() for d in done) if done else
                  f"{args.config}: no tables of an earlier kstage version to migrate")
            return EXIT_OK

    try:
        return asyncio.run(go())
    except MigrationError as exc:
        print(f"kstage tables migrate: {exc}", file=sys.stderr)
        return EXIT_CRASH
    except SettingsError:
        raise
    except Exception as exc:  # noqa: BLE001 - Spark or catalog failure: one clear line
        said = str(exc) if isinstance(exc, MaintenanceError) else short(exc)
        print(f"kstage tables {command}: {said}", file=sys.stderr)
        return EXIT_CRASH


def _reset_offsets(args: argparse.Namespace, settings: Settings) -> int:
    """``kstage tables reset-offsets`` (service.ops.offset_reset): through pyiceberg on a
    ``jdbc`` catalog (no JVM), else through the Spark session."""
    import asyncio

    from actors.preflight import resolve_processors
    from actors.resources import Resources
    from actors.sinks.spark.actor import short
    from actors.sinks.spark.catalog import dotted
    from actors.sinks.spark.offset_resets import PyIcebergOffsets, SparkOffsets
    from service.ops.lag import OpsError
    from service.ops.offset_reset import apply_resets, plan_resets

    processors = resolve_processors(settings)

    async def go() -> int:
        async with Resources(settings.spark) as resources:
            lake = PyIcebergOffsets(settings.spark) if settings.spark.catalog.type == "jdbc" \
                else None
            tables = lake if lake is not None else SparkOffsets(resources.spark())
            try:
                changes = await plan_resets(
                    settings, processors, tables, group=args.group, topic=args.topic,
                    partition=args.partition, to=args.to, table=args.table)
                for change in changes:
                    print(change.line(settings))
                if all(change.kept for change in changes):
                    print("nothing to reset")
                    return EXIT_OK
                if not args.yes:
                    print("dry run: nothing changed; run again with --yes to record it")
                    return EXIT_OK
                for name, snapshot in (await apply_resets(tables, changes)).items():
                    print(f"{dotted(settings.spark, name)}: reset recorded in snapshot "
                          f"{snapshot}; restart kstage (its workers read the offsets at "
                          "assignment)")
                return EXIT_OK
            finally:
                if lake is not None:
                    lake.close()

    try:
        return asyncio.run(go())
    except OpsError as exc:
        print(f"kstage tables reset-offsets: {exc}", file=sys.stderr)
        return EXIT_CRASH
    except Exception as exc:  # noqa: BLE001 - a catalog or Spark failure: one clear line
        print(f"kstage tables reset-offsets: {short(exc)}", file=sys.stderr)
        return EXIT_CRASH


def _jars_fetch(directory: str | None, repository: str | None) -> int:
    from service.ops.jars import JarsError, fetch

    try:
        result = fetch(Path(directory) if directory else None, repository)
    except (JarsError, OSError) as exc:
        print(f"kstage jars fetch: {exc}", file=sys.stderr)
        return EXIT_CRASH
    print(result.summary())
    return EXIT_OK


def _broker(port: int) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with EmbeddedBroker(port=port) as broker:
        print(f"embedded broker listening on {broker.bootstrap}; Ctrl-C stops it", flush=True)
        stop.wait()
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "validate":
            return _validate(args.config)
        if args.command == "processors":
            if args.processors_command == "new":
                return _new_plugin(args.name, args.dir)
            return _processors(args.config)
        if args.command == "schemas":
            return _schemas_check(args.config)
        if args.command == "config":
            return _config(args.config_command.removeprefix("from-"), args.file, args.output)
        if args.command in _OPS_COMMANDS:
            return _ops(args)
        if args.command == "merge":
            return _merge(args.config, args.table)
        if args.command == "tables":
            return _tables(args)
        if args.command == "jars":
            return _jars_fetch(args.dir, args.repository)
        if args.command == "demo":
            from service.dev.demo import run_demo

            configure_logging("ERROR")
            return run_demo(Path(args.dir), args.events)
        if args.command == "broker":
            configure_logging()
            return _broker(args.port)
        warnings: list[str] = []
        settings = _load_for_run(args.config, warnings)
        configure_logging(settings.service.log_level, settings.service.log_format)
        for warning in warnings:
            logger.warning("%s", warning)
        from service.lifecycle import run

        return run(settings, drain=args.drain)
    except ConfigValidationError as exc:  # one line per problem, each naming the file
        print("\n".join(f"kstage: {exc.source}: {problem}" for problem in exc.problems),
              file=sys.stderr)
        return EXIT_CONFIG
    except SettingsError as exc:
        print(f"kstage: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except RegistryError as exc:  # processors named by the file: prefix every line with it
        where = getattr(args, "config", None)
        lines = str(exc).splitlines() if where else [str(exc)]
        print("\n".join(f"kstage: {where}: {line}" if where else f"kstage: {line}"
                        for line in lines), file=sys.stderr)
        return EXIT_CONFIG
    except BrokerError as exc:
        print(f"kstage: {exc}", file=sys.stderr)
        return EXIT_CRASH


def entry() -> None:
    sys.exit(main())
