"""``kstage tables show|maintain|migrate|reset-offsets -c FILE``: the Iceberg tables of
the spark sinks (service.ops.tables, actors.sinks.spark): show them, maintain them, import
an earlier version's Parquet warehouse, or move the Kafka offsets a staging table holds."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from service.exits import EXIT_CONFIG, EXIT_CRASH, EXIT_OK

if TYPE_CHECKING:
    from settings.models import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    tables_sub = parser.add_subparsers(dest="tables_command", required=True)
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


def run(args: argparse.Namespace) -> int:
    import asyncio

    from actors.preflight import resolve_processors
    from actors.resources import Resources
    from actors.sinks.spark.actor import short
    from actors.tables import (
        MaintenanceError,
        MigrationError,
        legacy_problems,
        maintain,
        migrate_tables,
    )
    from service.commands.common import load_checked, missing_spark
    from service.logs import configure_logging
    from service.ops import tables
    from settings.errors import SettingsError

    command = args.tables_command
    if missing_spark(f"tables {command}"):
        return EXIT_CONFIG
    settings = load_checked(args.config)
    configure_logging("WARNING", settings.service.log_format)
    if command == "reset-offsets":
        return _reset_offsets(args, settings)
    if command == "maintain":  # the old directories are not Iceberg's: migrate first
        found = [why for _, why in legacy_problems(settings, args.config)]
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
            done = await migrate_tables(settings, processors, actor=actor)
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
    """``kstage tables reset-offsets`` (service.ops.offset_reset): through pyiceberg (no
    JVM) on a ``jdbc`` or ``rest`` catalog, through the Spark session when the catalog is
    a Java class (``catalog-impl`` in ``spark.catalog.properties``)."""
    import asyncio

    from actors.preflight import resolve_processors
    from actors.resources import Resources
    from actors.sinks.spark.actor import short
    from actors.sinks.spark.catalog import dotted
    from actors.tables import PyIcebergOffsets, SparkOffsets
    from service.ops.lag import OpsError
    from service.ops.offset_reset import apply_resets, plan_resets

    processors = resolve_processors(settings)

    async def go() -> int:
        async with Resources(settings.spark) as resources:
            lake = None if "catalog-impl" in settings.spark.catalog.properties \
                else PyIcebergOffsets(settings.spark)
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
