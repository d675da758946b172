"""``actors.sinks.spark.catalog_auth``: what a failed append says of the REST catalog's
identity provider, asked on a real token endpoint (tests/oidc_server.py) that answers, is
down (503), refuses the client, or is not there; and which JVM errors are the catalog
refusing the session's token; the tokens of ``appends: pyiceberg`` on a REST catalog
(:class:`~actors.sinks.spark.pyiceberg_rest.CatalogTokens`) kept, refreshed, and with the
provider down or refusing. (The whole path, Spark and Nessie included:
test_rest_catalog_oauth.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from actors.sinks.spark.catalog_auth import identity_provider_problem, login_refused
from actors.sinks.spark.pyiceberg_rest import CatalogLoginError, CatalogTokens
from service.broker import free_port
from settings.models import CatalogOAuth2Settings
from tests.oidc_server import OidcServer

SECRET = "catalog-idp-secret-77"  # noqa: S105 - a test value, looked for in output
WRONG = "wrong-secret-value"


@pytest.fixture
def idp() -> Iterator[OidcServer]:
    with OidcServer({"kstage": SECRET}) as server:
        yield server


def oauth2(url: str, secret: str = SECRET) -> CatalogOAuth2Settings:
    return CatalogOAuth2Settings(token_url=url, client_id="kstage",
                                 client_secret=SecretStr(secret), allow_insecure_http=True)


def test_a_provider_that_gives_a_token_is_no_problem(idp: OidcServer) -> None:
    assert identity_provider_problem(oauth2(idp.token_url)) is None
    assert idp.issued == 1


def test_a_provider_down_is_named_as_an_outage(idp: OidcServer) -> None:
    idp.down = True
    found = identity_provider_problem(oauth2(idp.token_url))
    assert found == (f"the REST catalog's identity provider {idp.token_url} fails (HTTP 503 "
                     "temporarily_unavailable)", False)
    assert idp.unavailable == 1


def test_refused_credentials_are_named_as_such_without_the_secret(idp: OidcServer) -> None:
    found = identity_provider_problem(oauth2(idp.token_url, secret=WRONG))
    assert found is not None
    text, refused = found
    assert refused and "refuses the client credentials (HTTP 401 invalid_client)" in text
    assert WRONG not in text and SECRET not in text


def test_a_provider_not_there_is_unreachable() -> None:
    url = f"http://127.0.0.1:{free_port()}/token"
    found = identity_provider_problem(oauth2(url), timeout_s=2)
    assert found == (f"the REST catalog's identity provider {url} is unreachable "
                     "(ConnectError)", False)


def test_a_refused_token_is_told_from_other_failures() -> None:
    java = Exception("An error occurred while calling o93.append.\n: org.apache.iceberg."
                     "exceptions.NotAuthorizedException: Not authorized: ")
    wrapped = RuntimeError("append failed")
    wrapped.__cause__ = java
    assert login_refused(java) and login_refused(wrapped)
    assert login_refused(Exception("org.apache.iceberg.exceptions.RESTException: Unable to "
                                   "process (code: 419, type: AuthenticationTimeout): x"))
    assert not login_refused(Exception("spark sink t: partition 419 not appended"))
    assert not login_refused(Exception("software.amazon.awssdk.core.exception."
                                       "SdkClientException: Unable to execute HTTP request"))


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_pyiceberg_tokens_are_kept_and_refreshed_late_in_their_life() -> None:
    """``appends: pyiceberg`` on a REST catalog: a token is asked for once, kept while it is
    in the first four fifths of its life, then a new one; the REST server refusing it
    (401/419) drops it."""
    with OidcServer({"kstage": SECRET}, ttl_s=10) as server:
        clock = Clock()
        tokens = CatalogTokens(oauth2(server.token_url), clock=clock)
        first = tokens.token()
        assert tokens.token() == first and server.issued == 1
        clock.now += 7.9
        assert tokens.token() == first and server.issued == 1
        clock.now += 0.2  # past 8 s of 10
        tokens.token()
        assert server.issued == 2
        tokens.refused()
        tokens.token()
        assert server.issued == 3
        assert SECRET not in repr(tokens)


def test_pyiceberg_tokens_with_the_provider_down_name_it_back_off_and_recover() -> None:
    with OidcServer({"kstage": SECRET}, ttl_s=10) as server:
        clock = Clock()
        tokens = CatalogTokens(oauth2(server.token_url), clock=clock)
        held = tokens.token()
        server.down = True
        clock.now += 9  # due for a refresh, still valid: the one held is used
        assert tokens.token() == held and server.unavailable == 1
        clock.now += 0.1  # within the backoff: no request
        assert tokens.token() == held and server.unavailable == 1
        clock.now += 1  # expired: no token to be had
        with pytest.raises(CatalogLoginError) as failed:
            tokens.token()
        assert str(failed.value) == (f"the REST catalog's identity provider "
                                     f"{server.token_url} fails (HTTP 503 "
                                     "temporarily_unavailable)")
        assert not failed.value.refused and server.unavailable == 2
        with pytest.raises(CatalogLoginError):  # within the backoff: no request
            tokens.token()
        assert server.unavailable == 2
        server.down = False
        clock.now += 60  # the backoff over: the provider back, a token again
        tokens.token()
        assert server.issued == 2


def test_pyiceberg_tokens_refused_say_so_without_the_secret() -> None:
    with OidcServer({"kstage": SECRET}) as server:
        tokens = CatalogTokens(oauth2(server.token_url, secret=WRONG))
        with pytest.raises(CatalogLoginError) as failed:
            tokens.token()
        assert failed.value.refused
        assert "refuses the client credentials (HTTP 401 invalid_client)" in str(failed.value)
        assert WRONG not in str(failed.value) and SECRET not in str(failed.value)
        assert failed.value.__cause__ is None and failed.value.__context__ is None
