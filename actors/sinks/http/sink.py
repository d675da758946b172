"""The HTTP sink itself, :class:`HttpSink`: its client's lifecycle, and each ``write``
planned into requests (or refusals) and sent one after the other, retried, split on a
413, refused or raised as the package's overview (:mod:`actors.sinks.http`) promises."""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from actors.backoff import Jitter, backoff_s
from actors.codecs.schema_registry import Sleep, describe_transport_error
from actors.codecs.schema_registry.answers import retry_after_s
from actors.errors import SinkAuthError, SinkError
from actors.sinks.base import Sink, SinkCapabilities
from actors.sinks.http.client import headers_and_secrets, tls_verify
from actors.sinks.http.request import Request, idempotency_key, json_default, partition_of
from actors.sinks.http.settings import HttpSinkSettings
from actors.sinks.http.url_template import RowError, UrlTemplate, shown_url
from processors.base import Row
from processors.jsonfast import dumps_compact

if TYPE_CHECKING:
    from actors.tracing import Tracing

logger = logging.getLogger(__name__)

BODY_HEAD_BYTES = 1024
AUTH_STATUSES = frozenset({401, 403, 407})
"""Retried statuses that mean refused credentials: the worker is not ready at once."""


class _State(enum.Enum):
    INIT = "INIT"
    OPEN = "OPEN"
    CLOSED = "CLOSED"


