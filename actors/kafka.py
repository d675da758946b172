"""Building aiokafka consumers from kstage settings.

``kafka.consumer_config`` takes Kafka's own dotted client keys (``security.protocol``,
``sasl.mechanism``, ``ssl.ca.location`` ...) so configs port from other Kafka clients.
They are translated to aiokafka's keyword arguments here; a key aiokafka cannot honour
is an error at start, naming the key, instead of being silently ignored.

``group.instance.id`` (static membership) names one member of a group, but every worker
is a member of its group: the configured id is a prefix, each worker's consumer uses
``<id>-<topic>``. Two workers of one group with the same id would fence each other.

Group membership: kstage fences a member's partitions once the group coordinator may
have given them to another member (:mod:`actors.worker.rebalance`), that is once no
heartbeat was answered for about ``session.timeout.ms``. aiokafka does not say when it
last heartbeated (it notices a silent coordinator only after ``request.timeout.ms``), so
the consumer records the send time of every answered heartbeat
(:meth:`GroupMember.last_heartbeat`).

Security failures at start are configuration errors, not outages: when the consumer
cannot bootstrap, one probe connection to the first bootstrap server tells a refused
login or a failed certificate check (:class:`KafkaSecurityError`, naming the setting to
fix; the process exits 2 without restarting the worker, because the same credentials
and certificates would fail the same way on every restart) from an unreachable broker
(aiokafka's own error, retried by the supervisor as before).

A moved leader: aiokafka's fetcher resets a partition's position (no committed offset, a
seek to the beginning or the end, an offset out of range) with a ListOffsets request to
the leader its metadata names. When that broker answers that it is not the leader, the
fetcher logs ``Failed fetch offsets``, waits ``retry_backoff_ms`` and asks the same broker
again, without refreshing its metadata (its fetches and ``offsets_for_times`` do refresh
on that error). Metadata read while a killed broker still led the partition (its
leaderships move only after the controller fenced it), then that broker back up as a
follower: the partition, and every other partition of the member led by that broker, no
longer moved until ``metadata.max.age.ms`` (5 min) passed. Seen in the chaos run on the
3-node cluster. The consumer refreshes its metadata on that answer
(:class:`LeaderFollowingConsumer`: the workers' consumers and ``kstage dlq``'s reader of a
dead-letter topic), as Kafka's Java client does (KAFKA-9535).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.conn import create_conn
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.helpers import create_ssl_context
from pydantic import SecretStr

from actors import inflate
from actors.errors import FatalError
from actors.kafka_keys import KEYS, OAUTH_PREFIX, SSL_KEYS, supported_keys
from actors.tokens import CachedTokens, TokenError, cached_tokens
from settings.models import CommitMode, GroupSettings, Settings

logger = logging.getLogger(__name__)
_PROBE_TIMEOUT_S = 10.0
_CONFIG = "kafka.consumer_config"


class KafkaSecurityError(FatalError):
    """The broker refused this client's login or certificate, or its own certificate
    failed verification: a configuration error (exit 2), never retried."""


def _plain(value: Any) -> Any:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


# aiokafka keywords that concern the connection (security, timeouts); the others in
# kafka.consumer_config (fetch sizes, isolation, group.instance.id ...) are consumer-only.
# group.instance.id in particular must never be reused: the tools would impersonate the
# service's static member.
CONNECTION_KEYS = frozenset({
    "security_protocol", "ssl_context", "sasl_mechanism", "sasl_plain_username",
    "sasl_plain_password", "sasl_kerberos_service_name", "sasl_kerberos_domain_name",
    "sasl_oauth_token_provider", "request_timeout_ms", "retry_backoff_ms",
    "metadata_max_age_ms", "connections_max_idle_ms",
})
_PROBE_KEYS = ("security_protocol", "ssl_context", "sasl_mechanism", "sasl_plain_username",
               "sasl_plain_password", "sasl_kerberos_service_name",
               "sasl_kerberos_domain_name", "sasl_oauth_token_provider")


def connection_kwargs(consumer_config: dict[str, Any]) -> dict[str, Any]:
    """The connection keywords (security, timeouts) of :func:`client_kwargs`, for the
    producers and standalone clients that talk to the consumer's brokers."""
    kwargs = client_kwargs(consumer_config)
    return {k: v for k, v in kwargs.items() if k in CONNECTION_KEYS}


