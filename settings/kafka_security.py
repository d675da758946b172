"""Checks of ``kafka.consumer_config``'s security keys, at ``validate`` and at run start.

A security setting that cannot work is an error naming its key (and, through the
loader, its line), never a crash at run time:

- ``security.protocol`` is case-insensitive (``sasl_ssl`` is ``SASL_SSL``); anything but
  PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL is refused.
- ``sasl.mechanism`` (or librdkafka's ``sasl.mechanisms``) is case-insensitive and must be
  one kstage can drive from a file: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER
  (GSSAPI too when the ``gssapi`` package is installed).
- OAUTHBEARER needs ``sasl.oauthbearer.method``, the token provider (``oidc``, built in,
  or a plugin's: :mod:`actors.tokens`, which checks the provider's own keys); the
  ``sasl.oauthbearer.*`` keys need OAUTHBEARER.
- ``sasl.*`` keys without a SASL protocol, or ``ssl.*`` keys without a TLS protocol, are
  refused: the client would silently send no credentials or not encrypt at all.
- PLAIN and SCRAM need ``sasl.username`` and ``sasl.password``.
- ``ssl.*`` files must load (CA bundle, client certificate and key).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from pydantic import SecretStr, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISM_KEYS = ("sasl.mechanism", "sasl.mechanisms")
_USER_KEYS = ("sasl.username", "sasl.plain.username")
_PASSWORD_KEYS = ("sasl.password", "sasl.plain.password")
_CA, _CERT, _KEY, _KEY_PASSWORD = ("ssl.ca.location", "ssl.certificate.location",
                                   "ssl.key.location", "ssl.key.password")


_OAUTH_PREFIX, _METHOD = "sasl.oauthbearer.", "sasl.oauthbearer.method"


def supported_mechanisms() -> tuple[str, ...]:
    """SASL mechanisms a configuration file can use here."""
    base = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
    return (*base, "GSSAPI") if importlib.util.find_spec("gssapi") else base


def _plain(value: Any) -> Any:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def _load_files(config: dict[str, Any], problem: Any) -> None:
    import ssl  # only for a file that names TLS files: TLS loads in ~10 ms

    cafile = config.get(_CA)
    if cafile is not None:
        try:
            ssl.create_default_context(cafile=str(cafile))
        except (OSError, ssl.SSLError) as exc:
            problem(_CA, f"cannot load the CA bundle {cafile}: {exc}")
    certfile = config.get(_CERT)
    if certfile is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        keyfile = config.get(_KEY)
        password = _plain(config.get(_KEY_PASSWORD))
        try:
            context.load_cert_chain(str(certfile), None if keyfile is None else str(keyfile),
                                    None if password is None else str(password))
        except (OSError, ssl.SSLError) as exc:
            key = f" with the key {keyfile}" if keyfile is not None else ""
            problem(_CERT, f"cannot load the client certificate {certfile}{key}: {exc}")
    elif config.get(_KEY) is not None:
        problem(_KEY, f"needs {_CERT} (the client certificate of this key)")


def check_security(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with protocol and mechanism upper-cased; ValidationError listing every
    key that cannot work (loc = the key, so the loader cites its line)."""
    errors: list[InitErrorDetails] = []
    out = dict(config)

    def problem(key: str, message: str) -> None:
        errors.append(InitErrorDetails(
            type=PydanticCustomError("value_error", message),  # literal text
            loc=(key,), input=None))

    protocol = "PLAINTEXT"
    raw = out.get("security.protocol")
    if raw is not None:
        if str(raw).upper() in PROTOCOLS:
            protocol = out["security.protocol"] = str(raw).upper()
        else:
            problem("security.protocol", f"{raw!r} is not a security protocol (one of "
                    f"{', '.join(PROTOCOLS)}; any case)")
            protocol = ""
    mechanism = None
    for key in _MECHANISM_KEYS:
        if out.get(key) is None:
            continue
        mechanism = str(out[key]).upper()
        supported = supported_mechanisms()
        if mechanism in supported:
            out[key] = mechanism
            continue
        why = ": it needs the gssapi package (pip install gssapi)" if mechanism == "GSSAPI" \
            else ""
        problem(key, f"SASL mechanism {out[key]!r} is not supported{why} (supported: "
                f"{', '.join(supported)})")
        mechanism = ""
    unused = {"sasl.": (("PLAINTEXT", "SSL"), "no SASL login would be made; set "
                        "security.protocol: SASL_SSL"),
              "ssl.": (("PLAINTEXT", "SASL_PLAINTEXT"), "the connection would not use TLS; "
                       "set security.protocol: SSL or SASL_SSL")}
    default = " (the default)" if raw is None else ""
    for prefix, (protocols, why) in unused.items():
        if protocol in protocols:
            for key in (k for k in out if k.startswith(prefix)):
                problem(key, f"is set but security.protocol is {protocol}{default}: {why}")
    if protocol.startswith("SASL_") and mechanism != "" and (mechanism or "PLAIN") in (
            "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        for keys in (_USER_KEYS, _PASSWORD_KEYS):
            if all(out.get(k) is None for k in keys):
                problem("security.protocol", f"{protocol} with SASL mechanism "
                        f"{mechanism or 'PLAIN (the default)'} needs {keys[0]}")
    oauth = [k for k in out if k.startswith(_OAUTH_PREFIX)]
    if mechanism == "OAUTHBEARER" and protocol.startswith("SASL_") and out.get(_METHOD) is None:
        problem(_MECHANISM_KEYS[0] if out.get(_MECHANISM_KEYS[0]) else _MECHANISM_KEYS[1],
                f"OAUTHBEARER needs {_METHOD}: the token provider (oidc for OIDC client "
                "credentials, or a token provider plugin's name)")
    elif mechanism not in ("OAUTHBEARER", "") and protocol.startswith("SASL_"):
        used = mechanism or "PLAIN (the default)"
        for key in oauth:
            problem(key, f"is set but the SASL mechanism is {used}: set sasl.mechanism: "
                    "OAUTHBEARER")
    if protocol in ("SSL", "SASL_SSL"):
        _load_files(out, problem)
    if errors:
        raise ValidationError.from_exception_data("consumer_config", errors)
    return out
