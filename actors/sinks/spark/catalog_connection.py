"""The PostgreSQL catalog's connection settings, the same on both append paths.

Spark's catalog (Iceberg's JDBC catalog) connects with the PostgreSQL JDBC driver (PgJDBC):
the parameters of ``spark.catalog.uri``'s query, ``user`` and ``password``, and every
``spark.catalog.properties`` key ``jdbc.<name>`` (Iceberg hands those to the driver without
their prefix). With ``spark.appends: pyiceberg`` the same catalog is also opened by
pyiceberg through SQLAlchemy and psycopg2, i.e. libpq, whose parameters have other names
and other defaults. Here every such parameter is either given to libpq with the same
meaning (:func:`libpq_arguments`, :func:`login`) or refused (:func:`connection_problems`,
which ``kstage validate`` names by file, line and key):

* ``user``, ``password``: the URL's login; ``sslmode`` (the same six modes, lower-cased
  as PgJDBC reads them in any case; PgJDBC's
  ``ssl=true`` or a bare ``ssl`` without ``sslmode`` is ``verify-full``, as in the driver),
  ``sslrootcert``, ``sslcert``, ``sslkey``, ``ApplicationName`` -> ``application_name``,
  ``connectTimeout`` -> ``connect_timeout``;
* the driver's defaults are passed explicitly, so libpq's own (and its ``PGSSLMODE``,
  ``PGSSLROOTCERT``, ``PGCONNECT_TIMEOUT`` variables) never apply: ``sslmode=prefer``,
  ``connect_timeout=10``, and with ``verify-ca``/``verify-full`` the driver's root
  certificate file ``~/.postgresql/root.crt`` (Java's ``user.home``);
* refused: a parameter given twice (query, setting, property) with different values (the
  two libraries would not pick the same one), the Java-only ones (``sslfactory``,
  ``sslfactoryarg``, ``sslhostnameverifier``, ``sslpasswordcallback``), ``sslpassword``
  (PgJDBC decrypts only DER PKCS-8 and PKCS-12 keys, which libpq cannot read),
  ``sslrootcert=system`` (libpq's system store, a file name to the driver), an
  ``sslrootcert`` with a mode that does not verify (the driver ignores it, libpq verifies
  with it), ``sslcert`` without ``sslkey`` (the two default key files differ), an ``sslkey``
  that is not PEM (``.pk8``, ``.der``, ``.p12``, ``.pfx``: libpq reads PEM only; a PKCS-8
  PEM key, ``BEGIN PRIVATE KEY``, is read by both), several hosts or a URI without
  ``//HOST``, and any other driver parameter (its meaning on libpq is not checked).

Iceberg's own ``jdbc.*`` catalog properties (``schema-version``, ``strict-mode``,
``init-catalog-tables``) are not connection parameters and are left alone.
"""

from __future__ import annotations

import os
import pwd
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from actors.sinks.spark.catalog import catalog_uri
from settings.loader import ConfigPath, dotted_key
from settings.models import SparkSettings
from settings.suggest import did_you_mean

Problem = tuple[ConfigPath, str]

URI: ConfigPath = ("spark", "catalog", "uri")
JDBC_PREFIX = "jdbc."
SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
VERIFYING = ("verify-ca", "verify-full")
JDBC_SSLMODE = "prefer"  # PgJDBC's default (libpq's too, unless PGSSLMODE says otherwise)
JDBC_CONNECT_TIMEOUT_S = "10"  # PgJDBC's default; libpq's is to wait forever
LIBPQ_NAMES = {"sslmode": "sslmode", "sslrootcert": "sslrootcert", "sslcert": "sslcert",
               "sslkey": "sslkey", "ApplicationName": "application_name",
               "connectTimeout": "connect_timeout"}
"""PgJDBC parameter -> libpq parameter of the same meaning."""
LOGIN = ("user", "password")
SSL_FLAG = "ssl"
ICEBERG_KEYS = frozenset({"schema-version", "strict-mode", "init-catalog-tables"})
"""Iceberg's JDBC catalog's own ``jdbc.*`` properties (not the driver's)."""
JAVA_ONLY = {
    "sslfactory": "a Java SSLSocketFactory class, which libpq has no equivalent of",
    "sslfactoryarg": "the argument of a Java SSLSocketFactory class",
    "sslhostnameverifier": "a Java HostnameVerifier class (libpq checks the host name "
                           "with sslmode=verify-full)",
    "sslpasswordcallback": "a Java CallbackHandler class",
    "sslpassword": "the password of an encrypted client key, which PgJDBC reads only as "
                   "DER PKCS-8 (.pk8) or PKCS-12 (.p12), formats libpq cannot read: use an "
                   "unencrypted PKCS-8 PEM key (BEGIN PRIVATE KEY) kept as a secret file",
}
NOT_PEM = (".pk8", ".der", ".p12", ".pfx")
SUPPORTED = (*LOGIN, SSL_FLAG, *LIBPQ_NAMES)


