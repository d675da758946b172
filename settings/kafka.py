"""The ``kafka:`` section: the bootstrap list and the Kafka client keys."""

from __future__ import annotations

import re
from typing import Any

from pydantic import (
    Field,
    SecretStr,
    field_validator,
)

from settings.base import Model
from settings.kafka_security import check_security
from settings.secrets import secret_name

# One bootstrap address: host:port, the host a name or IPv4 address or a bracketed IPv6.
_HOST_PORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?)"
                        r":(?P<port>[0-9]{1,5})$")


def _bootstrap(value: str) -> str:
    if value.strip().lower() == "embedded":
        return value
    addresses = [a.strip() for a in value.split(",")]
    for address in addresses:
        match = _HOST_PORT.match(address)
        if match is None or not 1 <= int(match["port"]) <= 65535:
            raise ValueError(f"{address!r} is not host:port (port 1-65535); write a "
                             "comma-separated host:port list, or embedded")
    return ",".join(addresses)

class KafkaSettings(Model):
    bootstrap: str = Field(
        "embedded",
        description='Comma-separated host:port list, or "embedded" to start the bundled broker.',
    )
    consumer_config: dict[str, Any] = Field(
        default_factory=dict,
        description="Free-form Kafka client keys (security.protocol, sasl.*, ssl.*, ...).",
    )
    client_id: str = Field("kstage", description="Kafka client.id prefix.")
    metadata_refresh_s: float = Field(
        30.0, gt=0, le=3600, description="How often the topics are listed for the "
        "topic_pattern entries: a topic created (or deleted) is picked up (or its worker "
        "stopped) within this many seconds.")
    max_batch_inflated_bytes: int = Field(
        64 * 1024 * 1024, ge=1, description="A compressed record batch that inflates past "
        "this (bytes) is not inflated further: each of its offsets is poison (default 64 "
        "MiB; at least every topic's max_message_bytes). Bounds the memory a decompression "
        "bomb takes.")

    _check_bootstrap = field_validator("bootstrap")(_bootstrap)

    @field_validator("consumer_config")
    @classmethod
    def _check_security(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_security(value)  # case normalised; a key that cannot work is refused

    @field_validator("consumer_config")
    @classmethod
    def _hide_secrets(cls, value: dict[str, Any]) -> dict[str, Any]:
        return {
            k: SecretStr(str(v)) if secret_name(k) and not isinstance(v, SecretStr) else v
            for k, v in value.items()
        }

    @property
    def embedded(self) -> bool:
        return self.bootstrap.strip().lower() == "embedded"

