"""processors.jsonfast (orjson) gives exactly what the standard library's json gives.

Property tests (hypothesis) compare each function with the ``json`` call it replaces on
arbitrary JSON values (NaN, infinities, floats of any size, integers beyond 64 bits,
text with lone surrogates and control characters, bytes for ``default``, tuples, int
subclasses, UUIDs, dates) and arbitrary text and bytes, plus the edge cases named in
issue 14 as explicit examples: same bytes out, same value in, the same exception type
and message where ``json`` refuses. The canonical dumps are the stored aspect and
system-metadata columns of the DataHub processors and the metastore audit processor:
:func:`test_canonical_columns_are_the_old_text` runs the old implementations next to
the new ones.
"""

from __future__ import annotations

import base64
import enum
import json
import math
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from actors.sinks.files import _default as jsonl_default
from actors.sinks.http.request import json_default as http_default
from processors import datahub_mcl, jsonfast, metastore_audit

PROPERTY = settings(max_examples=400, deadline=timedelta(seconds=2), database=None)


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Name(str):
    pass


def _base64(value: object) -> str:  # the DataHub / metastore processors' default
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


SCALARS = (
    st.none() | st.booleans()
    | st.integers()  # any size: beyond 64 bits json writes them, orjson refuses
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats()  # NaN, infinities, subnormals, -0.0
    | st.floats(min_value=-1e-3, max_value=1e-3)  # orjson writes small floats its own way
    | st.text()  # lone surrogates and control characters included
    | st.sampled_from(["", "é", "\u2028", "\x7f", "\x00", "\ud800", "😀", '"\\', "1e-5"])
)
EXTRAS = (
    st.binary(max_size=20) | st.uuids() | st.sampled_from([Color.RED, Level.HIGH])
    | st.builds(Name, st.text(max_size=5)) | st.dates()
    | st.datetimes(timezones=st.just(UTC)) | st.decimals(allow_nan=False)
)
KEYS = st.text(max_size=8) | st.sampled_from(["a", "b", "é", "😀", "\uffff", "\ud800"])


def _values(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner)
        | st.dictionaries(KEYS, inner, max_size=6),
        max_leaves=20,
    )


JSON_VALUES = _values(SCALARS)
ANY_VALUES = _values(SCALARS | EXTRAS)
NON_STR_KEYS = st.dictionaries(st.integers() | st.none() | st.booleans() | st.floats(),
                               SCALARS, max_size=4)

EDGE_VALUES = [
    float("nan"), float("inf"), -float("inf"), 1e-5, 1e-7, 5e-324, 1e16, 1e22, -0.0, 0.1,
    2**63, -(2**63) - 1, 2**64, 10**30, "\ud800", "é\u2028\x00\x1f\x7f", {"b": 1, "a": 2},
    {"é": 1, "😀": 2, "\uffff": 3, "z": 4}, {1: "int key"}, {1: 1, "1": 2}, {None: 1},
    {"a": b"\xff\x00"}, (1, 2), [Level.HIGH], [Color.RED], uuid.UUID(int=1),
    date(2024, 1, 2), Decimal("1.10"), {"x": [float("nan"), None]}, "0.0000 e-",
]


def _outcome(call: Any, *args: Any) -> Any:
    """What the call returns, or the type and message of what it raises."""
    try:
        return ("ok", call(*args))
    except (TypeError, ValueError, RecursionError) as exc:
        return ("raised", type(exc), str(exc))


def _old_canonical(value: Any, default: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=default)


def _old_compact(value: Any, default: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False,
                      default=default).encode("utf-8")


@pytest.mark.parametrize("default", [None, _base64, jsonl_default, http_default])
@pytest.mark.parametrize("value", EDGE_VALUES, ids=repr)
def test_dumps_edge_cases(value: Any, default: Any) -> None:
    assert _outcome(jsonfast.dumps_canonical, value, default) == _outcome(
        _old_canonical, value, default)
    assert _outcome(jsonfast.dumps_compact, value, default) == _outcome(
        _old_compact, value, default)


@PROPERTY
@given(JSON_VALUES | NON_STR_KEYS)
@example({"b": 0.00001, "a": [1e-7, float("nan")]})
@example({"a": 2**64, "b": "\ud800"})
def test_canonical_json_is_json_dumps(value: Any) -> None:
    assert _outcome(jsonfast.dumps_canonical, value, _base64) == _outcome(
        _old_canonical, value, _base64)
    assert _outcome(jsonfast.dumps_compact, value, None) == _outcome(
        _old_compact, value, None)


@PROPERTY
@given(ANY_VALUES, st.sampled_from([_base64, jsonl_default, http_default]))
def test_dumps_with_default_is_json_dumps(value: Any, default: Any) -> None:
    assert _outcome(jsonfast.dumps_canonical, value, default) == _outcome(
        _old_canonical, value, default)
    assert _outcome(jsonfast.dumps_compact, value, default) == _outcome(
        _old_compact, value, default)


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types (NaN equals NaN, -0.0 is not 0.0, 1 is not 1.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and str(a) == str(b))
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def _loads_outcome(call: Any, data: Any) -> Any:
    try:
        return ("ok", call(data))
    except ValueError as exc:
        return ("raised", type(exc), str(exc))