@dataclass(frozen=True)
class Parameter:
    """One PgJDBC connection parameter and where the settings give it."""

    name: str
    value: str
    where: ConfigPath


def is_postgres(settings: SparkSettings) -> bool:
    """Whether the catalog is a JDBC catalog in PostgreSQL."""
    return settings.catalog.type == "jdbc" and catalog_uri(settings).startswith(
        "jdbc:postgresql:")


def parameters(settings: SparkSettings) -> list[Parameter]:
    """Every PgJDBC connection parameter of ``spark.catalog``, in the order the settings
    give them: the URI's query (URL-decoded, as the driver does; a bare name is an empty
    value), ``user``, ``password``, then the ``jdbc.*`` properties."""
    catalog = settings.catalog
    query = catalog_uri(settings).partition("?")[2]
    found = [Parameter(name, value, URI)
             for name, value in parse_qsl(query, keep_blank_values=True)]
    if catalog.user is not None:
        found.append(Parameter("user", catalog.user, ("spark", "catalog", "user")))
    if catalog.password is not None:
        found.append(Parameter("password", catalog.password.get_secret_value(),
                               ("spark", "catalog", "password")))
    for key, value in catalog.properties.items():
        name = key.removeprefix(JDBC_PREFIX)
        if key.startswith(JDBC_PREFIX) and name not in ICEBERG_KEYS:
            found.append(Parameter(name, value, ("spark", "catalog", "properties", key)))
    return found


def _problems(settings: SparkSettings) -> tuple[dict[str, Parameter], list[Problem]]:
    """The parameters by name (each once) and what libpq cannot mean the same way."""
    problems: list[Problem] = []
    uri = catalog_uri(settings)
    place = uri.partition("?")[0]
    if not place.startswith("jdbc:postgresql://"):
        problems.append((URI, "appends: pyiceberg connects with libpq, which needs the "
                              "host: jdbc:postgresql://HOST[:PORT]/DB"))
    elif "," in urlsplit(place.removeprefix("jdbc:")).netloc:
        problems.append((URI, "appends: pyiceberg connects to one host only (PgJDBC's "
                              "host list and its targetServerType are not libpq's): name "
                              "one host, jdbc:postgresql://HOST[:PORT]/DB"))
    given: dict[str, Parameter] = {}
    for param in parameters(settings):
        first = given.setdefault(param.name, param)
        if first is not param:
            if first.value != param.value:
                problems.append((param.where, (
                    f"{param.name} is given twice with different values (also in "
                    f"{dotted_key(first.where)}): PgJDBC and libpq (appends: pyiceberg) "
                    "would not take the same one; give it once")))
            continue
        if param.name in JAVA_ONLY:
            problems.append((param.where, (
                f"{param.name}: {JAVA_ONLY[param.name]}; appends: pyiceberg connects "
                "with libpq and cannot honour it (verify the server with "
                "sslmode=verify-full and sslrootcert=CA.pem, which both honour)")))
        elif param.name not in SUPPORTED:
            problems.append((param.where, (
                f"the PostgreSQL JDBC parameter {param.name!r} is not supported with "
                f"appends: pyiceberg, which connects with libpq (supported: "
                f"{', '.join(SUPPORTED)})" + did_you_mean(param.name, SUPPORTED))))
    problems.extend(_tls_problems(given))
    return given, problems


def _tls_problems(given: dict[str, Parameter]) -> list[Problem]:
    problems: list[Problem] = []
    mode = given.get("sslmode")
    if mode is not None and mode.value.lower() not in SSLMODES:
        problems.append((mode.where, f"sslmode {mode.value!r} is none of "
                                     f"{', '.join(SSLMODES)}"))
    effective = _sslmode(given)
    root, cert, key = given.get("sslrootcert"), given.get("sslcert"), given.get("sslkey")
    if root is not None and root.value == "system":
        problems.append((root.where, (
            "sslrootcert=system is libpq's store of system CAs but a file name to PgJDBC: "
            "name the CA file (sslrootcert=/path/ca.pem)")))
    elif root is not None and effective not in VERIFYING:
        problems.append((root.where, (
            f"sslrootcert with sslmode={effective}: PgJDBC ignores it (no check of the "
            "server's certificate) while libpq (appends: pyiceberg) checks the CA with "
            "it: set sslmode=verify-full (or verify-ca)")))
    if cert is not None and key is None:
        problems.append((cert.where, (
            "sslcert without sslkey: PgJDBC's default key file (postgresql.pk8) is not "
            "libpq's (postgresql.key): name the key, sslkey=/path/client.key (PKCS-8 PEM)")))
    if key is not None and key.value.lower().endswith(NOT_PEM):
        problems.append((key.where, (
            f"sslkey {os.path.basename(key.value)!r}: libpq (appends: pyiceberg) reads "
            "PEM keys only: give a PKCS-8 PEM key (BEGIN PRIVATE KEY), which PgJDBC and "
            "libpq both read")))
    timeout = given.get("connectTimeout")
    if timeout is not None and not timeout.value.isdigit():
        problems.append((timeout.where, f"connectTimeout {timeout.value!r} is not a whole "
                                        "number of seconds"))
    return problems


