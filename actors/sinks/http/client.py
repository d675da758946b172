"""What the HTTP sink's one ``httpx.AsyncClient`` is built with: its headers, the
credentials among them and the secrets to mask (:func:`headers_and_secrets`), and its
TLS (:func:`tls_verify`). Secrets are only read here; they never appear in logs, reprs
or exception messages."""

from __future__ import annotations

import base64
import re
import ssl

from actors.errors import SinkError
from actors.sinks.http.settings import HttpSinkSettings, HttpTls
from actors.tls import ssl_verify

_SECRET_HEADER = re.compile(r"(auth|key|token|secret|password|cookie|session)", re.IGNORECASE)


def headers_and_secrets(s: HttpSinkSettings) -> tuple[dict[str, str], list[str]]:
    """The client's headers (JSON, the settings' own, the auth) and the secret values
    among them, longest first, for :meth:`HttpSink._scrub` to mask."""
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


def tls_verify(tls: HttpTls) -> ssl.SSLContext | bool:
    """httpx's ``verify`` for the sink's ``tls`` (:func:`actors.tls.ssl_verify`); files
    that cannot be loaded are a SinkError."""
    try:
        return ssl_verify(tls, "http sink")
    except (OSError, ssl.SSLError) as exc:
        raise SinkError(f"http sink tls: cannot load the files: {exc}") from exc
