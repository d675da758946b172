"""The HTTP sink against a real local HTTP server (tests/http_server.py): order,
batching, idempotency keys, URL templates, retries, permanent failures, auth, secrets."""

from __future__ import annotations

import base64
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from actors.errors import SinkError
from actors.sink_health import SinkHealth
from actors.sinks import SinkContext
from actors.sinks.http import HttpSink, HttpSinkSettings
from processors.base import Row
from settings.models import SinkSettings
from tests.http_server import HttpTestServer

TOKEN = "s3cr3t-t0ken-value"  # noqa: S105 - a fake secret to look for
PASSWORD = "hunter2-but-longer"  # noqa: S105


def row(offset: int, partition: int = 0, **fields: Any) -> Row:
    base: Row = {"entity_type": "dataset", "category": "TAG", "operation": "ADD",
                 "entity_urn": "urn:li:dataset:(urn:li:dataPlatform:hive,db.t,PROD)",
                 "_topic": "PlatformEvent_v1", "_partition": partition, "_offset": offset,
                 "_timestamp": 1_700_000_000_000}
    base.update(fields)
    return base


class Failures:
    """Records refused-row calls (async, as the worker's handler is)."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[Row], int, str]] = []

    async def __call__(self, rows: Any, status: int, body_head: str) -> None:
        self.calls.append((list(rows), status, body_head))


@pytest.fixture
def server() -> Iterator[HttpTestServer]:
    with HttpTestServer() as srv:
        yield srv


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def failures() -> Failures:
    return Failures()


@pytest.fixture
async def make_sink(server: HttpTestServer, sleeps: list[float], failures: Failures
                    ) -> AsyncIterator[Any]:
    """Factory of open sinks (fake sleep, jitter 1.0, failure recorder); closed after."""
    opened: list[HttpSink] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def make(**options: Any) -> HttpSink:
        options.setdefault("url", server.url + "/hook")
        sink = HttpSink(HttpSinkSettings.model_validate(options), sleep=fake_sleep,
                        jitter=lambda: 1.0)
        sink.bind(SinkContext(refuse=failures))
        await sink.open()
        opened.append(sink)
        return sink

    yield make
    for sink in opened:
        await sink.close()


def keys(server: HttpTestServer) -> list[str]:
    return [r.headers["idempotency-key"] for r in server.requests]


# ------------------------------------------------------------------ requests and order


async def test_one_request_per_row_in_order_with_idempotency_keys(
        server: HttpTestServer, make_sink: Any, failures: Failures) -> None:
    sink = await make_sink(headers={"X-Source": "kstage"})
    rows = [row(5), row(6, parameters=b"\xffraw"), row(7)]
    await sink.write(rows)
    assert [r.json["_offset"] for r in server.requests] == [5, 6, 7]
    assert keys(server) == ["PlatformEvent_v1-0-5-5", "PlatformEvent_v1-0-6-6",
                            "PlatformEvent_v1-0-7-7"]
    first = server.requests[0]
    assert (first.method, first.path) == ("POST", "/hook")
    assert first.json == rows[0]
    assert first.headers["content-type"] == "application/json"
    assert first.headers["x-source"] == "kstage"
    assert server.requests[1].json["parameters"] == "\\xffraw"  # bytes: backslashreplace
    assert failures.calls == [] and sink.stats["requests"] == 3
    await sink.write(rows)  # a replay sends the same keys
    assert keys(server)[3:] == keys(server)[:3]


async def test_batches_of_max_events_as_json_arrays(server: HttpTestServer,
                                                    make_sink: Any) -> None:
    sink = await make_sink(batch={"max_events": 2, "max_interval_s": 0.5}, method="PUT")
    rows = [row(o) for o in range(10, 15)]
    await sink.write(rows)
    assert [r.json for r in server.requests] == [rows[0:2], rows[2:4], rows[4:5]]
    assert keys(server) == ["PlatformEvent_v1-0-10-11", "PlatformEvent_v1-0-12-13",
                            "PlatformEvent_v1-0-14-14"]
    assert {r.method for r in server.requests} == {"PUT"}
    assert (sink.max_interval_s, sink.capabilities.max_concurrency) == (0.5, 8)


async def test_rows_of_one_message_split_over_requests_get_distinct_keys(
        server: HttpTestServer, make_sink: Any) -> None:
    sink = await make_sink(batch={"max_events": 2})
    await sink.write([row(1), row(1), row(1), row(2)])
    assert keys(server) == ["PlatformEvent_v1-0-1.0-1.1", "PlatformEvent_v1-0-1.2-2.0"]
    server.clear()
    sink = await make_sink()
    await sink.write([row(3), row(3)])
    assert keys(server) == ["PlatformEvent_v1-0-3.0-3.0", "PlatformEvent_v1-0-3.1-3.1"]


async def test_url_template_routes_rows_and_batches_per_url(
        server: HttpTestServer, make_sink: Any, failures: Failures) -> None:
    sink = await make_sink(url=server.url + "/e/{entity_type}/{category}?urn={entity_urn}",
                           batch={"max_events": 10})
    rows = [row(1), row(2), row(3, category="OWNER"), row(4, category=None), row(5),
            row(6, entity_type="a b/c")]
    del rows[4]["category"]
    await sink.write(rows)
    urn = "urn:li:dataset:(urn:li:dataPlatform:hive,db.t,PROD)"
    assert [r.path for r in server.requests] == [
        f"/e/dataset/TAG?urn={urn}", f"/e/dataset/OWNER?urn={urn}", f"/e/a%20b%2Fc/TAG?urn={urn}"]
    assert [[x["_offset"] for x in r.json] for r in server.requests] == [[1, 2], [3], [6]]
    assert [(c[0][0]["_offset"], c[1]) for c in failures.calls] == [(4, 0), (5, 0)]
    assert "field 'category' is null" in failures.calls[0][2]
    assert "field 'category' is missing" in failures.calls[1][2]


# ---------------------------------------------------------------------------- retries


async def test_5xx_is_retried_then_succeeds(server: HttpTestServer, make_sink: Any,
                                            failures: Failures, sleeps: list[float]) -> None:
    server.respond(500, b"oops", times=2)
    sink = await make_sink(min_backoff_s=0.1)
    await sink.write([row(1)])
    assert server.count() == 3 and len(set(keys(server))) == 1
    assert sink.stats == {"requests": 1, "retries": 2, "refused_rows": 0}
    assert sleeps == [0.1, 0.2]  # capped exponential, jitter injected as 1.0
    assert failures.calls == []


async def test_4xx_is_permanent_with_the_first_kb_of_the_body(
        server: HttpTestServer, make_sink: Any, failures: Failures) -> None:
    body = "é" + "x" * 3000
    server.respond(400, body, headers={"Content-Type": "text/plain; charset=utf-8"})
    sink = await make_sink()
    await sink.write([row(1), row(2)])
    assert server.count() == 2  # not retried; the next request is still sent
    [(rows, status, head)] = failures.calls
    assert ([r["_offset"] for r in rows], status) == ([1], 400)
    assert head == body.encode()[:1024].decode()
    assert sink.stats == {"requests": 1, "retries": 0, "refused_rows": 1}


async def test_redirects_are_not_followed(server: HttpTestServer, make_sink: Any,
                                          failures: Failures) -> None:
    server.respond(308, headers={"Location": server.url + "/elsewhere"})
    sink = await make_sink()  # a redirect is retried by default (see test_http_sink_security)
    await sink.write([row(1)])
    assert [r.path for r in server.requests] == ["/hook", "/hook"] and not failures.calls


async def test_permanent_failure_without_a_handler_raises(server: HttpTestServer) -> None:
    server.respond(400)
    sink = HttpSink(HttpSinkSettings(url=server.url))
    await sink.open()
    try:
        with pytest.raises(SinkError, match="status 400"):
            await sink.write([row(1)])
    finally:
        await sink.close()


async def test_a_hanging_server_times_out_and_is_retried(
        server: HttpTestServer, make_sink: Any, sleeps: list[float]) -> None:
    server.hang(1.0)
    sink = await make_sink(timeout_s=0.3)
    await sink.write([row(1)])
    assert server.count() == 2 and len(sleeps) == 1 and sink.stats["retries"] == 1


async def test_429_waits_retry_after(server: HttpTestServer, make_sink: Any,
                                     sleeps: list[float]) -> None:
    server.respond(429, headers={"Retry-After": "2"})
    server.respond(503, headers={"Retry-After": "600"})  # capped at max_backoff_s
    sink = await make_sink(max_backoff_s=5)
    await sink.write([row(1)])
    assert sleeps == [2.0, 5.0] and server.count() == 3


async def test_exhausted_retries_raise_sink_error(server: HttpTestServer, make_sink: Any,
                                                  failures: Failures) -> None:
    server.respond(502, b"bad gateway", times=3)
    sink = await make_sink(max_retries=2)
    with pytest.raises(SinkError, match=r"3 attempt\(s\): HTTP 502: bad gateway"):
        await sink.write([row(1)])
    assert server.count() == 3 and failures.calls == []


async def test_connection_refused_is_retried(make_sink: Any, sleeps: list[float]) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sink = await make_sink(url=f"http://127.0.0.1:{port}/x", max_retries=1)
    with pytest.raises(SinkError, match="ConnectError"):
        await sink.write([row(1)])
    assert len(sleeps) == 1


# ------------------------------------------------------------------- auth and secrets


async def test_bearer_and_basic_auth(server: HttpTestServer, make_sink: Any) -> None:
    bearer = await make_sink(auth={"bearer": TOKEN})
    basic = await make_sink(auth={"basic": {"username": "svc", "password": PASSWORD}})
    await bearer.write([row(1)])
    await basic.write([row(2)])
    expected = base64.b64encode(f"svc:{PASSWORD}".encode()).decode()
    assert [r.headers["authorization"] for r in server.requests] == [
        f"Bearer {TOKEN}", f"Basic {expected}"]


async def test_secrets_never_reach_logs_reprs_or_errors(
        server: HttpTestServer, make_sink: Any, failures: Failures,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    echo = f"you sent Authorization: Bearer {TOKEN} and X-Api-Key: k-{PASSWORD}"
    server.respond(400, echo)
    server.respond(401, echo)
    server.respond(500, echo, times=3)
    sink = await make_sink(auth={"bearer": TOKEN}, headers={"X-Api-Key": f"k-{PASSWORD}"},
                           url=server.url + f"/hook?api_key={PASSWORD}", max_retries=2)
    health = SinkHealth(0)
    sink.bind(replace(sink.context, health=health))
    await sink.write([row(1)])
    with pytest.raises(SinkError) as info:
        await sink.write([row(2)])
    reason = health.reason()
    assert reason is not None and "answered HTTP 500" in reason and "***" in reason
    # httpx itself logs each request URL (query included) at INFO: the service's logging
    # config is where that is silenced; everything kstage logs must be clean
    logged = [r.getMessage() for r in caplog.records if r.name != "httpx"]
    assert any("retry 1/2" in m for m in logged)
    texts = [*logged, str(info.value), repr(sink), repr(sink.settings), failures.calls[0][2],
             reason]
    assert "***" in failures.calls[0][2]
    for text in texts:
        assert TOKEN not in text and PASSWORD not in text
    with pytest.raises(ValidationError) as bad:
        HttpSinkSettings.model_validate({"url": server.url, "auth": {"berer": TOKEN}})
    assert TOKEN not in str(bad.value)


# ------------------------------------------------------------- lifecycle and settings


async def test_lifecycle_one_client_one_connection(server: HttpTestServer) -> None:
    sink = HttpSink(HttpSinkSettings(url=server.url))
    with pytest.raises(RuntimeError, match="INIT; open"):
        await sink.write([row(1)])
    await sink.open()
    with pytest.raises(RuntimeError, match="already open"):
        await sink.open()
    client = sink._client
    for offset in range(5):
        await sink.write([row(offset)])
    assert sink._client is client
    assert len({r.client_port for r in server.requests}) == 1  # keep-alive, one client
    assert "OPEN" in repr(sink)
    await sink.close()
    await sink.close()
    assert "CLOSED" in repr(sink) and sink._client is None
    with pytest.raises(RuntimeError, match="CLOSED"):
        await sink.write([row(9)])
    await sink.open()  # a closed sink can be opened again
    await sink.write([])
    await sink.close()


def test_settings_from_sink_settings() -> None:
    sink_settings = SinkSettings.model_validate({
        "type": "http", "url": "https://api.example.com/{entity_type}", "method": "PATCH",
        "batch": {"max_events": 50, "max_interval_s": 2}, "auth": {"bearer": TOKEN},
        "tls": {"verify": False}, "max_concurrency": 4})
    settings = HttpSinkSettings.model_validate(sink_settings.model_dump())
    assert (settings.method, settings.batch and settings.batch.max_events,
            settings.max_concurrency, settings.tls.verify) == ("PATCH", 50, 4, False)
    assert settings.auth is not None and settings.auth.bearer is not None
    assert settings.auth.bearer.get_secret_value() == TOKEN
    assert HttpSink(settings).capabilities.max_concurrency == 4


@pytest.mark.parametrize(("options", "needle"), [
    ({"url": "https://x", "nope": 1}, "nope"),
    ({"url": "ftp://x/y"}, "http(s)://host"),
    ({"url": "https://user:pw@x/y"}, "credentials in the url"),
    ({"url": "https://x/{a.b}"}, "plain row field"),
    ({"url": "https://x/{a!r}"}, "use {name}"),
    ({"url": "https://x/{oops"}, "not a valid template"),
    ({"url": "https://x", "method": "GET"}, "method"),
    ({"url": "https://x", "batch": {"max_events": 0}}, "max_events"),
    ({"url": "https://x", "auth": {}}, "exactly one of bearer, basic"),
    ({"url": "https://x", "auth": {"bearer": "t"}, "headers": {"authorization": "x"}},
     "not both"),
    ({"url": "https://x", "headers": {"Idempotency-Key": "x"}}, "idempotency_header"),
    ({"url": "https://x", "headers": {"X-A": "a\r\nb"}}, "line break"),
    ({"url": "https://x", "min_backoff_s": 5, "max_backoff_s": 1}, "max_backoff_s"),
    ({"url": "https://x", "path": "/tmp/out.jsonl"}, "path"),
])
def test_bad_settings_are_refused(options: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError, match=needle.replace("(", r"\(").replace(")", r"\)")
                       .replace("{", r"\{").replace("}", r"\}")):
        HttpSinkSettings.model_validate({"type": "http", **options})
