"""SASL/OAUTHBEARER token providers: the plugin contract, their registry, and the cache
that hands aiokafka a fresh token.

A configuration names a provider with ``sasl.oauthbearer.method`` in
``kafka.consumer_config``; every other ``sasl.oauthbearer.*`` key is the provider's option
(the prefix dropped, dots as underscores: ``sasl.oauthbearer.client.id`` is
``client_id``), validated by its ``options_model``::

    kafka:
      consumer_config:
        security.protocol: SASL_SSL
        sasl.mechanism: OAUTHBEARER
        sasl.oauthbearer.method: oidc           # the built-in: OIDC client credentials
        sasl.oauthbearer.token.endpoint.url: https://idp.example.com/oauth2/token
        sasl.oauthbearer.client.id: kstage
        sasl.oauthbearer.client.secret: ${OIDC_CLIENT_SECRET}
        sasl.oauthbearer.scope: kafka

Providers are found through the entry-point group ``kstage.token_providers`` (the
built-in ``oidc`` too, one path), so a cloud IAM login (Amazon MSK IAM, Azure Event Hubs)
is a plugin: a :class:`TokenProvider` subclass that returns a :class:`Token`
(docs/security.md, ``examples/kstage-example-token-provider``).

aiokafka asks for a token at every new connection and never re-authenticates one.
:class:`CachedTokens` (one per configuration and process, shared by the consumers, the
dead-letter producer and the probe) fetches a new token when it has none or the one it
has is in the last fifth of its lifetime, so a token handed out is never about to
expire; a broker that enforces expiry (``connections.max.reauth.ms``) closes a
connection when its token expires, and the new connection gets the fresh one. A failed
fetch is remembered for ``/readyz`` and raised to aiokafka as a connection error, which
it retries. After a failed fetch no other is made for a backoff (0.5 s doubling to 10 s,
half of it random): aiokafka asks at every connection attempt, dozens a second while the
brokers cannot be reached, and without it every one of them would be a request to an
identity provider that is down or just coming back, from every process of the group.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from typing import Any, ClassVar

from aiokafka.abc import AbstractTokenProvider
from aiokafka.errors import KafkaConnectionError
from pydantic import BaseModel, SecretStr, ValidationError

from actors.backoff import Jitter, backoff_s
from actors.kafka_keys import OAUTH_PREFIX
from settings.plugins import DuplicatePlugin, pick, registered

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "kstage.token_providers"
PREFIX = OAUTH_PREFIX
METHOD_KEY = "sasl.oauthbearer.method"
_REFRESH_AT = 0.8  # of a token's lifetime: fetch a new one from then on
_RETRY_MIN_S, _RETRY_MAX_S = 0.5, 10.0  # the wait after a failed fetch (see the module doc)


@dataclass(frozen=True)
class Token:
    """An access token and when it expires (Unix time, seconds)."""

    value: str
    expires_at: float


class TokenError(Exception):
    """No token could be had. ``refused``: the identity provider refused the client's
    credentials (a configuration error at start), not an outage."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class TokenProvider(ABC):
    """A source of OAUTHBEARER tokens (a plugin: entry point ``kstage.token_providers``).

    Subclasses set ``name`` and ``options_model`` and implement :meth:`fetch`; kstage
    caches the tokens and decides when to fetch (see :class:`CachedTokens`).

    Args:
        options: the validated ``options_model`` instance.
    """

    name: ClassVar[str]
    options_model: ClassVar[type[BaseModel]]
    where: str = "token provider"

    def __init__(self, options: BaseModel) -> None:
        self.options = options

    @abstractmethod
    async def fetch(self) -> Token:
        """A new token. Raise :class:`TokenError` (``refused=True`` when the credentials
        were refused) when there is none to be had."""

    def extensions(self) -> dict[str, str]:
        """SASL extensions sent with the token (KIP-342), e.g. a logical cluster id."""
        return {}

    def describe(self) -> str:
        """Where tokens come from, for messages (never a secret)."""
        return f"token provider {self.name!r}"


def _entry_points() -> dict[str, list[EntryPoint]]:
    return registered(ENTRY_POINT_GROUP)


def available() -> list[str]:
    """The installed token providers' names."""
    return sorted(_entry_points())


