"""Hot-path JSON on orjson, giving exactly what the standard library's ``json`` gives.

orjson is 5-20x faster than ``json`` on kstage's events, but it differs on a few inputs:
it refuses NaN/Infinity literals, integers beyond 64 bits, lone surrogates and non-string
keys; it reads integers beyond 64 bits as floats; it writes NaN and Infinity as ``null``,
floats under 1e-4 as ``0.00001`` or ``1e-7`` (Python: ``1e-05``, ``1e-07``), and
serializes some types (UUID, Enum) that ``json`` hands to ``default``. Every function
here takes the fast path only where its result is provably the one of ``json``, and
falls back to ``json`` otherwise, so output bytes and accepted input stay the same:

* :func:`loads`: ``json.loads``; errors are ``json``'s own (a ``ValueError``).
* :func:`dumps_compact` / :func:`dumps_canonical`: ``json.dumps(value,
  separators=(",", ":"), ensure_ascii=False, default=default)``, the latter with
  ``sort_keys=True``, as ``str``. (orjson writes no spaces, so compact is the form both
  agree on.)
* :func:`check`: raises what ``json.loads`` raises for the text, if anything.

``tests/unit/test_jsonfast.py`` compares each function with ``json`` on arbitrary values.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

import orjson

# An integer of 19 or more digits may not fit 64 bits: orjson would read a float. Found
# as a run of 19 '0's once every ASCII digit is mapped to '0' and every other byte to 'x'
# (the same test as re.search(rb"\d{19}"), ~10x faster: on 1 KB events the regex took
# 8.5 us, more than orjson's parse and twice json.loads of the raw benchmark loop).
_DIGITS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x78 for byte in range(256))
_BIG_INT = b"0" * 19
# floats under 1e-4, which orjson writes its own way (0.00001, 1e-7; Python: 1e-05,
# 1e-07), and any exponent (json's way for 1e16 and up): left to json
_ODD_FLOAT = re.compile(rb"0\.0000|\de[-+]")
_DUMP_OPTIONS = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATETIME | (
    orjson.OPT_PASSTHROUGH_DATACLASS)
_SORTED_OPTIONS = _DUMP_OPTIONS | orjson.OPT_SORT_KEYS
_NATIVE = (str, int, float, list, tuple, dict)  # json serializes their subclasses itself
_SCALARS = frozenset((str, int, bool, type(None)))


def bytes_as_base64(value: object) -> str:
    """``default`` for the dumps: bytes as standard base64 text; anything else is not
    JSON serializable (``TypeError``, as ``json`` raises)."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class _Fallback(Exception):  # control flow, never escapes this module
    """orjson met a value ``json`` writes differently: use ``json``."""


def loads(data: bytes | str) -> Any:
    """``json.loads(data)``: the same value, or the same ``ValueError``."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _BIG_INT not in raw.translate(_DIGITS):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # json may accept it (NaN, lone surrogates...) or says why it does not
    return json.loads(data)


def check(data: bytes, text: str) -> None:
    """Raise what ``json.loads(text)`` raises, if anything (``text``: ``data`` decoded
    as UTF-8 by the caller): orjson checks the common case, ``json`` has the last word
    on what orjson refuses (NaN, Infinity, lone surrogates, 1E400...) and the message.

    A nesting too deep for ``json`` raises its RecursionError, as ``json.loads`` does.
    """
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        json.loads(text)


def _hook(default: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    def hook(value: Any) -> Any:
        if isinstance(value, _NATIVE) or default is None:
            raise _Fallback
        return default(value)
    return hook


def _plain(items: Iterable[Any]) -> bool:
    """Whether the values hold only str, int, bool, None, and lists and dicts of them
    (the usual decoded event): orjson writes these as json does, or refuses them (an
    integer beyond 64 bits, a lone surrogate, a non-string key)."""
    for v in items:
        t = type(v)
        if t in _SCALARS:
            continue
        if t is dict:
            if not _plain(v.values()):
                return False
        elif t is not list or not _plain(v):
            return False
    return True


def _fast_dumps(value: Any, default: Callable[[Any], Any] | None, options: int) -> bytes | None:
    """orjson's bytes for ``value`` if they are ``json``'s (compact, UTF-8), else None."""
    try:
        out = orjson.dumps(value, default=_hook(default), option=options)
    except (TypeError, _Fallback):  # orjson.JSONEncodeError is a TypeError
        return None
    # the value must read back equal (NaN and Infinity come back as None; what default
    # made, or orjson wrote where json calls default (UUID, Enum), comes back as another
    # type), and no float may be written the way only orjson does
    if (b"0.0000" in out or b"e-" in out or b"e+" in out) and _ODD_FLOAT.search(out):
        return None
    return out if _equal(orjson.loads(out), value) else None


def _equal(back: Any, value: Any) -> bool:
    try:
        return bool(back == value)
    except Exception:  # noqa: BLE001 - a value whose __eq__ fails (arrays): let json decide
        return False


def dumps_compact(value: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """``json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=default)``
    encoded as UTF-8 (a lone surrogate raises UnicodeEncodeError, as that encoding does)."""
    if type(value) is dict and _plain(value.values()):  # the usual row: no checks after
        try:
            return orjson.dumps(value)
        except TypeError:  # a lone surrogate, an integer beyond 64 bits, a non-string key
            out = None
    else:
        out = _fast_dumps(value, default, _DUMP_OPTIONS)
    if out is None:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=default)
        return text.encode("utf-8")
    return out


def dumps_canonical(value: Any, default: Callable[[Any], Any] | None = None) -> str:
    """Canonical JSON text: ``json.dumps`` with ``sort_keys=True``, ``separators=(",",
    ":")``, ``ensure_ascii=False`` and ``default``."""
    if type(value) is dict and _plain(value.values()):  # the usual event: no checks after
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode("utf-8")
        except TypeError:  # a lone surrogate, an integer beyond 64 bits, a non-string key
            out = None
    else:
        out = _fast_dumps(value, default, _SORTED_OPTIONS)
    if out is None:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          default=default)
    return out.decode("utf-8")
