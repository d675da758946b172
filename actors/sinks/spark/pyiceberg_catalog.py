"""The catalog of ``spark.catalog`` opened with pyiceberg (``spark.appends: pyiceberg``),
without a JVM: for a ``jdbc`` one, what Iceberg's JDBC catalog in Spark's session does when
it opens the catalog, done the same way so either side can open what the other made (a
``rest`` one: :mod:`actors.sinks.spark.pyiceberg_rest`, which uses this module's fence).

* :func:`sqlalchemy_uri`, :func:`catalog_properties`: the same database (SQLite file or
  PostgreSQL) and warehouse as Spark's catalog, as pyiceberg's ``SqlCatalog`` takes them;
* :func:`open_catalog`: the warehouse directory and the SQLite file's directory made (as the
  Spark session does), the SQLite journal mode of the JDBC URI set (WAL by default), and the
  catalog's own tables (``iceberg_tables``, ``iceberg_namespace_properties``) created with
  the DDL of Iceberg's JDBC catalog, schema version V1 (:data:`CATALOG_TABLES`) when absent;
  a V0 catalog (no ``iceberg_type`` column) gets that column, as Spark's
  ``jdbc.schema-version: V1`` does;
* :func:`ensure_namespace`: the namespace with the properties ``CREATE NAMESPACE`` gives it
  in Spark (``exists``, ``owner``);
* the commit-time fence (:func:`~actors.sinks.spark.iceberg.fence_violations`): the catalog
  :func:`open_catalog` opens is a ``SqlCatalog`` whose ``_update_and_stage_table`` (called
  by ``commit_table`` with the table it just loaded, the very metadata whose location its
  compare-and-swap then requires) refuses a snapshot whose ``kstage.expect`` does not match
  the offsets that metadata records. pyiceberg's transaction calls ``commit_table`` again
  on each retry of a ``CommitFailedException`` (the table reloaded), so the check runs
  against every base a commit is tried on. The refusal (:func:`fence_error`) is a
  ``ValidationException``: pyiceberg neither retries it nor keeps the files it wrote.

pyiceberg and SQLAlchemy are imported only inside functions.
"""

from __future__ import annotations

import functools
import getpass
import logging
import os
import sqlite3
from importlib.util import find_spec
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from actors.sinks.spark import carried_offsets, catalog_connection, iceberg, offset_history
from actors.sinks.spark.catalog import catalog_uri, is_local, sqlite_file, warehouse_location
from settings.models import SparkSettings

logger = logging.getLogger(__name__)

SQLITE_TIMEOUT_S = 30.0
"""How long a commit waits for another writer of a SQLite catalog (its URI's
``busy_timeout``, in ms, when it has one)."""

CATALOG_TABLES = {
    "iceberg_tables": (
        "CREATE TABLE iceberg_tables(catalog_name VARCHAR(255) NOT NULL,table_namespace "
        "VARCHAR(255) NOT NULL,table_name VARCHAR(255) NOT NULL,metadata_location "
        "VARCHAR(1000),previous_metadata_location VARCHAR(1000), iceberg_type VARCHAR(5),"
        "PRIMARY KEY (catalog_name, table_namespace, table_name))"),
    "iceberg_namespace_properties": (
        "CREATE TABLE iceberg_namespace_properties(catalog_name VARCHAR(255) NOT NULL,"
        "namespace VARCHAR(255) NOT NULL,property_key VARCHAR(255),property_value "
        "VARCHAR(1000),PRIMARY KEY (catalog_name, namespace, property_key))"),
}
"""The catalog's tables as Iceberg's JDBC catalog (schema version V1) creates them."""


def sqlalchemy_uri(settings: SparkSettings) -> str:
    """The jdbc catalog's URI as SQLAlchemy's: ``sqlite:///PATH?timeout=S`` (the JDBC
    URI's ``busy_timeout``), ``postgresql+psycopg2://USER:PASSWORD@HOST[:PORT]/DB?...``
    with the libpq parameters of the JDBC ones (TLS included:
    :mod:`~actors.sinks.spark.catalog_connection`); raises ValueError for a setting libpq
    cannot honour as the JDBC driver does."""
    database = sqlite_file(settings)
    uri = catalog_uri(settings)
    if database is not None:
        query = parse_qs(uri.partition("?")[2])
        timeout = SQLITE_TIMEOUT_S
        if query.get("busy_timeout"):
            timeout = int(query["busy_timeout"][0]) / 1000
        return f"sqlite:///{database}?timeout={timeout:g}"
    if not uri.startswith("jdbc:postgresql:"):
        raise ValueError(f"appends: pyiceberg: no SQLAlchemy URL for the catalog {uri!r}")
    # Every connection parameter of Spark's catalog, with the same meaning for libpq, or
    # a ValueError naming what cannot be (catalog_connection; validate refuses it too).
    user, password = catalog_connection.login(settings)
    libpq = catalog_connection.libpq_arguments(settings)
    parts = urlsplit(uri.partition("?")[0].removeprefix("jdbc:"))
    login = ""
    if user:
        login = f"{quote(user, safe='')}:{quote(password or '', safe='')}@"
    elif password is not None:  # the login name's default user, as the JDBC driver
        libpq["password"] = password
    return f"postgresql+psycopg2://{login}{parts.netloc}{parts.path}?{urlencode(libpq)}"