def provider_class(method: str) -> type[TokenProvider]:
    """The provider registered as ``method``; ValueError naming the installed ones."""
    try:
        ep = pick(_entry_points().get(method), method, "token provider")
    except DuplicatePlugin as exc:
        raise ValueError(str(exc)) from None
    if ep is None:
        raise ValueError(f"unknown token provider {method!r} (installed: "
                         f"{', '.join(available()) or 'none'})")
    try:
        cls = ep.load()
    except Exception as exc:  # any import failure is a registry problem
        raise ValueError(f"token provider {method!r} ({ep.value}) failed to import: "
                         f"{exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, TokenProvider)):
        raise ValueError(f"token provider {method!r} ({ep.value}) is not a "
                         "TokenProvider subclass")
    return cls


def option_name(key: str) -> str:
    """``sasl.oauthbearer.client.id`` -> ``client_id``."""
    return key.removeprefix(PREFIX).replace(".", "_")


def _plain(value: Any) -> Any:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def options_problems(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What is wrong with the ``sasl.oauthbearer.*`` keys, as (key, why) pairs."""
    method = config.get(METHOD_KEY)
    if method is None:
        return []
    try:
        cls = provider_class(str(method))
    except ValueError as exc:
        return [(METHOD_KEY, str(exc))]
    keys = {option_name(k): k for k in config if k.startswith(PREFIX) and k != METHOD_KEY}
    try:
        cls.options_model.model_validate({name: _plain(config[k]) for name, k in keys.items()})
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            name = str(error["loc"][0]) if error["loc"] else ""
            key = keys.get(name, PREFIX + name.replace("_", "."))
            problems.append((key, f"{error['msg']} (token provider {method!r})"))
        return problems
    return []


def build_provider(config: Mapping[str, Any]) -> TokenProvider:
    """The provider ``config`` names, built with its options (checked: see
    :func:`options_problems`)."""
    cls = provider_class(str(config[METHOD_KEY]))
    options = {option_name(k): _plain(v) for k, v in config.items()
               if k.startswith(PREFIX) and k != METHOD_KEY}
    return cls(cls.options_model.model_validate(options))


class CachedTokens(AbstractTokenProvider):  # type: ignore[misc]
    """What aiokafka is given: the provider's tokens, fetched when needed (see the
    module doc). ``error`` says why the last fetch failed (None: it did not)."""

    def __init__(self, provider: TokenProvider, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.provider = provider
        self._clock = clock  # the wall clock that tokens' expiry times are on
        self._token: Token | None = None
        self._fetched_at = 0.0
        self.error: str | None = None
        self.failing_since: float | None = None
        self.fetches = 0
        self._lock = asyncio.Lock()
        self._failures = 0  # failed fetches in a row
        self._last_failure: TokenError | None = None
        self._retry_at = 0.0  # time.monotonic() before which a failed fetch is not retried

    def _fresh(self, token: Token) -> bool:
        lifetime = max(token.expires_at - self._fetched_at, 0.0)
        return self._clock() < self._fetched_at + lifetime * _REFRESH_AT

    async def token(self) -> str:
        held = self._token
        if held is not None and self._fresh(held):
            return held.value
        async with self._lock:  # connections made at once share one fetch
            return await self._token_locked()

    async def _token_locked(self) -> str:
        held = self._token
        if held is not None and self._fresh(held):
            return held.value  # fetched while this one waited
        try:
            failure = self._last_failure
            if failure is not None and time.monotonic() < self._retry_at:
                # The last fetch failed just now: no request before its wait is over.
                raise TokenError(str(failure), refused=failure.refused)
            token = await self.fetch()
        except TokenError as exc:
            if held is not None and self._clock() < held.expires_at:
                # Not fresh, not expired either: used while the endpoint is out.
                logger.warning("%s: %s; the current token is valid for %.0fs more",
                               self.provider.describe(), exc, held.expires_at - self._clock())
                return held.value
            raise KafkaConnectionError(f"no OAUTHBEARER token: {exc}") from exc
        return token.value

    async def fetch(self) -> Token:
        """A new token from the provider (TokenError remembered in :attr:`error`)."""
        try:
            token = await self.provider.fetch()
        except TokenError as exc:
            self.error = f"{self.provider.describe()}: {exc}"
            self.failing_since = self.failing_since or time.monotonic()
            self._last_failure = exc
            self._retry_at = time.monotonic() + backoff_s(
                self._failures, _RETRY_MIN_S, _RETRY_MAX_S, Jitter.EQUAL)
            self._failures += 1
            raise
        self._failures, self._last_failure = 0, None
        self.fetches += 1
        self._token, self._fetched_at = token, self._clock()
        if self.error is not None:
            logger.info("%s: a token again", self.provider.describe())
        self.error, self.failing_since = None, None
        logger.debug("%s: new token, valid for %.0fs", self.provider.describe(),
                     token.expires_at - self._fetched_at)
        return token

    def extensions(self) -> dict[str, str]:
        return self.provider.extensions()

    @property
    def unusable(self) -> str | None:
        """Why no token can be handed out now: the last fetch failed and no token held
        is still valid (None: a token can be)."""
        held = self._token
        if self.error is None or (held is not None and self._clock() < held.expires_at):
            return None
        return self.error


_shared: dict[tuple[tuple[str, str], ...], CachedTokens] = {}


def cached_tokens(config: Mapping[str, Any]) -> CachedTokens:
    """The process's one :class:`CachedTokens` of these ``sasl.oauthbearer.*`` settings
    (the consumers, the dead-letter producer and the probe share its token)."""
    key = tuple(sorted((k, str(_plain(v))) for k, v in config.items() if k.startswith(PREFIX)))
    if key not in _shared:
        _shared[key] = CachedTokens(build_provider(config))
    return _shared[key]


def token_errors() -> list[str]:
    """Why the process's token providers cannot hand out a token now (empty: they
    can, or there are none)."""
    return [error for cache in _shared.values() if (error := cache.unusable) is not None]


__all__ = ["ENTRY_POINT_GROUP", "CachedTokens", "Token", "TokenError", "TokenProvider",
           "available", "build_provider", "cached_tokens", "options_problems",
           "provider_class", "token_errors"]
