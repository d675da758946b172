"""The schema registry client: writer schemas by id over the Confluent REST API (httpx).

It fetches writer schemas for the decoders, robustly:

* one ``httpx.AsyncClient`` per registry, opened by ``start()``, closed by ``close()``;
* failover: ``url`` may list several base URLs; a transport error or a 5xx from one
  moves on to the next at once, and the URL that answered last is tried first from then;
* retries: a failed round over all URLs is retried up to ``max_retries`` times after a
  capped exponential backoff with full jitter (a ``429`` waits its ``Retry-After``
  seconds instead, capped at ``max_backoff_s``), then :class:`RegistryUnavailable`
  (retriable) is raised. Other 4xx answers are never retried;
* schemas by id are immutable: cached forever, and concurrent lookups of one id share a
  single request (single-flight). A not-found id is *not* cached: a registry follower
  may lag behind the leader that assigned the id, so a later lookup can succeed (the
  caller, e.g. :class:`actors.codecs.avro.AvroDecoder`, decides whether to remember it).

Id types (the bytes after the magic byte): ``int``/``long`` ids use Confluent's
``GET /schemas/ids/{id}`` (JSON ``{"schema": ...}``); ``uuid`` ids (32 lowercase hex)
use WhereHows' ``GET /schemas/id=<hex>``, answering the plain schema text. Secrets are
read from their ``SecretStr`` only to build the HTTP client; never logged, in reprs or
errors.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import json
import logging
import random
import ssl
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Self
from urllib.parse import quote

from actors.backoff import Jitter, backoff_s
from actors.codecs.schema_registry.answers import (
    describe,
    field,
    json_body,
    list_of,
    raise_for,
    redirect,
    retry_after_s,
    type_and_references,
)
from actors.codecs.schema_registry.errors import RegistryRequestError, RegistryUnavailable
from actors.codecs.schema_registry.ids import normalize_schema_id
from actors.codecs.schema_registry.schemas import (
    IdType,
    Reference,
    RegisteredSchema,
    SchemaId,
    SchemaVersion,
    Sleep,
)
from actors.codecs.schema_registry.transport import describe_transport_error, tls_verify

if TYPE_CHECKING:
    import httpx

    from settings.models import SchemaRegistrySettings

logger = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_ACCEPT = f"{CONTENT_TYPE}, application/vnd.schemaregistry+json; qv=0.9, application/json; qv=0.5"


class _State(enum.Enum):
    INIT = "INIT"
    RUNNING = "RUNNING"
    CLOSED = "CLOSED"


class SchemaRegistryClient:
    """Async client of a Confluent-compatible schema registry (and WhereHows' uuid ids).

    Args:
        settings: the ``schema_registry`` settings (http(s) URLs only).
        transport: an httpx transport to use instead of the network (tests).
        sleep: awaited for every backoff wait (tests inject a recorder).
        jitter: returns a float in [0, 1) scaling each backoff (full jitter).

    Lifecycle: ``await start()`` (or ``async with``) before any request; ``close()`` is
    idempotent and cancels lookups still in flight. A closed client cannot restart.
    """

    def __init__(
        self,
        settings: SchemaRegistrySettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        if not settings.urls:
            raise ValueError("SchemaRegistryClient needs http(s) URLs (file:// is a directory)")
        self._settings = settings
        self.id_type: IdType = settings.id_type
        self._urls = settings.urls
        self._preferred = 0  # index of the URL that answered last
        self.last_problem: str | None = None
        """The last failure a request met (method, URL and why), kept after it: what a
        caller that gave up waiting names."""
        self._transport = transport
        self._sleep = sleep
        self._jitter = jitter
        self._client: httpx.AsyncClient | None = None
        self._state = _State.INIT
        self._cache: dict[SchemaId, str] = {}
        # schemaType and references of the ids in _cache that have them (not Avro)
        self._extras: dict[SchemaId, tuple[str, tuple[Reference, ...]]] = {}
        self._inflight: dict[SchemaId, asyncio.Task[str]] = {}

    def __repr__(self) -> str:
        auth = "basic" if self._settings.basic_auth else "bearer" if self._bearer else "none"
        return (
            f"<SchemaRegistryClient {self._state.value} urls={self._urls} "
            f"id_type={self.id_type} auth={auth} cached={len(self._cache)}>"
        )

    @property
    def _bearer(self) -> bool:
        return self._settings.bearer_token is not None

    @property
    def url(self) -> str:
        """The base URL tried first (the one that answered last)."""
        return self._urls[self._preferred]

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Open the HTTP client; raises RuntimeError when started twice or closed."""
        if self._state is not _State.INIT:
            raise RuntimeError(f"schema registry client is {self._state.value}, not INIT")
        import httpx  # loaded by the clients that run, not by `kstage validate`

        s = self._settings
        headers = {"Accept": _ACCEPT}
        if s.bearer_token is not None:
            headers["Authorization"] = f"Bearer {s.bearer_token.get_secret_value()}"
        auth = None
        if s.basic_auth is not None:
            auth = httpx.BasicAuth(s.basic_auth.username, s.basic_auth.password.get_secret_value())
        self._client = httpx.AsyncClient(
            auth=auth,
            headers=headers,
            timeout=httpx.Timeout(s.timeout_s),
            # an injected transport carries its own TLS settings
            verify=tls_verify(s.tls) if self._transport is None else True,
            transport=self._transport,
            follow_redirects=False,
        )
        self._state = _State.RUNNING
        logger.info("schema registry client started: %s (id_type %s)", self._urls, self.id_type)

    async def close(self) -> None:
        """Cancel in-flight lookups and close the HTTP client (idempotent)."""
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None
            logger.info("schema registry client closed")

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _running_client(self) -> httpx.AsyncClient:
        if self._client is None:
            raise RuntimeError(f"schema registry client is {self._state.value}; start() it")
        return self._client

    # ------------------------------------------------------------------ requests

    async def get_schema(self, schema_id: int | str) -> str:
        """The writer schema text of an id (cached forever; one request per id at a time).

        Raises:
            SchemaNotFound: unknown or impossible id (PoisonMessage).
            RegistryUnavailable: no URL answered within the retries (retriable).
            RegistryRequestError: refused (401, 403, ...) or a malformed answer.
        """
        key = normalize_schema_id(schema_id, self.id_type)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        task = self._inflight.get(key)
        if task is None:
            self._running_client()
            # Tracked in _inflight until done; close() cancels it. Shielded below, so a
            # cancelled waiter does not cancel the lookup the other waiters share.
            task = asyncio.create_task(self._fetch(key), name=f"schema-registry-id-{key}")
            self._inflight[key] = task
            task.add_done_callback(functools.partial(self._fetched, key))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and current is not None and not current.cancelling():
                raise RuntimeError("schema registry client closed during the lookup") from None
            raise

    def _fetched(self, key: SchemaId, task: asyncio.Task[str]) -> None:
        self._inflight.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved: no "never retrieved" noise if all waiters left

    async def _fetch(self, key: SchemaId) -> str:
        what = f"schema id {key}"
        if isinstance(key, str):  # uuid: WhereHows answers the plain schema text
            response = await self._request("GET", f"/schemas/id={key}", what, key)
            text = response.text
            if not text.strip():
                raise RegistryRequestError(f"{what}: empty answer from {response.url}")
        else:
            body = json_body(await self._request("GET", f"/schemas/ids/{key}", what, key), what)
            text = field(body, "schema", str, what)
            schema_type, references = type_and_references(body, what)
            if schema_type != "AVRO" or references:
                self._extras[key] = (schema_type, references)
        self._cache[key] = text
        logger.debug("fetched writer schema id %s (%d chars)", key, len(text))
        return text

    async def get_registered(self, schema_id: int | str) -> RegisteredSchema:
        """The schema of an id with its type and references (cached as
        :meth:`get_schema`; raises as it does)."""
        text = await self.get_schema(schema_id)
        schema_type, references = self._extras.get(
            normalize_schema_id(schema_id, self.id_type), ("AVRO", ()))
        return RegisteredSchema(text, schema_type, references)

    async def get_version(self, subject: str, version: int) -> RegisteredSchema:
        """One version of a subject (a reference's target); SchemaNotFound on a 404.
        Versions of a subject are immutable, but a deleted one may be recreated: not
        cached here (the decoders cache what they build from it, per schema id)."""
        what = f"version {version} of subject {subject!r}"
        path = f"/subjects/{quote(subject, safe='')}/versions/{version}"
        body = json_body(await self._request("GET", path, what, f"{subject}/{version}"), what)
        schema_type, references = type_and_references(body, what)
        return RegisteredSchema(field(body, "schema", str, what), schema_type, references)

    async def latest(self, subject: str) -> SchemaVersion:
        """``(id, version, schema)`` of the subject's latest version."""
        what = f"latest version of subject {subject!r}"
        path = f"/subjects/{quote(subject, safe='')}/versions/latest"
        body = json_body(await self._request("GET", path, what, subject), what)
        schema_id = field(body, "id", int, what)
        schema = field(body, "schema", str, what)
        if self.id_type != "uuid":
            self._cache.setdefault(schema_id, schema)  # ids are immutable
        return SchemaVersion(schema_id, field(body, "version", int, what), schema)

    async def register(self, subject: str, schema_text: str) -> int:
        """Register an Avro schema under a subject; the same schema gets the same id."""
        what = f"register under subject {subject!r}"
        path = f"/subjects/{quote(subject, safe='')}/versions"
        body = json.dumps({"schema": schema_text}).encode()
        answer = json_body(await self._request("POST", path, what, content=body), what)
        return field(answer, "id", int, what)

    async def subjects(self) -> list[str]:
        """All subject names."""
        body = json_body(await self._request("GET", "/subjects", "list subjects"), "list subjects")
        return list_of(body, str, "list subjects")

    async def versions(self, subject: str) -> list[int]:
        """The version numbers of a subject."""
        what = f"versions of subject {subject!r}"
        path = f"/subjects/{quote(subject, safe='')}/versions"
        return list_of(json_body(await self._request("GET", path, what, subject), what), int, what)

    async def _request(
        self,
        method: str,
        path: str,
        what: str,
        not_found: SchemaId | None = None,
        *,
        content: bytes | None = None,
    ) -> httpx.Response:
        """A 2xx answer, after failover and retries; raises for everything else.

        ``not_found`` is what a 404 is about (id or subject): SchemaNotFound names it;
        without it a 404 is a RegistryRequestError.
        """
        import httpx

        client = self._running_client()
        headers = {"Content-Type": CONTENT_TYPE} if content is not None else None
        retries = self._settings.max_retries
        problem, status, cause = "", None, None
        for attempt in range(retries + 1):
            retry_after: float | None = None
            first = self._preferred
            for step in range(len(self._urls)):
                index = (first + step) % len(self._urls)
                url = self._urls[index] + path
                try:
                    response = await client.request(method, url, content=content, headers=headers)
                except (httpx.TransportError, ssl.SSLError) as exc:  # httpx lets some through
                    problem, _ = describe_transport_error(
                        exc, https=url.startswith("https:"), settings="schema_registry.tls")
                    status, cause = None, exc
                    self._failed(what, method, url, problem)
                    continue  # fail over to the next URL
                code = response.status_code
                if response.is_redirect:  # never followed: a moved registry is an outage
                    problem, status, cause = redirect(response), code, None
                    self._failed(what, method, url, problem)
                    continue  # fail over to the next URL
                if code < 500 and code != 429:
                    if index != self._preferred:
                        logger.warning("schema registry: now using %s", self._urls[index])
                        self._preferred = index
                    if code < 300:
                        return response
                    raise_for(response, what, not_found)
                problem, status, cause = describe(response), code, None
                self._failed(what, method, url, problem)
                if code == 429:  # alive but asks us to slow down: wait, do not fail over
                    self._preferred = index
                    retry_after = retry_after_s(response)
                    break
            if attempt == retries:
                break
            delay = self._backoff(attempt, retry_after)
            logger.warning(
                "schema registry %s: retry %d/%d in %.2f s", what, attempt + 1, retries, delay
            )
            await self._sleep(delay)
        raise RegistryUnavailable(
            f"schema registry unavailable ({what}, {retries + 1} attempts over "
            f"{len(self._urls)} URL(s)): {problem}",
            status_code=status,
        ) from cause

    def _failed(self, what: str, method: str, url: str, problem: str) -> None:
        """One attempt failed: logged, and kept as :attr:`last_problem`."""
        logger.warning("schema registry %s: %s %s: %s", what, method, url, problem)
        self.last_problem = f"{method} {url}: {problem}"

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        cap = self._settings.max_backoff_s
        if retry_after is not None:
            return min(retry_after, cap)
        return backoff_s(attempt, self._settings.min_backoff_s, cap, Jitter.FULL, self._jitter)
