"""What the HTTP sink's one ``httpx.AsyncClient`` is built with: its headers, the
credentials among them and the secrets to mask (:func:`headers_and_secrets`), and its
TLS (:func:`tls_verify`). Secrets are only read here; they never appear in logs, reprs
or exception messages."""

from __future__ import annotations

import base64
import logging
import re
import ssl

from actors.errors import SinkError
from actors.sinks.http.settings import HttpSinkSettings, HttpTls

logger = logging.getLogger(__name__)

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
