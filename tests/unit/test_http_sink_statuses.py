"""Which HTTP answers the HTTP sink retries and which it dead-letters (issue 11, defect 3),
against a real local HTTP server: credentials, endpoint 404, 408/409/413/425 are retried,
never dead-lettered; 400/422 are; ``retry_statuses`` moves the line; 413 splits a batch."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from actors.errors import SinkAuthError, SinkError
from actors.sink_health import SinkHealth
from actors.sinks import SinkContext
from actors.sinks.http import HttpSink, HttpSinkSettings
from tests.http_server import HttpTestServer
from tests.unit.test_http_sink import Failures, row

TOKEN = "expired-t0ken-do-not-show"  # noqa: S105 - a fake secret to look for


@pytest.fixture
def server() -> Iterator[HttpTestServer]:
    with HttpTestServer() as srv:
        yield srv


@pytest.fixture
def failures() -> Failures:
    return Failures()


@pytest.fixture
async def make_sink(server: HttpTestServer, failures: Failures) -> AsyncIterator[Any]:
    """Open sinks with no real waits, a failure recorder and a SinkHealth (threshold 60 s)."""
    opened: list[HttpSink] = []

    async def no_sleep(seconds: float) -> None:
        return None

    async def make(**options: Any) -> HttpSink:
        options.setdefault("url", server.url + "/hook")
        sink = HttpSink(HttpSinkSettings.model_validate(options), sleep=no_sleep)
        sink.bind(SinkContext(health=SinkHealth(60), refuse=failures))
        await sink.open()
        opened.append(sink)
        return sink

    yield make
    for sink in opened:
        await sink.close()


@pytest.mark.parametrize("status", [401, 403, 404, 407, 408, 409, 413, 425, 429, 500, 503])
async def test_statuses_that_are_not_about_the_event_are_retried(
        server: HttpTestServer, make_sink: Any, failures: Failures, status: int) -> None:
    server.respond(status, "not now", times=3)
    sink = await make_sink()
    await sink.write([row(1)])
    assert [r.answer for r in server.requests] == [status, status, status, 200]
    assert failures.calls == [], "nothing dead-lettered"
    assert sink.health.reason() is None, "healthy again after the 2xx"


@pytest.mark.parametrize("status", [401, 403, 407])
async def test_refused_credentials_raise_sink_auth_error_and_mark_not_ready_at_once(
        server: HttpTestServer, make_sink: Any, failures: Failures, status: int) -> None:
    server.respond(status, f"token {TOKEN} expired", times=10)
    sink = await make_sink(auth={"bearer": TOKEN}, max_retries=2)
    with pytest.raises(SinkAuthError, match=f"HTTP {status}"):
        await sink.write([row(1)])
    reason = sink.health.reason()  # the threshold is 60 s: only auth is shown at once
    assert reason is not None and reason.startswith("sink credentials refused")
    assert f"answered HTTP {status}" in reason and TOKEN not in reason, reason
    assert failures.calls == []


async def test_other_failures_wait_for_the_threshold(
        server: HttpTestServer, make_sink: Any) -> None:
    server.respond(503, times=10)
    sink = await make_sink(max_retries=1)
    with pytest.raises(SinkError) as info:
        await sink.write([row(1)])
    assert not isinstance(info.value, SinkAuthError)
    assert sink.health.reason() is None, "failing for less than 60 s"
    sink.health.unready_after_s = 0
    assert "answered HTTP 503" in (sink.health.reason() or "")


@pytest.mark.parametrize("status", [400, 422])
async def test_facts_about_the_event_are_dead_lettered_with_status_and_body(
        server: HttpTestServer, make_sink: Any, failures: Failures, status: int) -> None:
    server.respond(status, "field x is invalid")
    sink = await make_sink()
    await sink.write([row(1), row(2)])
    assert [r.answer for r in server.requests] == [status, 200]
    assert [(c[0][0]["_offset"], c[1], c[2]) for c in failures.calls] == [
        (1, status, "field x is invalid")]
    assert sink.health.reason() is None


async def test_retry_statuses_is_configurable(
        server: HttpTestServer, make_sink: Any, failures: Failures) -> None:
    sink = await make_sink(retry_statuses=[400])
    server.respond(400, times=2)
    await sink.write([row(1)])
    assert [r.answer for r in server.requests] == [400, 400, 200]
    assert failures.calls == []
    server.respond(401)  # no longer in the set: dead-lettered
    await sink.write([row(2)])
    assert [(c[0][0]["_offset"], c[1]) for c in failures.calls] == [(2, 401)]


@pytest.mark.parametrize("value", [[500], [200], [600]])
def test_retry_statuses_outside_3xx_4xx_are_rejected(value: list[int]) -> None:
    with pytest.raises(ValidationError, match="retry_statuses"):
        HttpSinkSettings(url="http://127.0.0.1/x", retry_statuses=value)


async def test_413_splits_a_batch_down_to_single_rows(
        server: HttpTestServer, make_sink: Any, failures: Failures) -> None:
    sink = await make_sink(batch={"max_events": 4})
    server.respond(413, times=2)  # the 4 rows, then the first 2
    await sink.write([row(o) for o in range(10, 14)])
    sent = [([e["_offset"] for e in r.json], r.answer, r.headers["idempotency-key"])
            for r in server.requests]
    assert sent == [
        ([10, 11, 12, 13], 413, "PlatformEvent_v1-0-10-13"),
        ([10, 11], 413, "PlatformEvent_v1-0-10-11"),
        ([10], 200, "PlatformEvent_v1-0-10-10"),
        ([11], 200, "PlatformEvent_v1-0-11-11"),
        ([12, 13], 200, "PlatformEvent_v1-0-12-13"),
    ]
    assert failures.calls == []


async def test_413_for_a_single_row_follows_retry_statuses(
        server: HttpTestServer, make_sink: Any, failures: Failures) -> None:
    sink = await make_sink(batch={"max_events": 4},
                           retry_statuses=[401, 403, 404, 407, 408, 409, 425, 429])
    server.respond(413, "too big", times=2)
    await sink.write([row(1), row(2)])
    assert [len(r.json) for r in server.requests] == [2, 1, 1]
    assert [r.answer for r in server.requests] == [413, 413, 200]
    assert [([e["_offset"] for e in c[0]], c[1]) for c in failures.calls] == [([1], 413)]


async def test_split_keys_of_a_message_with_several_rows(
        server: HttpTestServer, make_sink: Any) -> None:
    sink = await make_sink(batch={"max_events": 4})
    server.respond(413)
    await sink.write([row(5), row(5), row(6), row(6)])
    assert [r.headers["idempotency-key"] for r in server.requests] == [
        "PlatformEvent_v1-0-5-6", "PlatformEvent_v1-0-5-5", "PlatformEvent_v1-0-6-6"]
    server.clear()
    server.respond(413)
    await sink.write([row(7), row(7), row(7)])
    assert [r.headers["idempotency-key"] for r in server.requests] == [
        "PlatformEvent_v1-0-7-7", "PlatformEvent_v1-0-7.0-7.0", "PlatformEvent_v1-0-7.1-7.2"]
