"""The HTTP sink never lets a message steer a request, and is secure against real servers
(issue 12): row fields only in the path and the query of the URL template, each value
percent-encoded into one segment or one query value, dot segments refused, the origin of
every request the template's own; HTTPS with a private CA and a client certificate
(mutual TLS); redirects never followed, credentials never sent to their ``Location``."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from actors.errors import SinkAuthError, SinkError
from actors.sink_health import SinkHealth
from actors.sinks import SinkContext
from actors.sinks.http import HttpSink, HttpSinkSettings
from actors.sinks.http.url_template import RowError, UrlTemplate
from service.cli import main
from tests.http_server import HttpTestServer
from tests.tls_certs import Pki, make_pki
from tests.unit.test_http_sink import Failures, row

TOKEN = "t0ken-that-stays-home"  # noqa: S105 - a fake secret to look for
AUTH = {"bearer": TOKEN}


@pytest.fixture
def server() -> Iterator[HttpTestServer]:
    with HttpTestServer() as srv:
        yield srv


@pytest.fixture
def evil() -> Iterator[HttpTestServer]:
    """Another origin (same host, another port): no request may ever reach it."""
    with HttpTestServer() as srv:
        yield srv


@pytest.fixture
def failures() -> Failures:
    return Failures()


@pytest.fixture
async def make_sink(failures: Failures) -> AsyncIterator[Any]:
    """Open sinks (no real waits, a failure recorder, a SinkHealth); closed after."""
    opened: list[HttpSink] = []

    async def no_sleep(seconds: float) -> None:
        return None

    async def make(health: SinkHealth | None = None, **options: Any) -> HttpSink:
        sink = HttpSink(HttpSinkSettings.model_validate(options), sleep=no_sleep)
        sink.bind(SinkContext(health=health or SinkHealth(60), refuse=failures))
        await sink.open()
        opened.append(sink)
        return sink

    yield make
    for sink in opened:
        await sink.close()


# ------------------------------------------------------- the template: where fields go

HOSTILE_TEMPLATES = [
    "https://{host}/x",                    # the host
    "https://api.example.com{path}",       # glued to the host: api.example.com.evil.com
    "https://api.example.com:{port}/x",    # the port
    "{scheme}://api.example.com/x",        # the scheme
    "https://{user}@api.example.com/x",    # userinfo
    "https://api{suffix}.example.com/x",   # part of the host
    "https://api.example.com/x#{frag}",    # the fragment
]


@pytest.mark.parametrize("template", HOSTILE_TEMPLATES)
def test_fields_outside_the_path_and_query_are_refused(template: str) -> None:
    with pytest.raises(ValidationError) as info:
        HttpSinkSettings(url=template)
    text = str(info.value)
    assert ("allowed only in the path and the query" in text
            or "http(s)://host[:port]/path" in text), text


@pytest.mark.parametrize("template", [
    "https://api.example.com/{entity_type}", "https://api.example.com/a/{x}/b{y}.json",
    "https://api.example.com?urn={urn}", "https://api.example.com:8443/e/{x}?a={y}&b=c#top",
])
def test_fields_in_the_path_and_query_are_accepted(template: str) -> None:
    assert HttpSinkSettings(url=template).url == template


@pytest.mark.parametrize(("value", "path"), [
    ("a/b", "/e/a%2Fb/x?q=a%2Fb"),
    ("x?y#z", "/e/x%3Fy%23z/x?q=x%3Fy%23z"),
    ("a&b=c+d;e", "/e/a%26b%3Dc%2Bd%3Be/x?q=a%26b%3Dc%2Bd%3Be"),
    ("%2e%2e", "/e/%252e%252e/x?q=%252e%252e"),
    ("@evil.com:1", "/e/@evil.com:1/x?q=@evil.com:1"),  # after the host's '/': inert
    ("urn:li:x(a,b)", "/e/urn:li:x(a,b)/x?q=urn:li:x(a,b)"),
    ("...", "/e/.../x?q=..."),  # not a dot segment
])
def test_values_are_encoded_into_one_segment_and_one_query_value(value: str,
                                                                 path: str) -> None:
    url = UrlTemplate("https://api.example.com/e/{v}/x?q={v}").render({"v": value})
    assert url == "https://api.example.com" + path


@pytest.mark.parametrize("value", ["..", ".", ""])
def test_a_value_making_an_empty_or_dot_segment_refuses_the_row(value: str) -> None:
    template = UrlTemplate("https://api.example.com/e/{v}/x")
    with pytest.raises(RowError, match="dot segment"):
        template.render({"v": value})
    # in the query, or inside a longer segment, the same values are harmless
    assert UrlTemplate("https://h/e/x{v}?q={v}").render({"v": value}).startswith("https://h/e/x")
    two = UrlTemplate("https://h/e/{a}{b}/x")
    with pytest.raises(RowError, match="dot segment"):
        two.render({"a": ".", "b": "."})


def test_a_rendered_url_with_another_origin_is_refused() -> None:
    """Defence in depth: should a value ever change the origin, the row is refused."""
    template = UrlTemplate("https://api.example.com/e/{v}")
    assert template.origin == ("https", "api.example.com", 443)
    template.origin = ("https", "elsewhere.example.com", 443)  # as if a value had moved it
    with pytest.raises(RowError, match="leaves the url's origin"):
        template.render({"v": "x"})


def test_validate_names_the_key_and_line_of_a_steerable_url(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "kstage.yml"
    config.write_text("name: steer\ngroups:\n  - topics:\n      - topic: events\n"
                      "        processor: json_rows\n        sink:\n          type: http\n"
                      "          url: 'https://api.example.com{path}'\n", encoding="utf-8")
    code = main(["validate", "-c", str(config)])
    output = "".join(capsys.readouterr())
    assert code == 2, output
    assert f"{config}: groups[0].topics[0].sink.url (line 8): " in output, output
    assert "allowed only in the path and the query" in output


# --------------------------------------------- against real servers: no request leaves


async def test_no_row_sends_a_request_or_the_token_to_another_origin(
        server: HttpTestServer, evil: HttpTestServer, make_sink: Any,
        failures: Failures) -> None:
    """Templates a row could steer are refused, and hostile values in an accepted one
    stay below its path: the other origin never sees a request, nor the token."""
    steer = ["http://127.0.0.1:{port}/hook", "http://127.0.0.1{path}/hook",
             "http://{host}/hook"]
    hostile: dict[str, Any] = {"port": evil.port, "path": f":{evil.port}",
                               "host": f"127.0.0.1:{evil.port}"}
    for template in steer:
        try:
            sink = await make_sink(url=template, auth=AUTH)
        except ValidationError:
            continue  # refused before anything is sent
        await sink.write([row(1, **hostile)])
    assert evil.count() == 0, [(r.path, r.headers.get("authorization")) for r in evil.requests]

    sink = await make_sink(url=server.url + "/e/{entity_type}/x?q={entity_type}", auth=AUTH)
    values = ["..", ".", "", "../../admin", f"@127.0.0.1:{evil.port}", f"//127.0.0.1:{evil.port}",
              "%2e%2e", "a/../../b", "x#y", "ok"]
    await sink.write([row(i, entity_type=v) for i, v in enumerate(values)])
    assert evil.count() == 0
    paths = [r.path for r in server.requests]
    assert all(p.startswith("/e/") and p.count("/") == 3 for p in paths), paths
    assert paths[-1] == "/e/ok/x?q=ok"
    assert {r.headers["authorization"] for r in server.requests} == {f"Bearer {TOKEN}"}
    # the dot segments (and the empty one) are refused, never sent (status 0)
    assert [(c[0][0]["_offset"], c[1]) for c in failures.calls] == [(0, 0), (1, 0), (2, 0)]
    assert all("dot segment" in c[2] for c in failures.calls)


# -------------------------------------------------------------------- redirects


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_is_not_followed_and_retried_as_an_endpoint_problem(
        server: HttpTestServer, evil: HttpTestServer, make_sink: Any, failures: Failures,
        status: int) -> None:
    server.respond(status, headers={"Location": evil.url + "/hook?api_key=" + TOKEN}, times=3)
    health = SinkHealth(0)  # not ready at the first failure: its reason is shown
    sink = await make_sink(url=server.url + "/hook", auth=AUTH, max_retries=2, health=health)
    with pytest.raises(SinkError) as info:
        await sink.write([row(1)])
    assert evil.count() == 0 and server.count() == 3
    assert not failures.calls  # a moved endpoint is not a fact about the event
    message = str(info.value)
    assert f"HTTP {status}: redirect to {evil.url}/hook?... not followed" in message
    assert "set url to the final address" in message and TOKEN not in message
    assert f"redirect to {evil.url}/hook?... not followed" in (health.reason() or "")


async def test_a_redirect_left_out_of_retry_statuses_is_dead_lettered_clearly(
        server: HttpTestServer, evil: HttpTestServer, make_sink: Any,
        failures: Failures) -> None:
    server.respond(301, headers={"Location": evil.url + "/moved"})
    sink = await make_sink(url=server.url + "/e/{entity_type}", auth=AUTH, retry_statuses=[])
    await sink.write([row(1), row(2)])
    assert evil.count() == 0 and server.count() == 2
    [(rows, status, head)] = failures.calls
    assert (rows[0]["_offset"], status) == (1, 301)
    assert head.startswith(f"redirect to {evil.url}/moved not followed")


# ----------------------------------------------------------- HTTPS and mutual TLS


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def server_context(pki: Pki, *, client_certs: bool) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    if client_certs:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki.ca)
    return context


@pytest.fixture
def mtls_server(pki: Pki) -> Iterator[HttpTestServer]:
    with HttpTestServer(ssl_context=server_context(pki, client_certs=True)) as srv:
        yield srv


async def test_https_with_a_private_ca_and_a_client_certificate(
        mtls_server: HttpTestServer, pki: Pki, make_sink: Any) -> None:
    tls = {"ca_file": str(pki.ca), "client_cert": str(pki.client_cert),
           "client_key": str(pki.client_key)}
    sink = await make_sink(url=mtls_server.url + "/hook", auth={"basic": {
        "username": "kstage", "password": TOKEN}}, tls=tls)
    await sink.write([row(1), row(2)])
    [first, second] = mtls_server.wait_for(2)
    expected = base64.b64encode(f"kstage:{TOKEN}".encode()).decode()
    assert first.headers["authorization"] == f"Basic {expected}"
    assert [r.json["_offset"] for r in (first, second)] == [1, 2]
    assert not mtls_server.tls_failures


@pytest.mark.parametrize(("case", "setting"), [
    ("no client certificate", "sink.tls.client_cert"),
    ("expired client certificate", "sink.tls.client_cert"),
    ("wrong CA", "sink.tls.ca_file"),
])
async def test_a_tls_failure_is_retried_never_dead_lettered_and_names_the_setting(
        mtls_server: HttpTestServer, pki: Pki, make_sink: Any, failures: Failures,
        case: str, setting: str) -> None:
    tls: dict[str, str] = {"ca_file": str(pki.ca)}
    if case == "expired client certificate":
        tls |= {"client_cert": str(pki.expired_client_cert),
                "client_key": str(pki.expired_client_key)}
    elif case == "wrong CA":
        tls |= {"ca_file": str(pki.other_ca), "client_cert": str(pki.client_cert),
                "client_key": str(pki.client_key)}
    sink = await make_sink(url=mtls_server.url + "/hook", auth=AUTH, tls=tls, max_retries=2)
    with pytest.raises(SinkError) as info:
        await sink.write([row(1)])
    assert len(mtls_server.wait_for_tls_failures(3)) == 3  # each attempt: a real handshake
    assert mtls_server.count() == 0  # no request: the token never went out
    assert not failures.calls  # a configuration problem, not a fact about the event
    assert setting in str(info.value), str(info.value)
    if case == "wrong CA":
        assert isinstance(info.value, SinkAuthError)  # not ready at once
        assert "not trusted" in str(info.value)
