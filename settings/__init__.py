"""kstage configuration: the typed settings model, its YAML loader and its errors.

Use :func:`load_settings` to read a YAML file (with ``${VAR}`` expansion and ``KSTAGE_*``
overrides) into a validated :class:`Settings`, or :func:`settings_from` to validate a mapping
the same way (tests, code). This package imports neither pyspark nor
aiokafka, so any part of kstage can depend on it.
"""

from __future__ import annotations

from settings.errors import (
    ConfigFileError,
    ConfigValidationError,
    SettingsError,
    UndefinedVariableError,
)
from settings.identifiers import QualifiedSqlIdentifier, SqlIdentifier, sql_identifier
from settings.loader import load_settings, settings_from
from settings.models import (
    CatalogSettings,
    CommitMode,
    CommitSettings,
    FailureMode,
    FailureSettings,
    FilterSettings,
    GroupSettings,
    KafkaSettings,
    MaintenanceSettings,
    MergeSettings,
    NamedSink,
    ObservabilitySettings,
    S3Settings,
    SchemaRegistryBasicAuth,
    SchemaRegistrySettings,
    SchemaRegistryTls,
    ServiceSettings,
    Settings,
    SinkSettings,
    SparkSettings,
    SupervisorSettings,
    TopicSettings,
)

__all__ = [
    "CatalogSettings",
    "CommitMode",
    "CommitSettings",
    "ConfigFileError",
    "ConfigValidationError",
    "FailureMode",
    "FailureSettings",
    "FilterSettings",
    "GroupSettings",
    "KafkaSettings",
    "MaintenanceSettings",
    "MergeSettings",
    "NamedSink",
    "ObservabilitySettings",
    "QualifiedSqlIdentifier",
    "S3Settings",
    "SchemaRegistryBasicAuth",
    "SchemaRegistrySettings",
    "SchemaRegistryTls",
    "ServiceSettings",
    "Settings",
    "SettingsError",
    "SinkSettings",
    "SparkSettings",
    "SqlIdentifier",
    "SupervisorSettings",
    "TopicSettings",
    "UndefinedVariableError",
    "load_settings",
    "settings_from",
    "sql_identifier",
]
