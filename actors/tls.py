"""httpx's ``verify`` from a ``tls`` settings section (the schema registry's, the HTTP
sink's): the one place that turns ``verify``, ``ca_file``, ``client_cert`` and
``client_key`` into a bool or an :class:`ssl.SSLContext`. It imports nothing of kstage,
so any module of ``actors`` may use it without an import cycle."""

from __future__ import annotations

import logging
import ssl
from typing import Protocol

__all__ = ["TlsFiles", "ssl_verify"]

logger = logging.getLogger(__name__)


class TlsFiles(Protocol):
    """The keys of a ``tls`` settings section."""

    @property
    def verify(self) -> bool: ...
    @property
    def ca_file(self) -> str | None: ...
    @property
    def client_cert(self) -> str | None: ...
    @property
    def client_key(self) -> str | None: ...


def ssl_verify(tls: TlsFiles, who: str) -> ssl.SSLContext | bool:
    """httpx's ``verify``: a bool, or an SSLContext when files are involved.

    ``ca_file`` replaces the default trust store; ``client_cert``/``client_key`` add a
    client certificate (mutual TLS), also with ``verify: false``. A disabled verification
    is logged as a warning naming ``who`` (e.g. ``schema registry``). Files that cannot be
    loaded raise the ``OSError`` or ``ssl.SSLError``, for the caller to wrap in its error.
    """
    if not tls.verify:
        logger.warning("%s: TLS certificate verification is disabled", who)
    if tls.ca_file is None and tls.client_cert is None:
        return tls.verify
    context = ssl.create_default_context(cafile=tls.ca_file if tls.verify else None)
    if not tls.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if tls.client_cert is not None:
        context.load_cert_chain(tls.client_cert, tls.client_key)
    return context
