"""``spark.catalog.oauth2``: a REST catalog's login, OAuth 2.0 client credentials (RFC 6749
§4.4) against the identity provider's token endpoint, as Apache Iceberg's REST clients do
it (the ``credential``, ``oauth2-server-uri``, ``scope`` and ``audience`` catalog
properties).

The client secret is a ``SecretStr``: never printed (``validate``, ``/status``, a repr, a
log line). The token endpoint must be ``https://``: the secret travels in every token
request; ``allow_insecure_http`` accepts ``http://`` (a test on loopback).
"""

from __future__ import annotations

import re

from pydantic import Field, SecretStr, ValidationInfo, field_validator

from settings.base import Model

ICEBERG_DEFAULT_SCOPE = "catalog"
"""The scope Iceberg's REST clients ask for when none is set."""

OAUTH2_PROPERTIES = ("credential", "token", "oauth2-server-uri", "scope", "audience",
                     "token-refresh-enabled", "token-exchange-enabled")
"""Iceberg catalog properties that ``spark.catalog.oauth2`` sets: refused in
``spark.catalog.properties`` beside it (one place says how kstage logs in)."""


class CatalogOAuth2Settings(Model):
    """``spark.catalog.oauth2``: the REST catalog's OAuth2 client credentials."""

    allow_insecure_http: bool = Field(
        False, description="Accept an http:// token_url (the client secret in clear text: "
        "loopback tests only).")
    token_url: str = Field(
        description="The identity provider's token endpoint (https://).")
    client_id: str = Field(min_length=1, description="The OAuth2 client id.")
    client_secret: SecretStr = Field(description="The OAuth2 client secret (never printed).")
    scope: str = Field(
        ICEBERG_DEFAULT_SCOPE, min_length=1,
        description="The scope(s) asked for, space separated (Iceberg's default: catalog).")
    audience: str | None = Field(
        None, min_length=1, description="The audience asked for (some identity providers "
        "need it; none: not sent).")

    @field_validator("token_url")
    @classmethod
    def _token_url(cls, value: str, info: ValidationInfo) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        if value.startswith("http://") and not info.data.get("allow_insecure_http"):
            raise ValueError(f"{value!r}: the client secret would travel in clear text: use "
                             "https:// (or allow_insecure_http: true on loopback)")
        return value
