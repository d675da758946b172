"""Schema registry client: writer schemas by id over the Confluent REST API (httpx).

This module is responsible for fetching Avro writer schemas for the decoders, robustly:

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
use WhereHows' ``GET /schemas/id=<hex>``, answering the plain schema text. Schema
references are not resolved. ``file://DIR`` serves ``.avsc`` files instead
(:mod:`actors.codecs.schema_files`; :func:`actors.codecs.registries.registry_from_settings`
builds the one a configuration names). Secrets are read from
their ``SecretStr`` only to build the HTTP client; never logged, in reprs or errors.

Errors (added under :mod:`processors.errors`)::

    ProcessorError
    └── SchemaRegistryError         root of this module's errors (status_code, error_code)
        ├── RegistryUnavailable     transport errors, 429, 5xx after the retries: retriable
        ├── RegistryRequestError    any other 4xx (401, 403, 422, ...) or a malformed answer
        ├── SchemaNotFound          404 for an id/subject/version; also a PoisonMessage
        └── SchemaNotFoundYet       404 for an id still inside its retry window: retriable
                                    (raised by :meth:`actors.codecs.avro.AvroDecoder.fetch`)
"""

from __future__ import annotations

import asyncio
import email.utils
import enum
import functools
import json
import logging
import random
import ssl
import string
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, NoReturn, Protocol, Self, TypeVar
from urllib.parse import quote

from actors.backoff import Jitter, backoff_s
from processors.errors import PoisonMessage, ProcessorError

if TYPE_CHECKING:
    import httpx

    from settings.models import SchemaRegistrySettings, SchemaRegistryTls

logger = logging.getLogger(__name__)

IdType = Literal["int", "long", "uuid"]
SchemaId = int | str
"""A normalised schema id: an int for ``int``/``long``, 32 lowercase hex for ``uuid``."""
Sleep = Callable[[float], Awaitable[None]]
_T = TypeVar("_T")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_ACCEPT = f"{CONTENT_TYPE}, application/vnd.schemaregistry+json; qv=0.9, application/json; qv=0.5"
_MAX_ID = {"int": 2**32, "long": 2**63}
_MAX_MESSAGE = 300  # characters of a registry error message kept in our exceptions