JSON_TEXTS = (
    JSON_VALUES.map(lambda v: json.dumps(v, ensure_ascii=False, default=str))
    | JSON_VALUES.map(lambda v: json.dumps(v, default=str, indent=1))
    | st.text()
    | st.text(alphabet=' \t\n\r{}[]",:0123456789.eE+-tfnaulsrINy\\u') 
)
EDGE_TEXTS = [
    "NaN", "-Infinity", "[Infinity]", "1E400", "-0", "-0.0", "1" * 30, "18446744073709551615",
    "18446744073709551616", "-9223372036854775809", '"\\ud800"', '"\\udc00x"',
    '{"a":1,"a":2}', '{"a":1,"b":2,"a":3}', "\ufeff{}", " {} ", "{}\n", '"\x01"', "[1,]",
    "", " ", "[" * 100 + "]" * 100, "0.1e-400", "1.7976931348623157e309", '"\\u00e9"',
    "123456789012345678901234567890.5", "1e1000000", "tru", "[1 2]", '"a" "b"',
]


@PROPERTY
@given(JSON_TEXTS)
def test_loads_is_json_loads(text: str) -> None:
    for data in (text, text.encode("utf-8", "surrogatepass")):
        new, old = _loads_outcome(jsonfast.loads, data), _loads_outcome(json.loads, data)
        assert new[0] == old[0]
        assert _same(new[1], old[1]) if new[0] == "ok" else new == old


@pytest.mark.parametrize("text", EDGE_TEXTS, ids=repr)
def test_loads_edge_cases(text: str) -> None:
    test_loads_is_json_loads.hypothesis.inner_test(text)  # type: ignore[attr-defined]


@pytest.mark.parametrize("data", [b"\xef\xbb\xbf{}", b"\xff", b'"\xed\xa0\x80"',
                                  '{"a":1}'.encode("utf-16"), b"\x00"], ids=repr)
def test_loads_of_bytes_edge_cases(data: bytes) -> None:
    new, old = _loads_outcome(jsonfast.loads, data), _loads_outcome(json.loads, data)
    assert new[0] == old[0]
    assert _same(new[1], old[1]) if new[0] == "ok" else new == old


def _check_outcome(data: bytes) -> Any:
    """generic_aspect_text's check: decode as UTF-8, then json.loads the text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8"
    old = _loads_outcome(json.loads, text)
    new = _loads_outcome(lambda t: jsonfast.check(data, t), text)
    return old[0], new[0], old[1:] if old[0] == "raised" else None, new[1:] if (
        new[0] == "raised") else None


@PROPERTY
@given(JSON_TEXTS.map(lambda t: t.encode("utf-8", "surrogatepass")) | st.binary())
def test_check_accepts_what_json_loads_accepts(data: bytes) -> None:
    outcome = _check_outcome(data)
    if outcome != "not UTF-8":
        old, new, old_error, new_error = outcome
        assert (old, old_error) == (new, new_error)


@pytest.mark.parametrize("text", EDGE_TEXTS, ids=repr)
def test_check_edge_cases(text: str) -> None:
    test_check_accepts_what_json_loads_accepts.hypothesis.inner_test(  # type: ignore[attr-defined]
        text.encode("utf-8", "surrogatepass"))


def test_too_deep_raises_recursion_error_as_json_did() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(RecursionError):
        json.loads(deep)
    with pytest.raises(RecursionError):
        jsonfast.loads(deep)
    with pytest.raises(RecursionError):
        jsonfast.check(deep, deep.decode())


@PROPERTY
@given(ANY_VALUES)
def test_canonical_columns_are_the_old_text(value: Any) -> None:
    """datahub_mcl.json_text and metastore_audit.info_json: the text of the code before
    orjson (json.dumps, sorted keys, compact, UTF-8 kept, bytes as base64)."""
    for new in (datahub_mcl.json_text, metastore_audit.info_json):
        assert _outcome(new, value) == _outcome(
            lambda v: None if v is None else _old_canonical(v, _base64), value)


def test_jsonl_sink_lines_are_compact_json() -> None:
    """The JSONL sink and HTTP bodies: json.dumps' compact form (no spaces) from now on."""
    row = {"a": 1, "b": "é", "c": None, "d": b"\xff", "e": datetime(2024, 1, 2, tzinfo=UTC)}
    assert jsonfast.dumps_compact(row, jsonl_default) == (
        '{"a":1,"b":"é","c":null,"d":"\\\\xff","e":"2024-01-02 00:00:00+00:00"}'.encode())


def test_typical_events_take_the_orjson_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path is taken for ordinary events (else all of the above proves little)."""

    def stdlib(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("json was used")

    monkeypatch.setattr(jsonfast.json, "dumps", stdlib)
    monkeypatch.setattr(jsonfast.json, "loads", stdlib)
    system = {"lastObserved": 1700000000000, "runId": "run-1", "registryName": None,
              "properties": {"clientId": "acryl-datahub"}, "ratio": 0.25, "ok": True}
    assert datahub_mcl.json_text(system) == (
        '{"lastObserved":1700000000000,"ok":true,"properties":{"clientId":"acryl-datahub"},'
        '"ratio":0.25,"registryName":null,"runId":"run-1"}')
    assert jsonfast.dumps_compact([system, "é"], jsonl_default).startswith(b'[{"lastObserved"')
    assert jsonfast.loads(b'{"a": [1, 2.5, "\\u00e9"]}') == {"a": [1, 2.5, "é"]}
    jsonfast.check(b"[1]", "[1]")
