"""The JDBC sink's settings (``sink: {type: jdbc, ...}``, :class:`JdbcSinkSettings`) and
its URL as shown (:func:`safe_url`: never a password)."""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, SecretStr, field_validator

from actors.sinks.base import SinkSettingsBase
from settings.identifiers import QualifiedTableTemplate

DEFAULT_JAR = "/usr/share/java/postgresql.jar"


class JdbcSinkSettings(SinkSettingsBase):
    """Options of ``sink: {type: jdbc, table: NAME, url: jdbc:postgresql://...}``."""

    type: Literal["jdbc"] = Field("jdbc", description="Sink type.")
    table: QualifiedTableTemplate | None = Field(
        None, description="Staging table, `name` or `schema.name` (default: the processor's); "
        "{topic} in it stands for the topic's name made safe (see topic_pattern).")
    topic_templates: ClassVar[tuple[str, ...]] = ("table",)
    url: str = Field(description="JDBC URL, e.g. jdbc:postgresql://host:5432/db.")
    user: str | None = Field(None, description="Database user.")
    password: SecretStr | None = Field(None, description="Database password (never logged).")
    driver: str = Field("org.postgresql.Driver", description="JDBC driver class.")
    jar: str = Field(DEFAULT_JAR, description="Driver jar, added to the Spark session "
                     "when the driver class is not on its classpath.")
    batch_size: int = Field(5000, ge=1, description="Rows per JDBC batch (Spark batchsize; "
                            "with mode: upsert, rows per statement).")
    mode: Literal["append", "upsert"] = Field(
        "append", description="append: every row is inserted (a staging table). upsert: "
        "one row per natural key of the processor, INSERT ... ON CONFLICT DO UPDATE when "
        "the incoming record is newer (same partition: higher offset), so a replay never "
        "rolls a row back.")
    properties: dict[str, str] = Field(
        default_factory=dict, description="Extra JDBC connection properties (override "
        "kstage's connectTimeout=10, socketTimeout=120, loginTimeout=10, "
        "reWriteBatchedInserts=true).")

    def destination(self) -> str:
        table = self.table or "(the processor's)"
        return f"jdbc table {table} at {safe_url(self.url)}"

    @field_validator("url")
    @classmethod
    def _jdbc_url(cls, value: str) -> str:
        if not value.startswith("jdbc:"):
            raise ValueError(f"jdbc sink url {safe_url(value)!r} must start with 'jdbc:'")
        return value


def safe_url(url: str) -> str:
    """``url`` without its query string and user info (they may hold a password)."""
    url = url.split("?", 1)[0].split(";", 1)[0]
    return re.sub(r"//[^/@]*@", "//", url)