class HttpSink(Sink):
    """Sends rows to an HTTP API (see :mod:`actors.sinks.http` for the guarantees).

    Args:
        settings: the parsed sink settings.
        transport: an httpx transport to use instead of the network (tests).
        sleep: awaited for every backoff wait (tests inject a recorder).
        jitter: a float in [0, 1) scaling each backoff (full jitter).

    Attributes:
        capabilities: ``max_concurrency`` is how many ``write`` calls the caller may run
            at once (one per partition); the sink does not enforce it beyond sizing its
            connection pool. Refused rows go to :meth:`refuse` (``refuses_rows``).
        max_interval_s: ``batch.max_interval_s`` for the caller, None without batch.
        stats: counters ``requests`` (2xx answers), ``retries``, ``refused_rows``.

    Lifecycle: :meth:`open` creates the one ``httpx.AsyncClient``, :meth:`close` closes it
    (idempotent); a closed sink may be opened again.
    """

    type = "http"
    settings_model = HttpSinkSettings

    def __init__(
        self,
        settings: HttpSinkSettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.settings = settings
        # A deletion is posted like any row, its ``_is_deleted`` marker in the body.
        self.capabilities = SinkCapabilities(max_concurrency=settings.max_concurrency,
                                             refuses_rows=True, deletes=True)
        self.max_interval_s = settings.batch.max_interval_s if settings.batch else None
        self.stats = {"requests": 0, "retries": 0, "refused_rows": 0}
        self._retry_statuses = frozenset(settings.retry_statuses)
        self._url = UrlTemplate(settings.url)
        self._transport = transport
        self._sleep = sleep
        self._jitter = jitter
        self._client: httpx.AsyncClient | None = None
        self._state = _State.INIT
        self._headers, self._secrets = headers_and_secrets(settings)
        self._tracing: Tracing | None = None  # the process's, when tracing is on

    def __repr__(self) -> str:
        s = self.settings
        auth = "none" if s.auth is None else "bearer" if s.auth.bearer else "basic"
        batch = s.batch.max_events if s.batch else None
        return (f"<HttpSink {self._state.value} {s.method} {shown_url(s.url)} batch={batch} "
                f"auth={auth}>")

    # ----------------------------------------------------------------- lifecycle

    async def open(self) -> None:
        """Create the HTTP client; RuntimeError if already open."""
        if self._state is _State.OPEN:
            raise RuntimeError("http sink is already open")
        s = self.settings
        self._client = httpx.AsyncClient(
            headers=self._headers,
            # pool=None: writes beyond max_concurrency wait for a connection, not fail
            timeout=httpx.Timeout(s.timeout_s, pool=None),
            limits=httpx.Limits(
                max_connections=s.max_concurrency, max_keepalive_connections=s.max_concurrency
            ),
            # an injected transport carries its own TLS settings
            verify=tls_verify(s.tls) if self._transport is None else True,
            transport=self._transport,
            follow_redirects=False,
        )
        self._state = _State.OPEN
        resources = self.context.resources
        self._tracing = None if resources is None else resources.tracing
        logger.info("http sink open: %s %s", s.method, shown_url(s.url))

    async def close(self) -> None:
        """Close the HTTP client (idempotent)."""
        client, self._client = self._client, None
        if self._state is _State.OPEN:
            self._state = _State.CLOSED
        if client is not None:
            await client.aclose()
            logger.info("http sink closed: %s", shown_url(self.settings.url))

    # --------------------------------------------------------------------- write

    async def write(self, rows: Sequence[Row]) -> None:
        """Send ``rows`` (one partition, offset order); return once each is settled."""
        client = self._client
        if client is None:
            raise RuntimeError(f"http sink is {self._state.value}; open() it first")
        for item in self._plan(rows):
            if item.refused is not None:
                logger.warning("http sink: %d row(s) not sent: %s", len(item.rows), item.refused)
                await self._refuse(item.rows, 0, item.refused)
            else:
                await self._send(client, item)

    def _plan(self, rows: Sequence[Row]) -> Iterator[Request]:
        """The requests (or refusals) for ``rows``, in row order."""
        max_events = self.settings.batch.max_events if self.settings.batch else 1
        # index of each row among the rows of its message (same offset), and whether it
        # is the message's last row: keys must differ when a message is split
        index, last = [0] * len(rows), [True] * len(rows)
        for i in range(1, len(rows)):
            if rows[i].get("_offset") == rows[i - 1].get("_offset"):
                index[i], last[i - 1] = index[i - 1] + 1, False
        group: list[int] = []
        url = ""
        for i, row in enumerate(rows):
            try:
                row_url = self._url.render(row)
                if not isinstance(row.get("_offset"), int):
                    raise RowError("the row has no Kafka coordinates (_offset)")
            except RowError as exc:
                if group:
                    yield self._request(rows, group, url, index, last)
                    group = []
                yield Request([row], refused=str(exc))
                continue
            if group and (row_url != url or len(group) >= max_events
                          or partition_of(row) != partition_of(rows[group[0]])):
                yield self._request(rows, group, url, index, last)
                group = []
            group.append(i)
            url = row_url
        if group:
            yield self._request(rows, group, url, index, last)

    def _request(self, rows: Sequence[Row], group: list[int], url: str,
                 index: list[int], last: list[bool]) -> Request:
        chosen = [rows[i] for i in group]
        marks = [(index[i], last[i]) for i in group]
        return Request(chosen, url, idempotency_key(chosen, marks), marks=marks)

    async def _send(self, client: httpx.AsyncClient, request: Request) -> None:
        s = self.settings
        payload: object = request.rows if s.batch else request.rows[0]
        body = dumps_compact(payload, json_default)
        headers = {s.idempotency_header: request.key} if s.idempotency_header else {}
        shown = shown_url(request.url)
        where = partition_of(request.rows[0])
        problem, cause, auth = "", None, False
        for attempt in range(s.max_retries + 1):
            wait: float | None = None
            started = time.monotonic()
            try:
                response, head = await self._exchange(client, request, body, headers)
            except (httpx.TransportError, ssl.SSLError) as exc:  # httpx lets some through
                text, auth = describe_transport_error(
                    exc, https=request.url.startswith("https:"), settings="sink.tls")
                problem, cause = self._scrub(text), exc
            else:
                status = response.status_code
                if 200 <= status < 300:
                    self.stats["requests"] += 1
                    self._healthy(where)
                    logger.debug("http sink: %s %s -> %d (key %s)", s.method, shown, status,
                                 request.key)
                    return
                if status == 413 and len(request.rows) > 1:
                    self._healthy(where)
                    logger.warning("http sink: %s %s -> 413 for %d rows (key %s): splitting "
                                   "the request in two", s.method, shown, len(request.rows),
                                   request.key)
                    for part in request.halves():
                        await self._send(client, part)
                    return
                if status < 500 and status not in self._retry_statuses:
                    self._healthy(where)
                    logger.warning("http sink: %s %s -> %d: %d row(s) refused (key %s)",
                                   s.method, shown, status, len(request.rows), request.key)
                    await self._refuse(request.rows, status, head)
                    return
                problem, cause = f"HTTP {status}: {head[:200]}", None
                auth = status in AUTH_STATUSES
                wait = retry_after_s(response)
            if self.health is not None:
                text = problem if cause is not None else f"answered {problem}"
                self.health.failed(where, f"http sink: {s.method} {shown}: {text}",
                                   since=started, auth=auth)
            if attempt == s.max_retries:
                break
            delay = self._backoff(attempt, wait)
            self.stats["retries"] += 1
            logger.warning("http sink: %s %s: %s; retry %d/%d in %.2f s", s.method, shown,
                           problem, attempt + 1, s.max_retries, delay)
            await self._sleep(delay)
        error = SinkAuthError if auth else SinkError
        raise error(f"http sink: {s.method} {shown} failed after {s.max_retries + 1} "
                    f"attempt(s): {problem}") from cause

    def _healthy(self, where: tuple[Any, Any]) -> None:
        """The API answered a request of ``where``'s rows (2xx, or a refusal)."""
        if self.health is not None:
            self.health.succeeded(where)

    async def _exchange(self, client: httpx.AsyncClient, request: Request, body: bytes,
                        headers: dict[str, str]) -> tuple[httpx.Response, str]:
        """One attempt: the response and, for a non-2xx, the first KB of its body; with
        tracing, in its span, the request carrying its ``traceparent``: a request for
        one event continues that event's trace (see :meth:`Tracing.http`)."""
        tracing, url = self._tracing, request.url
        if tracing is None:
            return await self._exchange_once(client, url, body, headers)
        offsets = [row["_offset"] for row in request.rows]
        with tracing.http(self.settings.method, shown_url(url), offsets) as span:
            headers = dict(headers)
            tracing.inject(headers)
            response, head = await self._exchange_once(client, url, body, headers)
            span.set_attribute("http.response.status_code", response.status_code)
            return response, head

    async def _exchange_once(self, client: httpx.AsyncClient, url: str, body: bytes,
                             headers: dict[str, str]) -> tuple[httpx.Response, str]:
        request = client.build_request(self.settings.method, url, content=body, headers=headers)
        response = await client.send(request, stream=True)
        try:
            if response.is_success:
                async for _ in response.aiter_raw():
                    pass  # drained (not decoded: it is not used), the connection is reused
                return response, ""
            if response.is_redirect:
                where = shown_url(response.headers.get("Location", ""))
                return response, self._scrub(f"redirect to {where} not followed (redirects "
                                             "never are): set url to the final address")
            data = b""
            try:
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) >= BODY_HEAD_BYTES:
                        break  # the rest is not read; the connection is closed instead
            except httpx.DecodingError:
                data += b" (undecodable content-encoding)"
            return response, self._scrub(_decode(data[:BODY_HEAD_BYTES], response))
        finally:
            await response.aclose()

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        cap = self.settings.max_backoff_s
        if retry_after is not None:
            return min(retry_after, cap)
        return backoff_s(attempt, self.settings.min_backoff_s, cap, Jitter.FULL, self._jitter)

    async def _refuse(self, rows: list[Row], status: int, body_head: str) -> None:
        self.stats["refused_rows"] += len(rows)
        await self.refuse(rows, status, body_head)

    def _scrub(self, text: str) -> str:
        """``text`` with every secret value masked (servers may echo our headers)."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


def _decode(data: bytes, response: httpx.Response) -> str:
    """``data`` as text, in the response's charset (UTF-8 if none or unknown)."""
    try:
        return data.decode(response.charset_encoding or "utf-8", "replace")
    except LookupError:  # an unknown charset name
        return data.decode("utf-8", "replace")

