"""The ``spark:`` section (the Iceberg catalog, its S3 store, table maintenance) and
``merge:``."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from settings.base import Model
from settings.catalog_oauth import OAUTH2_PROPERTIES, CatalogOAuth2Settings
from settings.identifiers import (
    SqlIdentifier,
)


class S3Settings(Model):
    """``spark.catalog.s3``: the S3-compatible object store of an ``s3://`` warehouse
    (Iceberg's S3FileIO)."""

    endpoint: str | None = Field(
        None, description="S3 endpoint URL (none: AWS's own for the region).")
    region: str = Field("us-east-1", description="S3 region.")
    path_style_access: bool = Field(
        False, description="Path-style addressing (bucket in the path), as most "
        "S3-compatible servers need.")
    access_key_id: SecretStr | None = Field(
        None, description="Access key id (none: the AWS default credential chain).")
    secret_access_key: SecretStr | None = Field(
        None, description="Secret access key (never printed).")

    @field_validator("endpoint")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        return value

    @model_validator(mode="after")
    def _key_pair(self) -> S3Settings:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("set access_key_id and secret_access_key together (or neither: "
                             "the AWS default credential chain)")
        return self


WAREHOUSE_SCHEMES = ("s3://", "s3a://")
"""URI schemes of a remote warehouse (Iceberg's S3FileIO); anything else is a local path."""


def _warehouse(value: str) -> str:
    if value.startswith("file://"):
        return value[len("file://"):] or "/"
    if value.startswith(WAREHOUSE_SCHEMES):
        if not re.match(r"^s3a?://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$", value):
            raise ValueError(f"{value!r} is not s3://bucket[/prefix] (a bucket name: 3-63 "
                             "lowercase letters, digits, '.' and '-')")
        return value.rstrip("/")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", value):
        raise ValueError(
            f"{value!r}: a warehouse is a local (or shared) path, file://, or s3://bucket"
            "/prefix (an S3-compatible object store, with spark.catalog.s3)")
    return value


# The catalog property bounding Iceberg's retries of a table metadata read
# (io.kstage.iceberg.BoundedMetadataReads; docs/spark.md), and Iceberg's own count.
METADATA_READ_RETRIES = "kstage.metadata-read-retries"
ICEBERG_METADATA_READ_RETRIES = 20

PYICEBERG_EXPIRY_EVERY_S = 60.0
"""How often ``kstage run`` expires the snapshots of the staging tables pyiceberg appends
to when ``maintenance.every_s`` is not set (:mod:`actors.tables.pyiceberg_expiry`)."""

PYICEBERG_SNAPSHOT_MAX_AGE_S = 60.0
"""``maintenance.snapshot_max_age_s`` of that expiry unless set: it deletes no file (a
reader's query keeps its files whatever the age), and each snapshot kept costs every
pyiceberg append ~0.1 ms of CPU, more beside a busy event loop (docs/benchmarks.md: at
9 000 events/s, 300 s kept grew the appends from 0.14 s to 0.40 s within five minutes; 60 s
kept them near 0.14 s)."""


class CatalogSettings(Model):
    """``spark.catalog``: the Apache Iceberg catalog of the staging and final tables."""

    name: SqlIdentifier = Field("kstage", description="The Spark catalog name.")
    type: Literal["jdbc", "rest"] = Field(
        "jdbc", description="jdbc: an Iceberg JDBC catalog in SQLite (one host) or "
        "PostgreSQL (several hosts); rest: an Iceberg REST catalog server.")
    uri: str | None = Field(
        None, description="jdbc:sqlite:PATH, jdbc:postgresql://HOST/DB or the REST "
        "catalog's http(s) URL (default, jdbc: jdbc:sqlite:<warehouse>/catalog.db; never "
        "printed with its credentials).")
    warehouse: str | None = Field(
        None, description="Where the tables' files live: a local path or s3://bucket/prefix "
        "(default: spark.warehouse).")
    namespace: SqlIdentifier = Field(
        "kstage", description="The namespace of the tables (they keep their names).")
    user: str | None = Field(None, description="jdbc: the catalog database's user.")
    password: SecretStr | None = Field(
        None, description="jdbc: the catalog database's password (never printed).")
    s3: S3Settings | None = Field(
        None, description="The S3-compatible store of an s3:// warehouse.")
    oauth2: CatalogOAuth2Settings | None = Field(
        None, description="rest: OAuth2 client credentials against the identity "
        "provider's token endpoint (tokens refreshed before they expire).")
    properties: dict[str, str] = Field(
        default_factory=dict, description="More Iceberg catalog properties "
        "(spark.sql.catalog.<name>.<key>).")

    @field_validator("warehouse")
    @classmethod
    def _warehouse_uri(cls, value: str | None) -> str | None:
        return None if value is None else _warehouse(value)

    @field_validator("properties")
    @classmethod
    def _metadata_read_retries(cls, value: dict[str, str]) -> dict[str, str]:
        # io.kstage.iceberg.BoundedMetadataReads refuses it too, when the JVM starts.
        retries = value.get(METADATA_READ_RETRIES)
        if retries is not None and not (retries.strip().isdigit()
                                         and int(retries) <= ICEBERG_METADATA_READ_RETRIES):
            raise ValueError(f"{METADATA_READ_RETRIES} is a whole number from 0 to "
                             f"{ICEBERG_METADATA_READ_RETRIES} (Iceberg's own), not {retries!r}")
        return value

    @model_validator(mode="after")
    def _uri_kind(self) -> CatalogSettings:
        uri = self.uri
        if self.type == "jdbc" and uri is not None and not uri.startswith(
                ("jdbc:sqlite:", "jdbc:postgresql:")):
            raise ValueError("a jdbc catalog's uri is jdbc:sqlite:PATH or "
                             "jdbc:postgresql://HOST[:PORT]/DB")
        if uri is not None and uri.startswith("jdbc:sqlite:") and (
                uri == "jdbc:sqlite:" or ":memory:" in uri or "mode=memory" in uri):
            raise ValueError("an in-memory SQLite catalog loses the tables (each pooled "
                             "connection gets its own empty database): name a file, "
                             "jdbc:sqlite:/path/catalog.db")
        if self.type == "rest" and (uri is None or not re.match(r"^https?://", uri)):
            raise ValueError("a rest catalog needs its uri: http(s)://HOST[:PORT][/PATH]")
        if self.oauth2 is not None and self.type != "rest":
            raise ValueError("oauth2 is a rest catalog's login: set type: rest (or remove "
                             "oauth2)")
        twice = sorted(set(self.properties) & set(OAUTH2_PROPERTIES))
        if self.oauth2 is not None and twice:
            raise ValueError(f"spark.catalog.properties sets {', '.join(twice)}, which "
                             "spark.catalog.oauth2 sets: remove it from properties")
        return self


class MaintenanceSettings(Model):
    """``spark.maintenance``: what ``kstage tables maintain`` does to each Iceberg table
    of the spark sinks (staging and final), and how often ``kstage run`` does it."""

    every_s: float | None = Field(
        600, gt=0, description="Maintain the spark tables this often inside `kstage run` "
        "(beside the appends; each table by the process holding partition 0 of its topic; "
        "a failure is logged and retried at the next interval); null: only `kstage tables "
        "maintain`. With appends: pyiceberg, off unless set (it would start a JVM): the "
        "staging tables' snapshots then expire through pyiceberg every 60 s and their small "
        "files are folded by pyiceberg (fold_files), no JVM.")
    fold_files: int | None = Field(
        50, ge=2, description="Inside `kstage run` (with every_s, or with appends: "
        "pyiceberg and every_s unset: through pyiceberg, no JVM): a staging table is "
        "compacted beside its appends (the background fold) once it has this many more "
        "data files than its last compaction left; null: only at every_s.")
    snapshot_max_age_s: float = Field(
        3600, gt=0, description="Snapshots older than this are expired, except those Kafka "
        "offset recovery or the merge still needs; younger ones are kept (a reader's query "
        "planned on one keeps its files). With appends: pyiceberg and every_s unset (the "
        "expiry through pyiceberg, which deletes no file): 60 unless set.")
    snapshot_min_keep: int = Field(
        10, ge=1, description="The newest snapshots of a table kept whatever their age.")
    target_file_mb: int = Field(
        128, ge=1, description="Compaction writes data files of about this size (MiB).")
    min_input_files: int = Field(
        5, ge=2, description="Compaction rewrites a partition's small files once it has at "
        "least this many.")
    orphan_min_age_s: float = Field(
        86400, ge=86400, description="Files in a table's directory that no snapshot "
        "references are removed once older than this (at least one day: a write still in "
        "progress has files no snapshot references yet).")
    kafka_timeout_s: float = Field(
        30, gt=0, description="How long maintenance waits for Kafka's committed offsets "
        "before it expires nothing.")


class SparkSettings(Model):
    """The process-wide ``spark:`` section (one SparkSession per process)."""

    master: str = Field("local[2]", description="Spark master URL.")
    warehouse: str = Field(
        "./warehouse", description="Where the Iceberg tables' files live (the default of "
        "catalog.warehouse): a local or shared path, file://, or s3://bucket/prefix.")
    catalog: CatalogSettings = Field(
        default_factory=lambda: CatalogSettings(),
        description="The Iceberg catalog of the staging and final tables.")
    jars: Literal["fetched"] | list[str] = Field(
        "fetched", description="The JVM jars of the session: fetched (those `kstage jars "
        "fetch` put in the jar directory), or the paths of jars a cluster already has "
        "([] when its Spark has them on its class path).")
    conf: dict[str, str] = Field(
        default_factory=lambda: {"spark.driver.memory": "512m"},
        description="Extra Spark configuration (overrides kstage's defaults).",
    )
    flush_max_rows: int = Field(
        100_000, ge=1, description="The largest append, in rows: a table is flushed at this "
        "many pending rows (the size of a backlog's appends, with flush_max_mb).")
    flush_max_mb: float = Field(
        32, gt=0, description="The largest append, in MiB of pending rows (their Arrow "
        "buffers; the JDBC sink counts rows alone): a table is flushed at this much.")
    flush_min_rows: int = Field(
        1, ge=1, description="Flush a table at this many rows when none of its appends "
        "is running and its partitions are not behind by an append's worth (caught up: 1, "
        "as soon as a row is there; while a backlog of an append's worth or more waits, "
        "rows gather up to flush_max_rows/flush_max_mb).")
    appends: Literal["spark", "pyiceberg"] = Field(
        "spark", description="What writes the staging appends: spark (the Arrow rows go to "
        "the JVM, Spark writes the Parquet files and commits), or pyiceberg (Apache "
        "Iceberg's Python library writes the files and commits from the Python process, to "
        "the same table in the same catalog, jdbc or rest (with its oauth2 login); Spark "
        "still merges and maintains).")
    staging_write_options: dict[str, str] = Field(
        default_factory=dict,
        description="Iceberg Spark write options of the staging appends (e.g. "
        "compression-codec); kstage sets the snapshot properties itself.")
    flush_max_interval_s: float = Field(
        5, gt=0, description="Longest wait of a row before its table is flushed."
    )
    flush_idle_s: float | None = Field(
        None, gt=0, description="Longest wait of a row while none of its table's appends "
        "runs: a quiet table is flushed within about this long, below flush_min_rows (at "
        "most about one append per flush_idle_s), and no rest between appends holds a row "
        "longer; at or above flush_max_interval_s: off. Unset: freshness_target_s.")
    freshness_target_s: float = Field(
        1, gt=0, description="The freshness the staging appends of a caught-up table aim "
        "at: between appends that take L seconds (measured), give or take S (their measured "
        "spread), the next one rests freshness_target_s - 2(L + 2S), so that a row waits "
        "this long at most (the append running when it came, the rest, its own append); "
        "when L + 2S passes half of it, "
        "appends go back to back and a row waits about 2L. At most flush_max_interval_s "
        "(unset: 1, or flush_max_interval_s when that is lower).")
    max_commits_per_s: float = Field(
        2, gt=0, le=1000, description="The most staging appends (Iceberg commits) this "
        "process starts a second per table that are not full: one of caught-up rows, or "
        "one a timer starts (flush_idle_s, flush_max_interval_s), due earlier waits; a "
        "full one (flush_max_rows or flush_max_mb reached, or a worker's window full) "
        "does not. Several processes writing one table commit up to this many each.")
    flush_rest_ratio: float | None = Field(
        None, ge=0, le=100, description="The least rest between a staging table's "
        "appends of caught-up rows, in times the CPU they cost the process (pyiceberg's, "
        "measured on its thread: a remote catalog's wait costs no rest; Spark's: their "
        "duration) (on top of "
        "freshness_target_s's rule; never longer than flush_idle_s holds a row; "
        "flush_max_rows, flush_max_interval_s and a worker at its max_in_flight do not "
        "wait). Unset: 1 with appends: pyiceberg (each pyiceberg commit costs the process "
        "CPU, more the more snapshots the table keeps: at most half of its time goes to "
        "commits), 0 with appends: spark.")
    max_session_restarts: int = Field(
        3, ge=0, description="New SparkSessions started after the Spark JVM died (or while "
        "its replacement fails to start) within session_restart_window_s; one more death "
        "stops the process with exit code 1 (its orchestrator restarts it).")
    session_restart_window_s: float = Field(
        600, gt=0, description="Window of max_session_restarts, in seconds.")
    maintenance: MaintenanceSettings = Field(
        default_factory=lambda: MaintenanceSettings(),
        description="Snapshot expiry, compaction and orphan removal of the tables.")

    def maintenance_every_s(self) -> float | None:
        """How often ``kstage run`` maintains the spark tables: ``maintenance.every_s``,
        except with ``appends: pyiceberg`` when it was not set (the default would start a
        JVM in a process that has none)."""
        if self.appends == "pyiceberg" and "every_s" not in self.maintenance.model_fields_set:
            return None
        return self.maintenance.every_s

    def pyiceberg_expiry(self) -> tuple[float, float] | None:
        """``(every, max_age_s)`` of the snapshot expiry through pyiceberg inside ``kstage
        run``: with ``appends: pyiceberg`` when ``maintenance.every_s`` is not set (every
        :data:`PYICEBERG_EXPIRY_EVERY_S`, expiring what is older than
        ``snapshot_max_age_s``, :data:`PYICEBERG_SNAPSHOT_MAX_AGE_S` unless set); None when
        it does not run (``every_s`` set: the maintenance expires; null: neither)."""
        maintenance = self.maintenance
        if self.appends != "pyiceberg" or "every_s" in maintenance.model_fields_set:
            return None
        age = (maintenance.snapshot_max_age_s if "snapshot_max_age_s"
               in maintenance.model_fields_set else PYICEBERG_SNAPSHOT_MAX_AGE_S)
        return PYICEBERG_EXPIRY_EVERY_S, age

    def pyiceberg_fold_files(self) -> int | None:
        """``maintenance.fold_files`` of the background fold through pyiceberg inside
        ``kstage run`` (:mod:`actors.tables.pyiceberg_fold`): with ``appends: pyiceberg``
        when ``maintenance.every_s`` is not set; None when it does not run (``every_s``
        set: Spark's fold; null: no maintenance inside ``kstage run``)."""
        if self.appends != "pyiceberg" or "every_s" in self.maintenance.model_fields_set:
            return None
        return self.maintenance.fold_files

    @field_validator("warehouse")
    @classmethod
    def _warehouse_uri(cls, value: str) -> str:
        return _warehouse(value)

    @model_validator(mode="after")
    def _catalog_place(self) -> SparkSettings:
        catalog = self.catalog
        if (catalog.warehouse is not None and "warehouse" in self.model_fields_set
                and catalog.warehouse != self.warehouse):
            raise ValueError(f"spark.warehouse ({self.warehouse!r}) and "
                             f"spark.catalog.warehouse ({catalog.warehouse!r}) differ: set "
                             "one of them")
        warehouse = self.table_warehouse
        remote = warehouse.startswith(WAREHOUSE_SCHEMES)
        if catalog.type == "jdbc" and catalog.uri is None and remote:
            raise ValueError(f"the warehouse {warehouse!r} is in object storage: set "
                             "spark.catalog.uri (jdbc:postgresql://HOST/DB for several hosts, "
                             "or jdbc:sqlite:/local/path/catalog.db for one)")
        if self.appends == "pyiceberg" and "catalog-impl" in catalog.properties:
            raise ValueError(f"appends: pyiceberg opens the {catalog.type} catalog of "
                             "spark.catalog.type itself, not the catalog class that "
                             "spark.catalog.properties' catalog-impl names: remove "
                             "catalog-impl, or set appends: spark")
        if self.appends == "pyiceberg" and self.staging_write_options:
            raise ValueError("staging_write_options are Spark write options, which "
                             "appends: pyiceberg does not use: set the table's write "
                             "properties instead, or appends: spark")
        if ("freshness_target_s" in self.model_fields_set
                and self.freshness_target_s > self.flush_max_interval_s):
            raise ValueError(f"spark.freshness_target_s ({self.freshness_target_s:g}) is "
                             "above spark.flush_max_interval_s "
                             f"({self.flush_max_interval_s:g}), the longest a row waits: "
                             "lower the target or raise flush_max_interval_s")
        if remote and catalog.s3 is None:
            raise ValueError(f"the warehouse {warehouse!r} is in object storage: set "
                             "spark.catalog.s3 (endpoint, region, credentials)")
        return self

    @property
    def freshness_s(self) -> float:
        """``freshness_target_s``, at most ``flush_max_interval_s`` (a target set by hand
        above it is refused; the default's 1 s follows an interval set below it)."""
        return min(self.freshness_target_s, self.flush_max_interval_s)

    @property
    def idle_s(self) -> float:
        """``flush_idle_s``, else the freshness target (:attr:`freshness_s`)."""
        return self.freshness_s if self.flush_idle_s is None else self.flush_idle_s

    @property
    def local_master(self) -> bool:
        """Whether the session runs in this process's JVM (``local[...]``): its executor
        is the driver."""
        return self.master.startswith("local")

    @property
    def table_warehouse(self) -> str:
        """The warehouse of the tables: ``catalog.warehouse``, else ``warehouse``."""
        return self.catalog.warehouse or self.warehouse


class MergeSettings(Model):
    """The ``merge:`` section: merging staging into final tables inside the service."""

    interval_s: float | None = Field(
        None, gt=0, description="Merge every spark staging table this often while running "
        "(and once more at the end of --drain); none: only `kstage merge` merges.")


