"""A small OpenID Connect identity provider on loopback: a client-credentials token
endpoint and the JWKS that Apache Kafka's ``OAuthBearerValidatorCallbackHandler``
validates the tokens against.

``POST /token`` (RFC 6749 §4.4): the client authenticates with HTTP Basic
(``client_secret_basic``, Kafka's clients) or with ``client_id`` and ``client_secret`` in the
form (``client_secret_post``, Iceberg's REST clients); a wrong id or secret gets
``401 {"error": "invalid_client"}``. The answer is an RS256 JWT with ``sub``
(the client id), ``iss``, ``aud``, ``scope``, ``iat`` and ``exp`` (``ttl_s`` from now) and
``expires_in``. ``GET /jwks`` gives the signing key, ``GET /.well-known/openid-configuration``
the discovery document (issuer, token endpoint, JWKS) that Quarkus OIDC (Nessie) reads.
``down = True`` makes the token endpoint answer 503 (an outage); ``issued`` counts the
tokens handed out.
"""

from __future__ import annotations

import base64
import json
import math
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

ISSUER = "http://kstage-test-idp"
AUDIENCE = "kafka"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int_b64(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


class OidcServer:
    """The identity provider; a context manager (see the module doc)."""

    def __init__(self, clients: dict[str, str], ttl_s: float = 300) -> None:
        self.clients = dict(clients)
        self.ttl_s = ttl_s
        self.down = False
        self.issued = 0
        self.refused = 0
        self.unavailable = 0  # token requests answered 503 while down
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._kid = "kstage-test-key"
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/jwks":
                    self._send(200, owner.jwks())
                elif self.path == "/.well-known/openid-configuration":
                    self._send(200, owner.discovery())
                else:
                    self._send(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = parse_qs(self.rfile.read(length).decode())
                if self.path != "/token":
                    self._send(404, {"error": "not_found"})
                    return
                status, body = owner.answer(self.headers.get("Authorization", ""), form)
                self._send(status, body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks"

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "kid": self._kid, "use": "sig", "alg": "RS256",
                          "n": _int_b64(numbers.n), "e": _int_b64(numbers.e)}]}

    def discovery(self) -> dict[str, Any]:
        """The OpenID Connect discovery document (what Quarkus OIDC needs of it)."""
        return {"issuer": ISSUER, "token_endpoint": self.token_url, "jwks_uri": self.jwks_url,
                "grant_types_supported": ["client_credentials"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic",
                                                          "client_secret_post"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "response_types_supported": ["token"], "subject_types_supported": ["public"]}

    def mint(self, subject: str, ttl_s: float, scope: str = "kafka") -> str:
        """A signed JWT for ``subject`` valid for ``ttl_s`` seconds."""
        now = time.time()
        header = {"alg": "RS256", "typ": "JWT", "kid": self._kid}
        # ``exp`` in whole seconds, rounded up: the token lives at least ``ttl_s`` (the
        # ``expires_in`` of the answer), so a client refreshing at a share of
        # ``expires_in`` (Iceberg: nine tenths) does so before the server's ``exp``.
        # ``jti``: each token its own, as real providers mint them (two tokens minted in
        # the same second differ).
        claims = {"sub": subject, "iss": ISSUER, "aud": AUDIENCE, "scope": scope,
                  "iat": int(now), "exp": math.ceil(now + ttl_s), "jti": uuid.uuid4().hex}
        signing_input = f"{_b64(json.dumps(header).encode())}." \
                        f"{_b64(json.dumps(claims).encode())}"
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(),
                                   hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"

    def answer(self, authorization: str, form: dict[str, list[str]]
               ) -> tuple[int, dict[str, Any]]:
        if self.down:
            self.unavailable += 1
            return 503, {"error": "temporarily_unavailable"}
        client, secret = "", ""
        if authorization.startswith("Basic "):
            client, _, secret = base64.b64decode(authorization[6:]).decode().partition(":")
        elif "client_id" in form:  # client_secret_post
            client = form["client_id"][0]
            secret = form.get("client_secret", [""])[0]
        if form.get("grant_type") != ["client_credentials"]:
            return 400, {"error": "unsupported_grant_type"}
        if self.clients.get(client) != secret or not client:
            self.refused += 1
            return 401, {"error": "invalid_client", "error_description": "bad credentials"}
        self.issued += 1
        scope = form.get("scope", ["kafka"])[0]
        return 200, {"access_token": self.mint(client, self.ttl_s, scope),
                     "token_type": "Bearer", "expires_in": int(self.ttl_s)}

    def __enter__(self) -> OidcServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
