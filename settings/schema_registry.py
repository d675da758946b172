"""The ``schema_registry:`` section: where the writer schemas of avro, protobuf and
json_schema topics come from."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from settings.base import Model


class SchemaRegistryBasicAuth(Model):
    username: str = Field(description="Schema registry user.")
    password: SecretStr = Field(description="Schema registry password (never logged).")


class SchemaRegistryTls(Model):
    verify: bool = Field(True, description="Verify the registry's certificate.")
    ca_file: str | None = Field(
        None, description="PEM bundle of trusted CAs; replaces the default trust store."
    )
    client_cert: str | None = Field(None, description="PEM client certificate (mutual TLS).")
    client_key: str | None = Field(
        None, description="PEM private key of client_cert (when not in the same file)."
    )

    @model_validator(mode="after")
    def _key_needs_cert(self) -> SchemaRegistryTls:
        if self.client_key and not self.client_cert:
            raise ValueError("client_key needs client_cert")
        return self


class SchemaRegistrySettings(Model):
    """Where Avro writer schemas come from: Confluent-compatible REST, or ``file://DIR``."""

    url: str = Field(
        "http://localhost:8081",
        description="Comma-separated http(s) URLs tried in order (failover), or file://DIR.",
    )
    id_type: Literal["int", "long", "uuid"] = Field(
        "int", description="Schema id after the magic byte: int (4 bytes), long (8), uuid (16)."
    )
    basic_auth: SchemaRegistryBasicAuth | None = Field(None, description="HTTP basic auth.")
    bearer_token: SecretStr | None = Field(None, description="HTTP bearer token.")
    tls: SchemaRegistryTls = Field(default_factory=SchemaRegistryTls, description="TLS options.")
    timeout_s: float = Field(10, gt=0, description="Timeout of one HTTP request.")
    max_retries: int = Field(5, ge=0, description="Retry rounds after the first attempt.")
    min_backoff_s: float = Field(0.2, ge=0, description="First retry delay (full jitter).")
    max_backoff_s: float = Field(10, ge=0, description="Cap of the retry delay and Retry-After.")
    not_found_retry_s: float = Field(
        60, ge=0,
        description="How long a 404 for a schema id is retried (capped backoff; the partition "
        "waits, nothing is committed), from the id's first 404, before its messages count as "
        "poison (failure mode). Registries answer 404 for existing ids while they reload "
        "(Karapace ~5 s after a restart). 0: poison at once.",
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        urls = [u.strip() for u in value.split(",") if u.strip()]
        if not urls:
            raise ValueError("must name at least one URL")
        if any(u.startswith("file://") for u in urls):
            if len(urls) > 1 or len(urls[0]) == len("file://"):
                raise ValueError("file://DIR must be the only URL and name a directory")
            return urls[0]
        for u in urls:
            scheme, sep, rest = u.partition("://")
            host = rest.split("/", 1)[0]
            if not sep or scheme not in ("http", "https") or not host:
                # the value is not echoed: it may hold credentials
                raise ValueError("each URL must be http(s)://host[:port] or file://DIR")
            if "@" in host:
                raise ValueError("credentials in the URL are not allowed; use basic_auth")
        return ",".join(u.rstrip("/") for u in urls)

    @model_validator(mode="after")
    def _check(self) -> SchemaRegistrySettings:
        if self.basic_auth is not None and self.bearer_token is not None:
            raise ValueError("set basic_auth or bearer_token, not both")
        if self.max_backoff_s < self.min_backoff_s:
            raise ValueError("max_backoff_s must be >= min_backoff_s")
        return self

    @property
    def urls(self) -> list[str]:
        """The http(s) base URLs in failover order (empty for ``file://``)."""
        return [] if self.file_dir is not None else self.url.split(",")

    @property
    def file_dir(self) -> str | None:
        """The directory of a ``file://DIR`` URL, else None."""
        return self.url[len("file://") :] if self.url.startswith("file://") else None