def client_kwargs(consumer_config: dict[str, Any]) -> dict[str, Any]:
    """Translate Kafka client keys to aiokafka keyword arguments.

    Raises:
        FatalError: a key is unknown or not supported by aiokafka.
    """
    kwargs: dict[str, Any] = {}
    ssl_files: dict[str, Any] = {}
    for key, value in consumer_config.items():
        if key.startswith(OAUTH_PREFIX):
            continue  # the token provider's: see below
        if key in KEYS:
            kwargs[KEYS[key]] = _plain(value)
        elif key in SSL_KEYS:
            ssl_files[SSL_KEYS[key]] = _plain(value)
        else:
            raise FatalError(
                f"kafka.consumer_config: key {key!r} is not supported "
                f"(supported: {', '.join(supported_keys())})"
            )
    if kwargs.get("sasl_mechanism") == "OAUTHBEARER":
        kwargs["sasl_oauth_token_provider"] = cached_tokens(consumer_config)
    if ssl_files or str(kwargs.get("security_protocol", "")).upper() in ("SSL", "SASL_SSL"):
        try:
            kwargs["ssl_context"] = create_ssl_context(**ssl_files)
        except (OSError, ValueError) as exc:  # validate loads them too: changed since?
            raise KafkaSecurityError(f"{_CONFIG}: cannot load the ssl.* files: {exc}") from exc
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
    inflate.install(settings.kafka.max_batch_inflated_bytes)  # the process's batches
    kwargs = client_kwargs(settings.kafka.consumer_config)
    # Explicit: aiokafka's default is session_timeout_ms, shorter than a revoke's drain.
    kwargs["rebalance_timeout_ms"] = rebalance_timeout_ms(settings, group)
    if kwargs.get("group_instance_id"):
        kwargs["group_instance_id"] = f"{kwargs['group_instance_id']}-{client_suffix}"
    return _Consumer(
        settings.kafka.consumer_config,
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


class GroupMember(Protocol):
    """What a worker needs of its consumer's group membership beyond aiokafka's API
    (:func:`build_consumer`'s consumers; the tests' fake consumer)."""

    def last_heartbeat(self) -> float | None:
        """``time.monotonic()`` when the last heartbeat the coordinator answered was
        sent (None: none yet). The coordinator cannot have expired the member's session
        before that time plus ``session.timeout.ms``."""

    def rejoin(self) -> None:
        """Leave the current generation: revoke the assignment (the rebalance listener
        is called) and join the group again at the next poll; positions are then read
        from the committed offsets."""

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partitions of ``topic`` in the consumer's metadata (None: unknown)."""

    def refresh_metadata(self) -> None:
        """Ask for the cluster's metadata now (in the background), not only every
        ``metadata.max.age.ms``."""

    def leader_of(self, tp: TopicPartition) -> int | None:
        """The broker leading ``tp`` in the consumer's metadata: ``-1`` when it has none
        (no in-sync replica is up), None when the metadata does not know the partition."""

    async def diagnose(self) -> str | None:
        """Why the brokers refuse this client, when the reason is a security setting
        (a refused login, certificate or token); None otherwise (see :func:`diagnose`)."""


class LeaderFollowingConsumer(AIOKafkaConsumer):  # type: ignore[misc]
    """A consumer whose position resets follow a moved leader (the module doc): every
    consumer of kstage that resets positions (the workers', ``kstage dlq``'s reader of a
    dead-letter topic) is one."""

    async def start(self) -> None:
        await super().start()
        self._follow_moved_leaders()

    def _follow_moved_leaders(self) -> None:
        """Refresh the metadata when a position reset's ListOffsets request meets stale
        leadership (the module doc). Wraps the fetcher's request (aiokafka has no hook
        for it; the method has been stable across its 0.x releases, the version is
        pinned); the fetcher still logs the error and retries after its backoff."""
        fetcher = self._fetcher
        request = fetcher._proc_offset_request
        client = self._client

        async def refreshed(node_id: int, topic_data: Any) -> Any:
            try:
                return await request(node_id, topic_data)
            except KafkaError as exc:
                if exc.invalid_metadata:  # not the leader, unknown partition, no leader
                    client.force_metadata_update()  # one update for concurrent callers
                raise

        fetcher._proc_offset_request = refreshed


class _Consumer(LeaderFollowingConsumer):
    """A worker's consumer: its failed start says why when the reason is a security
    setting, it records when its heartbeats were answered (:class:`GroupMember`), and
    its position resets follow a moved leader."""

    def __init__(self, consumer_config: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._probe_kwargs = {k: v for k, v in kwargs.items() if k in _PROBE_KEYS}
        self._consumer_config = consumer_config
        self._bootstrap = str(kwargs["bootstrap_servers"])
        self._heartbeat_answered: float | None = None

    async def start(self) -> None:
        try:
            await super().start()
        except KafkaConnectionError as exc:
            reason = await diagnose(self._bootstrap, self._consumer_config,
                                    self._probe_kwargs)
            await self.stop()  # never started: close its client (no "Unclosed" at exit)
            if reason is None:
                raise
            raise KafkaSecurityError(reason) from exc
        self._record_heartbeats()

    def _record_heartbeats(self) -> None:
        """Wrap the group coordinator's heartbeat (aiokafka has no hook for it; the
        method has been stable across its 0.x releases, the version is pinned)."""
        coordinator = self._coordinator
        if coordinator is None:  # no group: nothing to heartbeat
            return
        heartbeat = coordinator._do_heartbeat

        async def recorded() -> bool:
            sent = time.monotonic()
            answered = bool(await heartbeat())  # True also for "rebalancing": a member
            if answered:
                self._heartbeat_answered = max(self._heartbeat_answered or sent, sent)
            return answered

        coordinator._do_heartbeat = recorded

    def last_heartbeat(self) -> float | None:
        return self._heartbeat_answered

    def rejoin(self) -> None:
        coordinator = self._coordinator
        if coordinator is not None:
            coordinator.request_rejoin()

    def refresh_metadata(self) -> None:
        self._client.force_metadata_update()  # a future the background task resolves

    def leader_of(self, tp: TopicPartition) -> int | None:
        # The metadata aiokafka keeps: refreshed by the fetcher while a partition has no
        # leader, so it names the new one as soon as the brokers elect it.
        leader = self._client.cluster.leader_for_partition(tp)
        return None if leader is None else int(leader)

    async def diagnose(self) -> str | None:
        return await diagnose(self._bootstrap, self._consumer_config, self._probe_kwargs)


async def _tls_probe(host: str, port: int, context: ssl.SSLContext) -> None:
    """A TLS connection and one ApiVersions round trip: the server's verdict on our
    client certificate arrives after the handshake in TLS 1.3, with the first read."""
    reader, writer = await asyncio.open_connection(host, port, ssl=context)
    try:
        # ApiVersions v0: api_key 18, version 0, correlation id 1, client id "kstage".
        request = b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x06kstage"
        writer.write(len(request).to_bytes(4, "big") + request)
        await writer.drain()
        await reader.readexactly(4)
    finally:
        writer.close()


def _setting(config: dict[str, Any], *keys: str) -> str:
    """``kafka.consumer_config['KEY'] (VALUE)`` of the first key set, for messages."""
    for key in keys:
        if config.get(key) is not None:
            value = config[key]
            shown = "" if isinstance(value, SecretStr) else f" ({value})"
            return f"{_CONFIG}['{key}']{shown}"
    return f"{_CONFIG}['{keys[0]}'] (not set)"


async def diagnose(bootstrap: str, config: dict[str, Any], kwargs: dict[str, Any]
                   ) -> str | None:
    """Why the first bootstrap server refuses us, when the reason is a security setting;
    None when it is something else (unreachable, timeout): that stays retriable."""
    host, _, port_text = bootstrap.split(",")[0].strip().rpartition(":")
    port = int(port_text)
    where = f"the broker at {host}:{port}"
    protocol = kwargs.get("security_protocol", "PLAINTEXT")
    context = kwargs.get("ssl_context")
    tokens = kwargs.get("sasl_oauth_token_provider")
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT_S):
            if context is not None and protocol in ("SSL", "SASL_SSL"):
                await _tls_probe(host, port, context)
            if isinstance(tokens, CachedTokens):
                await tokens.fetch()  # the identity provider's verdict first
            if protocol.startswith("SASL_"):
                conn = await create_conn(host, port, client_id="kstage-probe", **kwargs)
                conn.close()
    except TokenError as exc:
        if not exc.refused:
            return None  # the identity provider is out: retried, shown in /readyz
        return (f"{tokens.provider.describe()} {exc}; check "  # type: ignore[union-attr]
                f"{_CONFIG}['sasl.oauthbearer.client.id'] and "
                f"{_CONFIG}['sasl.oauthbearer.client.secret'] (and the scope)")
    except ssl.SSLCertVerificationError as exc:
        return (f"{where}: its TLS certificate failed verification ({exc.verify_message}); "
                f"check {_setting(config, 'ssl.ca.location')} (the CA that signed the "
                "broker's certificate) and the broker's certificate itself")
    except ssl.SSLError as exc:
        return (f"{where} refused the TLS connection ({exc.reason or exc}): check the "
                f"client certificate {_setting(config, 'ssl.certificate.location')} and "
                f"key {_setting(config, 'ssl.key.location')} (missing, expired, or not "
                "signed by a CA the broker trusts)")
    except SaslAuthenticationFailed as exc:
        if isinstance(tokens, CachedTokens):
            return (f"{where} refused the OAUTHBEARER token from "
                    f"{tokens.provider.describe()} ({exc}); check that the broker trusts "
                    "its issuer and audience (its JWKS, sasl.oauthbearer.expected.audience) "
                    f"and {_CONFIG}['sasl.oauthbearer.scope']")
        user = config.get("sasl.username", config.get("sasl.plain.username"))
        return (f"{where} refused the SASL login of user {user!r} with mechanism "
                f"{kwargs.get('sasl_mechanism')} ({exc}); check "
                f"{_CONFIG}['sasl.username'] and {_CONFIG}['sasl.password']")
    except UnsupportedSaslMechanismError as exc:
        return (f"{where} does not enable SASL mechanism {kwargs.get('sasl_mechanism')} "
                f"({exc}); check {_setting(config, 'sasl.mechanism', 'sasl.mechanisms')}")
    except Exception as exc:  # noqa: BLE001 - unreachable, timeout...: not ours to classify
        logger.debug("security probe of %s found nothing to blame: %r", where, exc)
        return None
    return None
