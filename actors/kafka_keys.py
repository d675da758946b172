"""The ``kafka.consumer_config`` keys kstage knows: Kafka's own dotted client keys and
the aiokafka keyword each becomes (:mod:`actors.kafka` builds the clients with them).

A module of its own, importing no Kafka client: ``kstage validate`` checks the keys
without loading aiokafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OAUTH_PREFIX = "sasl.oauthbearer."
"""The keys of the OAUTHBEARER token provider (:mod:`actors.tokens`), checked by it."""

# Kafka client key -> aiokafka keyword. Keys not listed are rejected at start.
KEYS: dict[str, str] = {
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
SSL_KEYS = {
    "ssl.ca.location": "cafile",
    "ssl.certificate.location": "certfile",
    "ssl.key.location": "keyfile",
    "ssl.key.password": "password",
}


def supported_keys() -> list[str]:
    """The ``kafka.consumer_config`` keys kstage translates to aiokafka, sorted."""
    return sorted([*KEYS, *SSL_KEYS])


def unsupported_keys(consumer_config: Mapping[str, Any]) -> list[str]:
    """The keys of ``consumer_config`` that :func:`client_kwargs` refuses, in order
    (``sasl.oauthbearer.*`` keys are the token provider's, checked by it)."""
    return [key for key in consumer_config if key not in KEYS and key not in SSL_KEYS
            and not key.startswith(OAUTH_PREFIX)]


__all__ = ["KEYS", "OAUTH_PREFIX", "SSL_KEYS", "supported_keys", "unsupported_keys"]