class SchemaRegistryError(ProcessorError):
    """Root of the schema registry errors.

    Attributes:
        status_code: HTTP status of the answer, if there was one.
        error_code: the registry's ``error_code`` (e.g. 40403), if the body had one.
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, error_code: int | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error_code = error_code


class RegistryUnavailable(SchemaRegistryError):
    """No registry URL answered usefully (transport error, 429, 5xx) within the retries."""

    retriable = True


class RegistryRequestError(SchemaRegistryError):
    """The registry refused the request (4xx other than 404/429) or answered nonsense."""


class SchemaNotFound(SchemaRegistryError, PoisonMessage):
    """The schema id (or subject, version) does not exist; the message names it.

    ``schema_id`` (also in ``details``) is the id, or the subject, that was not found.
    """

    def __init__(self, message: str, *, schema_id: SchemaId | None = None, **codes: Any) -> None:
        super().__init__(message, **codes)
        self.schema_id = schema_id
        self.details = {"schema_id": schema_id}  # for the dead-letter line


class SchemaNotFoundYet(SchemaRegistryError):
    """A 404 for a schema id inside its ``not_found_retry_s`` window: retry, not poison.

    A registry answers 404 for ids that exist while it (re)loads them (Karapace for
    ~5 s after a restart, a follower lagging its leader), and an id a producer used is
    almost never truly unknown. ``schema_id`` is the id; ``waited_s`` the seconds since
    its first 404; ``remaining_s`` the seconds left before it counts as poison.
    """

    retriable = True

    def __init__(self, message: str, *, schema_id: SchemaId, waited_s: float,
                 remaining_s: float, **codes: Any) -> None:
        super().__init__(message, **codes)
        self.schema_id = schema_id
        self.waited_s = waited_s
        self.remaining_s = remaining_s


class SchemaVersion(NamedTuple):
    """One registered version of a subject: ``id, version, schema = await r.latest(s)``."""

    id: SchemaId
    version: int
    schema: str


class Reference(NamedTuple):
    """A schema reference: the ``name`` the referring schema uses (a Protobuf import
    path, a JSON Schema ``$ref`` URL) and the subject version that holds it."""

    name: str
    subject: str
    version: int


class RegisteredSchema(NamedTuple):
    """A schema by id or version with what the Confluent API says of it besides its text:
    ``schema_type`` (``AVRO`` when the answer has no ``schemaType``, as the API omits it
    for Avro; ``PROTOBUF``, ``JSON``) and its ``references``."""

    schema: str
    schema_type: str
    references: tuple[Reference, ...]


class SchemaRegistry(Protocol):
    """The read interface of both registries (HTTP client and ``file://`` directory)."""

    id_type: IdType

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None: ...
    async def get_schema(self, schema_id: int | str) -> str: ...
    async def latest(self, subject: str) -> SchemaVersion: ...
    async def subjects(self) -> list[str]: ...
    async def versions(self, subject: str) -> list[int]: ...


def normalize_schema_id(schema_id: int | str, id_type: IdType) -> SchemaId:
    """The canonical form of an id (cache key), or SchemaNotFound for an impossible one.

    ``int``/``long``: a non-negative int (digits in a str are accepted); ``uuid``: 32
    lowercase hex digits (dashes and upper case accepted, or the 128-bit int).
    """
    if isinstance(schema_id, str) and id_type != "uuid" and schema_id.strip().isdigit():
        schema_id = int(schema_id)
    if id_type == "uuid":
        if isinstance(schema_id, int) and not isinstance(schema_id, bool):
            if 0 <= schema_id < 2**128:
                return f"{schema_id:032x}"
        elif isinstance(schema_id, str):
            text = schema_id.strip().lower().replace("-", "")
            if len(text) == 32 and all(c in string.hexdigits for c in text):
                return text
    elif isinstance(schema_id, int) and not isinstance(schema_id, bool):
        # Registries hand out non-negative ids only: a negative one is bad input.
        if 0 <= schema_id < _MAX_ID[id_type]:
            return schema_id
    raise SchemaNotFound(f"invalid {id_type} schema id {schema_id!r}", schema_id=schema_id)


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
            verify=_tls_verify(s.tls) if self._transport is None else True,
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
            body = _json(await self._request("GET", f"/schemas/ids/{key}", what, key), what)
            text = _field(body, "schema", str, what)
            schema_type, references = _type_and_references(body, what)
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
        body = _json(await self._request("GET", path, what, f"{subject}/{version}"), what)
        schema_type, references = _type_and_references(body, what)
        return RegisteredSchema(_field(body, "schema", str, what), schema_type, references)

    async def latest(self, subject: str) -> SchemaVersion:
        """``(id, version, schema)`` of the subject's latest version."""
        what = f"latest version of subject {subject!r}"
        path = f"/subjects/{quote(subject, safe='')}/versions/latest"
        body = _json(await self._request("GET", path, what, subject), what)
        schema_id = _field(body, "id", int, what)
        schema = _field(body, "schema", str, what)
        if self.id_type != "uuid":
            self._cache.setdefault(schema_id, schema)  # ids are immutable
        return SchemaVersion(schema_id, _field(body, "version", int, what), schema)

    async def register(self, subject: str, schema_text: str) -> int:
        """Register an Avro schema under a subject; the same schema gets the same id."""
        what = f"register under subject {subject!r}"
        path = f"/subjects/{quote(subject, safe='')}/versions"
        body = json.dumps({"schema": schema_text}).encode()
        answer = _json(await self._request("POST", path, what, content=body), what)
        return _field(answer, "id", int, what)

    async def subjects(self) -> list[str]:
        """All subject names."""
        body = _json(await self._request("GET", "/subjects", "list subjects"), "list subjects")
        return _list_of(body, str, "list subjects")

    async def versions(self, subject: str) -> list[int]:
        """The version numbers of a subject."""
        what = f"versions of subject {subject!r}"
        path = f"/subjects/{quote(subject, safe='')}/versions"
        return _list_of(_json(await self._request("GET", path, what, subject), what), int, what)

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
                    logger.warning("schema registry %s: %s %s: %s", what, method, url, problem)
                    continue  # fail over to the next URL
                code = response.status_code
                if response.is_redirect:  # never followed: a moved registry is an outage
                    problem, status, cause = _redirect(response), code, None
                    logger.warning("schema registry %s: %s %s: %s", what, method, url, problem)
                    continue  # fail over to the next URL
                if code < 500 and code != 429:
                    if index != self._preferred:
                        logger.warning("schema registry: now using %s", self._urls[index])
                        self._preferred = index
                    if code < 300:
                        return response
                    _raise_for(response, what, not_found)
                problem, status, cause = _describe(response), code, None
                logger.warning("schema registry %s: %s %s: %s", what, method, url, problem)
                if code == 429:  # alive but asks us to slow down: wait, do not fail over
                    self._preferred = index
                    retry_after = _retry_after(response)
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

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        cap = self._settings.max_backoff_s
        if retry_after is not None:
            return min(retry_after, cap)
        return backoff_s(attempt, self._settings.min_backoff_s, cap, Jitter.FULL, self._jitter)


# -------------------------------------------------------------------- helpers


def _tls_verify(tls: SchemaRegistryTls) -> ssl.SSLContext | bool:
    """httpx's ``verify``: a bool, or an SSLContext when files are involved.

    ``ca_file`` replaces the default trust store; ``client_cert``/``client_key`` add a
    client certificate (mutual TLS), also with ``verify: false``.
    """
    if tls.ca_file is None and tls.client_cert is None:
        if not tls.verify:
            logger.warning("schema registry: TLS certificate verification is disabled")
        return tls.verify
    try:
        if tls.verify:
            context = ssl.create_default_context(cafile=tls.ca_file)
        else:
            logger.warning("schema registry: TLS certificate verification is disabled")
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if tls.client_cert is not None:
            context.load_cert_chain(tls.client_cert, tls.client_key)
    except (OSError, ssl.SSLError) as exc:
        raise RegistryRequestError(f"schema_registry.tls: cannot load the files: {exc}") from exc
    return context


def describe_transport_error(exc: BaseException, *, https: bool, settings: str
                             ) -> tuple[str, bool]:
    """``(text, tls)``: an httpx transport error (or an ``ssl.SSLError`` httpx let
    through) for an error message, and whether it is a TLS failure; a TLS failure names
    the ``settings`` to check (e.g. ``sink.tls``)."""
    import httpx

    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen and not isinstance(cause, ssl.SSLError):
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, ssl.SSLCertVerificationError):
        return (f"{text} (TLS: the server's certificate is not trusted: check {settings}"
                ".ca_file, the CA that signed it)"), True
    if isinstance(cause, ssl.SSLError):
        if "CERTIFICATE" in str(cause).upper() or "HANDSHAKE" in str(cause).upper():
            return (f"{text} (TLS: the server refused the handshake or our certificate: "
                    f"check {settings}.client_cert and {settings}.client_key)"), True
        return f"{text} (TLS: check {settings})", True
    if https and not str(exc) and isinstance(exc, httpx.ReadError | httpx.RemoteProtocolError):
        # a server refusing our client certificate (TLS 1.3) often shows only as this
        return (f"{text} (the server closed the connection without an answer; a server "
                f"requiring a client certificate does that when it refuses ours: check "
                f"{settings}.client_cert and {settings}.client_key)"), False
    return text, False


