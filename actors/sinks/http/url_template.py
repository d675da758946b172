"""The HTTP sink's ``url``: a template of row fields (:class:`UrlTemplate`), checked when
the settings are loaded and rendered for every row; a row it cannot render is a
:class:`RowError` (the row is refused, never sent). And :func:`shown_url`, the URL as logs
and errors show it."""

from __future__ import annotations

import re
import string
from urllib.parse import quote, urlsplit

import httpx

from processors.base import Row

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Characters left as they are when a row value is put into the URL besides the unreserved
# ``A-Z a-z 0-9 - . _ ~``; everything else (``/ ? # & = ; + %`` and spaces included) is
# percent-encoded, so a value stays one path segment or one query value. These
# sub-delimiters structure neither a path nor a query (DataHub URNs stay readable).
_URL_SAFE = ":@(),!*'"


class RowError(Exception):
    """A row cannot become a request (the URL template needs a field it lacks)."""


class UrlTemplate:
    """A ``str.format_map`` URL template of plain row fields (``{name}``, ``{name:spec}``).

    The scheme, host and port are literal: row fields may only follow the first ``/``
    (or ``?``) after the host, in path segments and in the query, never in the fragment.
    Values are formatted as ``format_map`` does, then percent-encoded whole (only
    unreserved characters and ``_URL_SAFE`` stay), so a value is one path segment or one
    query value: it cannot add a segment, a parameter or a fragment. A path segment
    holding a row value must not render empty, ``.`` or ``..`` (it would name another
    resource or navigate; ``%2E%2E`` is not used instead, since servers and proxies
    decode it and resolve it). A rendered URL must still have the template's origin
    (scheme, host, port; checked as httpx parses it, before anything is sent). A missing
    or null field, or a value breaking these rules, is a :class:`RowError`.
    """

    def __init__(self, template: str) -> None:
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError as exc:
            raise ValueError(f"url: not a valid template ({exc})") from None
        for _, field, spec, conversion in parsed:
            if field is None:
                continue
            if not _IDENTIFIER.match(field):
                raise ValueError(f"url: template field {field!r} must be a plain row field name")
            if conversion or "{" in (spec or ""):
                raise ValueError(f"url: template field {field!r}: use {{name}} or {{name:spec}}")
        has_fields = any(f is not None for _, f, _, _ in parsed)
        prefix = ""  # the literal text before the first field
        for literal, field, _, _ in parsed:
            prefix += literal
            if field is not None:
                break
        scheme, sep, rest = prefix.partition("://")
        end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=-1)
        authority = rest if end < 0 else rest[:end]
        if not sep or scheme.lower() not in ("http", "https"):
            raise ValueError("url must be http(s)://host[:port]/path")  # value not echoed
        if has_fields and (end < 0 or not authority):
            raise ValueError("url: row fields are allowed only in the path and the query; the "
                             "scheme, host and port must be literal and end with '/' before "
                             "the first {field}")
        if "@" in authority:
            raise ValueError("credentials in the url are not allowed; use auth")
        if not authority:
            raise ValueError("url must be http(s)://host[:port]/path")
        try:
            port = urlsplit(f"{scheme}://{authority}/").port
            origin = _origin(httpx.URL(f"{scheme}://{authority}/"))
        except (ValueError, httpx.InvalidURL):
            raise ValueError("url: the host or port is not valid") from None
        if not origin[1] or (port is not None and not 0 < port < 65536):
            raise ValueError("url: the host or port is not valid")
        self.origin = origin
        # (literal, field, spec, in_query); a field in the fragment is refused
        self.parts: list[tuple[str, str | None, str, bool]] = []
        where = "authority"
        for literal, field, spec, _ in parsed:
            for char in literal:
                if char == "#":
                    where = "fragment"
                elif char == "?" and where != "fragment":
                    where = "query"
                elif char == "/" and where == "authority":
                    where = "path"
            if field is not None and where == "fragment":
                raise ValueError(f"url: template field {field!r} is in the fragment (#...); "
                                 "row fields are allowed only in the path and the query")
            self.parts.append((literal, field, spec or "", where == "query"))
        self.static = None if has_fields else "".join(p[0] for p in parsed)

    def render(self, row: Row) -> str:
        if self.static is not None:
            return self.static
        out: list[str] = []
        spans: list[tuple[int, int, str]] = []  # where path values went, and their field
        size = 0
        for literal, field, spec, in_query in self.parts:
            out.append(literal)
            size += len(literal)
            if field is None:
                continue
            value = row.get(field)
            if value is None:
                what = "null" if field in row else "missing"
                raise RowError(f"url template: field {field!r} is {what} in the row")
            try:
                text = quote(format(value, spec), safe=_URL_SAFE)
            except (TypeError, ValueError) as exc:
                raise RowError(f"url template: field {field!r}: {exc}") from None
            if not in_query:
                spans.append((size, size + len(text), field))
            out.append(text)
            size += len(text)
        url = "".join(out)
        for start, stop, field in spans:
            first = url.rfind("/", 0, start) + 1
            last = min((i for i in (url.find(c, stop) for c in "/?#") if i >= 0),
                       default=len(url))
            if url[first:last] in ("", ".", ".."):
                raise RowError(f"url template: field {field!r} makes the path segment "
                                f"{url[first:last]!r} (empty or a dot segment)")
        try:
            origin = _origin(httpx.URL(url))
        except httpx.InvalidURL as exc:
            raise RowError(f"url template: the rendered url is not valid ({exc})") from None
        if origin != self.origin:  # not possible with the rules above: defence in depth
            raise RowError("url template: the rendered url leaves the url's origin "
                            f"{self.origin[0]}://{self.origin[1]}:{self.origin[2]}")
        return url


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` of ``url`` as httpx connects to it (default port filled)."""
    default = {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host, url.port or default



def shown_url(url: str) -> str:
    """The URL for logs and errors: without its query (it may carry an API key)."""
    base, sep, _ = url.partition("?")
    return f"{base}?..." if sep else base

