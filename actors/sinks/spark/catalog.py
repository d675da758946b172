"""The Apache Iceberg catalog of the staging and final tables, as Spark configuration.

``spark.catalog`` (:class:`~settings.models.CatalogSettings`) names one Iceberg catalog;
kstage registers it in its SparkSession as a ``SparkCatalog`` (the default catalog of the
session, its namespace the default namespace, so ``spark.table("stg_x")`` finds a staging
table), with Iceberg's SQL extensions (``MERGE INTO`` and the maintenance procedures):

* ``jdbc`` (the default): Iceberg's JDBC catalog, which commits a table by a
  compare-and-swap of its metadata location in one row: safe for several writer
  processes. The embedded default is a SQLite file beside a local warehouse
  (``<warehouse>/catalog.db``, in WAL mode with a busy timeout, so several processes on
  one host wait for each other's commits instead of failing); PostgreSQL for several
  hosts (``jdbc:postgresql://HOST/DB``, with ``user`` and ``password``).
* ``rest``: an Iceberg REST catalog server at ``uri``.

The catalog is wrapped in kstage's commit fence (:data:`~actors.sinks.spark.jars.FENCE_CATALOG`,
the jar of ``fence/``, Iceberg's ``catalog-impl`` with the wrapped catalog's type in
``kstage.delegate-type``): a staging append whose snapshot carries ``kstage.expect`` commits
only if the table's recorded offsets, in the metadata the commit is applied on, are the
expected ones (docs/spark.md, "Commit-time fencing").

An ``s3://`` warehouse is written through Iceberg's ``S3FileIO`` (the AWS bundle jar),
with ``spark.catalog.s3``'s endpoint, region, path-style addressing and credentials.
Nothing here imports pyspark.
"""

from __future__ import annotations

from pathlib import Path

from actors.sinks.spark.jars import FENCE_CATALOG
from settings.models import WAREHOUSE_SCHEMES, SparkSettings

EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
DELEGATE_TYPE = "kstage.delegate-type"  # FencingCatalog.DELEGATE_TYPE: the wrapped catalog
DELEGATE_IMPL = "kstage.delegate-impl"  # FencingCatalog.DELEGATE_IMPL: or its class
RETRYABLE_STATES_KEY = "retryable_status_codes"  # Iceberg's JdbcUtil.RETRYABLE_STATUS_CODES
RETRYABLE_STATES = "57P01,57P02,57P03"
SQLITE_OPTIONS = "journal_mode=WAL&busy_timeout=30000"
"""Appended to a SQLite catalog URI without options: WAL lets readers go on during a
commit, and a commit waits up to 30 s for another process's instead of failing."""


def warehouse_location(settings: SparkSettings) -> str:
    """The tables' warehouse: an absolute local path, or the ``s3://`` URI as given."""
    warehouse = settings.table_warehouse
    if warehouse.startswith(WAREHOUSE_SCHEMES):
        return warehouse
    return str(Path(warehouse).expanduser().resolve())


def is_local(settings: SparkSettings) -> bool:
    """Whether the warehouse is a local (or mounted) directory."""
    return not settings.table_warehouse.startswith(WAREHOUSE_SCHEMES)


def catalog_uri(settings: SparkSettings) -> str:
    """The catalog's URI (default: a SQLite file beside a local warehouse); a SQLite URI
    without options gets :data:`SQLITE_OPTIONS`."""
    catalog = settings.catalog
    uri = catalog.uri
    if uri is None:
        uri = f"jdbc:sqlite:{Path(warehouse_location(settings)) / 'catalog.db'}"
    if uri.startswith("jdbc:sqlite:") and "?" not in uri:
        uri = f"{uri}?{SQLITE_OPTIONS}"
    return uri


def sqlite_file(settings: SparkSettings) -> Path | None:
    """The SQLite catalog's database file (None for another catalog)."""
    uri = catalog_uri(settings)
    if settings.catalog.type != "jdbc" or not uri.startswith("jdbc:sqlite:"):
        return None
    path = uri[len("jdbc:sqlite:"):].split("?", 1)[0].removeprefix("file:")
    return Path(path)