def _redirect(response: httpx.Response) -> str:
    """The problem a redirect answer is (its Location shown without the query)."""
    base, sep, _ = response.headers.get("Location", "").partition("?")
    return (f"HTTP {response.status_code} redirect to {base}{'?...' if sep else ''} not "
            "followed (redirects never are: set schema_registry.url to the registry itself)")


def _error_of(response: httpx.Response) -> tuple[int | None, str]:
    """``(error_code, message)`` of an error answer, also when it is not JSON."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        code = body.get("error_code")
        message = body.get("message")
        return (
            code if isinstance(code, int) and not isinstance(code, bool) else None,
            str(message)[:_MAX_MESSAGE] if message is not None else response.reason_phrase,
        )
    return None, (response.text.strip()[:_MAX_MESSAGE] or response.reason_phrase)


def _describe(response: httpx.Response) -> str:
    code, message = _error_of(response)
    suffix = f" (error_code {code})" if code is not None else ""
    return f"HTTP {response.status_code}{suffix}: {message}"


def _raise_for(response: httpx.Response, what: str, not_found: SchemaId | None) -> NoReturn:
    code, _ = _error_of(response)
    message = f"{what}: {_describe(response)}"
    if response.status_code == 404 and not_found is not None:
        raise SchemaNotFound(message, schema_id=not_found, status_code=404, error_code=code)
    raise RegistryRequestError(message, status_code=response.status_code, error_code=code)


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds of a ``Retry-After`` header (delta-seconds or HTTP date), if any."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _json(response: httpx.Response, what: str) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise RegistryRequestError(f"{what}: the answer is not JSON") from exc


def _list_of(body: Any, kind: type[_T], what: str) -> list[_T]:
    if not isinstance(body, list) or not all(isinstance(v, kind) for v in body):
        raise RegistryRequestError(f"{what}: the answer is not a list of {kind.__name__}")
    return body


def _type_and_references(body: Any, what: str) -> tuple[str, tuple[Reference, ...]]:
    """``schemaType`` (default ``AVRO``) and ``references`` of an answer."""
    schema_type = body.get("schemaType") or "AVRO" if isinstance(body, dict) else "AVRO"
    raw = body.get("references") or [] if isinstance(body, dict) else []
    if not isinstance(schema_type, str) or not isinstance(raw, list):
        raise RegistryRequestError(f"{what}: the answer's schemaType or references are "
                                   "malformed")
    references = []
    for ref in raw:
        references.append(Reference(_field(ref, "name", str, what),
                                    _field(ref, "subject", str, what),
                                    _field(ref, "version", int, what)))
    return schema_type.upper(), tuple(references)


def _field(body: Any, name: str, kind: type[_T], what: str) -> _T:
    value = body.get(name) if isinstance(body, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise RegistryRequestError(f"{what}: the answer has no {kind.__name__} {name!r}")
    return value
