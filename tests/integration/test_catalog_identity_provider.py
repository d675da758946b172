"""``actors.sinks.spark.catalog_auth``: what a failed append says of the REST catalog's
identity provider, asked on a real token endpoint (tests/oidc_server.py) that answers, is
down (503), refuses the client, or is not there; and which JVM errors are the catalog
refusing the session's token. (The whole path, Spark and Nessie included:
test_rest_catalog_oauth.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from actors.sinks.spark.catalog_auth import identity_provider_problem, login_refused
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