def catalog_conf(settings: SparkSettings) -> dict[str, str]:
    """The Spark configuration that registers the catalog (secrets included: it goes to
    the JVM only, never to a log line)."""
    catalog = settings.catalog
    prefix = f"spark.sql.catalog.{catalog.name}"
    conf = {
        "spark.sql.extensions": EXTENSIONS,
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        # The fence wraps the catalog of spark.catalog.type (Iceberg refuses a catalog
        # with both `type` and `catalog-impl`).
        f"{prefix}.catalog-impl": FENCE_CATALOG,
        f"{prefix}.{DELEGATE_TYPE}": catalog.type,
        f"{prefix}.uri": catalog_uri(settings),
        f"{prefix}.warehouse": warehouse_location(settings),
        f"{prefix}.default-namespace": catalog.namespace,
        # Every statement loads the table's current metadata: commits of other processes
        # (appends, merges, maintenance) are seen at once, and the offsets a worker
        # resumes from are never read from a stale copy.
        f"{prefix}.cache-enabled": "false",
        "spark.sql.defaultCatalog": catalog.name,
    }
    if catalog.type == "jdbc":
        # The catalog's current table layout (views too); Spark asks for views when it
        # looks a table up, which the older layout refuses.
        conf[f"{prefix}.jdbc.schema-version"] = "V1"
    if catalog.type == "jdbc" and conf[f"{prefix}.uri"].startswith("jdbc:postgresql:"):
        # A pooled connection that PostgreSQL ended (a restart: 57P01 admin shutdown,
        # 57P02 crash shutdown, 57P03 still starting) is reconnected and the statement run
        # again, as Iceberg does for its own connection SQLSTATEs (08xxx); otherwise every
        # connection of the pool fails one catalog call after each server restart.
        conf[f"{prefix}.{RETRYABLE_STATES_KEY}"] = RETRYABLE_STATES
    if catalog.user is not None:
        conf[f"{prefix}.jdbc.user"] = catalog.user
    if catalog.password is not None:
        conf[f"{prefix}.jdbc.password"] = catalog.password.get_secret_value()
    s3 = catalog.s3
    if s3 is not None:
        conf[f"{prefix}.io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
        conf[f"{prefix}.client.region"] = s3.region
        conf[f"{prefix}.s3.path-style-access"] = str(s3.path_style_access).lower()
        if s3.endpoint is not None:
            conf[f"{prefix}.s3.endpoint"] = s3.endpoint
        if s3.access_key_id is not None and s3.secret_access_key is not None:
            conf[f"{prefix}.s3.access-key-id"] = s3.access_key_id.get_secret_value()
            conf[f"{prefix}.s3.secret-access-key"] = s3.secret_access_key.get_secret_value()
    oauth2 = catalog.oauth2
    if oauth2 is not None:
        # Iceberg's REST client gets a token with the client credentials, refreshes it
        # before it expires with a new client-credentials grant (no RFC 8693 token
        # exchange: most identity providers have none), and kstage builds the catalog
        # anew after a 401/419 (actors/sinks/spark/catalog_auth.py).
        conf[f"{prefix}.credential"] = (
            f"{oauth2.client_id}:{oauth2.client_secret.get_secret_value()}")
        conf[f"{prefix}.oauth2-server-uri"] = oauth2.token_url
        conf[f"{prefix}.scope"] = oauth2.scope
        conf[f"{prefix}.token-refresh-enabled"] = "true"
        conf[f"{prefix}.token-exchange-enabled"] = "false"
        if oauth2.audience is not None:
            conf[f"{prefix}.audience"] = oauth2.audience
    for key, value in catalog.properties.items():
        conf[f"{prefix}.{key}"] = value
    custom = catalog.properties.get("catalog-impl")
    if custom is not None and custom != FENCE_CATALOG:
        # A catalog class of the operator's (catalog.properties) is fenced too: the
        # wrapper builds it.
        conf[f"{prefix}.catalog-impl"] = FENCE_CATALOG
        del conf[f"{prefix}.{DELEGATE_TYPE}"]
        conf[f"{prefix}.{DELEGATE_IMPL}"] = custom
    return conf


def qualified(settings: SparkSettings, table: str) -> str:
    """``catalog.namespace.table``, each part quoted, for Spark SQL."""
    catalog = settings.catalog
    return f"`{catalog.name}`.`{catalog.namespace}`.`{table}`"


def dotted(settings: SparkSettings, table: str) -> str:
    """``catalog.namespace.table`` unquoted (the identifiers are plain), for the
    DataFrame API (``writeTo``) and Iceberg's ``Spark3Util.loadIcebergTable``."""
    catalog = settings.catalog
    return f"{catalog.name}.{catalog.namespace}.{table}"


def namespace(settings: SparkSettings) -> str:
    """``catalog.namespace``, quoted."""
    catalog = settings.catalog
    return f"`{catalog.name}`.`{catalog.namespace}`"


__all__ = ["DELEGATE_IMPL", "DELEGATE_TYPE", "EXTENSIONS", "catalog_conf", "catalog_uri",
           "dotted", "is_local", "namespace", "qualified", "sqlite_file", "warehouse_location"]
