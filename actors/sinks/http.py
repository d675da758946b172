"""The HTTP sink: rows become JSON requests to an HTTP API, acknowledged only on a 2xx.

Settings come from a topic's ``sink`` mapping (``type: http`` plus the keys of
:class:`HttpSinkSettings`), validated when the configuration is loaded.

Guarantees and rules, per :meth:`HttpSink.write` call (the rows of ONE partition, in
offset order):

* requests are sent one after the other, in row order, so a receiver sees the events of
  one partition in order. Concurrency across partitions is the caller's job:
  :attr:`HttpSink.capabilities` tell it how many writes may run at once (the
  connection pool is sized to match; extra writes wait for a connection);
* without ``batch`` each row is one request whose body is the row as a JSON object; with
  ``batch``, consecutive rows with the same rendered URL go as one JSON array of at most
  ``max_events`` rows. ``batch.max_interval_s`` is for the caller, which decides how long
  rows may wait before they are written (exposed as :attr:`HttpSink.max_interval_s`);
* every request carries ``Idempotency-Key: {topic}-{partition}-{first}-{last}`` (the
  offsets of its first and last row), so a replay after a crash sends the same key for
  the same event. When one message gave several rows and a request holds only some of
  them, the row's index within its message is appended (``{first}.{i}-{last}.{j}``).
  With ``batch``, keys repeat only if the replayed write is cut the same way: receivers
  that must dedupe per event should use ``_topic/_partition/_offset`` of the body;
* transport errors (timeouts included), 5xx and the statuses of ``retry_statuses`` are
  retried with capped exponential backoff and full jitter, honouring ``Retry-After``
  (capped at ``max_backoff_s``); after ``max_retries`` retries
  :class:`~actors.errors.SinkError` is raised (retriable: the caller retries the whole
  write, forever; nothing is acked, nothing dead-lettered). For 401, 403 and 407 it is
  :class:`~actors.errors.SinkAuthError`: credentials are not a fact about the event, and
  the worker is reported not ready at once. Every failed attempt is reported to
  :attr:`Sink.health <actors.sinks.Sink.health>` as it happens;
* ``retry_statuses`` defaults to :data:`RETRY_STATUSES`: answers about the request
  rather than the event (credentials, 404 of the endpoint, timeouts, conflicts, too
  large, too early, too many). 404 is retried because with a fixed URL it means the
  endpoint is missing (a deploy window, a wrong route): dead-lettering would empty the
  stream into the file. Where the URL names the event's own resource and 404 means "no
  such entity", leave 404 out of ``retry_statuses`` to dead-letter those events;
* a 413 for a request of several rows (``batch``) splits it in two halves, sent one
  after the other (each may split again), before a single row's 413 counts as above;
* redirects are never followed (no request, no credentials go to the ``Location``): a
  301, 302, 303, 307 or 308 is retried by default like a 404 (with a fixed URL it means
  the endpoint moved: a configuration problem, shown in ``/readyz`` with the ``Location``
  without its query); left out of ``retry_statuses``, it dead-letters like below;
* a TLS failure (the server's certificate not trusted, our client certificate missing
  or refused) is retried like an outage, never dead-lettered, and reported as
  :class:`~actors.errors.SinkAuthError` (not ready at once), naming the ``tls`` settings;
* any other answer (other 3xx and 4xx) refuses the request for good: its rows go to
  :meth:`Sink.refuse <actors.sinks.base.Sink.refuse>` with the status and the first KB
  of the body (for a redirect, where it pointed), and the next request is sent. A row
  whose URL cannot be rendered (missing or null field, a value making an empty or dot path
  segment: see :class:`_UrlTemplate`) is refused the same way, with status 0 (never
  sent);
* ``write`` returns once every request got a 2xx or was handed to the failure handler.

Secrets (auth, secret-looking headers) are only read to build the client; they never
appear in logs, reprs or exception messages (echoed back by a server, they are masked).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import enum
import logging
import random
import re
import ssl
import string
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from actors.backoff import Jitter, backoff_s
from actors.codecs.schema_registry import Sleep, describe_transport_error
from actors.codecs.schema_registry import _retry_after as retry_after_s
from actors.errors import SinkAuthError, SinkError
from actors.sinks.base import Sink, SinkCapabilities, SinkSettingsBase
from processors.base import Row
from processors.jsonfast import dumps_compact

if TYPE_CHECKING:
    from actors.tracing import Tracing

logger = logging.getLogger(__name__)

"""``(rows, status, body_head)``: rows an API refused for good (status 0: never sent)."""

BODY_HEAD_BYTES = 1024
RETRY_STATUSES = (301, 302, 303, 307, 308, 401, 403, 404, 407, 408, 409, 413, 425, 429)
"""Default ``retry_statuses``: 3xx/4xx answers that are not facts about the event."""
AUTH_STATUSES = frozenset({401, 403, 407})
"""Retried statuses that mean refused credentials: the worker is not ready at once."""
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_SECRET_HEADER = re.compile(r"(auth|key|token|secret|password|cookie|session)", re.IGNORECASE)
# Characters left as they are when a row value is put into the URL besides the unreserved
# ``A-Z a-z 0-9 - . _ ~``; everything else (``/ ? # & = ; + %`` and spaces included) is
# percent-encoded, so a value stays one path segment or one query value. These
# sub-delimiters structure neither a path nor a query (DataHub URNs stay readable).
_URL_SAFE = ":@(),!*'"


class _Model(BaseModel):
    # hide_input_in_errors: a mistyped key next to a token must not echo the token.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class _SinkModel(SinkSettingsBase):
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class HttpBatch(_Model):
    max_events: int = Field(100, ge=1, description="Rows per request (one JSON array).")
    max_interval_s: float = Field(
        1.0, gt=0, description="For the caller: longest wait of a row before it is written."
    )


class HttpBasicAuth(_Model):
    username: str = Field(description="HTTP basic auth user.")
    password: SecretStr = Field(description="HTTP basic auth password (never logged).")


class HttpAuth(_Model):
    """Exactly one of ``bearer`` and ``basic``."""

    bearer: SecretStr | None = Field(None, description="Bearer token (never logged).")
    basic: HttpBasicAuth | None = Field(None, description="HTTP basic auth.")

    @model_validator(mode="after")
    def _one(self) -> HttpAuth:
        if (self.bearer is None) == (self.basic is None):
            raise ValueError("auth needs exactly one of bearer, basic")
        return self


class HttpTls(_Model):
    verify: bool = Field(True, description="Verify the server's certificate.")
    ca_file: str | None = Field(None, description="PEM bundle of trusted CAs (replaces default).")
    client_cert: str | None = Field(None, description="PEM client certificate (mutual TLS).")
    client_key: str | None = Field(None, description="PEM key of client_cert, if separate.")

    @model_validator(mode="after")
    def _key_needs_cert(self) -> HttpTls:
        if self.client_key and not self.client_cert:
            raise ValueError("client_key needs client_cert")
        return self


class HttpSinkSettings(_SinkModel):
    """Options of ``sink: {type: http, ...}`` (see the module docstring for semantics)."""

    type: Literal["http"] = Field("http", description="Sink type.")
    url: str = Field(description="http(s) URL; row fields only in the path and query: "
                     "https://x/{entity_type}?urn={urn} (scheme, host and port literal).")
    method: Literal["POST", "PUT", "PATCH"] = Field("POST", description="HTTP method.")
    batch: HttpBatch | None = Field(None, description="None: one request per row.")
    headers: dict[str, str] = Field(default_factory=dict, description="Extra request headers.")
    auth: HttpAuth | None = Field(None, description="bearer or basic auth.")
    timeout_s: float = Field(
        10, gt=0, description="Connect, write and read timeouts of one request attempt."
    )
    max_concurrency: int = Field(8, ge=1, description="Concurrent writes (enforced by caller).")
    tls: HttpTls = Field(default_factory=HttpTls, description="TLS options.")
    max_retries: int = Field(10, ge=0, description="Retries after the first attempt.")
    min_backoff_s: float = Field(0.2, ge=0, description="First retry delay (full jitter).")
    max_backoff_s: float = Field(30, ge=0, description="Cap of the retry delay and Retry-After.")
    idempotency_header: str | None = Field(
        "Idempotency-Key", description="Header carrying the idempotency key (None: not sent)."
    )
    retry_statuses: list[int] = Field(
        list(RETRY_STATUSES), description="3xx/4xx answers retried like a 5xx (5xx always "
        "are); any other 3xx/4xx dead-letters the request's rows.")

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # header values may be API keys, the url's query too
        for name, value in super().__repr_args__():
            if name == "url":
                value = _shown(value)
            elif name == "headers":
                value = dict.fromkeys(value, "***")
            yield name, value

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        _UrlTemplate(value)  # raises ValueError, without echoing the value
        return value

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _TOKEN.match(name):
                raise ValueError(f"header name {name!r} is not a valid HTTP token")
            if "\r" in text or "\n" in text:
                raise ValueError(f"header {name!r}: the value contains a line break")
        return value

    @field_validator("retry_statuses")
    @classmethod
    def _check_statuses(cls, value: list[int]) -> list[int]:
        wrong = [s for s in value if not 300 <= s <= 499]
        if wrong:
            raise ValueError(f"retry_statuses: {wrong} not in 300..499 (5xx are always "
                             "retried, 2xx succeed)")
        return value

    @model_validator(mode="after")
    def _check(self) -> HttpSinkSettings:
        if self.max_backoff_s < self.min_backoff_s:
            raise ValueError("max_backoff_s must be >= min_backoff_s")
        names = {n.lower() for n in self.headers}
        if self.auth is not None and "authorization" in names:
            raise ValueError("set auth or an Authorization header, not both")
        if self.idempotency_header is not None:
            if not _TOKEN.match(self.idempotency_header):
                raise ValueError("idempotency_header is not a valid HTTP token")
            if self.idempotency_header.lower() in names:
                raise ValueError("headers must not set the idempotency_header")
        return self


class _RowError(Exception):
    """A row cannot become a request (the URL template needs a field it lacks)."""


class _UrlTemplate:
    """A ``str.format_map`` URL template of plain row fields (``{name}``, ``{name:spec}``).

    The scheme, host and port are literal: row fields may only follow the first ``/``
    (or ``?``) after the host, in path segments and in the query, never in the fragment.
    Values are formatted as ``format_map`` does, then percent-encoded whole (only
    unreserved characters and ``_URL_SAFE`` stay), so a value is one path segment or one
    query value: it cannot add a segment, a parameter or a fragment. A path segment
    holding a row value must not render empty, ``.`` or ``..`` (it would name another
    resource or navigate; ``%2E%2E`` is not used instead, since servers and proxies
    decode it and resolve it). A rendered URL must still have the template's origin
    (scheme, host, port; checked as httpx parses it, before anything is sent). A missing
    or null field, or a value breaking these rules, is a :class:`_RowError`.
    """

    def __init__(self, template: str) -> None:
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError as exc:
            raise ValueError(f"url: not a valid template ({exc})") from None
        for _, field, spec, conversion in parsed:
            if field is None:
                continue
            if not _IDENTIFIER.match(field):
                raise ValueError(f"url: template field {field!r} must be a plain row field name")
            if conversion or "{" in (spec or ""):
                raise ValueError(f"url: template field {field!r}: use {{name}} or {{name:spec}}")
        has_fields = any(f is not None for _, f, _, _ in parsed)
        prefix = ""  # the literal text before the first field
        for literal, field, _, _ in parsed:
            prefix += literal
            if field is not None:
                break
        scheme, sep, rest = prefix.partition("://")
        end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=-1)
        authority = rest if end < 0 else rest[:end]
        if not sep or scheme.lower() not in ("http", "https"):
            raise ValueError("url must be http(s)://host[:port]/path")  # value not echoed
        if has_fields and (end < 0 or not authority):
            raise ValueError("url: row fields are allowed only in the path and the query; the "
                             "scheme, host and port must be literal and end with '/' before "
                             "the first {field}")
        if "@" in authority:
            raise ValueError("credentials in the url are not allowed; use auth")
        if not authority:
            raise ValueError("url must be http(s)://host[:port]/path")
        try:
            port = urlsplit(f"{scheme}://{authority}/").port
            origin = _origin(httpx.URL(f"{scheme}://{authority}/"))
        except (ValueError, httpx.InvalidURL):
            raise ValueError("url: the host or port is not valid") from None
        if not origin[1] or (port is not None and not 0 < port < 65536):
            raise ValueError("url: the host or port is not valid")
        self.origin = origin
        # (literal, field, spec, in_query); a field in the fragment is refused
        self.parts: list[tuple[str, str | None, str, bool]] = []
        where = "authority"
        for literal, field, spec, _ in parsed:
            for char in literal:
                if char == "#":
                    where = "fragment"
                elif char == "?" and where != "fragment":
                    where = "query"
                elif char == "/" and where == "authority":
                    where = "path"
            if field is not None and where == "fragment":
                raise ValueError(f"url: template field {field!r} is in the fragment (#...); "
                                 "row fields are allowed only in the path and the query")
            self.parts.append((literal, field, spec or "", where == "query"))
        self.static = None if has_fields else "".join(p[0] for p in parsed)

    def render(self, row: Row) -> str:
        if self.static is not None:
            return self.static
        out: list[str] = []
        spans: list[tuple[int, int, str]] = []  # where path values went, and their field
        size = 0
        for literal, field, spec, in_query in self.parts:
            out.append(literal)
            size += len(literal)
            if field is None:
                continue
            value = row.get(field)
            if value is None:
                what = "null" if field in row else "missing"
                raise _RowError(f"url template: field {field!r} is {what} in the row")
            try:
                text = quote(format(value, spec), safe=_URL_SAFE)
            except (TypeError, ValueError) as exc:
                raise _RowError(f"url template: field {field!r}: {exc}") from None
            if not in_query:
                spans.append((size, size + len(text), field))
            out.append(text)
            size += len(text)
        url = "".join(out)
        for start, stop, field in spans:
            first = url.rfind("/", 0, start) + 1
            last = min((i for i in (url.find(c, stop) for c in "/?#") if i >= 0),
                       default=len(url))
            if url[first:last] in ("", ".", ".."):
                raise _RowError(f"url template: field {field!r} makes the path segment "
                                f"{url[first:last]!r} (empty or a dot segment)")
        try:
            origin = _origin(httpx.URL(url))
        except httpx.InvalidURL as exc:
            raise _RowError(f"url template: the rendered url is not valid ({exc})") from None
        if origin != self.origin:  # not possible with the rules above: defence in depth
            raise _RowError("url template: the rendered url leaves the url's origin "
                            f"{self.origin[0]}://{self.origin[1]}:{self.origin[2]}")
        return url


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` of ``url`` as httpx connects to it (default port filled)."""
    default = {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host, url.port or default


@dataclass(slots=True)
class _Request:
    """One request to send, or (``refused`` set) rows that cannot become one."""

    rows: list[Row]
    url: str = ""
    key: str = ""
    refused: str | None = None
    # per row: its index among its message's rows, and whether it is the message's last
    marks: list[tuple[int, bool]] = dataclasses.field(default_factory=list)

    def halves(self) -> tuple[_Request, _Request]:
        """The request cut in two (a 413 for a batch), each with its own key."""
        half = len(self.rows) // 2
        parts = (slice(None, half), slice(half, None))
        return tuple(  # type: ignore[return-value]
            _Request(self.rows[p], self.url, _key(self.rows[p], self.marks[p]),
                     marks=self.marks[p]) for p in parts)


class _State(enum.Enum):
    INIT = "INIT"
    OPEN = "OPEN"
    CLOSED = "CLOSED"


class HttpSink(Sink):
    """Sends rows to an HTTP API (see the module docstring for the guarantees).

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
        self._url = _UrlTemplate(settings.url)
        self._transport = transport
        self._sleep = sleep
        self._jitter = jitter
        self._client: httpx.AsyncClient | None = None
        self._state = _State.INIT
        self._headers, self._secrets = _headers_and_secrets(settings)
        self._tracing: Tracing | None = None  # the process's, when tracing is on

    def __repr__(self) -> str:
        s = self.settings
        auth = "none" if s.auth is None else "bearer" if s.auth.bearer else "basic"
        batch = s.batch.max_events if s.batch else None
        return (f"<HttpSink {self._state.value} {s.method} {_shown(s.url)} batch={batch} "
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
            verify=_tls_verify(s.tls) if self._transport is None else True,
            transport=self._transport,
            follow_redirects=False,
        )
        self._state = _State.OPEN
        resources = self.context.resources
        self._tracing = None if resources is None else resources.tracing
        logger.info("http sink open: %s %s", s.method, _shown(s.url))

    async def close(self) -> None:
        """Close the HTTP client (idempotent)."""
        client, self._client = self._client, None
        if self._state is _State.OPEN:
            self._state = _State.CLOSED
        if client is not None:
            await client.aclose()
            logger.info("http sink closed: %s", _shown(self.settings.url))

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

    def _plan(self, rows: Sequence[Row]) -> Iterator[_Request]:
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
                    raise _RowError("the row has no Kafka coordinates (_offset)")
            except _RowError as exc:
                if group:
                    yield self._request(rows, group, url, index, last)
                    group = []
                yield _Request([row], refused=str(exc))
                continue
            if group and (row_url != url or len(group) >= max_events
                          or _partition_of(row) != _partition_of(rows[group[0]])):
                yield self._request(rows, group, url, index, last)
                group = []
            group.append(i)
            url = row_url
        if group:
            yield self._request(rows, group, url, index, last)

    def _request(self, rows: Sequence[Row], group: list[int], url: str,
                 index: list[int], last: list[bool]) -> _Request:
        chosen = [rows[i] for i in group]
        marks = [(index[i], last[i]) for i in group]
        return _Request(chosen, url, _key(chosen, marks), marks=marks)

    async def _send(self, client: httpx.AsyncClient, request: _Request) -> None:
        s = self.settings
        payload: object = request.rows if s.batch else request.rows[0]
        body = dumps_compact(payload, _json_default)
        headers = {s.idempotency_header: request.key} if s.idempotency_header else {}
        shown = _shown(request.url)
        where = _partition_of(request.rows[0])
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

    async def _exchange(self, client: httpx.AsyncClient, request: _Request, body: bytes,
                        headers: dict[str, str]) -> tuple[httpx.Response, str]:
        """One attempt: the response and, for a non-2xx, the first KB of its body; with
        tracing, in its span, the request carrying its ``traceparent``: a request for
        one event continues that event's trace (see :meth:`Tracing.http`)."""
        tracing, url = self._tracing, request.url
        if tracing is None:
            return await self._exchange_once(client, url, body, headers)
        offsets = [row["_offset"] for row in request.rows]
        with tracing.http(self.settings.method, _shown(url), offsets) as span:
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
                where = _shown(response.headers.get("Location", ""))
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


# -------------------------------------------------------------------- helpers


def _headers_and_secrets(s: HttpSinkSettings) -> tuple[dict[str, str], list[str]]:
    headers = {"Content-Type": "application/json", "User-Agent": "kstage-http-sink"}
    headers.update(s.headers)
    secrets = [v for k, v in s.headers.items() if _SECRET_HEADER.search(k) and len(v) >= 4]
    if s.auth is not None and s.auth.bearer is not None:
        token = s.auth.bearer.get_secret_value()
        headers["Authorization"] = f"Bearer {token}"
        secrets.append(token)
    elif s.auth is not None and s.auth.basic is not None:
        password = s.auth.basic.password.get_secret_value()
        userpass = f"{s.auth.basic.username}:{password}".encode()
        encoded = base64.b64encode(userpass).decode("ascii")
        headers["Authorization"] = f"Basic {encoded}"
        secrets += [password, encoded]
    # longest first, so a secret containing another is masked whole
    return headers, sorted((x for x in secrets if x), key=len, reverse=True)


def _partition_of(row: Row) -> tuple[Any, Any]:
    return row.get("_topic"), row.get("_partition")


def _key(rows: Sequence[Row], marks: Sequence[tuple[int, bool]]) -> str:
    """The idempotency key of a request of ``rows`` (see the module docstring)."""
    topic, partition = _partition_of(rows[0])
    start, end = rows[0]["_offset"], rows[-1]["_offset"]
    (first_index, _), (last_index, last) = marks[0], marks[-1]
    if first_index == 0 and last:
        return f"{topic}-{partition}-{start}-{end}"
    return f"{topic}-{partition}-{start}.{first_index}-{end}.{last_index}"


def _shown(url: str) -> str:
    """The URL for logs and errors: without its query (it may carry an API key)."""
    base, sep, _ = url.partition("?")
    return f"{base}?..." if sep else base


def _json_default(value: object) -> object:
    """JSON of what a processor may put in a row beyond JSON's types: bytes as text,
    anything else as its str (a Decimal's exact digits, a datetime with its offset)."""
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


def _decode(data: bytes, response: httpx.Response) -> str:
    try:
        return data.decode(response.charset_encoding or "utf-8", "replace")
    except LookupError:  # an unknown charset name
        return data.decode("utf-8", "replace")


def _tls_verify(tls: HttpTls) -> ssl.SSLContext | bool:
    """httpx's ``verify``: a bool, or an SSLContext when CA or client files are given."""
    if not tls.verify:
        logger.warning("http sink: TLS certificate verification is disabled")
    if tls.ca_file is None and tls.client_cert is None:
        return tls.verify
    try:
        context = ssl.create_default_context(cafile=tls.ca_file if tls.verify else None)
        if not tls.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if tls.client_cert is not None:
            context.load_cert_chain(tls.client_cert, tls.client_key)
    except (OSError, ssl.SSLError) as exc:
        raise SinkError(f"http sink tls: cannot load the files: {exc}") from exc
    return context
