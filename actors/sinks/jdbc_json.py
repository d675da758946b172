"""Nested values (``struct``, ``array``, ``map``) as the JSON a PostgreSQL ``jsonb``
column holds: a struct or a map an object, an array an array; inside them a date, a
timestamp or a timestamp_ntz an ISO-8601 string (a timestamp in UTC with its ``+00:00``),
a decimal a JSON number written with exactly its digits, bytes base64 (standard alphabet,
padded), a map's keys strings (an int key its digits, a date key ISO-8601). NaN and the
infinities have no JSON form: such a value is refused, naming its path.

The row check (:func:`actors.sinks.table.rows.check`) has already checked and converted
the value; :func:`jsonb_text` writes it. The JSON text is carried to the rows' JSON
(:func:`actors.sinks.jdbc_upsert.rows_json`) as a :class:`JsonText`, embedded there as is.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from typing import Any

from processors.column_types import Array, Flat, Map, Struct, TypeNode

_STRING = Flat("string")


class JsonText(str):
    """The JSON text of a nested value: embedded in the rows' JSON as is, not as a string."""

    __slots__ = ()


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bytes | bytearray):
        return base64.b64encode(bytes(key)).decode("ascii")
    if isinstance(key, dt.date):
        return key.isoformat()
    return str(key).lower() if isinstance(key, bool) else str(key)


def _text(value: Any, node: TypeNode, path: str) -> str:
    if value is None:
        return "null"
    if isinstance(node, Struct):
        return "{" + ",".join(
            json.dumps(f.name, ensure_ascii=False) + ":"
            + _text(value.get(f.name), f.type, f"{path}.{f.name}") for f in node.fields) + "}"
    if isinstance(node, Array):
        return "[" + ",".join(_text(item, node.element, f"{path}[{i}]")
                              for i, item in enumerate(value)) + "]"
    if isinstance(node, Map):
        return "{" + ",".join(
            _text(_key(k), _STRING, f"{path}[{k!r}]") + ":"
            + _text(v, node.value, f"{path}[{k!r}]") for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            where = path.removeprefix(".") or "the value"
            raise ValueError(f"at {where}: {value!r} has no JSON form, so PostgreSQL jsonb "
                             "cannot hold it")
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return format(value, "f")  # finite (checked), every digit
    if isinstance(value, dt.date):  # a datetime too
        return json.dumps(value.isoformat())
    if isinstance(value, bytes | bytearray):
        return json.dumps(base64.b64encode(bytes(value)).decode("ascii"))
    if "\x00" in value:  # a str: the only type left
        raise ValueError(f"at {path.removeprefix('.') or 'the value'}: contains a NUL "
                         "character (PostgreSQL jsonb cannot store it)")
    return json.dumps(value, ensure_ascii=False)


def jsonb_text(value: Any, node: TypeNode) -> JsonText:
    """A checked nested value as its JSON text; ValueError (naming the path) for a float
    JSON cannot write (NaN, the infinities)."""
    return JsonText(_text(value, node, ""))


__all__ = ["JsonText", "jsonb_text"]
