"""Building aiokafka consumers from kstage settings.

``kafka.consumer_config`` takes Kafka's own dotted client keys (``security.protocol``,
``sasl.mechanism``, ``ssl.ca.location`` ...) so configs port from other Kafka clients.
They are translated to aiokafka's keyword arguments here; a key aiokafka cannot honour
is an error at start, naming the key, instead of being silently ignored.

``group.instance.id`` (static membership) names one member of a group, but every worker
is a member of its group: the configured id is a prefix, each worker's consumer uses
``<id>-<topic>``. Two workers of one group with the same id would fence each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.helpers import create_ssl_context
from pydantic import SecretStr

from actors.errors import FatalError
from settings.models import CommitMode, GroupSettings, Settings

# Kafka client key -> aiokafka keyword. Keys not listed are rejected at start.
_KEYS: dict[str, str] = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "sasl.plain.username": "sasl_plain_username",
    "sasl.plain.password": "sasl_plain_password",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
    "sasl.kerberos.domain.name": "sasl_kerberos_domain_name",
    "client.rack": "client_rack",
    "fetch.max.bytes": "fetch_max_bytes",
    "fetch.min.bytes": "fetch_min_bytes",
    "max.partition.fetch.bytes": "max_partition_fetch_bytes",
    "request.timeout.ms": "request_timeout_ms",
    "retry.backoff.ms": "retry_backoff_ms",
    "metadata.max.age.ms": "metadata_max_age_ms",
    "connections.max.idle.ms": "connections_max_idle_ms",
    "isolation.level": "isolation_level",
    "check.crcs": "check_crcs",
    "group.instance.id": "group_instance_id",
    "rebalance.timeout.ms": "rebalance_timeout_ms",
}
_SSL_KEYS = {
    "ssl.ca.location": "cafile",
    "ssl.certificate.location": "certfile",
    "ssl.key.location": "keyfile",
    "ssl.key.password": "password",
}


def _plain(value: Any) -> Any:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def supported_keys() -> list[str]:
    """The ``kafka.consumer_config`` keys kstage translates to aiokafka, sorted."""
    return sorted([*_KEYS, *_SSL_KEYS])


def unsupported_keys(consumer_config: Mapping[str, Any]) -> list[str]:
    """The keys of ``consumer_config`` that :func:`client_kwargs` refuses, in order."""
    return [key for key in consumer_config if key not in _KEYS and key not in _SSL_KEYS]


def client_kwargs(consumer_config: dict[str, Any]) -> dict[str, Any]:
    """Translate Kafka client keys to aiokafka keyword arguments.

    Raises:
        FatalError: a key is unknown or not supported by aiokafka.
    """
    kwargs: dict[str, Any] = {}
    ssl: dict[str, Any] = {}
    for key, value in consumer_config.items():
        if key in _KEYS:
            kwargs[_KEYS[key]] = _plain(value)
        elif key in _SSL_KEYS:
            ssl[_SSL_KEYS[key]] = _plain(value)
        else:
            raise FatalError(
                f"kafka.consumer_config: key {key!r} is not supported "
                f"(supported: {', '.join(supported_keys())})"
            )
    if ssl or str(kwargs.get("security_protocol", "")).upper() in ("SSL", "SASL_SSL"):
        kwargs["ssl_context"] = create_ssl_context(**ssl)
    return kwargs


def rebalance_timeout_ms(settings: Settings, group: GroupSettings) -> int:
    """The consumer's rebalance timeout: ``kafka.consumer_config``'s
    ``rebalance.timeout.ms`` when set, else the group's ``rebalance_timeout_ms``."""
    value = settings.kafka.consumer_config.get("rebalance.timeout.ms")
    return group.rebalance_timeout_ms if value is None else int(_plain(value))


def build_consumer(
    settings: Settings, group: GroupSettings, bootstrap: str, client_suffix: str
) -> AIOKafkaConsumer:
    """An unstarted consumer of ``group``; auto-commit only in commit mode ``auto``.

    ``client_suffix`` (the worker's topic) also suffixes ``group.instance.id``."""
    auto = group.commit.mode is CommitMode.AUTO
    kwargs = client_kwargs(settings.kafka.consumer_config)
    # Explicit: aiokafka's default is session_timeout_ms, shorter than a revoke's drain.
    kwargs["rebalance_timeout_ms"] = rebalance_timeout_ms(settings, group)
    if kwargs.get("group_instance_id"):
        kwargs["group_instance_id"] = f"{kwargs['group_instance_id']}-{client_suffix}"
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id=f"{settings.kafka.client_id}-{client_suffix}",
        group_id=settings.group_id(group),
        enable_auto_commit=auto,
        auto_commit_interval_ms=int(group.commit.max_interval_s * 1000),
        auto_offset_reset=group.auto_offset_reset,
        max_poll_records=group.max_poll_records,
        max_poll_interval_ms=group.max_poll_interval_ms,
        session_timeout_ms=group.session_timeout_ms,
        heartbeat_interval_ms=group.heartbeat_interval_ms,
        fetch_max_wait_ms=group.fetch_max_wait_ms,
        **kwargs,
    )


def coordinator_known(consumer: AIOKafkaConsumer) -> bool:
    """Whether the consumer knows its group coordinator: False from the moment a request
    to the coordinator failed (broker down, unreachable, or moving the group) until a
    new lookup succeeded. aiokafka has no public accessor for this; the attribute has
    been stable across its 0.x releases and the version is pinned in pyproject.toml."""
    coordinator = consumer._coordinator
    return coordinator is None or coordinator.coordinator_id is not None

