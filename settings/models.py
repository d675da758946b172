"""The typed configuration model of kstage (pydantic): the root :class:`Settings`.

One :class:`Settings` root; nested groups are plain ``BaseModel``s, each section in a
module of its own (``settings/kafka.py``, ``service.py``, ``commits.py``,
``sink_types.py``, ``topics.py``, ``lakehouse.py``, ``schema_registry.py``), re-exported
here so ``from settings.models import X`` keeps working. Every field has a default and a
description; durations carry their unit in the name (``*_s``, or ``*_ms`` where the value
goes to aiokafka unchanged). Unknown keys are errors, so typos surface.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from settings.base import check_name
from settings.catalog_oauth import CatalogOAuth2Settings
from settings.commits import CommitMode, CommitSettings, FailureMode, FailureSettings
from settings.kafka import KafkaSettings
from settings.lakehouse import (
    WAREHOUSE_SCHEMES,
    CatalogSettings,
    MaintenanceSettings,
    MergeSettings,
    S3Settings,
    SparkSettings,
)
from settings.schema_registry import (
    SchemaRegistryBasicAuth,
    SchemaRegistrySettings,
    SchemaRegistryTls,
)
from settings.service import ObservabilitySettings, ServiceSettings, SupervisorSettings
from settings.sink_types import (
    SINK_TYPES,
    SinkSettings,
    sink_entry_point,
    sink_entry_points,
    sink_settings_model,
)
from settings.topics import FilterSettings, GroupSettings, NamedSink, TopicSettings, sink_names


class Settings(BaseModel):
    """Root of the configuration: the YAML file, overridden by ``KSTAGE_*`` variables.

    The overrides are applied by :mod:`settings.loader` (``ENV_PREFIX``, nested keys
    joined by ``ENV_NESTED_DELIMITER``), never by building ``Settings(...)`` in code: a
    plain model, so that loading a file without ``KSTAGE_*`` variables does not import
    pydantic-settings (``kstage validate`` and ``run`` start quicker)."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True,
                              validate_default=True)

    name: Annotated[str, Field(description="Service name; default group id.")] = "kstage"
    kafka: KafkaSettings = Field(default_factory=KafkaSettings, description="Kafka client.")
    supervisor: SupervisorSettings = Field(
        default_factory=SupervisorSettings, description="Restarts and stop grace periods."
    )
    service: ServiceSettings = Field(default_factory=ServiceSettings, description="Process.")
    groups: list[GroupSettings] = Field(default_factory=list, description="Consumer groups.")
    spark: SparkSettings = Field(
        default_factory=lambda: SparkSettings(), description="Spark (sinks of type spark)."
    )
    schema_registry: SchemaRegistrySettings | None = Field(
        None, description="Schema registry for Avro topics (none: no registry)."
    )
    merge: MergeSettings = Field(
        default_factory=lambda: MergeSettings(), description="Merge into final tables."
    )
    observability: ObservabilitySettings = Field(
        default_factory=lambda: ObservabilitySettings(),
        description="OpenTelemetry tracing (off by default).")

    _service_name = field_validator("name")(check_name)

    @model_validator(mode="after")
    def _unique_topics(self) -> Settings:
        seen: dict[tuple[str, str], int] = {}
        for gi, group in enumerate(self.groups):
            gid = group.group_id or self.name
            for topic in group.topics:
                key = (gid, topic.topic or f"/{topic.topic_pattern}/")
                if key in seen:
                    raise ValueError(
                        f"topic {key[1]!r} appears twice in group {gid!r} "
                        f"(groups[{seen[key]}] and groups[{gi}])"
                    )
                seen[key] = gi
        return self

    @model_validator(mode="after")
    def _batches_hold_a_message(self) -> Settings:
        cap = self.kafka.max_batch_inflated_bytes
        for gi, group in enumerate(self.groups):
            for ti, topic in enumerate(group.topics):
                if topic.max_message_bytes > cap:
                    raise ValueError(
                        f"kafka.max_batch_inflated_bytes ({cap}) is less than "
                        f"groups[{gi}].topics[{ti}].max_message_bytes "
                        f"({topic.max_message_bytes}): a batch of one message that size "
                        "could never be read")
        return self

    @model_validator(mode="after")
    def _merge_needs_spark(self) -> Settings:
        if self.merge.interval_s is not None and not self.uses_sink("spark"):
            raise ValueError("merge.interval_s is set but no topic has a sink of type spark "
                             "(the merge folds spark staging tables)")
        return self

    def unplanned_spark_tables(self) -> list[str]:
        """The entries whose spark tables are known only to the running process (a
        topic_pattern's, a route's): the merge and the maintenance plan none of them."""
        return [f"topic_pattern {t.topic_pattern!r}" if t.topic_pattern is not None
                else f"the route of topic {t.topic!r}" for g in self.groups for t in g.topics
                if (t.topic_pattern is not None or t.route is not None)
                and any(s.settings.type == "spark" for s in t.named_sinks())]

    @model_validator(mode="after")
    def _pattern_tables_unplanned(self) -> Settings:
        patterns = self.unplanned_spark_tables()
        maintained = ("every_s" in self.spark.maintenance.model_fields_set
                      and self.spark.maintenance.every_s is not None)
        if patterns and (self.merge.interval_s is not None or maintained):
            raise ValueError(
                f"{patterns[0]} feeds spark tables, which the merge "
                "(merge.interval_s) and the table maintenance (spark.maintenance.every_s) "
                "do not cover yet: unset them (the default maintenance leaves such "
                "tables alone), or name the topics (the tables) in topic entries")
        return self

    def group_id(self, group: GroupSettings) -> str:
        return group.group_id or self.name

    def uses_sink(self, sink_type: str) -> bool:
        """Whether a topic has a sink of type ``sink_type`` (its checks and jobs load only
        then: ``kstage validate`` of a configuration without spark sinks loads no Spark
        code)."""
        return any(named.settings.type == sink_type for group in self.groups
                   for topic in group.topics for named in topic.named_sinks())

    def risks(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Valid settings that can lose data, as (path, why) pairs; the loader adds the
        file and line, ``validate`` prints them and ``run`` logs them at start."""
        found: list[tuple[tuple[str | int, ...], str]] = []
        for gi, group in enumerate(self.groups):
            if group.commit.mode is CommitMode.AUTO:
                found.append((("groups", gi, "commit", "mode"),
                              "'auto' can lose data: Kafka's auto-commit commits the offsets "
                              "the consumer fetched every max_interval_s, whether or not the "
                              "sink wrote them, so a crash or a failed write skips those "
                              "messages; use 'batch' to commit only what the sink accepted"))
        return found


ENV_PREFIX = "KSTAGE_"
"""The prefix of the environment variables that override the file's settings."""
ENV_NESTED_DELIMITER = "__"
"""What joins the keys of a nested setting in a variable's name
(``KSTAGE_KAFKA__BOOTSTRAP``)."""

__all__ = [
    "ENV_NESTED_DELIMITER",
    "ENV_PREFIX",
    "SINK_TYPES",
    "WAREHOUSE_SCHEMES",
    "CatalogOAuth2Settings",
    "CatalogSettings",
    "CommitMode",
    "CommitSettings",
    "FailureMode",
    "FailureSettings",
    "FilterSettings",
    "GroupSettings",
    "KafkaSettings",
    "MaintenanceSettings",
    "MergeSettings",
    "NamedSink",
    "ObservabilitySettings",
    "S3Settings",
    "SchemaRegistryBasicAuth",
    "SchemaRegistrySettings",
    "SchemaRegistryTls",
    "ServiceSettings",
    "Settings",
    "SinkSettings",
    "SparkSettings",
    "SupervisorSettings",
    "TopicSettings",
    "sink_entry_point",
    "sink_entry_points",
    "sink_names",
    "sink_settings_model",
]