def catalog_properties(settings: SparkSettings) -> dict[str, str]:
    """pyiceberg's ``SqlCatalog`` properties of ``spark.catalog`` (secrets included:
    never logged)."""
    props = {"uri": sqlalchemy_uri(settings), "warehouse": warehouse_location(settings),
             # The catalog's tables are made by open_catalog with the JDBC catalog's DDL.
             "init_catalog_tables": "false",
             # A V0 catalog gets the iceberg_type column, as Spark's jdbc.schema-version V1.
             "schema_version": "v1",
             # A pooled connection the server closed (a restart) is replaced, not failed.
             "pool_pre_ping": "true"}
    return props | s3_properties(settings)


def s3_properties(settings: SparkSettings) -> dict[str, str]:
    """pyiceberg's S3 file IO properties of ``spark.catalog.s3`` (secrets included: never
    logged; none without it), for its SQL and REST catalogs alike."""
    s3 = settings.catalog.s3
    if s3 is None:
        return {}
    props = {"s3.region": s3.region,
             "s3.force-virtual-addressing": str(not s3.path_style_access).lower()}
    if s3.endpoint is not None:
        props["s3.endpoint"] = s3.endpoint
    if s3.access_key_id is not None and s3.secret_access_key is not None:
        props["s3.access-key-id"] = s3.access_key_id.get_secret_value()
        props["s3.secret-access-key"] = s3.secret_access_key.get_secret_value()
    return props


def missing_modules(settings: SparkSettings) -> list[str]:
    """The packages ``appends: pyiceberg`` needs with this catalog that are not
    installed (pyiceberg, pyiceberg-core for the ``days()`` transform; for a jdbc catalog
    SQLAlchemy, and psycopg2 for a PostgreSQL one)."""
    needed = {"pyiceberg": "pyiceberg", "pyiceberg_core": "pyiceberg-core"}
    if settings.catalog.type == "jdbc":
        needed["sqlalchemy"] = "SQLAlchemy"
        if sqlite_file(settings) is None:
            needed["psycopg2"] = "psycopg2-binary"
    return [package for module, package in needed.items() if find_spec(module) is None]


def owner() -> str:
    """The user Spark names as a table's and a namespace's ``owner`` (``SPARK_USER``, else
    Hadoop's ``HADOOP_USER_NAME``, else the login name)."""
    return (os.environ.get("SPARK_USER") or os.environ.get("HADOOP_USER_NAME")
            or getpass.getuser())


def _prepare_place(settings: SparkSettings) -> None:
    """The directories the Spark session makes (a local warehouse, the SQLite file's), and
    the SQLite journal mode of the JDBC URI (sqlite-jdbc sets it on every connection; WAL
    stays set in the file)."""
    if is_local(settings):
        Path(warehouse_location(settings)).mkdir(parents=True, exist_ok=True)
    database = sqlite_file(settings)
    if database is None:
        return
    database.parent.mkdir(parents=True, exist_ok=True)
    mode = parse_qs(catalog_uri(settings).partition("?")[2]).get("journal_mode")
    if not mode:
        return
    with sqlite3.connect(database, timeout=SQLITE_TIMEOUT_S) as db:
        found = str(db.execute("PRAGMA journal_mode").fetchone()[0])
        if found.lower() != mode[0].lower():
            db.execute(f"PRAGMA journal_mode={mode[0]}")
    db.close()


def _create_catalog_tables(engine: Any) -> None:
    """The catalog's tables (:data:`CATALOG_TABLES`) that do not exist yet; one another
    process made meanwhile is taken as made."""
    from sqlalchemy import inspect, text
    from sqlalchemy.exc import DBAPIError

    def absent() -> list[str]:
        with engine.connect() as conn:
            found = {name.lower() for name in inspect(conn).get_table_names()}
        return [name for name in CATALOG_TABLES if name not in found]

    for name in absent():
        try:
            with engine.begin() as conn:
                conn.execute(text(CATALOG_TABLES[name]))
            logger.info("pyiceberg: catalog table %s created", name)
        except DBAPIError:
            if name in absent():
                raise


@functools.lru_cache(maxsize=8192)
def _parsed(value: str) -> tuple[tuple[tuple[str, str, int], int], ...]:
    """``kstage.offsets`` (or ``kstage.offsets-reset``) parsed once per value (a
    snapshot's summary never changes)."""
    return tuple(iceberg.parse_offsets(value).items())


