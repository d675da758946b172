"""The schema registry client against real HTTPS servers (issue 12): a private CA, basic
auth and a bearer token over TLS, a client certificate (mutual TLS); a TLS failure is an
outage naming the setting to check (retriable, never poison) and sends no credentials; a
redirect is never followed, its ``Location`` never sees the credentials, and it counts as
an unavailable URL (failover to the next one, then retried)."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Iterator
from typing import Any

import pytest

from actors.codecs.schema_registry import RegistryUnavailable, SchemaRegistryClient
from settings import SchemaRegistrySettings
from tests.fake_registry import FakeRegistry
from tests.http_server import HttpTestServer
from tests.tls_certs import Pki, make_pki
from tests.unit.test_schema_registry import EVENT, Sleeps

PASSWORD = "registry-pa55-w0rd"  # noqa: S105 - a fake secret to look for
TOKEN = "registry-t0ken-value"  # noqa: S105


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def server_context(pki: Pki, *, client_certs: bool = False) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    if client_certs:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki.ca)
    return context


def client(url: str, **settings: Any) -> SchemaRegistryClient:
    settings.setdefault("max_retries", 1)
    return SchemaRegistryClient(SchemaRegistrySettings(url=url, **settings), sleep=Sleeps(),
                                jitter=lambda: 1.0)


@pytest.mark.parametrize("auth", ["basic", "bearer"])
async def test_https_with_a_private_ca_and_credentials(pki: Pki, auth: str) -> None:
    credentials: dict[str, Any] = (
        {"basic_auth": ("kstage", PASSWORD)} if auth == "basic" else {"bearer_token": TOKEN})
    with FakeRegistry(ssl_context=server_context(pki), **credentials) as reg:
        schema_id = reg.register("events-value", EVENT)
        settings: dict[str, Any] = (
            {"basic_auth": {"username": "kstage", "password": PASSWORD}} if auth == "basic"
            else {"bearer_token": TOKEN})
        async with client(reg.url, tls={"ca_file": str(pki.ca)}, **settings) as c:
            assert json.loads(await c.get_schema(schema_id)) == json.loads(EVENT)
            assert (await c.latest("events-value")).id == schema_id
        expected = (f"Basic {base64.b64encode(f'kstage:{PASSWORD}'.encode()).decode()}"
                    if auth == "basic" else f"Bearer {TOKEN}")
        assert {r.headers["authorization"] for r in reg.requests} == {expected}
        assert reg.url.startswith("https://")


@pytest.mark.parametrize(("case", "setting"), [
    ("wrong CA", "schema_registry.tls.ca_file"),
    ("default trust store", "schema_registry.tls.ca_file"),
    ("no client certificate", "schema_registry.tls.client_cert"),
])
async def test_a_tls_failure_is_an_outage_naming_the_setting(pki: Pki, case: str,
                                                             setting: str) -> None:
    tls: dict[str, str] = {"ca_file": str(pki.other_ca if case == "wrong CA" else pki.ca)}
    if case == "default trust store":
        tls = {}
    if case != "no client certificate":
        tls |= {"client_cert": str(pki.client_cert), "client_key": str(pki.client_key)}
    context = server_context(pki, client_certs=True)
    with FakeRegistry(ssl_context=context, basic_auth=("kstage", PASSWORD)) as reg:
        schema_id = reg.register("events-value", EVENT)
        async with client(reg.url, tls=tls,
                          basic_auth={"username": "kstage", "password": PASSWORD}) as c:
            with pytest.raises(RegistryUnavailable) as info:
                await c.get_schema(schema_id)
        assert reg.requests == []  # no request: the password never went out
    assert info.value.retriable  # an outage to wait out, never a poison message
    assert setting in str(info.value), str(info.value)
    assert PASSWORD not in str(info.value)

    # with the right files the same server answers
    tls = {"ca_file": str(pki.ca), "client_cert": str(pki.client_cert),
           "client_key": str(pki.client_key)}
    with FakeRegistry(ssl_context=context) as reg:
        schema_id = reg.register("events-value", EVENT)
        async with client(reg.url, tls=tls) as c:
            assert json.loads(await c.get_schema(schema_id)) == json.loads(EVENT)


@pytest.fixture
def redirecting() -> Iterator[HttpTestServer]:
    with HttpTestServer() as srv:
        yield srv


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_a_redirect_is_not_followed_and_the_credentials_stay(
        redirecting: HttpTestServer, status: int) -> None:
    with FakeRegistry(basic_auth=("kstage", PASSWORD)) as elsewhere:
        schema_id = elsewhere.register("events-value", EVENT)
        target = f"{elsewhere.url}/schemas/ids/{schema_id}"
        location = f"{target}?token=x"
        redirecting.respond(status, headers={"Location": location}, times=2)
        async with client(redirecting.url, max_retries=1,
                          basic_auth={"username": "kstage", "password": PASSWORD}) as c:
            with pytest.raises(RegistryUnavailable) as info:
                await c.get_schema(schema_id)
        assert elsewhere.requests == []  # never followed: the Location saw nothing
    assert redirecting.count() == 2  # retried like an outage
    message = str(info.value)
    assert f"HTTP {status} redirect to {target}?... not followed" in message, message
    assert "set schema_registry.url to the registry itself" in message
    assert info.value.retriable and PASSWORD not in message


async def test_a_redirecting_url_fails_over_to_the_next(redirecting: HttpTestServer) -> None:
    with FakeRegistry() as reg:
        schema_id = reg.register("events-value", EVENT)
        redirecting.respond(302, headers={"Location": "http://127.0.0.1:9/x"})
        async with client(f"{redirecting.url},{reg.url}", bearer_token=TOKEN) as c:
            assert json.loads(await c.get_schema(schema_id)) == json.loads(EVENT)
            assert c.url == reg.url
        assert reg.count("GET", f"/schemas/ids/{schema_id}") == 1
