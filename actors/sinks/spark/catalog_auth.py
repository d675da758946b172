"""A REST catalog's OAuth2 login (``spark.catalog.oauth2``) kept alive in a running Spark
session, and its identity provider named when it fails.

Iceberg's REST client (the catalog properties :func:`~actors.sinks.spark.catalog.catalog_conf`
sets) gets a client-credentials token when the catalog is built and refreshes it before it
expires. When its refreshes keep failing (the identity provider down for longer than
Iceberg's few retries, about 3 s), it gives up for good: its token expires, and every
later call of that catalog is answered 401, forever, although the provider is back. So:

* :func:`login_refused`: whether a Spark call failed because the catalog refused the
  session's token (``NotAuthorizedException``, a 401; a 419, credentials timed out);
* :func:`forget_catalog` (Spark thread): the session's catalog instances dropped; the next
  statement builds the catalog again, which asks the identity provider for a new token with
  the client credentials (while the provider is down that fails, and the next call tries
  again: nothing half-built is kept). :class:`~actors.sinks.spark.actor.SparkActor` does it
  after such a failure, for every job of the session (appends, merge, maintenance);
* :func:`identity_provider_problem`: what is wrong with the identity provider, asked the
  way the catalog asks it (a client-credentials grant), for the error a failed append
  shows in ``/readyz``. Never the secret: the answer's text is the provider's error code;
* :func:`refused_at_start`: ``kstage run`` asks it once before it starts: credentials the
  provider refuses are the configuration's fault (exit 2, like a Kafka login the brokers
  refuse); the provider out of reach is an outage, which the appends retry.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx

from settings.models import CatalogOAuth2Settings, SparkSettings

logger = logging.getLogger(__name__)

# A 401 is Iceberg's NotAuthorizedException; a 419 (credentials timed out) has no class
# of its own: RESTException "Unable to process (code: 419, type: ...)".
_REFUSED = re.compile(r"NotAuthorizedException|\(code: 419\b")
PROBE_TIMEOUT_S = 5.0
# OAuth2 error codes (RFC 6749 §5.2) that say the client itself is refused.
_CLIENT_REFUSED = {"invalid_client", "unauthorized_client", "invalid_scope", "invalid_grant"}


def login_refused(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the catalog refused the
    session's token."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if _REFUSED.search(f"{type(seen).__name__}: {seen}"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def forget_catalog(spark: Any, settings: SparkSettings) -> None:
    """Spark thread: close the session's Iceberg catalog (its token refresh thread) and
    drop every catalog instance of the session; the next statement builds them from the
    session's configuration again (a new token)."""
    manager = spark._jsparkSession.sessionState().catalogManager()
    try:
        manager.catalog(settings.catalog.name).icebergCatalog().close()
    except Exception as exc:  # noqa: BLE001 - not built, or not closeable: dropped anyway
        logger.debug("spark: closing the catalog before it is built again: %s", exc)
    manager.reset()
    logger.warning("spark: the REST catalog refused the session's token: the catalog is "
                   "built again with a new token from %s", settings.catalog.oauth2.token_url
                   if settings.catalog.oauth2 is not None else "its identity provider")


def refused_at_start(oauth2: CatalogOAuth2Settings) -> str | None:
    """What ``kstage run`` refuses to start with: the identity provider refusing the client
    credentials (its reason). None when it gives a token, and when it fails otherwise (an
    outage at start: logged; the appends retry and ``/readyz`` names it)."""
    found = identity_provider_problem(oauth2)
    if found is None:
        return None
    problem, refused = found
    if refused:
        return problem
    logger.warning("spark.catalog.oauth2: %s at start; the appends retry it", problem)
    return None


def token_form(oauth2: CatalogOAuth2Settings) -> dict[str, str]:
    """The client-credentials grant Iceberg's REST clients send (``client_secret_post``:
    the secret in the form, never in a URL or a message)."""
    form = {"grant_type": "client_credentials", "client_id": oauth2.client_id,
            "client_secret": oauth2.client_secret.get_secret_value(), "scope": oauth2.scope}
    if oauth2.audience is not None:
        form["audience"] = oauth2.audience
    return form


def token_failure(oauth2: CatalogOAuth2Settings,
                  answer: httpx.Response | httpx.HTTPError) -> tuple[str, bool]:
    """What a token request that got no token says (``answer``: the provider's non-200
    answer, or the transport error): the text naming the identity provider, and whether
    it refused the client (True: the credentials; False: an outage). Never the secret:
    the text holds the provider's error code only."""
    where = f"the REST catalog's identity provider {oauth2.token_url}"
    if isinstance(answer, httpx.HTTPError):
        return f"{where} is unreachable ({type(answer).__name__})", False
    try:
        code = str(answer.json().get("error", ""))[:80]
    except (ValueError, AttributeError):
        code = ""
    refused = code in _CLIENT_REFUSED
    what = "refuses the client credentials" if refused else "fails"
    return (f"{where} {what} (HTTP {answer.status_code}{' ' + code if code else ''})",
            refused)


def identity_provider_problem(oauth2: CatalogOAuth2Settings,
                              timeout_s: float = PROBE_TIMEOUT_S) -> tuple[str, bool] | None:
    """Ask the token endpoint for a token as the catalog does; None when it gives one,
    else what is wrong and whether it refused the client (True: the credentials; False:
    an outage)."""
    try:
        response = httpx.post(oauth2.token_url, data=token_form(oauth2), timeout=timeout_s)
    except httpx.HTTPError as exc:
        return token_failure(oauth2, exc)
    if response.status_code == 200:
        return None
    return token_failure(oauth2, response)
