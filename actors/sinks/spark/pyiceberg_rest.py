"""The ``rest`` catalog of ``spark.catalog`` opened with pyiceberg (``spark.appends:
pyiceberg``), without a JVM: the REST catalog server Spark's session talks to, at the same
``uri`` with the same ``warehouse``, its tables' files written with ``spark.catalog.s3``.

* :func:`rest_properties`: pyiceberg's ``RestCatalog`` properties of ``spark.catalog``
  (``uri``, ``warehouse``, the S3 ones as :func:`~actors.sinks.spark.pyiceberg_catalog.
  catalog_properties` gives them; of ``spark.catalog.properties`` those meaning the same to
  pyiceberg as to Iceberg's Java client: ``header.*`` and, without ``oauth2``, the login
  ones, ``credential``, ``token``, ``oauth2-server-uri``, ``scope``, ``audience``);
* ``spark.catalog.oauth2``: :class:`CatalogTokens` logs in as Iceberg's Java client does
  (a client-credentials grant with ``client_secret_post``, the scope and audience), keeps
  the token and gets a new one once 80 % of its lifetime (``expires_in``, else the JWT's
  ``exp``) has passed; a refresh that fails while the token is still valid keeps it. The
  REST server refusing the token (401, or 419 credentials timed out) drops it: the call is
  made again once with a new one (pyiceberg does so for the calls it retries; the commit,
  which it does not retry, is made again here: the server refused it before applying
  anything). No token to be had (the identity provider down, or refusing the client):
  :class:`CatalogLoginError`, naming the identity provider and never the secret; after a
  failed request no other is made for a backoff (0.5 s doubling to 10 s, half of it
  random: every staging table's retries would otherwise each be a request), and the next
  one after it may succeed: nothing is given up for good, the process recovers without a
  restart. The append that failed is a retriable sink error naming the identity provider
  (:meth:`~actors.sinks.spark.staging.StagingWriter._catalog_login`, as on the Spark path),
  shown in ``/readyz`` after ``sink_unready_after_s``;
* the commit-time fence (:func:`~actors.sinks.spark.iceberg.fence_violations`): the catalog
  is a ``RestCatalog`` whose ``commit_table`` checks, before anything is sent, that the
  snapshot's ``kstage.expect`` matches the offsets recorded by the metadata the commit is
  based on (the table as pyiceberg loaded it); the commit carries the requirement
  ``assert-ref-snapshot-id`` of ``main`` on that metadata (pyiceberg's append adds it; added
  here when absent), so the server applies it only on that very base: the compare-and-swap
  is the server's. A base that moved meanwhile is a 409 (``CommitFailedException``), which
  pyiceberg's transaction retries on the reloaded table, the fence checked again on it.

pyiceberg is imported only inside functions.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from actors.backoff import Jitter, backoff_s
from actors.sinks.spark import carried_offsets, catalog_auth, iceberg
from actors.sinks.spark.catalog import catalog_uri, warehouse_location
from actors.sinks.spark.pyiceberg_catalog import s3_properties
from settings.catalog_oauth import OAUTH2_PROPERTIES
from settings.models import CatalogOAuth2Settings, SparkSettings

logger = logging.getLogger(__name__)

REFRESH_AT = 0.8
"""Of a token's lifetime: a new one is asked for from then on."""
RETRY_MIN_S, RETRY_MAX_S = 0.5, 10.0
"""The wait after a failed token request, doubling (see the module docstring)."""
TOKEN_TIMEOUT_S = 10.0
"""How long a token request waits for the identity provider."""
SHARED_LOGIN = tuple(k for k in OAUTH2_PROPERTIES
                     if k not in ("token-refresh-enabled", "token-exchange-enabled"))
"""``spark.catalog.properties`` of the login that pyiceberg's ``RestCatalog`` reads as
Iceberg's Java client does (passed on when ``oauth2`` is not set)."""