def _sslmode(given: dict[str, Parameter]) -> str:
    """The sslmode PgJDBC connects with: ``sslmode``, else ``verify-full`` when ``ssl``
    is true or bare, else ``prefer``."""
    mode = given.get("sslmode")
    if mode is not None:
        return mode.value.lower()  # PgJDBC ignores its case, libpq does not
    flag = given.get(SSL_FLAG)
    if flag is not None and flag.value.lower() in ("", "true"):
        return "verify-full"
    return JDBC_SSLMODE


def connection_problems(settings: SparkSettings) -> list[Problem]:
    """What ``appends: pyiceberg`` cannot honour the same way as Spark's catalog, as
    (path, why) pairs (none for another append path or catalog)."""
    if settings.appends != "pyiceberg" or not is_postgres(settings):
        return []
    return _problems(settings)[1]


def _resolved(settings: SparkSettings) -> dict[str, Parameter]:
    given, problems = _problems(settings)
    if problems:
        raise ValueError(f"appends: pyiceberg: catalog {settings.catalog.name!r}: " + "; ".join(
            f"{dotted_key(path)}: {why}" for path, why in problems))
    return given


def login(settings: SparkSettings) -> tuple[str | None, str | None]:
    """The user and password of the connection (None: not given)."""
    given = _resolved(settings)
    user, password = given.get("user"), given.get("password")
    return (user.value if user else None, password.value if password else None)


def libpq_arguments(settings: SparkSettings) -> dict[str, str]:
    """libpq's connection parameters (beside the login) that mean what PgJDBC's do;
    raises ValueError naming what cannot (:func:`connection_problems`)."""
    given = _resolved(settings)
    mode = _sslmode(given)
    args = {"sslmode": mode}
    for jdbc in ("sslrootcert", "sslcert", "sslkey", "ApplicationName"):
        if jdbc in given:
            args[LIBPQ_NAMES[jdbc]] = given[jdbc].value
    if mode in VERIFYING and "sslrootcert" not in args:
        home = pwd.getpwuid(os.getuid()).pw_dir  # Java's user.home, not $HOME
        args["sslrootcert"] = f"{home}/.postgresql/root.crt"
        args = {"sslmode": mode, "sslrootcert": args.pop("sslrootcert"), **args}
    timeout = given.get("connectTimeout")
    args["connect_timeout"] = timeout.value if timeout else JDBC_CONNECT_TIMEOUT_S
    return args


TLS_FAILURE = re.compile(r"\bSSL\b|\bTLS\b|certificate|PKIX|handshake", re.IGNORECASE)
"""What the JDBC driver's and libpq's errors say when the TLS connection failed
(``SSL error: certificate verify failed``, ``PKIX path building failed``, ``The server
does not support SSL``, ``no pg_hba.conf entry ... no encryption``...)."""


def tls_failure(settings: SparkSettings, exc: BaseException) -> str | None:
    """For an error of the PostgreSQL catalog that is about TLS: the catalog, its server
    and its TLS settings (:func:`describe`) and what to check, to put before the error;
    else None."""
    if not is_postgres(settings):
        return None
    text = str(exc)
    if exc.__cause__ is not None:
        text += f"\n{exc.__cause__}"
    if TLS_FAILURE.search(text) is None:
        return None
    return (f"{describe(settings)}: the TLS connection to the catalog failed (check that "
            "the server's certificate is signed by sslrootcert's CA for the URI's host, "
            "and the catalog's ssl* settings: docs/security.md)")


def describe(settings: SparkSettings) -> str:
    """The catalog's server and TLS as an error names them (no credentials):
    ``catalog 'kstage' (PostgreSQL 127.0.0.1:5432/kstage, TLS sslmode=verify-full,
    sslrootcert=/etc/ca.pem)``."""
    server = catalog_uri(settings).partition("?")[0].removeprefix("jdbc:postgresql:")
    server = server.removeprefix("//").rpartition("@")[2]  # never a login
    given = _problems(settings)[0]
    tls = f"TLS sslmode={_sslmode(given)}"
    if "sslrootcert" in given:
        tls += f", sslrootcert={given['sslrootcert'].value}"
    return f"catalog {settings.catalog.name!r} (PostgreSQL {server}, {tls})"


__all__ = ["JDBC_CONNECT_TIMEOUT_S", "JDBC_SSLMODE", "LIBPQ_NAMES", "Parameter",
           "connection_problems", "describe", "is_postgres", "libpq_arguments", "login",
           "parameters", "tls_failure"]
