"""The HTTP sink's settings: a topic's ``sink`` mapping (``type: http`` plus the keys of
:class:`HttpSinkSettings`), validated when the configuration is loaded. What the keys
do is told in the package's overview (:mod:`actors.sinks.http`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from actors.sinks.base import SinkSettingsBase
from actors.sinks.http.url_template import UrlTemplate, shown_url

RETRY_STATUSES = (301, 302, 303, 307, 308, 401, 403, 404, 407, 408, 409, 413, 425, 429)
"""Default ``retry_statuses``: 3xx/4xx answers that are not facts about the event."""
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


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
    """Options of ``sink: {type: http, ...}`` (see :mod:`actors.sinks.http` for semantics)."""

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
                value = shown_url(value)
            elif name == "headers":
                value = dict.fromkeys(value, "***")
            yield name, value

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        UrlTemplate(value)  # raises ValueError, without echoing the value
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