def recorded_offsets(metadata: Any) -> dict[tuple[str, str, int], int]:
    """Per stream, the offset the table records in pyiceberg table ``metadata`` (the
    fence's "recorded" offsets): over the snapshots of the main branch's ancestry, the
    highest ``kstage.offsets`` value from the stream's newest reset on
    (:func:`~actors.sinks.spark.offset_history.fold_parsed`, the rule of every reader)."""
    main = metadata.refs.get("main")
    current = main.snapshot_id if main is not None else metadata.current_snapshot_id
    by_id = {snapshot.snapshot_id: snapshot for snapshot in metadata.snapshots}
    chain: list[tuple[dict[tuple[str, str, int], int], dict[tuple[str, str, int], int]]] = []
    seen: set[int] = set()
    while current is not None and current in by_id and current not in seen:
        seen.add(current)
        snapshot = by_id[current]
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        offsets, reset = summary.get(iceberg.OFFSETS), summary.get(offset_history.RESET)
        chain.append((dict(_parsed(str(reset))) if reset is not None else {},
                      dict(_parsed(str(offsets))) if offsets is not None else {}))
        current = snapshot.parent_snapshot_id
    return offset_history.fold_parsed(reversed(chain))


def expected_offsets(updates: Any) -> dict[tuple[str, str, int], int]:
    """The ``kstage.expect`` of the snapshots a commit's ``updates`` add (empty: none
    carries one, nothing to check)."""
    from pyiceberg.table.update import AddSnapshotUpdate

    expected: dict[tuple[str, str, int], int] = {}
    for update in updates:
        if isinstance(update, AddSnapshotUpdate) and update.snapshot.summary is not None:
            value = update.snapshot.summary.additional_properties.get(iceberg.EXPECT)
            if value is not None:
                expected.update(iceberg.parse_offsets(str(value)))
    return expected


@functools.cache
def _fence_error_class() -> type[Exception]:
    from pyiceberg.exceptions import ValidationException  # only with appends: pyiceberg

    class FenceRefused(ValidationException):
        """The commit-time fence refused the commit (see the module docstring)."""

    return FenceRefused


def fence_error(message: str) -> Exception:
    """The refusal of a commit by the fence: a pyiceberg ``ValidationException`` (not
    retried, its files deleted) with ``message``."""
    return _fence_error_class()(message)


@functools.cache
def _fenced_catalog_class() -> type[Any]:
    from pyiceberg.catalog.sql import SqlCatalog  # only with appends: pyiceberg

    class FencedSqlCatalog(SqlCatalog):
        """``SqlCatalog`` whose commits obey ``kstage.expect`` (the module docstring)."""

        def _update_and_stage_table(self, current_table: Any, table_identifier: Any,
                                    requirements: Any, updates: Any) -> Any:
            expected = expected_offsets(updates)
            if expected and current_table is not None:
                violations = iceberg.fence_violations(
                    expected, recorded_offsets(current_table.metadata))
                if violations:
                    name = ".".join((self.name, *table_identifier)) \
                        if isinstance(table_identifier, tuple) else str(table_identifier)
                    raise fence_error(iceberg.fence_message(name, violations))
            # the offsets carried forward from this very base (a retry's base moved)
            updates = carried_offsets.onto(
                None if current_table is None else current_table.metadata, tuple(updates))
            return super()._update_and_stage_table(current_table, table_identifier,
                                                   requirements, updates)

    return FencedSqlCatalog


def open_catalog(settings: SparkSettings) -> Any:
    """pyiceberg's ``SqlCatalog`` of a ``jdbc`` ``spark.catalog`` with the commit-time
    fence, its place prepared and its tables created when absent (see the module
    docstring); raises what the database raised (the caller's call fails and is retried).
    A ``rest`` catalog is :func:`~actors.sinks.spark.pyiceberg_rest.open_rest_catalog`'s
    (the caller picks: :class:`actors.sinks.spark.pyiceberg_appends.Lake`)."""
    _prepare_place(settings)
    catalog = _fenced_catalog_class()(settings.catalog.name, **catalog_properties(settings))
    try:
        _create_catalog_tables(catalog.engine)
    except BaseException:
        catalog.engine.dispose()
        raise
    return catalog


def ensure_namespace(catalog: Any, name: str) -> None:
    """The namespace ``name``, created with Spark's properties when absent (another
    process creating it meanwhile is fine: whatever its creation raised, pyiceberg's
    ``NamespaceAlreadyExistsError`` or a SQL catalog's unique key, the namespace then
    exists)."""
    if catalog.namespace_exists(name):
        return
    try:
        catalog.create_namespace(name, {"exists": "true", "owner": owner()})
    except Exception:
        if not catalog.namespace_exists(name):
            raise


__all__ = ["CATALOG_TABLES", "SQLITE_TIMEOUT_S", "catalog_properties", "ensure_namespace",
           "expected_offsets", "fence_error", "missing_modules", "open_catalog", "owner",
           "recorded_offsets", "s3_properties", "sqlalchemy_uri"]
