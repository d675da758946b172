"""The HTTP transport of the registry client: its TLS (:func:`tls_verify`, httpx's
``verify``) and what a transport error says (:func:`describe_transport_error`, which the
HTTP sink uses too)."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

from actors.codecs.schema_registry.errors import RegistryRequestError
from actors.tls import ssl_verify

if TYPE_CHECKING:
    from settings.models import SchemaRegistryTls


def tls_verify(tls: SchemaRegistryTls) -> ssl.SSLContext | bool:
    """httpx's ``verify`` for ``schema_registry.tls`` (:func:`actors.tls.ssl_verify`);
    files that cannot be loaded are a RegistryRequestError naming the settings."""
    try:
        return ssl_verify(tls, "schema registry")
    except (OSError, ssl.SSLError) as exc:
        raise RegistryRequestError(f"schema_registry.tls: cannot load the files: {exc}") from exc


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
