"""Reading the registry's answers: an error answer's code and message, the error it
raises (:func:`raise_for`), a redirect, a ``Retry-After`` header, and the JSON fields of
a 2xx answer, each checked (a malformed answer is a
:class:`~actors.codecs.schema_registry.errors.RegistryRequestError`)."""

from __future__ import annotations

import email.utils
import time
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from actors.codecs.schema_registry.errors import RegistryRequestError, SchemaNotFound
from actors.codecs.schema_registry.schemas import Reference, SchemaId

if TYPE_CHECKING:
    import httpx

_T = TypeVar("_T")

_MAX_MESSAGE = 300  # characters of a registry error message kept in our exceptions


def redirect(response: httpx.Response) -> str:
    """The problem a redirect answer is (its Location shown without the query)."""
    base, sep, _ = response.headers.get("Location", "").partition("?")
    return (f"HTTP {response.status_code} redirect to {base}{'?...' if sep else ''} not "
            "followed (redirects never are: set schema_registry.url to the registry itself)")


def error_of(response: httpx.Response) -> tuple[int | None, str]:
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


def describe(response: httpx.Response) -> str:
    code, message = error_of(response)
    suffix = f" (error_code {code})" if code is not None else ""
    return f"HTTP {response.status_code}{suffix}: {message}"


def raise_for(response: httpx.Response, what: str, not_found: SchemaId | None) -> NoReturn:
    code, _ = error_of(response)
    message = f"{what}: {describe(response)}"
    if response.status_code == 404 and not_found is not None:
        raise SchemaNotFound(message, schema_id=not_found, status_code=404, error_code=code)
    raise RegistryRequestError(message, status_code=response.status_code, error_code=code)


def retry_after_s(response: httpx.Response) -> float | None:
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


def json_body(response: httpx.Response, what: str) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise RegistryRequestError(f"{what}: the answer is not JSON") from exc


def list_of(body: Any, kind: type[_T], what: str) -> list[_T]:
    if not isinstance(body, list) or not all(isinstance(v, kind) for v in body):
        raise RegistryRequestError(f"{what}: the answer is not a list of {kind.__name__}")
    return body


def type_and_references(body: Any, what: str) -> tuple[str, tuple[Reference, ...]]:
    """``schemaType`` (default ``AVRO``) and ``references`` of an answer."""
    schema_type = body.get("schemaType") or "AVRO" if isinstance(body, dict) else "AVRO"
    raw = body.get("references") or [] if isinstance(body, dict) else []
    if not isinstance(schema_type, str) or not isinstance(raw, list):
        raise RegistryRequestError(f"{what}: the answer's schemaType or references are "
                                   "malformed")
    references = []
    for ref in raw:
        references.append(Reference(field(ref, "name", str, what),
                                    field(ref, "subject", str, what),
                                    field(ref, "version", int, what)))
    return schema_type.upper(), tuple(references)


def field(body: Any, name: str, kind: type[_T], what: str) -> _T:
    value = body.get(name) if isinstance(body, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise RegistryRequestError(f"{what}: the answer has no {kind.__name__} {name!r}")
    return value