class CatalogLoginError(Exception):
    """No token for the REST catalog. ``refused``: the identity provider refused the client
    credentials (a configuration error), not an outage."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


class CatalogTokens:
    """The REST catalog's bearer tokens from ``spark.catalog.oauth2`` (see the module
    docstring); thread-safe. ``clock``: monotonic seconds (tests pass their own)."""

    def __init__(self, oauth2: CatalogOAuth2Settings, *,
                 clock: Callable[[], float] = time.monotonic,
                 timeout_s: float = TOKEN_TIMEOUT_S) -> None:
        self.oauth2 = oauth2
        self.issued = 0  # tokens received
        self._clock = clock
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._token: str | None = None
        self._refresh_at: float | None = None  # None: only when the server refuses it
        self._expires_at: float | None = None
        self._failures = 0
        self._retry_at = 0.0
        self._error: CatalogLoginError | None = None

    def __repr__(self) -> str:  # never the token nor the secret
        return (f"<CatalogTokens {self.oauth2.token_url} client={self.oauth2.client_id} "
                f"held={self._token is not None} failures={self._failures}>")

    def _usable(self, now: float) -> bool:
        return self._token is not None and (self._expires_at is None
                                            or now < self._expires_at)

    def token(self) -> str:
        """A token not in the last fifth of its lifetime (asked for when needed), or the
        one held while it is valid and a new one cannot be had; CatalogLoginError when
        there is none."""
        with self._lock:
            now = self._clock()
            if self._token is not None and (self._refresh_at is None
                                            or now < self._refresh_at):
                return self._token
            if self._error is not None and now < self._retry_at:
                if self._usable(now):
                    return str(self._token)
                raise CatalogLoginError(str(self._error), refused=self._error.refused)
            try:
                token, lifetime = self._fetch()
            except CatalogLoginError as exc:
                self._failures += 1
                self._retry_at = now + backoff_s(self._failures - 1, RETRY_MIN_S,
                                                 RETRY_MAX_S, Jitter.EQUAL)
                self._error = exc
                if self._usable(now):
                    logger.warning("pyiceberg: a new token for the REST catalog cannot be "
                                   "had (%s); the one held is used until it expires", exc)
                    return str(self._token)
                raise
            if self._error is not None:
                logger.warning("pyiceberg: the REST catalog's identity provider %s gives "
                               "tokens again", self.oauth2.token_url)
            self._failures, self._error = 0, None
            self._token = token
            self.issued += 1
            if lifetime is None or lifetime <= 0:
                self._refresh_at = self._expires_at = None
            else:
                self._refresh_at = now + REFRESH_AT * lifetime
                self._expires_at = now + lifetime
            return token

    def refused(self) -> None:
        """The REST server refused the token held (401/419): the next call asks for a new
        one (the backoff after a failed request still holds)."""
        with self._lock:
            self._token = self._refresh_at = self._expires_at = None

    def _fetch(self) -> tuple[str, float | None]:
        """A new token and its lifetime in seconds (None: unknown)."""
        oauth2 = self.oauth2
        try:
            response = httpx.post(oauth2.token_url, data=catalog_auth.token_form(oauth2),
                                  timeout=self._timeout_s)
        except httpx.HTTPError as exc:
            text, refused = catalog_auth.token_failure(oauth2, exc)
            raise CatalogLoginError(text, refused=refused) from None
        if response.status_code != 200:
            text, refused = catalog_auth.token_failure(oauth2, response)
            raise CatalogLoginError(text, refused=refused)
        try:
            body = response.json()
            token = body["access_token"]
            if not isinstance(token, str) or not token:
                raise TypeError(token)
        except (ValueError, KeyError, TypeError):
            raise CatalogLoginError(
                f"the REST catalog's identity provider {oauth2.token_url} answered "
                "without an access token") from None
        expires_in = body.get("expires_in")
        if isinstance(expires_in, int | float) and not isinstance(expires_in, bool):
            return token, float(expires_in)
        from actors.oidc import jwt_expiry  # not at import: it loads aiokafka (validate)

        expiry = jwt_expiry(token)
        return token, None if expiry is None else expiry - time.time()


def rest_properties(settings: SparkSettings) -> dict[str, str]:
    """pyiceberg's ``RestCatalog`` properties of ``spark.catalog`` (see the module
    docstring; ``spark.catalog.oauth2`` is not among them: :class:`CatalogTokens`)."""
    catalog = settings.catalog
    props = {"uri": catalog_uri(settings), "warehouse": warehouse_location(settings),
             **s3_properties(settings)}
    for key, value in catalog.properties.items():
        if key.startswith("header.") or (catalog.oauth2 is None and key in SHARED_LOGIN):
            props[key] = value
    return props


def _main_asserted(metadata: Any, requirements: tuple[Any, ...]) -> tuple[Any, ...]:
    """``requirements`` with ``assert-ref-snapshot-id`` of ``main`` at ``metadata``'s
    (pyiceberg's append has it already; added when absent)."""
    from pyiceberg.table.update import AssertRefSnapshotId  # only with appends: pyiceberg

    if any(isinstance(r, AssertRefSnapshotId) and r.ref == "main" for r in requirements):
        return requirements
    main = metadata.refs.get("main")
    return (*requirements, AssertRefSnapshotId(
        ref="main", snapshot_id=main.snapshot_id if main is not None else None))


@functools.cache
def _fenced_rest_class() -> type[Any]:
    from pyiceberg.catalog.rest import RestCatalog  # only with appends: pyiceberg
    from pyiceberg.catalog.rest.auth import AuthManager, AuthManagerAdapter
    from pyiceberg.exceptions import AuthorizationExpiredError, UnauthorizedError

    from actors.sinks.spark.pyiceberg_catalog import (
        expected_offsets,
        fence_error,
        recorded_offsets,
    )

    class TokenAuth(AuthManager):
        """pyiceberg's ``AuthManager`` of :class:`CatalogTokens`."""

        def __init__(self, tokens: CatalogTokens) -> None:
            self.tokens = tokens

        def auth_header(self) -> str:
            return f"Bearer {self.tokens.token()}"

    class FencedRestCatalog(RestCatalog):
        """``RestCatalog`` logged in by :class:`CatalogTokens`, whose commits obey
        ``kstage.expect`` (the module docstring)."""

        def __init__(self, name: str, tokens: CatalogTokens | None,
                     **properties: str) -> None:
            self.tokens = tokens  # before the config request, which needs a token
            super().__init__(name, **properties)

        def _create_session(self) -> Any:
            session = super()._create_session()
            if self.tokens is not None:
                self._auth_manager = TokenAuth(self.tokens)
                session.auth = AuthManagerAdapter(self._auth_manager)
            return session

        def _refresh_token(self) -> None:
            # pyiceberg's retry of a call the server answered 401 or 419.
            if self.tokens is None:
                super()._refresh_token()
                return
            logger.warning("pyiceberg: the REST catalog refused the token: a new one "
                           "from %s", self.tokens.oauth2.token_url)
            self.tokens.refused()

        def commit_table(self, table: Any, requirements: Any, updates: Any) -> Any:
            expected = expected_offsets(updates)
            if expected:
                violations = iceberg.fence_violations(
                    expected, recorded_offsets(table.metadata))
                if violations:
                    name = ".".join((self.name, *table.name()))
                    raise fence_error(iceberg.fence_message(name, violations))
            # the offsets carried forward from this very base (a retry's base moved),
            # which the server must then apply the commit on
            original = tuple(updates)
            redone = carried_offsets.onto(table.metadata, original)
            if expected or redone is not original:
                requirements = _main_asserted(table.metadata, tuple(requirements))
            updates = redone
            try:
                return super().commit_table(table, requirements, updates)
            except (UnauthorizedError, AuthorizationExpiredError):
                if self.tokens is None:
                    raise
                self._refresh_token()  # refused before anything was applied: again
                return super().commit_table(table, requirements, updates)

    return FencedRestCatalog


def catalog_tokens(settings: SparkSettings) -> CatalogTokens | None:
    """The tokens of ``spark.catalog.oauth2`` (None: no oauth2), for
    :func:`open_rest_catalog`; kept by the caller across catalogs it opens (one that could
    not be opened is opened again with them: the backoff holds)."""
    oauth2 = settings.catalog.oauth2
    if settings.catalog.type != "rest" or oauth2 is None:
        return None
    return CatalogTokens(oauth2)


def open_rest_catalog(settings: SparkSettings, tokens: CatalogTokens | None) -> Any:
    """pyiceberg's ``RestCatalog`` of ``spark.catalog`` (type ``rest``) with the
    commit-time fence and, with ``tokens`` (:func:`catalog_tokens`), kstage's login (the
    module docstring); raises what the server or the identity provider answered (the
    caller's call fails and is retried)."""
    return _fenced_rest_class()(settings.catalog.name, tokens, **rest_properties(settings))


__all__ = ["REFRESH_AT", "CatalogLoginError", "CatalogTokens", "catalog_tokens",
           "open_rest_catalog",
           "rest_properties"]
