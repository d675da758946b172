"""The built-in token provider ``oidc``: OAuth 2.0 client credentials (RFC 6749 §4.4)
against an OpenID Connect token endpoint, as Kafka's own clients do (KIP-768).

Keys (``kafka.consumer_config``; librdkafka's names)::

    sasl.oauthbearer.method: oidc
    sasl.oauthbearer.token.endpoint.url: https://idp.example.com/oauth2/token
    sasl.oauthbearer.client.id: kstage
    sasl.oauthbearer.client.secret: ${OIDC_CLIENT_SECRET}    # a secret: never printed
    sasl.oauthbearer.scope: kafka                            # optional
    sasl.oauthbearer.extensions: logicalCluster=lkc-1,identityPoolId=pool-2   # optional
    sasl.oauthbearer.allow.insecure.token.endpoint: false    # true: accept an http:// URL

The endpoint must be ``https://``: the client secret travels in every token request, so an
``http://`` endpoint is refused by ``validate`` unless
``sasl.oauthbearer.allow.insecure.token.endpoint`` is true (on loopback too: a name such
as ``localhost`` is resolved, and one rule keeps every cleartext secret written down).

The client authenticates with HTTP Basic (``client_secret_basic``, what Kafka's Java
client sends) and asks for ``grant_type=client_credentials`` and the scope. The answer's
``access_token`` is the token, valid for ``expires_in`` seconds (or until the JWT's
``exp`` when the endpoint gives no ``expires_in``). A 400 or 401 answer that names the
client (``invalid_client``, ``unauthorized_client``, ``invalid_scope``) is a refusal: a
configuration error at start; anything else (unreachable, 5xx, a timeout) is an outage,
retried.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator

from actors.tokens import Token, TokenError, TokenProvider

_REFUSALS = {"invalid_client", "unauthorized_client", "invalid_scope", "invalid_grant",
             "access_denied"}
_TIMEOUT_S = 10.0


class OidcOptions(BaseModel):
    """Options of ``oidc`` (``sasl.oauthbearer.*`` keys)."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    # Declared before token_endpoint_url: that field's check reads it.
    allow_insecure_token_endpoint: bool = Field(
        False, description="Accept an http:// token endpoint, which receives the client "
        "secret in cleartext (every token request carries it); also needed on loopback.")
    token_endpoint_url: str = Field(description="The token endpoint: https://, or http:// "
                                    "with allow_insecure_token_endpoint.")
    client_id: str = Field(min_length=1, description="The OAuth client id.")
    client_secret: SecretStr = Field(description="The OAuth client secret.")
    scope: str | None = Field(None, description="Scopes asked for, space-separated.")
    extensions: str | None = Field(
        None, description="SASL extensions sent with the token: key=value,key=value.")

    @field_validator("token_endpoint_url")
    @classmethod
    def _http_url(cls, value: str, info: ValidationInfo) -> str:
        scheme = value.partition("://")[0].lower() if "://" in value else ""
        if scheme not in ("https", "http"):
            raise ValueError(f"must be an http:// or https:// URL, got {value!r}")
        if scheme == "http" and not info.data.get("allow_insecure_token_endpoint"):
            raise ValueError(
                f"{value!r} sends the client secret in cleartext (HTTP basic auth on every "
                "token request): use https://, or set "
                "sasl.oauthbearer.allow.insecure.token.endpoint: true where the network "
                "path is trusted (loopback included: see docs/security.md)")
        return value

    @field_validator("extensions")
    @classmethod
    def _pairs(cls, value: str | None) -> str | None:
        if value is not None:
            for pair in value.split(","):
                if "=" not in pair:
                    raise ValueError(f"expected key=value,key=value; got {pair!r}")
        return value


def jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT (unverified: the broker verifies), else None."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return float(claims["exp"])
    except (IndexError, ValueError, KeyError, TypeError):
        return None


class OidcTokenProvider(TokenProvider):
    """OIDC client credentials (see the module doc)."""

    name = "oidc"
    options_model = OidcOptions
    options: OidcOptions

    def describe(self) -> str:
        return (f"token endpoint {self.options.token_endpoint_url} (client "
                f"{self.options.client_id!r})")

    def extensions(self) -> dict[str, str]:
        if not self.options.extensions:
            return {}
        pairs = (pair.split("=", 1) for pair in self.options.extensions.split(","))
        return {k.strip(): v.strip() for k, v in pairs}

    async def fetch(self) -> Token:
        options = self.options
        form = {"grant_type": "client_credentials"}
        if options.scope:
            form["scope"] = options.scope
        auth = (options.client_id, options.client_secret.get_secret_value())
        try:
            async with httpx.AsyncClient(timeout=_TIMEOUT_S, follow_redirects=False) as http:
                answer = await http.post(options.token_endpoint_url, data=form, auth=auth)
        except httpx.HTTPError as exc:
            raise TokenError(f"unreachable: {type(exc).__name__}: {exc}") from exc
        body = _json(answer)
        if answer.status_code in (400, 401, 403) and (
                answer.status_code != 400 or body.get("error") in _REFUSALS):
            raise TokenError(f"refused client {options.client_id!r}: HTTP "
                             f"{answer.status_code} {body.get('error', '')} "
                             f"{body.get('error_description', '')}".rstrip(), refused=True)
        if answer.status_code != 200:
            raise TokenError(f"answered HTTP {answer.status_code}")
        token = body.get("access_token")
        if not isinstance(token, str) or not token:
            raise TokenError("answered without an access_token")
        expires_in = body.get("expires_in")
        if isinstance(expires_in, int | float) and expires_in > 0:
            expires_at = time.time() + float(expires_in)
        else:
            expires_at = jwt_expiry(token) or time.time() + 300
        return Token(token, expires_at)


def _json(answer: httpx.Response) -> dict[str, Any]:
    try:
        body = answer.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


__all__ = ["OidcOptions", "OidcTokenProvider", "jwt_expiry"]
