"""Which settings and headers hold secrets, and how their values are kept out of output:
the one owner of masking (the loader, the models' reprs, the log formatter, dead letters
and ``kstage dlq show`` use these functions).

A setting is a secret when it is declared one: a typed field is a ``SecretStr``
(``password``, ``bearer_token``, ``auth.bearer``, ``control_token``, the S3
``access_key_id``...), and a key of a free-form mapping (``consumer_config``, sink
options, ``spark.conf``, catalog and JDBC ``properties``, HTTP ``headers``) is one when it
names a credential: a password or passphrase (``sasl.password``, ``ssl.key.password``), a
secret (``fs.s3a.secret.key``), a token or bearer, a credential, a JAAS config, an API,
access, account, private, encryption or keystore key, a key in PEM, an authorization or
a cookie. The loader sees untyped
YAML, so the rule is written on names (:func:`secret_name`, any part of a path); a test
(``tests/unit/test_masked_settings.py``) lists every masked setting and checks that the
names of typed fields say exactly what their types declare. A name that merely ends in
``key`` is no secret: ``key`` (a list of key columns), ``partition_key``, ``client_key``
(a file's path) are shown as they are.

* The loader keeps every scalar under a secret name a string, whatever its YAML type
  (``password: ${PG_PASSWORD}`` of digits is the text of the digits, not an int).
* Settings models show :func:`masked` values in their repr.
* :func:`secret_values` collects the values at secret paths of loaded data;
  :func:`redact` masks them in a text (problem lines of ``validate``, log lines).
* :func:`remember` / :func:`redact_known`: the process's secrets, masked from every log
  line (``service.logs``) and dead-letter line (``actors.deadletters``) as a last guard.
* :func:`secret_header` tells which message header values ``kstage dlq show`` masks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import BaseModel, SecretStr

MASK = "**********"
"""What a masked value reads as (pydantic's ``SecretStr`` shows the same)."""

_SECRET_NAME = re.compile(
    r"passw|passphrase|secret|token|bearer|credential|jaas"
    r"|(api|access|account|private|encryption|keystore)[-_.]?key(?![a-z])|(^|[-_.])key[-_.]pem$"
    r"|authorization|cookie",
    re.IGNORECASE,
)
# Names of where a secret comes from, what for and by whom: they hold none although a word
# above matches (``sasl.oauthbearer.scope``, ``sasl.oauthbearer.token.endpoint.url``,
# ``sasl.oauthbearer.client.id``, ``sasl.oauthbearer.allow.insecure.token.endpoint``:
# OAUTHBEARER's settings; a scope "kafka" masked as a secret masked every "kafka" in
# kstage's messages).
# (An id is public, but a key's id is the declared secret ``access_key_id``.)
_PUBLIC_NAME = re.compile(
    r"[-_.](url|uri|endpoint|scope|(?<!key[-_.])id|method|mechanisms?|location|extensions)$",
    re.IGNORECASE)
# Header names are looser than setting names: masking a harmless header in ``dlq show``
# costs nothing, printing a session cookie does.
_SECRET_HEADER = re.compile(
    r"auth|passw|secret|token|bearer|credential|api[-_.]?key|(^|[-_.])key$|cookie|session"
    r"|signature",
    re.IGNORECASE,
)
# Shorter values are not masked inside texts: masking every "1" would garble the text
# more than it hides (nothing prints these values on purpose; this is a second guard).
_MIN_REDACTED = 4


def secret_name(name: object) -> bool:
    """Whether a setting (or mapping key) of this name holds a secret."""
    return (isinstance(name, str) and _SECRET_NAME.search(name) is not None
            and _PUBLIC_NAME.search(name) is None)


def secret_path(path: Iterable[object]) -> bool:
    """Whether a value at this settings path is (part of) a secret."""
    return any(secret_name(part) for part in path)


def secret_header(name: object) -> bool:
    """Whether a message header of this name may carry a credential."""
    return isinstance(name, str) and _SECRET_HEADER.search(name) is not None


# Credentials inside a URL or connection string: the password of ``//user:pass@host``, and
# the value of a query or property parameter named like a secret (``?password=...``,
# ``;password=...``); a JDBC catalog's ``uri`` may carry them.
_URL_PASSWORD = re.compile(r"//[^/:@\s]*:([^/@\s]+)@")
_URL_PARAMETER = re.compile(r"[?&;]([A-Za-z0-9_.-]+)=([^&;\s]*)")


def url_credentials(text: str) -> list[str]:
    """The credentials a URL or connection string carries (empty for most texts)."""
    if "=" not in text and "@" not in text:
        return []
    found = [m.group(1) for m in _URL_PASSWORD.finditer(text)]
    found += [m.group(2) for m in _URL_PARAMETER.finditer(text)
              if secret_name(m.group(1)) and m.group(2)]
    return found


def secret_values(data: Any, path: tuple[object, ...] = ()) -> set[str]:
    """Every scalar value at a secret path of ``data`` (dicts, lists, models), as text.
    YAML aliases can make ``data`` cyclic (``a: &a [*a]``): each container is walked
    once per branch."""
    return set(_values(data, secret_path(path), set()))


def _values(data: Any, inside: bool, active: set[int]) -> Iterator[str]:
    if isinstance(data, SecretStr):
        yield data.get_secret_value()
        return
    if not isinstance(data, dict | list | tuple) and not hasattr(data, "__pydantic_fields__"):
        if inside and data is not None:
            yield str(data)
        elif isinstance(data, str):
            yield from url_credentials(data)
        return
    if id(data) in active:
        return
    active.add(id(data))
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _values(value, inside or secret_name(key), active)
    elif isinstance(data, list | tuple):
        for item in data:
            yield from _values(item, inside, active)
    else:  # a model: its fields and extras
        yield from _values(dict(data), inside, active)
    active.discard(id(data))


def masked(value: Any, path: tuple[object, ...] = (), active: frozenset[int] = frozenset()
           ) -> Any:
    """``value`` (a setting at ``path``) for a repr: its secret scalars read :data:`MASK`.
    Models are left alone (their own repr masks); a cycle (YAML aliases in a free-form
    mapping) reads ``...``."""
    if isinstance(value, dict | list):
        if id(value) in active:
            return ...
        inner = active | {id(value)}
        if isinstance(value, dict):
            return {k: masked(v, (*path, k), inner) for k, v in value.items()}
        return [masked(item, path, inner) for item in value]
    if secret_path(path) and value is not None and not isinstance(value, SecretStr):
        return MASK if not hasattr(value, "__pydantic_fields__") else value
    if isinstance(value, str):
        return redact(value, url_credentials(value))
    return value


def redact(text: str, values: Iterable[str]) -> str:
    """``text`` with every secret value of ``values`` replaced by :data:`MASK`."""
    for value in sorted({v for v in values if len(v) >= _MIN_REDACTED}, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


# The secret values of the running process's settings, for the last guards: the log
# formatter and the dead-letter line redact them from whatever an exception says (a
# driver's error that quotes its connection string, a traceback's locals...).
_known: list[str] = []


def remember(values: Iterable[str]) -> None:
    """Add secret values that :func:`redact_known` masks from now on (``service`` calls
    it with :func:`secret_values` of the loaded settings, before logging starts)."""
    _known[:] = sorted({*_known, *(v for v in values if len(v) >= _MIN_REDACTED)},
                       key=len, reverse=True)


def redact_known(text: str) -> str:
    """``text`` without any value given to :func:`remember`."""
    for value in _known:
        if value in text:
            text = text.replace(value, MASK)
    return text


class MaskedRepr(BaseModel):
    """Base of settings models: their repr (in a log line, a traceback) shows the values
    of secret-named fields and mapping keys as :data:`MASK`."""

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, masked(value, (name,))
